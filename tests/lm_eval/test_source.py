"""lm-eval tasks as workbench task records (`workbench.lm_eval.source`), against what lm-eval
itself sends a model: a recording `LM` run through `lm_eval.simple_evaluate` on the shipped
ARC-style fixture (`data/arc_style.yaml`, 12 questions, 4 training questions for few-shot)
receives, for every document and choice, exactly `prompt + target_delimiter + choice`; and
the records equal the fixture's rows written out by hand. Refusals are one line each."""

from __future__ import annotations

import json

import pytest

from tests.helpers import refusal
from tests.lm_eval.tasks import DATA, arc_style

lm_eval = pytest.importorskip("lm_eval", reason="lm-eval is the optional extra lm_eval")

from lm_eval.api.model import LM  # noqa: E402

from workbench.lm_eval.source import lm_eval_records  # noqa: E402


class Recorder(LM):
    """An lm-eval model that records every log-likelihood request and answers 0."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[int, int, tuple[str, str]]] = []

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        self.seen += [(r.doc_id, r.idx, tuple(r.args)) for r in requests]
        return [(0.0, False)] * len(requests)

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise AssertionError("not a rolling task")

    def generate_until(self, requests, disable_tqdm: bool = False):
        raise AssertionError("not a generation task")


def _lm_eval_requests(yaml_path, shots: int) -> dict[tuple[int, int], tuple[str, str]]:
    from lm_eval.tasks import TaskManager

    lm = Recorder()
    manager = TaskManager(include_path=str(yaml_path.parent), include_defaults=False)
    lm_eval.simple_evaluate(model=lm, tasks=[yaml_path.stem], task_manager=manager,
                            num_fewshot=shots)
    return {(doc, idx): args for doc, idx, args in lm.seen}


@pytest.mark.parametrize("shots", [0, 2])
def test_records_are_what_lm_eval_sends_the_model(tmp_path, shots):
    path = arc_style(tmp_path)
    header, records = lm_eval_records(str(path), num_fewshot=shots)
    sent = _lm_eval_requests(path, shots)
    delimiter = header["target_delimiter"]
    assert len(sent) == sum(len(r["choices"]) for r in records) == 48
    for r in records:
        doc = r["meta"]["doc_id"]
        for i, choice in enumerate(r["choices"]):
            context, continuation = sent[doc, i]
            assert context.rstrip() == r["prompt"] and continuation == delimiter + choice
        assert r["prompt"].count("Question:") == 1 + shots
    assert header["meta"]["lm_eval"]["num_fewshot"] == shots


def test_zero_shot_records_are_the_fixtures_rows(tmp_path):
    header, records = lm_eval_records(str(arc_style(tmp_path)))
    rows = [json.loads(line) for line in (DATA / "arc_style.jsonl").read_text().splitlines()]
    assert records == [
        {"id": f"arc_style-{i:04d}", "prompt": f"Question: {row['question']}\nAnswer:",
         "choices": row["choices"], "gold": row["label"], "meta": {"doc_id": i}}
        for i, row in enumerate(rows)
    ]
    assert records[1]["prompt"] == "Question: What do we call frozen water?\nAnswer:"
    assert records[1]["choices"][records[1]["gold"]] == "ice"
    assert {k: header[k] for k in ("name", "metric", "target_delimiter")} == {
        "name": "arc_style", "metric": "acc_norm", "target_delimiter": " "}
    assert header["meta"]["lm_eval"]["metrics"] == ["acc", "acc_norm"]


def test_metric_target_text_and_trailing_space(tmp_path):
    """A task that lists only acc is scored by acc; a gold given as the choice's text is its
    index; a context ending in a space moves the space into the delimiter, as lm-eval's
    tokenization moves it into every continuation."""
    path = arc_style(tmp_path, task="arc_acc", metric_list="[{metric: acc}]",
                     doc_to_target='"{{choices[label]}}"',
                     doc_to_text='"Question: {{question}}\\nAnswer: "')
    header, records = lm_eval_records(str(path))
    assert header["metric"] == "acc" and header["target_delimiter"] == "  "
    assert [r["gold"] for r in records] == [0, 1, 2, 3] * 3
    assert records[0]["prompt"].endswith("\nAnswer:")
    assert "'acc' or 'acc_norm'" in refusal(lambda: lm_eval_records(str(path), metric="f1"))


@pytest.mark.parametrize("overrides, words", [
    ({"task": "arc_roll", "output_type": "loglikelihood_rolling"},
     "'arc_roll' has output_type 'loglikelihood_rolling'; the workbench scores multiple_choice "
     "and generate_until tasks"),
    ({"task": "arc_hub", "dataset_path": "nobody/no-such-dataset", "dataset_kwargs": "{}"},
     "reads dataset 'nobody/no-such-dataset' from the Hugging Face hub, which this machine "
     "cannot reach (offline); write a task YAML that reads local files (dataset_path: json"),
    ({"task": "arc_lost", "dataset_kwargs": "{data_files: {test: /nonexistent/x.jsonl}}"},
     "lm-eval task 'arc_lost' could not read dataset 'json' (FileNotFoundError"),
    ({"task": "arc_bad", "doc_to_target": "7"},
     "lm-eval could not build task '{path}': IndexError: list index out of range"),
    ({"task": "arc_off", "doc_to_target": '"{{label + 1}}"'},
     "lm-eval task 'arc_off' document 3: target 4 is not a choice among 4"),
])
def test_tasks_the_workbench_cannot_take_are_refused_in_one_line(tmp_path, overrides, words):
    """Offline here: the tests run with HF_DATASETS_OFFLINE=1 (tests/conftest.py)."""
    path = arc_style(tmp_path, **overrides)
    message = refusal(lambda: lm_eval_records(str(path)))
    assert words.format(path=path) in message and "\n" not in message
    assert "does not exist" in refusal(lambda: lm_eval_records(str(tmp_path / "none.yaml")))


@pytest.mark.slow
def test_registered_names_unknown_group_and_hub_data_offline():
    """lm-eval's index of its 13k registered tasks takes ~25 s to build on 2 busy cores."""
    message = refusal(lambda: lm_eval_records("lm_eval:arc_esay"))
    assert "lm-eval has no task 'arc_esay'; did you mean 'arc_easy'" in message
    assert "is a group of tasks" in refusal(lambda: lm_eval_records("lm_eval:mmlu"))
    message = refusal(lambda: lm_eval_records("lm_eval:arc_easy"))
    assert "reads dataset 'allenai/ai2_arc' from the Hugging Face hub" in message
    message = refusal(lambda: lm_eval_records("lm_eval:gsm8k"))  # a generate_until task
    assert "reads dataset 'openai/gsm8k' from the Hugging Face hub" in message


