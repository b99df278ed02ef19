"""lm-eval `generate_until` tasks as workbench generation records
(`workbench.lm_eval.generate_until`), against lm-eval's own code on the GSM8K-style fixture
(`data/gsm_style.yaml`: gsm8k's prompt, generation settings, both filters and exact_match
options over 8 local problems, 4 training problems for few-shot prompts):

- the records' prompts are the contexts lm-eval's `Task.build_all_requests` builds and the
  contexts a recording model receives through `simple_evaluate` (0-shot and 2-shot), their
  targets lm-eval's `doc_to_target`, the header's `until` / `max_new_tokens` its
  `generation_kwargs`;
- scoring canned generations with the header's extractor and exact-match options (the
  independent rules of `bench/gen_reference.py`) gives lm-eval's own `exact_match` for each
  filter (`strict-match`, `flexible-extract`);
- gsm8k's installed YAML maps onto the named extractors; what the workbench cannot reproduce is
  refused in one line.
"""

from __future__ import annotations

import functools

import pytest

from tests.helpers import load_script, refusal
from tests.lm_eval.tasks import ROOT, gsm_style

lm_eval = pytest.importorskip("lm_eval", reason="lm-eval is the optional extra lm_eval")

from lm_eval.api.model import LM  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from workbench.lm_eval.generate_until import generation_settings  # noqa: E402
from workbench.lm_eval.source import check_lm_eval_name, lm_eval_records  # noqa: E402

GSM8K_IGNORE = [",", "\\$", "(?s).*#### ", "\\.$"]
# Canned generations, one per document in turn: right or wrong, in each filter's form.
CANNED = (
    " 3 + 4 = 7.\n#### 7",            # both filters right
    " 12 * 2 = 24. The answer is 24.",  # flexible right, strict invalid
    " 20 - 8 = 12.\n#### 13",          # strict wrong; flexible takes the last number: 13
    " 5 * 6 = 30\n#### 30\n\n",        # both right
    " It is 4",                         # flexible takes '4' (one digit: the second group)
    " 15 * 3 = 44.\n#### 45",           # strict right, flexible right (last number 45)
    " 1,200 + 300 = 1,500\n#### 1,500",  # both right after ',' is ignored
    " #### -5",                         # both right, negative
)


@functools.cache
def _reference():
    return load_script(ROOT / "bench" / "gen_reference.py")


