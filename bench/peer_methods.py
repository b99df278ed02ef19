"""The methods `bench/peers.py` compares, each choosing heads from a task's selection split.

Each returns a `MethodResult`: per-head scores (higher = removal helps more), its sets of each
size, and what choosing them cost (wall and CPU seconds, forward-equivalents: see
`bench/peers.py`). CHG (`nam-causal-head-gating` 0.1.0, the optional `peers` extra) is
imported only when its functions run.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd
import torch
from real import Meter

from workbench.heads import HeadSet
from workbench.metrics.scores import METRICS, get_metric
from workbench.pipeline import run_cel
from workbench.scoring.scorer import MaskScorer
from workbench.screening.screen import screen_heads
from workbench.search.candidates import search_pool
from workbench.search.space import SearchSpace
from workbench.search.strategies.compressed_sensing import (
    CompressedSensingSettings,
    compressed_sensing,
    lasso,
    lasso_alpha_max,
)
from workbench.tables import head_name
from workbench.tasks.encoding import TaskBatch
from workbench.tasks.task import Task


@dataclass(frozen=True)
class CSSettings:
    """Compressed sensing: `n_masks` random masks, each head knocked out with probability
    `knockout_p`, a Lasso with penalty `alpha` (None: the workbench strategy's own choices)."""

    n_masks: int | None
    knockout_p: float | None
    alpha: float | None


# llm-components (locuslab, arXiv 2603.03335): ~100 masks, ~2 % of heads out, Lasso alpha 0.01
CS_PEER = CSSettings(n_masks=100, knockout_p=0.02, alpha=0.01)


@dataclass(frozen=True)
class CHGBudget:
    """What CHG is given: one mask (`num_masks` None) or several, `updates` optimizer updates
    in each of its three stages, `batch_size` prompts per update; `l1_weight` and `lr` are
    `CHGTrainer`'s defaults (0.1, 1.0). Its default budget is 10 masks and 500 updates."""

    updates: int = 100
    batch_size: int = 32
    num_masks: int | None = None
    l1_weight: float = 0.1
    lr: float = 1.0


@dataclass
class MethodResult:
    """One method's choice: per-head `scores` `[layer, head]` (higher = removal helps more),
    its `sets` by size, and what choosing them cost."""

    name: str
    scores: np.ndarray
    sets: dict[int, list]
    wall_s: float = 0.0
    cpu_s: float = 0.0
    forward_eq: float = 0.0
    notes: dict = field(default_factory=dict)

def top_sets(scores: np.ndarray, max_size: int, positive: bool = False) -> dict[int, list]:
    """The `k` heads of largest score for k = 1..`max_size` (NaN last, ties by head order).
    With `positive`, only heads of score > 0 (a Lasso's selected heads whose removal helps):
    sizes beyond their count are absent, and no head gives no sets."""
    L, H = scores.shape
    flat = np.nan_to_num(scores.reshape(-1).astype(float), nan=-np.inf)
    order = np.argsort(-flat, kind="stable")
    top = int((flat > 0).sum()) if positive else len(flat)
    return {k: sorted((int(f) // H, int(f) % H) for f in order[:k])
            for k in range(1, min(max_size, top) + 1)}


@contextmanager
def timed(result: MethodResult, meter: Meter | None = None):
    """Wall and CPU seconds of the block into `result`, and the meter's count for its name."""
    if meter is not None:
        meter.stage = result.name
    w, c = time.perf_counter(), time.process_time()
    try:
        yield result
    finally:
        result.wall_s += time.perf_counter() - w
        result.cpu_s += time.process_time() - c
        if meter is not None:
            result.forward_eq += meter.eq.pop(result.name, 0.0)
            meter.stage = "setup"

# ---------------------------------------------------------------------------------------------
# The methods. Each chooses heads from the selection split `select` alone.


def cel_default(model, task: Task, objective: str, max_size: int, seed: int,
                meter: Meter) -> MethodResult:
    """The workbench's default CEL run, screening and search only (its own confirmation is
    asked for no random sets, and not counted)."""
    res = MethodResult("cel", np.zeros(0), {})
    with timed(res):
        meter.stage = "setup"
        run = run_cel(model, task, objective=objective, max_size=max_size, seed=seed,
                      n_random=0, plots=False)
    res.forward_eq = meter.eq.pop("screen", 0.0) + meter.eq.pop("search", 0.0)
    meter.eq.pop("confirm", None)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    res.scores = run.heads[f"d_{objective}"].to_numpy(dtype=float).reshape(L, H)
    res.sets = {int(r.size): HeadSet.of(model, r.heads).heads for r in
                run.confirmation.itertuples()}
    second = run.config.secondary
    res.notes = {"pool": search_pool(run.heads, objective, second=second), "summary": run.summary,
                 "timings": run.timings, "secondary": run.config.secondary}
    return res


def attribution(model, select: TaskBatch, objective: str, max_size: int) -> MethodResult:
    """Attribution screening's estimates of `d_<objective>`; one forward and one backward per
    metric it differentiates (counted: 1 + 2 per metric)."""
    res = MethodResult("attribution", np.zeros(0), {})
    with timed(res):
        table = screen_heads(model, select, method="attribution", split=None)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    res.scores = table[f"d_{objective}"].to_numpy(dtype=float).reshape(L, H)
    res.sets = top_sets(res.scores, max_size)
    n_backward = len(METRICS)  # attribution_effects differentiates every registered metric
    res.forward_eq = 1.0 + 2.0 * n_backward
    res.notes = {"backward_passes": n_backward}
    return res


def cs_peer(model, select: TaskBatch, objective: str, max_size: int, seed: int, meter: Meter,
            settings: CSSettings = CS_PEER) -> MethodResult:
    """llm-components' compressed sensing: random knockouts over all heads scored on the
    selection split, a Lasso at a fixed penalty of the masks' gain; top heads by coefficient."""
    res = MethodResult("cs_peer", np.zeros(0), {})
    L, H = model.cfg.n_layers, model.cfg.n_heads
    with timed(res, meter):
        rng = np.random.default_rng([seed, 2603])
        x = rng.random((settings.n_masks, L * H)) < settings.knockout_p
        x[~x.any(1), rng.integers(L * H)] = True  # an empty mask measures nothing
        scorer = MaskScorer(model, select)
        clean = scorer.clean()[objective]
        masks = torch.as_tensor(x.reshape(-1, L, H), dtype=torch.float32,
                                device=model.cfg.device)
        y = torch.nanmean(scorer.score(masks)[objective] - clean[None], -1).cpu().numpy()
        scorer.release()
        coef = lasso(x.astype(float), y, settings.alpha)
    res.scores = coef.reshape(L, H)
    res.sets = top_sets(res.scores, max_size, positive=True)
    res.notes = {"settings": asdict(settings), "nonzero": int((coef != 0).sum()),
                 "positive": int((coef > 0).sum()),
                 "alpha_max": lasso_alpha_max(x.astype(float), y),
                 "heads_per_mask": float(x.sum(1).mean()), "masks": x, "gains": y}
    return res


def cs_peer_std(base: MethodResult, max_size: int,
                settings: CSSettings = CS_PEER) -> MethodResult:
    """`cs_peer` refitted on the same masks and gains, standardised (`y / sd(y)`), at the same
    alpha: llm-components' fixed alpha assumes the gains' scale (a head enters only when its
    effect is about `alpha / knockout_p` = 0.5 in the objective's units), so on a probability
    difference it can select nothing. No forward of its own (the masks are `base`'s)."""
    x, y = base.notes["masks"], base.notes["gains"]
    sd = float(np.nanstd(y))
    coef = lasso(x.astype(float), y / sd, settings.alpha)
    L, H = base.scores.shape
    res = MethodResult("cs_peer_std", coef.reshape(L, H), {})
    res.sets = top_sets(res.scores, max_size, positive=True)
    res.notes = {"settings": asdict(settings), "gain_sd": sd, "nonzero": int((coef != 0).sum()),
                 "positive": int((coef > 0).sum()), "reuses": base.name}
    return res


def cs_workbench(model, select: TaskBatch, objective: str, secondary: str | None,
                 max_size: int, seed: int, meter: Meter) -> MethodResult:
    """The workbench's `compressed_sensing` strategy at its defaults (raced sets, as in a run)."""
    res = MethodResult("cs_workbench", np.zeros(0), {})
    L, H = model.cfg.n_layers, model.cfg.n_heads
    with timed(res, meter):
        space = SearchSpace(MaskScorer(model, select), [], objective, secondary,
                            max_size=max_size, seed=seed, adaptive=True)
        compressed_sensing(space)
        space.scorer.release()
    coef = space.notes.get("cs_coefficients", {})
    res.scores = np.array([[coef.get(head_name(l, h), 0.0) for h in range(H)] for l in range(L)])
    combos = pd.DataFrame(space.records)
    combos = combos[(combos["n"] == len(select))]
    key = f"d_{objective}"
    res.sets = {k: HeadSet.of(model, g.sort_values(key, ascending=False, kind="stable")
                              .iloc[0]["heads"]).heads
                for k, g in combos.groupby("size") if 1 <= k <= max_size}
    res.notes = {"n_masks": max(64, 4 * L * H), "knockout_p": min(0.25, 5.0 / (L * H)),
                 "alpha": "5-fold CV", "top_m": CompressedSensingSettings.top_m}
    return res


# ---------------------------------------------------------------------------------------------
# CHG, driven through its own trainer and gated forward


def chg_available() -> str | None:
    """None when `causal_head_gating` imports, else why not (the optional `peers` extra)."""
    try:
        import causal_head_gating  # noqa: F401
    except ImportError as e:
        return f"CHG needs the optional `peers` extra: pip install --no-deps " \
               f"nam-causal-head-gating==0.1.0 ({e})"
    return None


def chg_adapter(hf_model):
    """CHG's adapter for `hf_model`. 0.1.0 registers no `Gemma3ForCausalLM`, and its adapters
    take a head's width as `hidden_size // num_attention_heads` (640 / 4 = 160 on
    Gemma-3-270m, whose heads are 256 wide, so its gated forward cannot reshape `o_proj`'s
    1024-wide input). Where the config states `head_dim` and it differs, CHG's own
    `ModelAdapter` is subclassed (as its error message invites) with `model.layers[i]
    .self_attn.o_proj`, the layout of its Llama and Gemma adapters, and the stated width."""
    from causal_head_gating.models.adapters import ModelAdapter, get_adapter

    cfg = hf_model.config
    width = getattr(cfg, "head_dim", None)
    if width is None or width == cfg.hidden_size // cfg.num_attention_heads:
        return get_adapter(hf_model)

    class StatedWidth(ModelAdapter):
        head_dim = width

        def get_layers(self):
            return self.model.model.layers

        def get_attention_output_proj(self, layer):
            return layer.self_attn.o_proj

    return StatedWidth(hf_model)


def chg_dataset(batch: TaskBatch):
    """CHG's `MaskedSequenceDataset` of an encoded task. Its trainer hands a loss only
    `input_ids` and `loss_masks`, so `loss_masks` carries, at each prompt's answer position,
    the example's row + 1 (0 elsewhere); `task_objective` reads the answer ids from it. Pad id
    -1 (never a token) keeps its collate from trimming columns."""
    from causal_head_gating import MaskedSequenceDataset

    tokens = batch.tokens.cpu()
    marks = torch.zeros_like(tokens)
    marks[torch.arange(len(batch)), batch.answer_pos.cpu()] = torch.arange(len(batch)) + 1
    return MaskedSequenceDataset(pad_token_id=-1, input_ids=tokens, loss_masks=marks)


def task_objective(chg, batch: TaskBatch, metric, counter: dict, masks, input_ids, loss_masks,
                   agg: str = "mean", return_accuracy: bool = False):
    """Stands in for `CHG.get_logp` on a trainer's `CHG`: the task's metric per prompt (and per
    mask) at the answer position, from CHG's own gated forward `chg(input_ids, masks)`, in
    float32 whatever autocast is on. Higher is better, as a log-prob is."""
    with torch.autocast(input_ids.device.type, enabled=False):
        single = masks.ndim == 2
        m = masks[None] if single else masks
        logits = chg(input_ids, m.float())  # (b, k, pos, vocab)
        b, k = logits.shape[:2]
        pos = loss_masks.argmax(-1)
        rows = (loss_masks.amax(-1) - 1).repeat_interleave(k)
        at = logits[torch.arange(b), :, pos]  # (b, k, vocab)
        sub = batch.rows(rows.cpu())
        value = metric(at.reshape(b * k, -1).float(), sub).view(b, k)
    counter["rows"] = counter.get("rows", 0) + b * k
    return value[:, 0] if single else value


def chg_gated_scores(hf_model, batch: TaskBatch, objective: str,
                     gates: torch.Tensor) -> torch.Tensor:
    """The task's `objective` per example under CHG's gated forward with fixed `gates`
    `[layer, head]` (1 = keep), in float32."""
    from causal_head_gating import CHG

    chg = CHG(hf_model, adapter=chg_adapter(hf_model))
    with torch.no_grad():
        return task_objective(chg, batch, get_metric(objective), {}, gates.float(),
                              batch.tokens, chg_dataset(batch)["loss_masks"])


def chg_labels(keep_gate: np.ndarray, remove_gate: np.ndarray,
               threshold: float = 0.5) -> np.ndarray:
    """The paper's taxonomy from the stage that pushes gates toward keeping (`keep_gate`,
    0.1.0's `"positive"`) and the one that pushes toward removal (`"negative"`)."""
    out = np.full(keep_gate.shape, "irrelevant", dtype=object)
    out[remove_gate >= threshold] = "facilitating"
    out[keep_gate < threshold] = "interfering"
    return out


def chg_trainer(hf_model, select: TaskBatch, objective: str, budget: CHGBudget,
                counter: dict, seed: int = 0):
    """A `CHGTrainer` on the selection split whose objective is the task's `objective`
    (`task_objective` in place of its `CHG`'s log-prob); `counter["rows"]` counts the
    prompt-passes it runs. Seeded: its initial gates and its shuffling draw from torch."""
    from causal_head_gating import CHGTrainer

    torch.manual_seed(seed)
    for p in hf_model.parameters():
        p.requires_grad_(False)
    trainer = CHGTrainer(hf_model, chg_dataset(select), num_masks=budget.num_masks,
                         batch_size=budget.batch_size, l1_weight=budget.l1_weight,
                         lr=budget.lr, lr_reg=budget.lr, adapter=chg_adapter(hf_model))
    gated, metric = trainer.masked_model, get_metric(objective)
    gated.get_logp = lambda *a, **kw: task_objective(gated, select, metric, counter, *a, **kw)
    return trainer


def chg(hf_model, select: TaskBatch, objective: str, max_size: int, seed: int,
        budget: CHGBudget = CHGBudget()) -> MethodResult:
    """CHG's three stages (`CHGTrainer.fit`) on the task's objective; heads ranked by how
    far the keep-pushing stage closed their gate."""
    res = MethodResult("chg", np.zeros(0), {})
    counter: dict = {}
    with timed(res):
        trainer = chg_trainer(hf_model, select, objective, budget, counter, seed)
        for _ in trainer.fit(budget.updates, budget.updates, verbose=False):
            pass
    keep_logit = trainer.mask_logits_pos.detach().float().cpu()  # 0.1.0's "positive" stage
    remove_logit = trainer.mask_logits_neg.detach().float().cpu()
    if keep_logit.ndim == 3:  # several masks: their mean logit
        keep_logit, remove_logit = keep_logit.mean(0), remove_logit.mean(0)
    res.scores = (-keep_logit).numpy()
    res.sets = top_sets(res.scores, max_size)
    res.forward_eq = 3.0 * counter.get("rows", 0) / len(select)
    keep, remove = keep_logit.sigmoid().numpy(), remove_logit.sigmoid().numpy()
    labels = chg_labels(keep, remove)
    res.notes = {"budget": asdict(budget), "objective": objective, "keep_gate": keep,
                 "remove_gate": remove, "unregularized_gate": trainer.mask_logits.detach()
                 .sigmoid().float().cpu().numpy(), "labels": labels,
                 "label_counts": {k: int((labels == k).sum()) for k in
                                  ("interfering", "facilitating", "irrelevant")}}
    return res
