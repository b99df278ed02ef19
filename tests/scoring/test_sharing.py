"""Shared prefixes among masks (`workbench.scoring.sharing`) against one restarted run per mask and
the naive full forward: the same scores, fewer blocks run."""

from __future__ import annotations

import json
from itertools import combinations

import pytest
import torch

from tests.helpers import assert_close, randomize_biases, tiny_model, write_task
from workbench.ablation import compute_head_means
from workbench.compute import Compute
from workbench.racing import example_order
from workbench.scoring.scorer import MaskScorer, masks_of
from workbench.scoring.sharing import next_layers, shared_cost, sharing_pays
from workbench.tasks.encoding import encode_task
from workbench.tasks.task import load_task

METRICS = ("accuracy", "logprob", "logit_diff")
# finalist-like heads: several per layer, spread over the 5 layers
HEADS = ["L0H1", "L1H0", "L1H2", "L2H3", "L3H1", "L4H0", "L4H2"]


@pytest.fixture(scope="module")
def deep():
    model = tiny_model(attn_only=False, n_layers=5, seed=4)
    randomize_biases(model, seed=4)
    return model


@pytest.fixture(scope="module")
def cf_task(tmp_path_factory):
    """`write_task`'s task with a counterfactual prompt per example (first word changed)."""
    path = write_task(tmp_path_factory.mktemp("sharing") / "cf.jsonl", n=24, seed=5)
    head, *records = [json.loads(line) for line in path.read_text().splitlines()]
    for r in records:
        first, *rest = r["prompt"].split()
        r["counterfactual"] = " ".join([f"w{(int(first[1:]) + 7) % 20}", *rest])
    path.write_text("\n".join(json.dumps(r) for r in [head, *records]) + "\n")
    return load_task(path)


def _sets():
    """Every set of up to 3 of `HEADS` (the finalists' sets), a duplicate, the empty set and
    a set of two heads of one layer: groups that share 0 to 4 blocks."""
    sets = [list(c) for k in (1, 2, 3) for c in combinations(HEADS, k)]
    return sets + [["L1H0", "L2H3"], [], ["L1H0", "L1H2", "L1H3"]]


@pytest.mark.parametrize("kind", ["zero", "mean", "resample"])
@pytest.mark.parametrize("masks_per_pass", [None, 3])
def test_shared_runs_equal_one_restart_per_mask_and_the_naive_forward(deep, cf_task, kind,
                                                                      masks_per_pass):
    batch = encode_task(deep, cf_task, "select")
    means = compute_head_means(deep, batch.tokens, batch.lengths) if kind == "mean" else None
    compute = Compute(masks_per_pass=masks_per_pass, share_prefix=True)
    masks = masks_of(deep, _sets())
    shared = MaskScorer(deep, batch, kind=kind, means=means, compute=compute).score(masks)
    alone = MaskScorer(deep, batch, kind=kind, means=means, compute=compute)
    one_by_one = [alone.score(masks[i : i + 1]) for i in range(len(masks))]
    naive = MaskScorer(deep, batch, kind=kind, means=means, reuse_prefix=False).score(masks)
    rows = example_order(len(batch), 0)[:9]
    sliced = MaskScorer(deep, batch, kind=kind, means=means, compute=compute).score(masks,
                                                                                  rows=rows)
    for m in METRICS:
        reference = torch.cat([s[m] for s in one_by_one])
        assert_close(shared[m], reference, msg=m)
        assert_close(shared[m], naive[m], msg=m)
        assert_close(sliced[m], shared[m][:, rows], msg=m)