def test_load_task_reads_a_yaml_as_a_split_multiple_choice_task(tmp_path):
    from workbench import load_task

    task = load_task(arc_style(tmp_path))
    assert task.name == "arc_style" and len(task) == 12 and task.metric == "acc_norm"
    assert {e.split for e in task.examples} == {"select", "heldout"}
    assert task.examples[1].choices[task.examples[1].gold] == "ice"


def test_the_cli_refuses_an_lm_eval_task_before_the_model_loads(tmp_path, monkeypatch, capsys):
    import workbench.loading.model
    from workbench import cli

    def loader(*args, **kwargs):
        raise AssertionError("the model was loaded before the run was refused")

    monkeypatch.setattr(workbench.loading.model, "load_model", loader)
    path = arc_style(tmp_path, task="arc_roll", output_type="loglikelihood_rolling")
    argv = ["cel", "--model", "smollm2-135m", "--task", str(path), "--out", str(tmp_path / "o")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has output_type 'loglikelihood_rolling'" in err[0], err
    assert not (tmp_path / "o").exists()


def test_rescore_command_refuses_a_task_before_the_model_loads(tmp_path, monkeypatch, capsys):
    import workbench.loading.model
    from workbench.lm_eval.rescore import main

    def loader(*args, **kwargs):
        raise AssertionError("the model was loaded before the task was refused")

    monkeypatch.setattr(workbench.loading.model, "load_model", loader)
    path = arc_style(tmp_path, task="arc_hub", dataset_path="nobody/no-such-dataset",
                     dataset_kwargs="{}")
    assert main(["--model", "smollm2-135m", "--task", str(path), "--heads", "L3H1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rescore: error: ") and "offline" in err[0], err


def test_without_lm_eval_installed_the_fix_is_named_in_one_line(monkeypatch):
    import importlib.util

    import workbench.lm_eval.source as source

    real = importlib.util.find_spec
    monkeypatch.setattr(source.importlib.util, "find_spec",
                        lambda name, *a: None if name == "lm_eval" else real(name, *a))
    message = refusal(lambda: source.lm_eval_records("lm_eval:arc_easy"))
    assert 'pip install "cel-workbench[lm_eval]"' in message and "\n" not in message


def test_the_report_gives_the_command_that_rescores_the_best_set_with_lm_eval():
    """A run on a task lm-eval built says how to re-score its best set (else its top
    candidate) with lm-eval's own code; a run on another task says nothing of it."""
    from types import SimpleNamespace

    from workbench.config import CELConfig
    from workbench.results.report import rescore_lines

    spec = {"task": "arc_style", "spec": "tests/lm_eval/data/arc_style.yaml", "num_fewshot": 0}
    run = SimpleNamespace(summary={"lm_eval": spec}, best=("L3H1", "L7H0"), top_candidate=(),
                          config=CELConfig(model="smollm2-135m", task="arc_style",
                                                    kind="mean"))
    assert rescore_lines(run) == [
        "**Re-score with lm-eval** (its own scoring, on all of the task's documents, clean and "
        "without L3H1,L7H0): `python -m workbench.lm_eval.rescore --model smollm2-135m --task "
        "tests/lm_eval/data/arc_style.yaml --heads L3H1,L7H0 --kind mean --num-fewshot 0`"]
    run.best, run.top_candidate = (), ("L0H2",)
    assert "--heads L0H2 " in rescore_lines(run)[0]
    run.summary = {}
    assert rescore_lines(run) == []
