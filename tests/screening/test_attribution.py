"""Attribution screening (`workbench.screening.attribution`): exact when the metric is linear
in z, ranked like exact screening, the derivative of the exact scores on multi-token tasks, on
a first look of racing's order, with custom metrics run once per length bucket."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch

from tests.helpers import assert_close, linear_model
from workbench import Ablation, WorkbenchError, compute_head_means
from workbench.screening.attribution import attribution_effects
from workbench.screening.screen import screen_heads, single_head_diffs
from workbench.stats import Stats, rank_correlation
from workbench.tables import check_head_table
from workbench.tasks.encoding import encode_task
from workbench.tasks.task import Example, Task


def _means(model, batch):
    return compute_head_means(model, batch.tokens, batch.lengths)


def test_attribution_is_exact_when_the_metric_is_linear_in_z(tiny_task):
    model = linear_model()
    batch = encode_task(model, tiny_task, "select")
    for kind in ("zero", "mean"):
        means = _means(model, batch)
        _, est = attribution_effects(model, batch, Ablation(kind, means))
        _, exact = single_head_diffs(model, batch, "exact", Ablation(kind, means))
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


def test_attribution_on_a_multi_token_task_is_the_derivative_of_the_exact_scores(
    attn_model, multi_task
):
    """Attribution with `multi_token_metric` counts every forward an example makes (its answers'
    rows): each head's estimate equals the finite difference of the exact scores when that head's
    z moves a small step towards its ablated value (zero ablation: z -> (1 - eps) z)."""
    from workbench.metrics.scores import multi_token_metric
    from workbench.screening.attribution import attribution_effects

    batch = encode_task(attn_model, multi_task)
    clean, est = attribution_effects(attn_model, batch, metric=multi_token_metric)
    eps = 1e-3
    H = attn_model.cfg.n_heads

    def shrink(z, hook, head):
        z = z.clone()
        z[:, :, head] *= 1 - eps
        return z

    with torch.no_grad():
        base = multi_token_metric(attn_model, batch)
        assert_close(clean["logprob"], base["logprob"])
        for layer in range(attn_model.cfg.n_layers):
            for head in range(H):
                hooks = [(f"blocks.{layer}.attn.hook_z", partial(shrink, head=head))]
                with attn_model.hooks(fwd_hooks=hooks):
                    moved = multi_token_metric(attn_model, batch)
                for name in ("logprob", "logit_diff"):
                    fd = (moved[name] - base[name]) / eps
                    got = est[name][layer * H + head]
                    # float32 finite differences: second-order term ~eps and rounding ~1e-7/eps
                    torch.testing.assert_close(got, fd, rtol=2e-2, atol=2e-3)
    assert torch.isnan(est["accuracy"]).all()  # exact match has no derivative


def test_attribution_refuses_custom_data_whose_metric_runs_several_forwards(attn_model):
    from workbench.screening.attribution import attribution_effects

    tokens = torch.tensor([[1, 2, 3], [4, 5, 6]])

    def two_passes(model, data):
        return model(data[:1])[:, -1, 0] + model(data[1:])[:, -1, 0]

    with pytest.raises(WorkbenchError, match="needs one forward over the data's 1 rows"):
        attribution_effects(attn_model, tokens, metric=two_passes)


def test_attribution_on_a_multi_token_accuracy_task_has_a_pool_baseline(attn_model):
    """Attribution has no estimate of exact match, so the log-prob decides the search pool
    (`search_pool(..., second=)`), and the held-out headline gets its pool baseline."""
    from workbench.pipeline import run_cel
    from workbench.search.candidates import search_pool

    examples = [
        Example(id=f"e{i}", prompt=f"w{i % 20} w{(3 * i) % 20} w{(7 * i + 1) % 20}",
                answers=(f"w{(i + 5) % 19} w{(2 * i) % 20}",), wrong=("w19",),
                split="select" if i % 2 else "heldout")
        for i in range(40)
    ]
    task = Task(name="multi_acc", examples=examples, answer_tokens="multi", metric="accuracy")
    result = run_cel(attn_model, task, method="attribution", check_attribution=False,
                     strategy=["exhaustive"], max_size=2, top_m=3, n_random=20, n_boot=100,
                     progress=False)
    assert result.heads["d_accuracy_hi"].isna().all()
    pool = search_pool(result.heads, "accuracy", second="logprob")
    assert pool == search_pool(result.heads, "logprob") and pool
    assert result.confirmation["pool_percentile"].notna().all()


def test_a_one_forward_custom_metric_gets_length_buckets_and_the_same_estimates(
    gpt2_like_model, tiny_task
):
    """A custom metric declared `one_forward` runs once per length bucket under attribution,
    not once per example, and its estimates equal the one-example-at-a-time ones."""
    from workbench import one_forward
    from workbench.logits import answer_logits
    from workbench.metrics.scores import score_logits
    from workbench.screening.attribution import attribution_effects

    calls = []

    def logprob(model, batch):
        calls.append(len(batch))
        return score_logits(answer_logits(model, batch), batch)["logprob"]

    batch = encode_task(gpt2_like_model, tiny_task)
    assert len(set(batch.lengths.tolist())) > 1  # several buckets' worth of lengths
    clean_slow, slow = attribution_effects(gpt2_like_model, batch, metric=logprob)
    assert calls == [1] * len(batch)
    calls.clear()
    clean_fast, fast = attribution_effects(gpt2_like_model, batch, metric=one_forward(logprob))
    assert 1 <= len(calls) < len(batch) and sum(calls) == len(batch)
    assert_close(clean_fast["metric"], clean_slow["metric"])
    assert_close(fast["metric"], slow["metric"])


def test_a_declared_one_forward_metric_that_runs_several_is_refused(attn_model, multi_task):
    from workbench import one_forward
    from workbench.metrics.scores import multi_token_metric
    from workbench.screening.attribution import attribution_effects

    batch = encode_task(attn_model, multi_task)
    with pytest.raises(WorkbenchError, match="declared `one_forward`, but on"):
        attribution_effects(attn_model, batch, metric=one_forward(
            lambda model, b: multi_token_metric(model, b)))