def test_sharing_runs_fewer_blocks(deep, cf_task):
    """Rows entering each block, counted by a hook: the finalists' sets share their lowest
    heads' blocks, so they cost less than one restart per mask (which the count also checks)."""
    batch = encode_task(deep, cf_task, "select")
    masks = masks_of(deep, _sets())
    counted = {"rows": 0}

    def count(resid, hook):
        counted["rows"] += resid.shape[0]

    hooks = [(f"blocks.{l}.hook_resid_pre", count) for l in range(deep.cfg.n_layers)]
    scorer = MaskScorer(deep, batch, compute=Compute(share_prefix=True))
    scorer.clean()
    with deep.hooks(fwd_hooks=hooks):
        scorer.score(masks)
    first = next_layers(masks, 0)
    restarts = int(sum(deep.cfg.n_layers - f for f in first.tolist())) * len(batch)
    assert counted["rows"] < 0.8 * restarts
    counted["rows"] = 0
    seen, fresh = set(), 0  # a mask scored alone again is answered from the scorer's memo
    with deep.hooks(fwd_hooks=hooks):
        for i in range(len(masks)):
            scorer.score(masks[i : i + 1])
            key = tuple(masks[i].flatten().tolist())
            fresh += 0 if key in seen else (deep.cfg.n_layers - int(first[i])) * len(batch)
            seen.add(key)
    assert counted["rows"] == fresh
    assert len(seen) < len(masks) or fresh == restarts
    counted["rows"] = 0
    unshared = MaskScorer(deep, batch, compute=Compute(share_prefix=False))
    unshared.clean()
    with deep.hooks(fwd_hooks=hooks):
        scores = unshared.score(masks)
    assert counted["rows"] == restarts  # share_prefix=False: one restart per mask, as before
    for m in METRICS:
        assert_close(scores[m], scorer.score(masks)[m], msg=m)


def test_next_layers():
    masks = torch.zeros(3, 4, 2)
    masks[0, 1, 0] = masks[0, 3, 1] = masks[1, 0, 1] = 1
    assert next_layers(masks, 0).tolist() == [1, 0, 4]
    assert next_layers(masks, 2).tolist() == [3, 4, 4]


def test_auto_shares_the_finalist_sets_and_restarts_random_knockouts(deep, cf_task):
    """`share_prefix=None` (auto) in one process: the finalists' sets share (fewer rows enter
    the blocks, counted by a hook), random knockouts of 30 % of the heads restart (exactly one
    restart per mask); the scores equal one restart per mask either way."""
    batch = encode_task(deep, cf_task, "select")
    L = deep.cfg.n_layers
    finalists = masks_of(deep, _sets()[:-3])
    g = torch.Generator().manual_seed(0)
    knockouts = (torch.rand(40, L, deep.cfg.n_heads, generator=g) < 0.3).float()
    counted = {"rows": 0}

    def count(resid, hook):
        counted["rows"] += resid.shape[0]

    hooks = [(f"blocks.{l}.hook_resid_pre", count) for l in range(L)]
    for masks, pays in ((finalists, True), (knockouts, False)):
        first = next_layers(masks, 0)
        layers = sorted(set(first.tolist()) - {L})
        decided = [sharing_pays(masks, (first == l).nonzero().flatten(), l) for l in layers]
        assert any(decided) if pays else not any(decided)
        restarted = sum(shared_cost(masks, (first == l).nonzero().flatten(), l)[1]
                        for l in layers)
        assert restarted == sum(L - f for f in first.tolist() if f < L)
        auto = MaskScorer(deep, batch, compute=Compute(share_prefix=None, masks_per_pass=1))
        auto.clean()
        counted["rows"] = 0
        with deep.hooks(fwd_hooks=hooks):
            scores = auto.score(masks)
        if not pays:
            assert counted["rows"] == restarted * len(batch)
        else:
            assert counted["rows"] < 0.8 * restarted * len(batch)
        reference = MaskScorer(deep, batch, compute=Compute(share_prefix=False)).score(masks)
        for m in METRICS:
            assert_close(scores[m], reference[m], msg=m)


def _counting_hooks(n_layers: int) -> tuple[dict, list]:
    """`(calls, hooks)`: the hooks count in `calls["rows"]` the rows entering every block and
    in `calls["passes"]` the forwards reaching the last block."""
    calls = {"rows": 0, "passes": 0}

    def count(resid, hook):
        calls["rows"] += resid.shape[0]

    def last(resid, hook):
        calls["passes"] += 1

    hooks = [(f"blocks.{l}.hook_resid_pre", count) for l in range(n_layers)]
    return calls, [*hooks, (f"blocks.{n_layers - 1}.hook_resid_pre", last)]


