"""bench/replicate.py: a finished cell's sets scored on the examples the cell never used."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from tests.helpers import assert_close, micro_cel
from workbench import WorkbenchError, compute_head_means
from workbench.ablation import ablated
from workbench.heads import HeadSet
from workbench.metrics.scores import score_logits
from workbench.pipeline import run_cel
from workbench.tasks.encoding import encode_task
from workbench.tasks.task import load_task
from workbench.tasks.tokenizer import get_tokenizer

FAST = dict(n_random=10, n_boot=200, progress=False)


def _bench():
    path = Path(__file__).resolve().parent.parent / "bench" / "replicate.py"
    spec = importlib.util.spec_from_file_location("bench_replicate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _naive_gain(model, batch, heads, kind, means, metric):
    """Mean over examples of the metric with `heads` ablated minus clean, from the full
    model's own logits (no prefix reuse, no racing)."""
    def scores():
        with torch.no_grad():
            logits = model(batch.tokens)
        return score_logits(logits[torch.arange(len(batch)), batch.answer_pos], batch)[metric]

    clean = scores()
    with ablated(model, heads, kind, means):
        return float((scores().double() - clean.double()).nanmean())


@pytest.mark.parametrize("kind", ["zero", "mean"])
def test_replicate_scores_the_cells_sets_on_the_unused_examples(tmp_path, gpt2_like_model,
                                                                 tiny_task, kind):
    """The fresh examples are exactly those in neither recorded split; each size's gain in the
    objective and the secondary metric equals the naive forward with its set ablated (mean
    ablation with the cell's selection-split means, which differ from the fresh examples'
    own), and the table's p-values are Holm-adjusted as stated."""
    bench = _bench()
    model, task = gpt2_like_model, tiny_task
    out = tmp_path / "cell"
    run_cel(model, task, out_dir=out, kind=kind, max_examples=6, max_size=2, top_m=3, **FAST)
    cfg, summary = bench.cell_config(out)
    used = set(summary["splits"]["select"]) | set(summary["splits"]["heldout"])
    fresh = bench.fresh_examples(task, summary["splits"])
    assert {e.id for e in fresh.examples} == set(task.ids) - used
    assert len(fresh.examples) == len(task.examples) - 12 > 0
    assert {e.split for e in fresh.examples} == {"heldout"}

    got = bench.replicate(out, model, task)
    batch = encode_task(model, fresh)
    means = None
    if kind == "mean":
        chosen = set(summary["splits"]["select"])
        select = encode_task(model, replace(task, examples=[e for e in task.examples
                                                            if e.id in chosen]), "select")
        means = compute_head_means(model, select.tokens, select.lengths)
        own = compute_head_means(model, batch.tokens, batch.lengths)
        assert (own.averaged - means.averaged).abs().max() > 1e-3  # so the choice is tested
    assert list(got["n"]) == [len(batch)] * len(got)
    for row in got.itertuples():
        heads = list(HeadSet.of(model, row.heads))
        for metric, gain in ((cfg["objective"], row.gain), (cfg["secondary"], row.secondary_gain)):
            want = _naive_gain(model, batch, heads, kind, means, metric)
            assert_close(torch.tensor(gain), torch.tensor(want), msg=f"{metric}, size {row.size}")
        assert row.secondary == cfg["secondary"] and cfg["secondary"] is not None
    p = sorted(got["p_value"])
    assert got["p_holm"].min() == pytest.approx(min(1.0, p[0] * len(p)))


def test_replicate_refuses_another_model_or_a_changed_task_file(tmp_path, gpt2_like_model,
                                                                attn_model, tiny_task):
    bench = _bench()
    out = tmp_path / "cell"
    run_cel(gpt2_like_model, tiny_task, out_dir=out, max_examples=6, max_size=2, top_m=3, **FAST)
    with pytest.raises(WorkbenchError, match="another model"):
        bench.replicate(out, attn_model, tiny_task)
    _, summary = bench.cell_config(out)
    used = summary["splits"]["select"][0]  # a used example's prompt changed in the file
    changed = replace(tiny_task, examples=[replace(e, prompt=e.prompt + " w2") if e.id == used
                                           else e for e in tiny_task.examples])
    with pytest.raises(WorkbenchError, match="another version of task"):
        bench.replicate(out, gpt2_like_model, changed)