class Recorder(LM):
    """An lm-eval model that records every generation request and answers from CANNED."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[int, tuple[str, dict]] = {}

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        raise AssertionError("not a log-likelihood task")

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise AssertionError("not a rolling task")

    def generate_until(self, requests, disable_tqdm: bool = False):
        for r in requests:
            self.seen[r.doc_id] = tuple(r.args)
        return [CANNED[r.doc_id] for r in requests]


def _simple_evaluate(path, shots: int) -> tuple[Recorder, dict]:
    lm = Recorder()
    manager = TaskManager(include_path=str(path.parent), include_defaults=False)
    out = lm_eval.simple_evaluate(model=lm, tasks=[path.stem], task_manager=manager,
                                  num_fewshot=shots)
    return lm, out["results"][path.stem]


def _lm_eval_task(path):
    manager = TaskManager(include_path=str(path.parent), include_defaults=False)
    return next(iter(manager.load([path.stem])["tasks"].values()))


@pytest.mark.parametrize("shots", [0, 2])
def test_records_are_what_lm_eval_sends_the_model(tmp_path, shots):
    path = gsm_style(tmp_path)
    header, records = lm_eval_records(str(path), num_fewshot=shots)
    lm, _ = _simple_evaluate(path, shots)
    assert len(records) == len(lm.seen) == 8
    for r in records:
        context, kwargs = lm.seen[r["meta"]["doc_id"]]
        assert r["prompt"] == context
        assert r["prompt"].count("Question:") == 1 + shots and r["prompt"].endswith("Answer:")
        assert header["generation"]["until"] == kwargs["until"]
        assert header["generation"]["max_new_tokens"] == kwargs["max_gen_toks"] == 48
    assert header["meta"]["lm_eval"]["num_fewshot"] == shots


def test_records_are_lm_eval_s_task_contexts_and_targets(tmp_path):
    """Against lm-eval's `Task` itself: `build_all_requests` (0-shot, the YAML's count) and
    `doc_to_text` / `doc_to_target` per evaluation document."""
    path = gsm_style(tmp_path)
    _, records = lm_eval_records(str(path))
    task = _lm_eval_task(path)
    task.build_all_requests()
    contexts = {inst.doc_id: inst.args[0] for inst in task.instances}
    docs = list(task.eval_docs)
    assert [r["prompt"] for r in records] == [contexts[i] for i in range(len(docs))]
    assert [r["prompt"] for r in records] == [task.doc_to_text(d) for d in docs]
    assert [r["target"] for r in records] == [task.doc_to_target(d) for d in docs]
    assert records[0] == {
        "id": "gsm_style-0000",
        "prompt": "Question: Tom has 3 apples and buys 4 more. How many apples does he have?"
                  "\nAnswer:",
        "target": "3 + 4 = 7.\n#### 7", "meta": {"doc_id": 0},
    }


@pytest.mark.parametrize("chosen, extractor", [
    (None, "strict-match"), ("strict-match", "strict-match"),
    ("flexible-extract", "flexible-extract"),
])
def test_header_maps_gsm8k_settings(tmp_path, chosen, extractor):
    header, _ = lm_eval_records(str(gsm_style(tmp_path)), filter=chosen)
    assert header["metric"] == "exact_match" and header["target_delimiter"] == " "
    assert header["generation"] == {
        "max_new_tokens": 48, "until": ["Question:", "</s>", "<|im_end|>"],
        "extractor": extractor, "ignore_case": True, "ignore_punctuation": False,
        "regexes_to_ignore": GSM8K_IGNORE,
    }
    meta = header["meta"]["lm_eval"]
    assert meta["filter"] == (chosen or "strict-match")
    assert meta["filters"] == ["strict-match", "flexible-extract"]


def test_the_header_scores_canned_generations_as_lm_eval_does(tmp_path):
    """lm-eval's own `exact_match` per filter equals the header's extractor and options
    applied to the same generations (the rules written out in bench/gen_reference.py)."""
    path = gsm_style(tmp_path)
    _, results = _simple_evaluate(path, 0)
    ref = _reference()
    for name in ("strict-match", "flexible-extract"):
        header, records = lm_eval_records(str(path), filter=name)
        generation = header["generation"]
        hits = [
            ref.exact_match(ref.extract(ref.cut_at_stops(CANNED[r["meta"]["doc_id"]],
                                                         generation["until"]),
                                        generation["extractor"]), r["target"], generation)
            for r in records
        ]
        assert sum(hits) / len(hits) == pytest.approx(results[f"exact_match,{name}"]), name
    assert results["exact_match,strict-match"] == pytest.approx(5 / 8)
    assert results["exact_match,flexible-extract"] == pytest.approx(7 / 8)


def test_gsm8k_s_own_yaml_maps_onto_the_named_extractors():
    """lm-eval's installed gsm8k.yaml (read, not built: its data are on the hub)."""
    from pathlib import Path

    from lm_eval.tasks._yaml_loader import load_yaml

    config = load_yaml(Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k.yaml",
                       resolve_func=False)
    expected = {"max_new_tokens": 256, "until": ["Question:", "</s>", "<|im_end|>"],
                "extractor": "strict-match", "ignore_case": True, "ignore_punctuation": False,
                "regexes_to_ignore": GSM8K_IGNORE}
    assert generation_settings("gsm8k", config) == expected
    flexible = generation_settings("gsm8k", config, "flexible-extract")
    assert flexible == {**expected, "extractor": "flexible-extract"}


def test_other_filters_and_defaults(tmp_path):
    """A user regex becomes a regex extractor; no filter_list is lm-eval's `none` pipeline;
    no generation_kwargs is lm-eval's default (until the few-shot delimiter, 256 tokens)."""
    path = gsm_style(tmp_path, task="gsm_regex", filter_list=(
        '[{name: last, filter: [{function: regex, regex_pattern: "(\\\\d+)", group_select: -1, '
        'fallback: "?"}, {function: take_first}, {function: remove_whitespace}]}]'))
    header, _ = lm_eval_records(str(path))
    assert header["generation"]["extractor"] == {"regex": "(\\d+)", "group_select": -1,
                                                 "fallback": "?"}
    path = gsm_style(tmp_path, task="gsm_plain", filter_list="null",
                     generation_kwargs="null")
    header, _ = lm_eval_records(str(path))
    assert header["generation"] == {"max_new_tokens": 256, "until": ["\n\n"], "extractor": "none",
                                    "ignore_case": True, "ignore_punctuation": False,
                                    "regexes_to_ignore": GSM8K_IGNORE}


