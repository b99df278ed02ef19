"""Adaptive evaluation against the exhaustive computation: slices, raced screening, raced random
baselines, the racing rules, tiling (planted models, where the answer is known, and the naive
loop). The search space's racing is tested in tests/search/ (`test_space.py`, the interaction
search's knockouts in `test_interaction.py`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bench.planted import PlantSpec, planted_model
from tests.helpers import assert_close, loop_head_effects
from workbench import WorkbenchError
from workbench.compute import Compute
from workbench.confirmation.confirm import ConfirmPlan, confirm_sets, random_head_sets
from workbench.heads import HeadSet
from workbench.racing import (
    MIN_SLICE,
    clearly_hurts,
    example_order,
    look_z,
    race,
    separated_from,
    slice_ends,
)
from workbench.scoring.scorer import MaskScorer, masks_of
from workbench.screening.screen import ScreenRace, screen_heads
from workbench.search.candidates import search_pool, select_candidates
from workbench.stats import Stats, percentile_of, share_at_least
from workbench.tables import table_to_matrix
from workbench.tasks.encoding import encode_task

FIRST, SECOND = "logit_diff", "logprob"
METRICS = ("accuracy", "logprob", "logit_diff")
MICRO = PlantSpec(
    n_layers=6, n_heads=4, single_gains=(2.0,), pair_gains=(5.0,), triple_gains=(9.0,), seed=3
)


@pytest.fixture(scope="module")
def micro():
    return planted_model(MICRO)


def test_slices_double_and_end_at_the_split():
    assert slice_ends(150) == [19, 38, 76, 150]
    assert slice_ends(64) == [MIN_SLICE, 32, 64]
    assert slice_ends(10) == [10]
    assert_close(look_z(0.95, 1), 1.959964, atol=1e-6)
    assert look_z(0.95, 4) > look_z(0.95, 2) > look_z(0.95, 1)
    order = example_order(50, seed=3)
    assert sorted(order.tolist()) == list(range(50))
    assert torch.equal(order, example_order(50, seed=3))
    assert not torch.equal(order, example_order(50, seed=4))


@pytest.mark.parametrize("cache_bytes", [0, 1 << 30])
@pytest.mark.parametrize("masks_per_pass,token_budget", [(1, 16384), (3, 40)])
def test_scoring_a_slice_equals_the_full_scores_at_those_rows(
    gpt2_like_model, tiny_task, cache_bytes, masks_per_pass, token_budget
):
    """Rows across several length buckets, cached or recomputed prefixes, tiled masks."""
    model = gpt2_like_model
    batch = encode_task(model, tiny_task, "select")
    masks = masks_of(model, [["L0H1"], ["L1H0", "L1H3"], [], ["L1H2", "L0H0"]])
    options = dict(masks_per_pass=masks_per_pass, token_budget=token_budget,
                   cache_bytes=cache_bytes)
    full = MaskScorer(model, batch, compute=Compute(**options)).score(masks)
    rows = example_order(len(batch), seed=1)[:7]
    part = MaskScorer(model, batch, compute=Compute(**options)).score(masks, rows=rows)
    naive = MaskScorer(model, batch, reuse_prefix=False).score(masks, rows=rows)
    for m in METRICS:
        assert part[m].shape == (4, 7)
        assert_close(part[m], full[m][:, rows], msg=m)
        assert_close(naive[m], full[m][:, rows], msg=m)
    with pytest.raises(WorkbenchError, match="must not repeat"):
        MaskScorer(model, batch).score(masks, rows=torch.tensor([0, 0]))


def test_race_without_a_rule_is_the_exhaustive_computation(gpt2_like_model, tiny_task):
    model = gpt2_like_model
    batch = encode_task(model, tiny_task, "select")
    scorer = MaskScorer(model, batch)
    masks = masks_of(model, [["L0H1"], ["L1H0", "L1H3"]])
    result = race(scorer, masks, None)
    full, clean = scorer.score(masks), scorer.clean()
    for m in METRICS:
        assert_close(result.diffs[m], full[m] - clean[m][None], msg=m)
    assert result.n.tolist() == [len(batch)] * 2 and result.forward_eq == 2.0


def test_raced_screening_equals_the_naive_loop_where_undecided(gpt2_like_model, tiny_task):
    """Heads the race never closes have the loop's numbers; closed heads clearly hurt in the
    exhaustive table too, and the search pool is the same."""
    model = gpt2_like_model
    batch = encode_task(model, tiny_task, "select")
    raced = screen_heads(
        model, batch, split=None, race_on=ScreenRace("logprob"), stats=Stats(n_boot=200)
    )
    exact = screen_heads(model, batch, split=None, stats=Stats(n_boot=200))
    loop = loop_head_effects(model, batch)
    n = table_to_matrix(raced, "d_logprob_n").ravel()
    done = n == len(batch)
    assert done.any()
    for m in METRICS:
        assert_close(table_to_matrix(raced, f"d_{m}").ravel()[done], loop[m].ravel()[done], msg=m)
    assert (table_to_matrix(exact, "d_logprob_hi").ravel()[~done] < 0).all()
    assert search_pool(raced, "logprob") == search_pool(exact, "logprob")
    assert (table_to_matrix(exact, "d_logprob_n") == len(batch)).all()


def test_raced_screening_on_a_planted_model_closes_only_hurting_heads(micro):
    """At 24 heads, 64 selection examples: heads stop early only where removing them clearly
    hurts in the exhaustive table too, every planted enhancing head sees every example, and
    the pool and candidates equal the exhaustive ones."""
    exact = select_candidates(
        screen_heads(micro.model, micro.task, stats=Stats(n_boot=200)), FIRST, SECOND, 8
    )
    raced = select_candidates(
        screen_heads(micro.model, micro.task, race_on=ScreenRace(FIRST), stats=Stats(n_boot=200)),
        FIRST,
        SECOND,
        8,
    )
    n_select = int(exact["d_logit_diff_n"].max())
    stopped = raced[raced["d_logit_diff_n"] < n_select]
    assert len(stopped) > 0
    assert (exact.loc[stopped.index, "d_logit_diff_hi"] < 0).all()
    roles = {f"L{l}H{h}": r for (l, h), r in micro.roles.items()}
    enhancing = ("single", "member", "backup_a", "backup_b")
    assert not any(roles.get(name) in enhancing for name in stopped["head_name"])
    assert {roles.get(name) for name in stopped["head_name"]} >= {"helpful"}
    assert search_pool(raced, FIRST) == search_pool(exact, FIRST)
    assert list(raced["candidate"]) == list(exact["candidate"])
    done = raced["d_logit_diff_n"] == n_select
    assert_close(raced.loc[done, "d_logit_diff"], exact.loc[done, "d_logit_diff"])
    assert raced.attrs["forward_eq"][micro.task.name] < exact.attrs["forward_eq"][micro.task.name]


def test_raced_random_baseline_percentile_equals_the_exhaustive_one(micro):
    """The found sets (gains 2, 5, 9) against 60 random sets of each size: the raced
    percentile and share equal those of the 60 exact gains, at a fraction of the rows."""
    scorer = micro.scorer("heldout")
    sets = {s: HeadSet.of(micro.model, micro.best[s]) for s in (1, 2, 3)}
    runs = {
        a: confirm_sets(
            scorer, sets, ConfirmPlan(FIRST, SECOND, n_random=60, adaptive=a,
                                      stats=Stats(n_boot=100))
        )[0]
        for a in (False, True)
    }
    exact, raced = runs[False], runs[True]
    L, H = MICRO.n_layers, MICRO.n_heads
    clean = scorer.clean()
    for i, size in enumerate((1, 2, 3)):
        random_sets = random_head_sets(L, H, size, 60, 0)
        r = scorer.score(masks_of(micro.model, random_sets))
        for m, col in ((FIRST, "percentile"), (SECOND, f"percentile_{SECOND}")):
            gains = (r[m] - clean[m][None]).mean(-1).numpy()
            assert_close(raced[col][i], percentile_of(raced[f"d_{m}"][i], gains))
            assert_close(raced[col][i], exact[col][i])
        gains = (r[FIRST] - clean[FIRST][None]).mean(-1).numpy()
        assert_close(raced["random_pct_ge"][i],
                     100 * share_at_least(raced[f"d_{FIRST}"][i], gains))
    assert (raced["random_forward_eq"] < exact["random_forward_eq"]).all()
    assert (raced["n_random_complete"] < raced["n_random"]).any()
    assert (exact["n_random_complete"] == exact["n_random"]).all()


def test_separated_sets_are_decided_only_when_their_interval_excludes_the_value():
    rule = separated_from({"a": 1.0})
    means = {"a": torch.tensor([0.0, 0.9, 3.0, 1.0])}
    ses = {"a": torch.tensor([0.1, 0.1, 0.5, float("nan")])}
    assert rule(means, ses, 2.0, torch.arange(4)).tolist() == [False, True, False, True]
    hurts = clearly_hurts("a")
    assert hurts(means, ses, 2.0, torch.arange(4)).tolist() == [True, True, True, True]
    assert hurts(
        {"a": torch.tensor([-1.0])}, {"a": torch.tensor([0.2])}, 2.0, torch.arange(1)
    ).tolist() == [False]
    assert np.isfinite(look_z(0.99, 10))


def test_gpu_token_budget_tiles_many_masks_per_forward():
    """On an accelerator the default budget comes from free memory: SmolLM2's shape with
    100 GiB free puts >= 64 masks of a 150 x 30-token split in one forward (the CPU keeps
    the measured one mask per pass)."""
    from types import SimpleNamespace

    from workbench.compute import (
        DEFAULT_TOKEN_BUDGET,
        GPU_TOKEN_CAP,
        default_masks_per_pass,
        device_token_budget,
    )

    cfg = SimpleNamespace(device="cuda", dtype=torch.bfloat16, d_model=576, d_mlp=1536, n_heads=9)
    budget = device_token_budget(cfg, free_bytes=100 << 30)
    assert DEFAULT_TOKEN_BUDGET < budget <= GPU_TOKEN_CAP
    model = SimpleNamespace(cfg=cfg)
    assert default_masks_per_pass(model, 150, 30, budget) >= 64
    assert device_token_budget(SimpleNamespace(**{**vars(cfg), "device": "cpu"})) == (
        DEFAULT_TOKEN_BUDGET
    )
    small = device_token_budget(cfg, free_bytes=1 << 20)  # nearly full: never below the CPU's
    assert small == DEFAULT_TOKEN_BUDGET


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tiles_many_masks_per_forward_and_matches_the_cpu(tiny_task):
    """On CUDA the default scorer puts many masks in one forward, with the CPU's numbers.
    Tolerance 1e-4: float32 on both (no TF32 in PyTorch's default matmul); not yet measured
    on a GPU, where reductions run in another order."""
    from tests.helpers import tiny_model

    scores = {}
    for device in ("cpu", "cuda"):
        model = tiny_model(attn_only=False, seed=1, device=device)
        batch = encode_task(model, tiny_task, "select")
        masks = (
            torch.rand(
                40,
                model.cfg.n_layers,
                model.cfg.n_heads,
                generator=torch.Generator().manual_seed(0),
            )
            < 0.3
        ).float()
        scorer = MaskScorer(model, batch)
        if device == "cuda":
            assert scorer.masks_per_pass(scorer.chunks()[0]) >= 16
        scores[device] = {m: v.cpu() for m, v in scorer.score(masks).items()}
    for m in METRICS:
        assert_close(scores["cuda"][m], scores["cpu"][m], atol=1e-4, msg=m)


def test_side_task_columns_rest_on_the_first_slice(micro):
    """Raced screening scores a side task only on as many examples as the main task's first
    look (the first of the side task's racing order), with the exact numbers of those
    examples, and says so in `d_<m>_n_<task>`; and only for the heads in the search pool
    (the others, whose removal clearly hurts the task, get NaN and n = 0)."""
    from workbench.racing import ATOL, first_slice
    from workbench.stats import mean_se

    model, task = micro.model, micro.task
    side = encode_task(model, task)
    raced = screen_heads(
        model, task, others={"side": side}, race_on=ScreenRace(FIRST), stats=Stats(n_boot=50)
    )
    in_pool = (raced[f"d_{FIRST}_hi"] >= -ATOL).to_numpy()
    assert in_pool.any() and not in_pool.all()
    k = first_slice(len(encode_task(model, task, "select")))  # the task's first look
    assert k < len(side) and (raced["d_logprob_n_side"][in_pool] == k).all()
    assert (raced["d_logprob_n_side"][~in_pool] == 0).all()
    assert raced["d_logprob_side"][~in_pool].isna().all()
    rows = example_order(len(side), seed=0)[:k]
    scorer = MaskScorer(model, side)
    heads = [(l, h) for l in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)]
    scores = scorer.score(masks_of(model, [[h] for h in heads]), rows=rows)
    expected = mean_se(scores["logprob"] - scorer.clean()["logprob"][rows][None])[0]
    assert_close(raced["d_logprob_side"][in_pool], expected.numpy()[in_pool])


# ---------------------------------------------------------------------------------------------
# What the default pipeline races for: the search pool, shared random baselines, CPU tiling


def test_pool_rule_decides_membership_and_keeps_every_exhaustive_pool_head(micro):
    """Screening raced for the pool (`race_rule="pool"`, what `run_cel` uses with the
    interaction search): a head stops once it clearly hurts (then it hurts under the `hurts`
    rule at the same look, and in the exhaustive table) or once its mean effect is >= 0; the
    heads never stopped have the exhaustive numbers; the pool holds every exhaustive pool head
    and every planted enhancing head, at fewer forward-equivalents than the `hurts` rule."""
    from workbench.racing import ATOL, pool_decided
    from workbench.screening.stage import screen_race_rule

    assert screen_race_rule(["interaction"]) == "pool"
    assert screen_race_rule(["interaction", "greedy"]) == "hurts"
    tables = {
        rule: screen_heads(
            micro.model, micro.task, race_on=ScreenRace(FIRST, rule), stats=Stats(n_boot=200)
        )
        for rule in ("pool", "hurts")
    }
    exact = screen_heads(micro.model, micro.task, stats=Stats(n_boot=200))
    pool, hurts = tables["pool"], tables["hurts"]
    n_select = int(exact["d_logit_diff_n"].max())
    done = pool["d_logit_diff_n"] == n_select
    assert_close(pool.loc[done, "d_logit_diff"], exact.loc[done, "d_logit_diff"])
    stopped = pool[~done]
    assert len(stopped) > 0
    out = stopped[stopped["d_logit_diff_hi"] < -ATOL]
    kept = stopped[stopped["d_logit_diff_hi"] >= -ATOL]
    assert (kept["d_logit_diff"] >= -ATOL).all()  # stopped in: mean >= 0
    assert (hurts.loc[out.index, "d_logit_diff_hi"] < -ATOL).all()
    assert (exact.loc[out.index, "d_logit_diff_hi"] < 0).all()
    assert set(search_pool(pool, FIRST)) >= set(search_pool(exact, FIRST))
    roles = {f"L{l}H{h}": r for (l, h), r in micro.roles.items()}
    enhancing = {
        name for name, r in roles.items() if r in ("single", "member", "backup_a", "backup_b")
    }
    assert enhancing <= {f"L{l}H{h}" for l, h in search_pool(pool, FIRST)}
    task = micro.task.name
    assert pool.attrs["forward_eq"][task] < hurts.attrs["forward_eq"][task]
    rule = pool_decided("a")
    means = {"a": torch.tensor([-1.0, -0.1, 0.0, 0.2])}
    ses = {"a": torch.tensor([0.1, 0.1, 0.0, 0.5])}
    assert rule(means, ses, 2.0, torch.arange(4)).tolist() == [False, True, False, False]
    with pytest.raises(WorkbenchError, match="race_rule"):
        screen_heads(micro.model, micro.task, race_on=ScreenRace(FIRST, "bogus"))


@pytest.mark.parametrize("adaptive", [False, True])
def test_pool_baseline_reuses_scores_and_equals_scoring_the_pool_sets(micro, adaptive):
    """The pool baseline's percentile equals that of the pool sets' own held-out gains (the
    shared ones taken from the random baseline), and the shared sets cost nothing more."""
    from workbench.confirmation.confirm import pool_random_head_sets

    scorer = micro.scorer("heldout")
    L, H = MICRO.n_layers, MICRO.n_heads
    heads = [(l, h) for l in range(L) for h in range(H)]
    pool = heads[2:]  # 22 of 24 heads: most random sets lie in the pool
    sets = {s: HeadSet.of(micro.model, micro.best[s]) for s in (1, 2, 3)}
    conf, _ = confirm_sets(
        scorer,
        sets,
        ConfirmPlan(FIRST, SECOND, n_random=60, pool=pool, adaptive=adaptive,
                    stats=Stats(n_boot=100)),
    )
    clean = scorer.clean()
    for i, size in enumerate((1, 2, 3)):
        random_sets = random_head_sets(L, H, size, 60, 0)
        pool_sets = pool_random_head_sets(pool, size, 60, 0, reuse=random_sets)
        shared = sum(s in random_sets for s in pool_sets)
        assert conf["n_pool_random_shared"][i] == shared > 0
        gains = (
            (scorer.score(masks_of(micro.model, pool_sets))[FIRST] - clean[FIRST][None])
            .mean(-1)
            .numpy()
        )
        assert_close(conf["pool_percentile"][i], percentile_of(conf[f"d_{FIRST}"][i], gains))
        new = len(pool_sets) - shared
        assert conf["pool_forward_eq"][i] <= new + 1e-9
        if not adaptive:
            assert_close(conf["pool_forward_eq"][i], new)


def test_cpu_tiles_small_slices_up_to_its_token_target(gpt2_like_model, tiny_task):
    """On a CPU a racing slice is tiled up to `CPU_TOKEN_TARGET` tokens per forward, a split
    that large gets one mask per pass, and the tiled scores equal one mask per pass."""
    from types import SimpleNamespace

    from workbench.compute import CPU_TOKEN_TARGET, DEFAULT_TOKEN_BUDGET, default_masks_per_pass

    cpu = SimpleNamespace(cfg=SimpleNamespace(device="cpu"))
    assert default_masks_per_pass(cpu, 20, 20, DEFAULT_TOKEN_BUDGET) == CPU_TOKEN_TARGET // 400
    assert default_masks_per_pass(cpu, 154, 20, DEFAULT_TOKEN_BUDGET) == 1
    assert default_masks_per_pass(cpu, 20, 20, 800) == 2  # never past the token budget
    model = gpt2_like_model
    batch = encode_task(model, tiny_task, "select")
    scorer = MaskScorer(model, batch)
    assert scorer.masks_per_pass(scorer.chunks()[0]) > 1
    masks = (
        torch.rand(
            12, model.cfg.n_layers, model.cfg.n_heads, generator=torch.Generator().manual_seed(2)
        )
        < 0.4
    ).float()
    rows = example_order(len(batch), seed=0)[:5]
    tiled = scorer.score(masks, rows=rows)
    one = MaskScorer(model, batch, compute=Compute(masks_per_pass=1)).score(masks, rows=rows)
    for m in METRICS:
        assert_close(tiled[m], one[m], msg=m)




def test_racing_pays_while_a_slice_costs_its_share():
    """The rule of `--racing auto`: pure compute (a slice costs its share of a pass) races,
    pure launch overhead (a slice costs a whole pass) does not; the bound is `RACING_SAVING`
    times the slice's share."""
    from workbench.racing import RACING_SAVING, racing_pays

    share = 16 / 154
    assert racing_pays(share * 2.5, 2.5, share)  # compute-bound: the CPU's case
    assert not racing_pays(0.020, 0.024, share)  # launch-bound: a small model on a GPU
    bound = RACING_SAVING * share * 1.0
    assert racing_pays(bound * 0.99, 1.0, share) and not racing_pays(bound * 1.01, 1.0, share)
    with pytest.raises(WorkbenchError, match="0 < share <= 1"):
        racing_pays(0.1, 1.0, 0.0)


def test_auto_racing_measures_on_a_gpu_only(attn_model, tiny_task, monkeypatch):
    """A CPU or a torch.distributed group races without measuring; a GPU's measurement (here
    stood in for) decides, and the line says what was measured."""
    import types

    import workbench.racing as racing
    from workbench.scoring.scorer import MaskScorer
    from workbench.tasks.encoding import encode_task

    scorer = MaskScorer(attn_model, encode_task(attn_model, tiny_task, "select"))
    n = 154  # SmolLM2's ioi selection split: a first slice of 20

    def unmeasured(*args, **kwargs):
        raise AssertionError("measured")

    monkeypatch.setattr(racing, "time_slice_and_pass", unmeasured)
    assert racing.auto_racing(scorer) == (True, None)
    gpu = types.SimpleNamespace(model=types.SimpleNamespace(cfg=types.SimpleNamespace(
        device="cuda:0")), data=range(n))
    assert racing.auto_racing(gpu, distributed=True) == (True, None)
    for (slice_s, full_s), on in (((0.020, 0.024), False), ((0.003, 0.024), True)):
        monkeypatch.setattr(racing, "time_slice_and_pass",
                            lambda s, first, t=(slice_s, full_s): t)
        got, why = racing.auto_racing(gpu)
        assert got is on and why.startswith(f"racing {'on' if on else 'off'}: on cuda:0 ")
        assert f"{racing.first_slice(n)} of {n} selection examples" in why


def test_the_timed_slice_and_pass_run_on_the_model(attn_model, tiny_task):
    from workbench.racing import time_slice_and_pass
    from workbench.scoring.scorer import MaskScorer
    from workbench.tasks.encoding import encode_task

    scorer = MaskScorer(attn_model, encode_task(attn_model, tiny_task, "select"))
    calls = []
    score = scorer.score
    scorer.score = lambda masks, rows=None: calls.append(None if rows is None else len(rows)) \
        or score(masks, rows=rows)
    slice_s, full_s = time_slice_and_pass(scorer, 5, repeats=2)
    assert slice_s > 0 and full_s > 0
    assert calls == [5, 5, 5, None, None, None]  # one untimed call before each timed pair
