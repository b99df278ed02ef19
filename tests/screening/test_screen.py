"""Single-head screening (`workbench.screening.screen`) against naive references: prefix
reuse, `evaluate` per head, the table's schema and other tasks, custom metrics on a
HookedEncoder and a TransformerBridge, clear errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers import assert_close, tiny_encoder
from workbench import Ablation, WorkbenchError, ablated, compute_head_means, evaluate, summarize
from workbench.heads import all_heads
from workbench.screening.screen import naive_effects, screen_heads
from workbench.stats import Stats, rank_correlation
from workbench.tables import check_head_table, table_to_matrix
from workbench.tasks.encoding import encode_task

METRICS = ("accuracy", "logprob", "logit_diff")


def _means(model, batch):
    return compute_head_means(model, batch.tokens, batch.lengths)


@pytest.mark.parametrize("kind", ["zero", "mean"])
@pytest.mark.parametrize("model_name", ["attn_model", "gpt2_like_model"])
def test_prefix_reuse_equals_naive_loop(request, tiny_task, kind, model_name):
    model = request.getfixturevalue(model_name)
    batch = encode_task(model, tiny_task, "select")
    means = _means(model, batch)
    exact = screen_heads(
        model, batch, kind, "exact", split=None, means=means, stats=Stats(n_boot=50)
    )
    naive = naive_effects(model, batch, Ablation(kind, means))
    for m in METRICS:
        assert_close(table_to_matrix(exact, f"d_{m}"), naive[m], msg=m)
    # The check can fail: heads do change the log-prob, by more than the tolerance.
    assert np.abs(naive["logprob"]).max() > 1e-2


def test_exact_equals_evaluate_per_head(gpt2_like_model, tiny_task):
    """An independent reference: the foundation's `evaluate` with one head ablated."""
    model = gpt2_like_model
    df = screen_heads(model, tiny_task, "zero", split="select", stats=Stats(n_boot=20))
    clean = summarize(evaluate(model, tiny_task, split="select"), by=None).iloc[0]
    for layer, head in [(0, 1), (1, 3)]:
        ablated_row = summarize(
            evaluate(model, tiny_task, heads=[(layer, head)], split="select"), by=None
        ).iloc[0]
        row = df[(df["layer"] == layer) & (df["head"] == head)].iloc[0]
        for m in METRICS:
            assert_close(row[f"d_{m}"], ablated_row[m] - clean[m], msg=m)


def test_table_schema_and_other_tasks(attn_model, tiny_task):
    other = tiny_task.subset("heldout")
    other.name = "other"
    df = screen_heads(attn_model, tiny_task, others=[other], stats=Stats(n_boot=50))
    check_head_table(df)
    assert len(df) == 8
    for m in METRICS:
        for stat in ("", "_se", "_lo", "_hi"):
            assert f"d_{m}{stat}" in df and f"d_{m}{stat}_other" in df
    assert (df["d_logprob_lo"] <= df["d_logprob"] + 1e-9).all()
    assert (df["d_logprob"] <= df["d_logprob_hi"] + 1e-9).all()
    assert df.attrs["n_examples"] == {
        tiny_task.name: len(tiny_task.subset("select")),
        "other": len(other),
    }
    # The other task's columns are its own screening, not a copy of the main task's.
    direct = screen_heads(attn_model, other, split=None, stats=Stats(n_boot=50))
    assert_close(df["d_logprob_other"], direct["d_logprob"])


def _mlm_metric(model, tokens):
    """Log-prob of the token at position 2 (a masked-LM style score), per example."""
    logits = model(tokens)
    return {"lp": logits[:, 2].log_softmax(-1).gather(1, tokens[:, 2:3])[:, 0]}


def test_custom_metric_on_hooked_encoder():
    enc = tiny_encoder()
    tokens = torch.randint(0, 30, (5, 7))
    df = screen_heads(enc, tokens, metric=_mlm_metric, stats=Stats(n_boot=20))
    check_head_table(df)
    clean = _mlm_metric(enc, tokens)["lp"]
    for layer, head in all_heads(enc):
        with ablated(enc, [(layer, head)]), torch.no_grad():
            ref = (_mlm_metric(enc, tokens)["lp"] - clean).mean()
        row = df[(df["layer"] == layer) & (df["head"] == head)].iloc[0]
        assert_close(row["d_lp"], ref)
    att = screen_heads(
        enc, tokens, metric=_mlm_metric, method="attribution", stats=Stats(n_boot=20)
    )
    assert np.isfinite(att["d_lp"]).all()
    assert rank_correlation(att["d_lp"], df["d_lp"]) > 0.5
    with pytest.raises(WorkbenchError, match="means"):
        screen_heads(enc, tokens, kind="mean", metric=_mlm_metric)


def test_clear_errors(attn_model, tiny_task):
    with pytest.raises(WorkbenchError, match="out of range"):
        screen_heads(attn_model, tiny_task, heads=["L7H0"])
    with pytest.raises(WorkbenchError, match="not of the form"):
        screen_heads(attn_model, tiny_task, heads=["head three"])
    with pytest.raises(WorkbenchError, match="screening method"):
        screen_heads(attn_model, tiny_task, method="telepathy")
    with pytest.raises(WorkbenchError, match="neither a file nor a task"):
        screen_heads(attn_model, "no_such_task")
    with pytest.raises(WorkbenchError, match="ablation kind"):
        screen_heads(attn_model, tiny_task, kind="half")


