"""A workbench multiple-choice task written as an lm-eval task (`workbench.lm_eval.export`):
lm-eval's own `acc` and `acc_norm` on the written documents, clean and with heads removed,
equal the workbench's on the same examples (counts exactly: the heads change some of them, so
the comparison could fail)."""

from __future__ import annotations

import pytest

from tests.helpers import save_tiny_gpt2
from tests.lm_eval.tasks import word_task

pytest.importorskip("lm_eval", reason="lm-eval is the optional extra lm_eval")

from workbench import evaluate, load_model, load_task  # noqa: E402
from workbench.errors import WorkbenchError  # noqa: E402
from workbench.lm_eval.export import write_lm_eval_task  # noqa: E402
from workbench.lm_eval.rescore import rescore  # noqa: E402


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    model = load_model(str(save_tiny_gpt2(tmp_path_factory.mktemp("gpt2"))), device="cpu")
    task = load_task(str(word_task(tmp_path_factory.mktemp("source"), n=40)))
    return model, task, tmp_path_factory.mktemp("written")


@pytest.mark.parametrize("split", ["heldout", None])
def test_lm_eval_scores_the_written_task_as_the_workbench_does(setting, split):
    model, task, folder = setting
    yaml = write_lm_eval_task(task, folder / str(split), split=split)
    n = len(task.subset(split)) if split else len(task)
    judged = rescore(model, str(yaml), heads=["L0H3", "L1H2"])
    for label, heads in (("clean", None), ("ablated", ["L0H3", "L1H2"])):
        ours = evaluate(model, task, heads=heads, split=split)
        assert len(ours) == n
        for metric in ("acc", "acc_norm"):
            assert round(judged[label][metric] * n) == int(ours[metric].sum()), (label, metric)
    clean = evaluate(model, task, split=split)
    ablated = evaluate(model, task, heads=["L0H3", "L1H2"], split=split)
    assert (clean["prediction"] != ablated["prediction"]).any()  # the heads change answers


def test_only_a_multiple_choice_or_generation_task_is_written(tmp_path):
    with pytest.raises(WorkbenchError, match="'ioi' is neither a multiple-choice nor a generation"):
        write_lm_eval_task(load_task("ioi"), tmp_path)


def test_lm_eval_builds_the_shipped_benchmark_task_back_to_its_examples(tmp_path):
    """Every held-out question of `mc_facts_text` (multi-line few-shot prompts, answers with
    spaces), as lm-eval renders the written documents: the same context, choices, gold and
    delimiter."""
    from workbench.lm_eval.source import build_lm_eval_task

    task = load_task("mc_facts_text")
    built = build_lm_eval_task(str(write_lm_eval_task(task, tmp_path)))
    docs = [doc for _, doc in built.doc_iterator()]
    held = task.subset("heldout").examples
    assert len(docs) == len(held) == 84
    for doc, e in zip(docs, held, strict=True):
        assert built.doc_to_text(doc) == e.prompt
        assert built.doc_to_choice(doc) == list(e.choices)
        assert built.doc_to_target(doc) == e.gold
    assert built.config.target_delimiter == " " and built.config.num_fewshot == 0


# generation tasks: three extractors and exact-match options, on the tiny GPT-2's words
GEN_SETTINGS = {
    "first_line": {"max_new_tokens": 5, "until": ["w0"], "extractor": "first_line"},
    "regex_last": {"max_new_tokens": 5, "until": ["w3 w4"],
                   "extractor": {"regex": r"(w1[0-9])|(w[5-7])", "group_select": -1}},
    "none_options": {"max_new_tokens": 4, "until": ["w0"], "extractor": "none",
                     "ignore_case": True, "ignore_punctuation": True,
                     "regexes_to_ignore": [r"[wW]1\d"]},
}
GEN_HEADS = ["L0H3", "L1H2"]


def _gen_task(model, key):
    """24 prompts of 2-6 words; even examples' target the clean model's extracted answer (in
    upper case under `ignore_case`, with a comma under `ignore_punctuation`), odd ones `w19`."""
    import torch

    from workbench.metrics.generation import generations
    from workbench.tasks.encoding import encode_task
    from workbench.tasks.task import Task

    g = torch.Generator().manual_seed(1)
    rows = [{"id": f"d{i}", "split": "heldout", "target": "w19",
             "prompt": " ".join(f"w{int(j)}" for j in torch.randint(0, 20, (int(k),),
                                                                     generator=g))}
            for i, k in enumerate(torch.randint(2, 7, (24,), generator=g))]
    settings = GEN_SETTINGS[key]
    draft = Task.from_records(rows, name=f"gen_{key}", generation=settings)
    extract = draft.generation.extract
    for i, text in enumerate(generations(model, encode_task(model, draft, "heldout"))):
        answer = extract(text).strip()
        if i % 2 == 0 and answer:
            rows[i]["target"] = (answer.upper() + "," if key == "none_options" else answer)
    return Task.from_records(rows, name=f"gen_{key}", generation=settings)


@pytest.mark.parametrize("key", list(GEN_SETTINGS))
def test_lm_eval_scores_a_written_generation_task_as_the_workbench_does(setting, key):
    """lm-eval's `exact_match` on the written `generate_until` task, document by document
    (its filtered answer and its score) and as `rescore` aggregates it, clean and with two
    heads removed, equals `evaluate_generation`'s on the same examples; and lm-eval renders
    every document back to the example's prompt and target, with the task's stops and
    budget. The heads change what the model writes, so the comparison could fail."""
    import lm_eval

    from workbench.ablation import ablation_hooks
    from workbench.lm_eval.model import HookedLM
    from workbench.lm_eval.source import build_lm_eval_task, task_manager
    from workbench.metrics.generation import evaluate_generation
    from workbench.tasks.encoding import encode_task

    model, _, folder = setting
    task = _gen_task(model, key)
    yaml = write_lm_eval_task(task, folder / key)
    built = build_lm_eval_task(str(yaml))
    docs = [doc for _, doc in built.doc_iterator()]
    assert [built.doc_to_text(d) for d in docs] == [e.prompt for e in task.examples]
    assert [built.doc_to_target(d) for d in docs] == [e.target for e in task.examples]
    kwargs = built.config.generation_kwargs
    assert kwargs["until"] == list(task.generation.until)
    assert kwargs["max_gen_toks"] == task.generation.max_new_tokens
    batch = encode_task(model, task, "heldout")
    judged = rescore(model, str(yaml), heads=GEN_HEADS)
    ours = {}
    for label, heads in (("clean", []), ("ablated", GEN_HEADS)):
        ours[label] = evaluate_generation(model, batch, ablation_hooks(model, heads))
        out = lm_eval.simple_evaluate(model=HookedLM(model, heads=heads), tasks=[built],
                                      task_manager=task_manager(False), log_samples=True)
        samples = sorted(out["samples"][built.task_name], key=lambda s: s["doc_id"])
        assert [s["resps"][0][0] for s in samples] == list(ours[label]["generation"])
        assert [s["filtered_resps"][0].strip() for s in samples] == [
            p.strip() for p in ours[label]["prediction"]]
        assert [s["exact_match"] for s in samples] == list(ours[label]["exact_match"])
        n = len(task.examples)
        assert round(judged[label]["exact_match"] * n) == int(ours[label]["exact_match"].sum())
    assert ours["clean"]["exact_match"].sum() >= len(task.examples) // 4
    assert (ours["clean"]["generation"] != ours["ablated"]["generation"]).any()
