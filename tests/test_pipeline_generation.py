"""`run_cel` and `workbench cel` on generation tasks: the main job end to end (exact match
searched and confirmed on real generations, heads ranked by the target's log-prob under
attribution), position-dependent ablations refused, and bad generation files refused with
exit 2 before the model loads."""

from __future__ import annotations

import json
import warnings

import pytest

import workbench.cli.parser as cli
import workbench.loading.model
from tests.metrics.test_generation import gen_task
from workbench.errors import TaskWarning, WorkbenchError
from workbench.pipeline import run_cel

FAST = dict(n_random=20, n_boot=100, progress=False, max_size=2)


@pytest.fixture(scope="module")
def gen_run(attn_model, tiny_task, tmp_path_factory):
    out = tmp_path_factory.mktemp("gen") / "run"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TaskWarning)
        result = run_cel(attn_model, gen_task(attn_model, 40), others=[tiny_task], out_dir=out,
                         method="attribution", **FAST)
    return result, out


def test_a_generation_run_searches_exact_match_ranked_by_logprob(gen_run):
    result, out = gen_run
    assert (result.config.objective, result.config.secondary) == ("exact_match", "logprob")
    heads = result.heads
    assert heads["d_logprob"].notna().all()  # attribution ranks by the target's log-prob
    assert heads["d_exact_match"].isna().all()  # which has no estimate of exact match
    assert heads["candidate"].any()
    conf = result.confirmation
    assert {"d_exact_match", "d_logprob"} <= set(conf) and "d_accuracy" not in conf
    assert conf["d_exact_match"].notna().all() and conf["d_logprob"].notna().all()
    side = result.side_effects
    assert set(side["task"]) == {"tiny"} and side["d_accuracy"].notna().all()
    for csv in out.glob("*.csv"):  # no empty or 1-byte table
        assert csv.stat().st_size > 1 and len(csv.read_text().splitlines()) >= 2, csv.name
    assert "exact_match" in (out / "report.md").read_text()


def test_a_next_token_run_scores_a_generation_side_task_in_exact_match(attn_model, tiny_task):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TaskWarning)
        result = run_cel(attn_model, tiny_task, others=[gen_task(attn_model)], **FAST)
    side = result.side_effects
    assert set(side["task"]) == {"gen"} and result.config.objective == "accuracy"
    assert side["d_exact_match"].notna().all() and side["d_logprob"].notna().all()
    assert "d_accuracy" not in side


def test_position_dependent_ablations_are_refused_on_generation(attn_model):
    with pytest.raises(WorkbenchError, match="generation task.s. .'gen'. decode new tokens"):
        run_cel(attn_model, gen_task(attn_model), kind="mean", per_position=True, **FAST)


GOOD = {"id": "ok", "prompt": "Q: 2+2?\nAnswer:", "target": "4"}
BAD = [
    ({}, {"prompt": "Q: 1+1?\nAnswer:"}, "bad.jsonl line 3, example 'x': missing field 'target'"),
    ({}, {"prompt": "Q: 1+1?\nAnswer:", "target": 2}, "'target' must be a non-empty string"),
    ({"extractor": "last_line"}, None, "bad.jsonl line 1: extractor 'last_line' is unknown"),
    ({"extractor": {"regex": "(\\d"}}, None, "extractor regex '(\\\\d' does not compile"),
    ({"max_new_tokens": 0}, None, "max_new_tokens must be an int >= 1; got 0"),
    ({"until": [""]}, None, "until lists an empty stop sequence"),
]


@pytest.mark.parametrize(("generation", "fields", "words"), BAD)
def test_bad_generation_files_are_one_line_and_exit_2_before_the_model_loads(
        generation, fields, words, tmp_path, capsys, monkeypatch):
    def loader(*args, **kwargs):
        raise AssertionError("the model was loaded before the run was refused")

    monkeypatch.setattr(workbench.loading.model, "load_model", loader)
    path = tmp_path / "bad.jsonl"
    records = [{"task": {"name": "bad", "generation": generation}}, GOOD]
    records += [{"id": "x", **fields}] if fields else [{**GOOD, "id": "x"}]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    assert cli.main(["cel", "--model", "embedded", "--task", str(path),
                     "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("workbench: error: ") and words in err[0], err


def test_a_position_dependent_ablation_is_refused_before_the_model_loads(tmp_path, capsys,
                                                                       monkeypatch):
    def loader(*args, **kwargs):
        raise AssertionError("the model was loaded before the run was refused")

    monkeypatch.setattr(workbench.loading.model, "load_model", loader)
    path = tmp_path / "gen.jsonl"
    path.write_text(json.dumps(GOOD) + "\n")
    assert cli.main(["cel", "--model", "embedded", "--task", str(path), "--ablation", "mean",
                     "--per-position", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "decode new tokens" in err[0], err
