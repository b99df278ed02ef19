"""Single-head screening against naive references: prefix reuse, tiling, attribution, stats."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers import assert_close, linear_model, tiny_encoder
from workbench import WorkbenchError, ablated, compute_head_means, evaluate, summarize
from workbench.compute import Compute
from workbench.heads import all_heads
from workbench.scoring.scorer import MaskScorer, masks_of
from workbench.screening.attribution import attribution_effects
from workbench.screening.screen import naive_effects, screen_heads, single_head_diffs
from workbench.stats import (
    Stats,
    bootstrap_weights,
    mean_se,
    paired_bootstrap,
    percentile_of,
    rank_correlation,
    share_at_least,
)
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
    naive = naive_effects(model, batch, kind, means)
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


@pytest.mark.parametrize("masks_per_pass,max_rows", [(3, 1024), (2, 7), (None, 5)])
def test_tiled_and_chunked_scoring_equals_one_mask_at_a_time(
    gpt2_like_model, tiny_task, masks_per_pass, max_rows
):
    model = gpt2_like_model
    batch = encode_task(model, tiny_task, "select")
    means = _means(model, batch)
    sets = [["L0H1"], ["L1H0", "L1H3"], ["L0H0", "L0H2", "L1H1"], [], ["L1H2"]]
    masks = masks_of(model, sets)
    ref = MaskScorer(model, batch, "mean", means, compute=Compute(masks_per_pass=1)).score(masks)
    got = MaskScorer(
        model,
        batch,
        "mean",
        means,
        compute=Compute(masks_per_pass=masks_per_pass, max_rows=max_rows),
    ).score(masks)
    for m in METRICS:
        assert_close(got[m], ref[m], msg=m)
    # and against the context manager on the full model
    with ablated(model, sets[2], "mean", means), torch.no_grad():
        from workbench.metrics.scores import answer_logits, score_logits

        direct = score_logits(answer_logits(model, batch), batch)
    assert_close(got["logprob"][2], direct["logprob"])
    assert_close(got["logprob"][3], MaskScorer(model, batch).clean()["logprob"])


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


def test_attribution_is_exact_when_the_metric_is_linear_in_z(tiny_task):
    model = linear_model()
    batch = encode_task(model, tiny_task, "select")
    for kind in ("zero", "mean"):
        means = _means(model, batch)
        _, est = attribution_effects(model, batch, kind, means)
        _, exact = single_head_diffs(model, batch, "exact", kind, means)
        assert_close(est["logit_diff"], exact["logit_diff"], atol=1e-4, rtol=1e-4)
        assert exact["logit_diff"].abs().max() > 1e-2
        # log-prob is not linear (softmax) but is estimated to first order
        assert rank_correlation(est["logprob"].nanmean(-1), exact["logprob"].nanmean(-1)) > 0.8


def test_attribution_table_ranks_like_exact(gpt2_like_model, tiny_task):
    att = screen_heads(gpt2_like_model, tiny_task, method="attribution", stats=Stats(n_boot=20))
    exact = screen_heads(gpt2_like_model, tiny_task, method="exact", stats=Stats(n_boot=20))
    check_head_table(att)
    assert list(att.columns) == list(exact.columns)
    assert rank_correlation(att["d_logit_diff"], exact["d_logit_diff"]) > 0.7
    flips = att["d_accuracy"].to_numpy() * len(tiny_task.subset("select"))
    assert_close(flips, np.round(flips), atol=1e-4)  # estimated accuracy moves in whole examples


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


def test_bootstrap_matches_a_numpy_reference():
    rng = np.random.default_rng(0)
    diffs = torch.tensor(rng.normal(0.3, 1.0, size=(3, 25)))
    diffs[1, 4] = float("nan")
    lo, hi = paired_bootstrap(diffs, n_boot=400, seed=5, ci=0.9)
    w = bootstrap_weights(25, 400, 5).double().numpy()
    for r in range(3):
        x = diffs[r].numpy()
        valid = ~np.isnan(x)
        boots = (w[:, valid] @ x[valid]) / w[:, valid].sum(1)
        assert_close(lo[r], np.quantile(boots, 0.05))
        assert_close(hi[r], np.quantile(boots, 0.95))
    mean, se = mean_se(diffs)
    assert_close(mean[1], np.nanmean(diffs[1].numpy()))
    assert_close(se[0], diffs[0].numpy().std(ddof=1) / 5.0)
    assert (bootstrap_weights(25, 400, 5).sum(1) == 25).all()


def test_percentile_and_rank_correlation():
    assert percentile_of(3.0, [1, 2, 3, 4]) == 62.5
    assert percentile_of(10.0, [1, 2]) == 100.0
    assert share_at_least(3.0, [1, 2, 3, 4]) == 0.5
    assert share_at_least(3.0, [1, float("nan"), 3, 4]) == 2 / 3  # NaNs dropped, as above
    scipy_stats = pytest.importorskip("scipy.stats")  # reference only; not a dependency
    a, b = np.random.default_rng(1).normal(size=(2, 30))
    b[3] = a[7]  # a tie
    assert_close(rank_correlation(a, b), scipy_stats.spearmanr(a, b).statistic)


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


def test_attribution_on_a_first_look_scores_the_racing_orders_first_examples(
    gpt2_like_model, tiny_task
):
    """A side task's per-head columns rest on its first look (`max_examples`): attribution then
    estimates on those examples of the racing order alone, as exact screening scores them, and
    leaves the others NaN."""
    from workbench.racing import RacePlan, example_order
    from workbench.screening.attribution import attribution_effects
    from workbench.screening.screen import single_head_diffs

    batch = encode_task(gpt2_like_model, tiny_task)
    k = 5
    clean, est = single_head_diffs(gpt2_like_model, batch, "attribution",
                                   plan=RacePlan(seed=3, max_examples=k))
    rows = example_order(len(batch), 3)[:k]
    want_clean, want = attribution_effects(gpt2_like_model, batch.rows(rows))
    others = torch.ones(len(batch), dtype=torch.bool)
    others[rows] = False
    for name, v in est.items():
        assert_close(v[:, rows], want[name])
        assert torch.isnan(v[:, others]).all() and torch.isnan(clean[name][others]).all()
        assert_close(clean[name][rows], want_clean[name])