def test_replicate_refuses_a_cell_that_used_every_example_or_another_task(tmp_path):
    bench = _bench()
    model, main, _ = micro_cel(tmp_path)
    task = load_task(main)
    with pytest.raises(WorkbenchError, match="used every example"):
        bench.fresh_examples(task, {"select": task.ids, "heldout": []})
    with pytest.raises(WorkbenchError, match="lacks"):
        bench.fresh_examples(task, {"select": ["not-an-id"], "heldout": []})


def test_replicate_command_line_prints_and_writes_the_table(tmp_path, gpt2_like_model, tiny_task,
                                                           monkeypatch, capsys):
    """`main` loads each cell's model and task by their recorded names (here replaced by the
    fixtures), prints the table and writes the same rows to `--out`, with Holm over them all."""
    bench = _bench()
    cells = [tmp_path / "zero", tmp_path / "mean"]
    for cell in cells:
        run_cel(gpt2_like_model, tiny_task, out_dir=cell, kind=cell.name, max_examples=6,
                max_size=2, top_m=3, **FAST)
    monkeypatch.setattr(bench, "load_model", lambda name: gpt2_like_model)
    monkeypatch.setattr(bench, "load_task", lambda name: tiny_task)
    out = tmp_path / "table.csv"
    bench.main([str(c) for c in cells] + ["--out", str(out)])
    table = pd.read_csv(out)
    assert list(table["cell"]) == ["zero", "zero", "mean", "mean"]
    assert list(table.columns) == bench.COLUMNS + ["p_holm_all"]
    p = np.sort(table["p_value"].to_numpy())
    assert table["p_holm_all"].min() == pytest.approx(min(1.0, p[0] * 4))
    printed = capsys.readouterr().out
    assert all(h in printed for h in table["heads"])


def test_top_tokens_counts_each_examples_own_argmax(gpt2_like_model, tiny_task):
    """bench/top_tokens.py: every example's argmax at its answer position, counted clean and
    with the set ablated, equals the argmax of the example's own unpadded forward; `is_answer`
    and `copy` (a wrong token that occurs in the prompt, padding excluded) are counted per
    example from the prompt's own ids."""
    path = Path(__file__).resolve().parent.parent / "bench" / "top_tokens.py"
    spec = importlib.util.spec_from_file_location("bench_top_tokens", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    model = gpt2_like_model
    batch = encode_task(model, tiny_task, "heldout")
    assert len(set(batch.lengths.tolist())) > 1  # padding is exercised
    heads = HeadSet.of(model, "L0H1,L1H2")
    got = bench.top_tokens(model, batch, heads, "zero", top=10_000)

    def naive():
        rows = []
        for i in range(len(batch)):
            ids = batch.tokens[i, : batch.lengths[i]]
            with torch.no_grad():
                tok = int(model(ids[None])[0, -1].argmax())
            answers = set(batch.answer_ids[i].tolist()) - {-1}
            rows.append((tok, tok in answers, tok in ids.tolist() and tok not in answers))
        return pd.DataFrame(rows, columns=["id", "is_answer", "copy"])

    clean = naive()
    with ablated(model, heads, "zero"):
        removed = naive()
    assert not clean["id"].equals(removed["id"])  # the set changes some answers
    for name, want in (("clean", clean), ("ablated", removed)):
        want = want.assign(token=[get_tokenizer(model).decode([t]) for t in want["id"]])
        want = want.groupby("token").agg(n=("id", "size"), is_answer=("is_answer", "sum"),
                                         copy=("copy", "sum")).sort_index()
        have = got[got["condition"] == name].set_index("token")[["n", "is_answer", "copy"]]
        pd.testing.assert_frame_equal(have.sort_index(), want, check_dtype=False)
