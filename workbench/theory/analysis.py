"""Reading a trained theory model: per-head feature use, single-head ablations, per-seed
summaries.

**Feature use.** Within each task, each head's scalar output is regressed on `[1, u_s, u_c]`
over a held-out batch. A head with a large `shared_*` coefficient carries the shared feature;
a head with `conflict_A > 0` carries `+c` (the conflicting feature with task A's sign), one
with `conflict_B < 0` carries `-c`. A `+c` head's `conflict_B` is its *leak*: how much of
task A's rule it still applies in task B, where it points the wrong way. Coefficients are in
logit units (nats) per unit of feature.

**Ablation.** Zeroing one head's output (`"zero"`) or replacing it by its mean over the
evaluation batch (`"mean"`, both tasks pooled) and measuring the change in loss and accuracy
within each task. The losses are paired (same samples with and without the head), so small
differences are measured precisely.

**Summary.** Per seed: the roles (`head_A` = the head with the largest `conflict_A`, `head_B`
= the one with the most negative `conflict_B`), how concentrated the conflicting feature is,
and whether ablating a role head trades one task against the other.

Long tables (several seeds) follow the per-head schema of `workbench.tables`: `layer, head,
head_name` first (layer is always 0 here), then `seed` (and `step` in training histories,
`condition` in sweeps) *after* `head_name`, then the values. One seed's rows, without the
extra key columns, pass `check_head_table`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from workbench.options import choose
from workbench.tables import head_table
from workbench.theory.bayes import bayes_loss, logistic_loss
from workbench.theory.data import Batch

TASKS = ("A", "B")  # task +1 and task -1
FEATURES = ("intercept", "shared", "conflict")


def _task_masks(batch: Batch) -> dict[str, Tensor]:
    return {"A": batch.task > 0, "B": batch.task < 0}


def feature_coefficients(head_out: Float[Tensor, "seed batch head_index"], batch: Batch
                         ) -> Float[Tensor, "seed head_index task feature"]:
    """Least-squares coefficients of each head's output on `[1, u_s, u_c]` within each task.

    Returns:
        `(n_seeds, n_heads, 2, 3)`: task axis `(A, B)`, feature axis `(intercept, shared,
        conflict)`.
    """
    coefs = []
    for mask in _task_masks(batch).values():
        design = torch.stack([torch.ones_like(batch.u_s[mask]), batch.u_s[mask],
                              batch.u_c[mask]], dim=-1)  # (N, 3)
        target = head_out[:, mask, :]  # (S, N, H)
        dty = torch.einsum("nk,snh->shk", design, target)  # (S, H, 3)
        gram = design.T @ design  # (3, 3), symmetric
        coefs.append(torch.linalg.solve(gram, dty.reshape(-1, 3).T).T.reshape(dty.shape))
    return torch.stack(coefs, dim=2)


def features_to_table(coefs: Float[Tensor, "seed head_index task feature"],
                      seeds: Sequence[int]) -> pd.DataFrame:
    """Long per-head table `layer, head, head_name, seed, <feature>_<task>...` from
    `feature_coefficients`."""
    coefs_np = coefs.detach().to("cpu", torch.float64).numpy()
    tables = []
    for i, seed in enumerate(seeds):
        columns = {f"{feat}_{task}": coefs_np[i, :, k, j][None, :]
                   for k, task in enumerate(TASKS) for j, feat in enumerate(FEATURES)}
        table = head_table(columns)
        table.insert(3, "seed", int(seed))
        tables.append(table)
    return pd.concat(tables, ignore_index=True)


def feature_use_table(model, batch: Batch, seeds: Sequence[int] | None = None) -> pd.DataFrame:
    """Per-head feature use of a trained model on a held-out batch (`seeds` default to the
    model's).

    Returns:
        One row per (seed, head): `layer, head, head_name, seed, intercept_A, shared_A,
        conflict_A, intercept_B, shared_B, conflict_B` (logit units per unit of feature).
    """
    with torch.no_grad():
        head_out = model.head_outputs(batch.x, batch.q)
    return features_to_table(feature_coefficients(head_out, batch),
                             model.seeds if seeds is None else seeds)


def _ablate_zero(head_out: Tensor, head: int) -> Tensor:
    return head_out.sum(-1) - head_out[..., head]


def _ablate_mean(head_out: Tensor, head: int) -> Tensor:
    return head_out.sum(-1) - head_out[..., head] + head_out[..., head].mean(-1, keepdim=True)


# ablation kind -> (head outputs (S, B, H), head) -> ablated logits (S, B)
ABLATIONS: dict[str, Callable[[Tensor, int], Tensor]] = {
    "zero": _ablate_zero,
    "mean": _ablate_mean,
}


def _task_metrics(logits: Tensor, batch: Batch) -> dict[str, Tensor]:
    """Per-seed loss and accuracy within each task: name -> `(n_seeds,)`."""
    out = {}
    for task, mask in _task_masks(batch).items():
        out[f"loss_{task}"] = logistic_loss(logits[:, mask], batch.y[mask]).mean(-1)
        out[f"acc_{task}"] = ((logits[:, mask] > 0) == (batch.y[mask] > 0)).float().mean(-1)
    out["loss"] = logistic_loss(logits, batch.y).mean(-1)
    return out


def evaluate(model, batch: Batch, config) -> pd.DataFrame:
    """Per-seed held-out metrics of the full model: `seed, loss, loss_A, loss_B, acc_A, acc_B,
    bayes_loss, gap` (losses in nats, accuracy in [0, 1], gap = loss - bayes_loss)."""
    with torch.no_grad():
        metrics = _task_metrics(model(batch.x, batch.q), batch)
        bayes = float(bayes_loss(batch, config))
    table = pd.DataFrame({"seed": list(config.seeds)})
    for name in ("loss", "loss_A", "loss_B", "acc_A", "acc_B"):
        table[name] = metrics[name].cpu().double().numpy()
    table["bayes_loss"] = bayes
    table["gap"] = table["loss"] - bayes
    return table


def ablation_table(model, batch: Batch, seeds: Sequence[int] | None = None, kind: str = "zero"
                   ) -> pd.DataFrame:
    """Ablate each head alone and measure each task's loss and accuracy.

    Args:
        model: a trained `MultiHeadAttentionModel`.
        batch: held-out samples (both tasks).
        seeds: the model's seeds, in order (default: `model.seeds`).
        kind: a key of `ABLATIONS` (`"zero"`: drop the head's output; `"mean"`: replace it by
            its mean over `batch`).

    Returns:
        One row per (seed, head): `layer, head, head_name, seed, loss_A, loss_B, acc_A, acc_B`
        with the head ablated, then `d_loss_A, d_loss_B, d_acc_A, d_acc_B` = ablated minus
        full model (a negative `d_loss` is an improvement).
    """
    choose(kind, sorted(ABLATIONS), "ablation kind")
    seeds = model.seeds if seeds is None else seeds
    names = ("loss_A", "loss_B", "acc_A", "acc_B")
    with torch.no_grad():
        head_out = model.head_outputs(batch.x, batch.q)  # (S, B, H)
        full = _task_metrics(head_out.sum(-1), batch)
        ablated = [_task_metrics(ABLATIONS[kind](head_out, h), batch)
                   for h in range(head_out.shape[-1])]
    values = {n: torch.stack([a[n] for a in ablated], dim=-1).cpu().double().numpy()
              for n in names}  # (S, H)
    base = {n: full[n].cpu().double().numpy()[:, None] for n in names}
    tables = []
    for i, seed in enumerate(seeds):
        columns = {n: values[n][i][None, :] for n in names}
        columns.update({f"d_{n}": (values[n] - base[n])[i][None, :] for n in names})
        table = head_table(columns)
        table.insert(3, "seed", int(seed))
        tables.append(table)
    return pd.concat(tables, ignore_index=True)


def seed_summary(metrics: pd.DataFrame, features: pd.DataFrame, ablations: pd.DataFrame,
                 tol: float = 0.0) -> pd.DataFrame:
    """One row per seed: fit, role heads, concentration of the conflicting feature and the
    ablation trade-off.

    Args:
        metrics: `evaluate` output; features: `feature_use_table`; ablations: `ablation_table`.
        tol: a loss change counts as a gain or a harm only beyond `tol` nats.

    Returns:
        The `metrics` columns plus
        `conflict_top2` (share of `|conflict_A| + |conflict_B|` held by the two heads with
        most of it), `head_shared`, `head_A`, `head_B` (role heads), `leak_A` (`conflict_B`
        of `head_A`, > 0 means it hurts task B), `leak_B` (`conflict_A` of `head_B`),
        `ablate_A_d_loss_A`, `ablate_A_d_loss_B`, `ablate_A_d_acc_B`, `ablate_B_d_loss_B`,
        `ablate_B_d_loss_A`, `ablate_B_d_acc_A`, `tradeoff_A` (ablating `head_A` lowers task
        B's loss and raises task A's), `tradeoff_B` (the mirror), `tradeoff` (both),
        `tradeoff_any` (some head lowers one task's loss and raises the other's),
        `gain` (mean of the two role-head gains on the other task, nats), `gain_acc` (the
        same in accuracy), `gain_best` (largest loss drop on either task from any single
        head, >= 0).
    """
    rows = []
    for seed in metrics["seed"]:
        f = features[features["seed"] == seed].reset_index(drop=True)
        a = ablations[ablations["seed"] == seed].reset_index(drop=True)
        mass = f["conflict_A"].abs() + f["conflict_B"].abs()
        top2 = float(np.sort(mass.to_numpy())[::-1][:2].sum() / max(mass.sum(), 1e-30))
        head_a = int(f["conflict_A"].idxmax())
        head_b = int(f["conflict_B"].idxmin())
        head_s = int((f["shared_A"] + f["shared_B"]).idxmax())
        ra, rb = a.loc[head_a], a.loc[head_b]
        trade_a = bool(ra["d_loss_B"] < -tol and ra["d_loss_A"] > tol)
        trade_b = bool(rb["d_loss_A"] < -tol and rb["d_loss_B"] > tol)
        any_trade = bool((((a["d_loss_A"] < -tol) & (a["d_loss_B"] > tol))
                          | ((a["d_loss_B"] < -tol) & (a["d_loss_A"] > tol))).any())
        rows.append({
            "seed": seed, "conflict_top2": top2,
            "head_shared": head_s, "head_A": head_a, "head_B": head_b,
            "leak_A": float(f.loc[head_a, "conflict_B"]),
            "leak_B": float(f.loc[head_b, "conflict_A"]),
            "ablate_A_d_loss_A": float(ra["d_loss_A"]), "ablate_A_d_loss_B": float(ra["d_loss_B"]),
            "ablate_A_d_acc_B": float(ra["d_acc_B"]),
            "ablate_B_d_loss_B": float(rb["d_loss_B"]), "ablate_B_d_loss_A": float(rb["d_loss_A"]),
            "ablate_B_d_acc_A": float(rb["d_acc_A"]),
            "tradeoff_A": trade_a, "tradeoff_B": trade_b, "tradeoff": trade_a and trade_b,
            "tradeoff_any": any_trade,
            "gain": -0.5 * float(ra["d_loss_B"] + rb["d_loss_A"]),
            "gain_acc": 0.5 * float(ra["d_acc_B"] + rb["d_acc_A"]),
            "gain_best": max(0.0, -float(a[["d_loss_A", "d_loss_B"]].to_numpy().min())),
        })
    return metrics.merge(pd.DataFrame(rows), on="seed")