@pytest.mark.parametrize("kind", ["zero", "mean", "resample"])
@pytest.mark.parametrize("masks_per_pass", [None, 3])
def test_joined_passes_equal_one_restart_per_layer_in_fewer_forwards(deep, cf_task, kind,
                                                                     masks_per_pass):
    """Auto (`share_prefix=None`) joins the masks of layers that do not share into common
    passes (`ChunkRun.joined`): every single head (what screening scores) and scattered
    pairs, the empty set. The scores equal per-layer restarts and the naive forward, every
    mask runs exactly its own blocks (rows entering blocks, counted by a hook), and the
    forwards reaching the last block are `ceil(M / per_pass)` instead of one per layer."""
    batch = encode_task(deep, cf_task, "select")
    means = compute_head_means(deep, batch.tokens, batch.lengths) if kind == "mean" else None
    L, H = deep.cfg.n_layers, deep.cfg.n_heads
    sets = [[(l, h)] for l in range(L) for h in range(H)]
    sets += [[(0, 1), (3, 2)], [(2, 0), (4, 3)], [], [(1, 1), (1, 3)]]
    masks = masks_of(deep, sets)
    first = next_layers(masks, 0)
    layers = sorted(set(first.tolist()) - {L})
    assert not any(sharing_pays(masks, (first == l).nonzero().flatten(), l) for l in layers)
    calls, hooks = _counting_hooks(L)
    scored, passes = {}, {}
    for share in (None, False):
        scorer = MaskScorer(deep, batch, kind=kind, means=means,
                            compute=Compute(share_prefix=share, masks_per_pass=masks_per_pass))
        scorer.clean()
        calls.update(rows=0, passes=0)
        with deep.hooks(fwd_hooks=hooks):
            scored[share] = scorer.score(masks)
        chunks = scorer.chunks()
        per_pass = [scorer.masks_per_pass(c) for c in chunks]
        restarts = sum(L - f for f in first.tolist() if f < L)
        assert calls["rows"] == restarts * len(batch)
        n_layer = [int((first == l).sum()) for l in layers]
        expected = (sum(-(-sum(n_layer) // p) for p in per_pass) if share is None
                    else sum(-(-n // p) for p in per_pass for n in n_layer))
        assert calls["passes"] == expected
        passes[share] = expected
    assert passes[None] < passes[False]
    naive = MaskScorer(deep, batch, kind=kind, means=means, reuse_prefix=False).score(masks)
    rows = example_order(len(batch), 0)[:9]
    sliced = MaskScorer(deep, batch, kind=kind, means=means,
                        compute=Compute(masks_per_pass=masks_per_pass)).score(masks, rows=rows)
    for m in METRICS:
        assert_close(scored[None][m], scored[False][m], msg=m)
        assert_close(scored[None][m], naive[m], msg=m)
        assert_close(sliced[m], scored[None][m][:, rows], msg=m)


def test_shared_walks_join_their_lone_masks(deep, cf_task):
    """Auto with the finalists' sets (which share): the shared walk's lone masks are queued
    (`ChunkRun.defer`) and joined into common passes. The same blocks run as with
    `share_prefix=True` (one tail per trie node), in fewer forwards reaching the last block,
    and the scores equal one restart per mask."""
    batch = encode_task(deep, cf_task, "select")
    L = deep.cfg.n_layers
    masks = masks_of(deep, _sets()[:-3])
    first = next_layers(masks, 0)
    assert all(sharing_pays(masks, (first == l).nonzero().flatten(), l)  # the last: a tail
               for l in sorted(set(first.tolist()) - {L, L - 1}))
    calls, hooks = _counting_hooks(L)
    seen, scores = {}, {}
    for share in (None, True, False):
        scorer = MaskScorer(deep, batch, compute=Compute(share_prefix=share, masks_per_pass=4))
        scorer.clean()
        calls.update(rows=0, passes=0)
        with deep.hooks(fwd_hooks=hooks):
            scores[share] = scorer.score(masks)
        seen[share] = dict(calls)
    assert seen[None]["rows"] == seen[True]["rows"] < seen[False]["rows"]
    assert seen[None]["passes"] < seen[True]["passes"]
    for m in METRICS:
        assert_close(scores[None][m], scores[False][m], msg=m)
        assert_close(scores[True][m], scores[False][m], msg=m)