@pytest.mark.parametrize("overrides, words", [
    ({"generation_kwargs": "{until: [Question], do_sample: true}"},
     "samples (generation_kwargs do_sample True, temperature None); the workbench decodes "
     "greedily"),
    ({"generation_kwargs": "{until: [Question], temperature: 0.7}"}, "temperature 0.7"),
    ({"generation_kwargs": "{until: [Question], num_beams: 4}"},
     "sets generation_kwargs ['num_beams'], which the workbench's greedy decoding cannot"),
    ({"generation_kwargs": "{until: [Question], max_gen_toks: 0}"},
     "max_gen_toks must be an integer >= 1; got 0"),
    ({"filter_list": "[{name: lower, filter: [{function: lowercase}]}]"},
     "filter 'lower' uses lm-eval's 'lowercase' filter, which the workbench cannot reproduce"),
    ({"filter_list": "[{name: ws, filter: [{function: remove_whitespace}, {function: regex}]}]"},
     "strips whitespace before its regex"),
    ({"filter_list": '[{name: bad, filter: [{function: regex, regex_pattern: "(("}]}]'},
     "regex filter pattern '((' does not compile"),
    ({"metric_list": "[{metric: bleu}]"},
     "lists metrics ['bleu']; the workbench scores a generate_until task by exact_match"),
    ({"metric_list": "[{metric: exact_match, ignore_numbers: true}]"}, "ignore_numbers"),
])
def test_what_the_workbench_cannot_reproduce_is_refused_in_one_line(tmp_path, overrides, words):
    path = gsm_style(tmp_path, task="gsm_bad", **overrides)
    for call in (lambda: lm_eval_records(str(path)), lambda: check_lm_eval_name(str(path))):
        message = refusal(call)
        assert words in message and "\n" not in message, message


def test_records_refusals(tmp_path):
    path = gsm_style(tmp_path)
    assert "has no filter 'loose'; its filters: ['strict-match', 'flexible-extract']" in refusal(
        lambda: lm_eval_records(str(path), filter="loose"))
    assert "'exact_match' or 'logprob'" in refusal(lambda: lm_eval_records(str(path),
                                                                           metric="acc"))
    spaced = gsm_style(tmp_path, task="gsm_space", doc_to_text='"Question: {{question}}\\nA: "')
    message = refusal(lambda: lm_eval_records(str(spaced)))
    assert "document 0: its context ends in whitespace (' ')" in message
    listy = gsm_style(tmp_path, task="gsm_list", doc_to_target='"{{[answer, answer]}}"')
    assert "is not one text" in refusal(lambda: lm_eval_records(str(listy)))


def test_load_task_makes_a_generation_task_scored_as_lm_eval_scores_it(tmp_path):
    """End to end: `load_task` on the YAML gives a generation task whose settings score the
    canned generations as lm-eval's `exact_match` does, for either filter."""
    from workbench import load_task
    from workbench.generation.settings import GenerationSettings
    from workbench.tasks.task import Task

    path = gsm_style(tmp_path)
    task = load_task(path)
    assert task.is_generation and len(task) == 8 and task.metric == "exact_match"
    assert task.generation == GenerationSettings(
        48, ("Question:", "</s>", "<|im_end|>"), "strict-match", True, False,
        tuple(GSM8K_IGNORE))
    assert {e.split for e in task.examples} == {"select", "heldout"}
    _, results = _simple_evaluate(path, 0)
    for name in ("strict-match", "flexible-extract"):
        header, records = lm_eval_records(str(path), filter=name)
        built = Task.from_records(records, name=header.pop("name"), **header)
        hits = [built.generation.score(CANNED[r["meta"]["doc_id"]], r["target"])
                for r in records]
        assert sum(hits) / len(hits) == pytest.approx(results[f"exact_match,{name}"]), name


def test_the_cli_refuses_a_sampling_task_before_the_model_loads(tmp_path, monkeypatch, capsys):
    import workbench.loading.model
    from workbench import cli

    def loader(*args, **kwargs):
        raise AssertionError("the model was loaded before the run was refused")

    monkeypatch.setattr(workbench.loading.model, "load_model", loader)
    path = gsm_style(tmp_path, task="gsm_hot", generation_kwargs="{until: [Q], temperature: 1}")
    argv = ["cel", "--model", "smollm2-135m", "--task", str(path), "--out", str(tmp_path / "o")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'gsm_hot' samples" in err[0], err
    assert not (tmp_path / "o").exists()