def _last_logprob(model, tokens):
    """Log-prob of each row's last token given the rest (a next-token score on raw tokens)."""
    logits = model(tokens)[:, -2]
    return logits.log_softmax(-1).gather(1, tokens[:, -1:])[:, 0]


def test_custom_metric_on_transformer_bridge(tmp_path):
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(2)
    hf = GPT2LMHeadModel(
        GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=50, n_positions=32)
    ).eval()
    hf.save_pretrained(tmp_path / "g")
    bridge = TransformerBridge.boot_transformers(str(tmp_path / "g"), device="cpu")
    bridge.enable_compatibility_mode(disable_warnings=True, fold_value_biases=False)
    tokens = torch.randint(0, 50, (6, 7))
    df = screen_heads(bridge, tokens, metric=_last_logprob, stats=Stats(n_boot=20))
    clean = _last_logprob(bridge, tokens)
    for layer, head in [(0, 1), (1, 2)]:
        with ablated(bridge, [(layer, head)]), torch.no_grad():
            ref = (_last_logprob(bridge, tokens) - clean).mean()
        row = df[(df["layer"] == layer) & (df["head"] == head)].iloc[0]
        assert_close(row["d_metric"], ref)
    assert df["d_metric"].abs().max() > 1e-4
    att = screen_heads(
        bridge, tokens, metric=_last_logprob, method="attribution", stats=Stats(n_boot=20)
    )
    assert rank_correlation(att["d_metric"], df["d_metric"]) > 0.5


def test_keywords_of_0_1_still_work_with_a_deprecation_warning(attn_model, tiny_task):
    """`screen_heads(model, task, method="exact", n_boot=50)`, public in 0.1.0, gives what the
    new spelling gives and warns, naming the replacement (the keywords moved in 0.2): the bootstrap
    settings moved into `Stats`, the budgets into `Compute`, the race into `ScreenRace`."""
    import pandas as pd

    from workbench.compute import Compute
    from workbench.screening.screen import ScreenRace

    with pytest.warns(DeprecationWarning) as caught:
        old = screen_heads(attn_model, tiny_task, method="exact", n_boot=50, seed=3, ci=0.9,
                           max_rows=64, progress=False, race_on="logit_diff",
                           race_rule="pool")
    new = screen_heads(attn_model, tiny_task, method="exact",
                       stats=Stats(n_boot=50, seed=3, ci=0.9),
                       compute=Compute(max_rows=64, progress=False),
                       race_on=ScreenRace("logit_diff", "pool"))
    pd.testing.assert_frame_equal(old, new)
    messages = [str(w.message) for w in caught]
    assert any("n_boot" in m and "workbench.stats.Stats(n_boot=50)" in m for m in messages)
    assert any("race_on=ScreenRace('logit_diff')" in m for m in messages)
    assert all("0.3.0" in m for m in messages)
    # attributed to the caller (this file), where Python's default filter would show it
    assert {w.filename for w in caught} == {__file__}
    # a moved keyword that changes a number does change it, as before
    with pytest.warns(DeprecationWarning, match="n_boot"):
        narrow = screen_heads(attn_model, tiny_task, n_boot=20)
    assert not narrow["d_logit_diff_lo"].equals(new["d_logit_diff_lo"])


def test_the_ablation_and_scope_keywords_still_work_with_a_deprecation_warning(attn_model,
                                                                               tiny_task):
    """`kind`, `means` and `per_position` moved into `ablation=Ablation(...)`, `split` and
    `heads` into `scope=ScreenScope(...)`: the old keywords give the new call's table, and
    each warns, naming its replacement."""
    import pandas as pd

    from workbench.screening.screen import ScreenScope

    batch = encode_task(attn_model, tiny_task)
    means = compute_head_means(attn_model, batch.tokens, batch.lengths)
    heads = ["L0H1", "L1H2"]
    with pytest.warns(DeprecationWarning) as caught:
        old = screen_heads(attn_model, batch, kind="mean", means=means, per_position=False,
                           split="select", heads=heads, stats=Stats(n_boot=20))
    new = screen_heads(attn_model, batch, Ablation("mean", means, per_position=False),
                       scope=ScreenScope("select", heads), stats=Stats(n_boot=20))
    pd.testing.assert_frame_equal(old, new)
    messages = [str(w.message) for w in caught]
    for old_keyword, shown in [("kind", "Ablation(kind='mean')"),
                               ("means", "Ablation(means="),
                               ("per_position", "Ablation(per_position=False)"),
                               ("split", "ScreenScope(split='select')"),
                               ("heads", "ScreenScope(heads=")]:
        assert any(f"screen_heads(..., {old_keyword}=...)" in m and shown in m
                   for m in messages), old_keyword
    assert {w.filename for w in caught} == {__file__}
    # the means reach the scores: mean ablation differs from zero ablation
    zero = screen_heads(attn_model, batch, scope=ScreenScope("select", heads),
                        stats=Stats(n_boot=20))
    assert not np.allclose(zero["d_logit_diff"].dropna(), new["d_logit_diff"].dropna())
    with pytest.raises(WorkbenchError, match="ScreenScope"):
        screen_heads(attn_model, batch, "zero", "exact", "select")
