"""Figures of the theory experiments, made from the long tables of a `SweepResult`.

Every function returns a `matplotlib.figure.Figure` built without pyplot, so nothing global
(backend, style) changes and the figures can be saved from a headless command or shown in a
notebook with `display(fig)`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from workbench.errors import WorkbenchError

_HEATMAP_COLUMNS = ("shared_A", "shared_B", "conflict_A", "conflict_B")


def _conditions(df: pd.DataFrame, conditions: Sequence[str] | None) -> list[str]:
    available = list(dict.fromkeys(df["condition"]))
    if conditions is None:
        return available
    missing = [c for c in conditions if c not in available]
    if missing:
        raise WorkbenchError(f"conditions {missing} not in the table; available: {available}")
    return list(conditions)


def _panels(n: int, width: float, height: float, max_cols: int = 4, **kw):
    """A figure with `n` panels in rows of at most `max_cols`; unused panels are hidden."""
    cols = min(n, max_cols)
    rows = -(-n // cols)
    fig = Figure(figsize=(width * cols, height * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False, **kw).ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def _seed(df: pd.DataFrame, seed: int | None) -> int:
    return int(df["seed"].iloc[0]) if seed is None else seed


def plot_feature_trajectories(head_history: pd.DataFrame, conditions: Sequence[str] | None = None,
                              seed: int | None = None) -> Figure:
    """Per-head conflict coefficients (task A solid, task B dashed) and shared coefficient
    (dotted, mean of both tasks) over training, one panel per condition, log-step axis."""
    conditions = _conditions(head_history, conditions)
    seed = _seed(head_history, seed)
    fig, axes = _panels(len(conditions), 5, 3.6, max_cols=3, sharey=True)
    for ax, name in zip(axes, conditions, strict=True):
        d = head_history[(head_history["condition"] == name) & (head_history["seed"] == seed)]
        for i, (_, g) in enumerate(d.groupby("head", sort=True)):
            step = g["step"] + 1
            ax.plot(step, g["conflict_A"], color=f"C{i}")
            ax.plot(step, g["conflict_B"], color=f"C{i}", ls="--")
            ax.plot(step, (g["shared_A"] + g["shared_B"]) / 2, color=f"C{i}", ls=":")
        ax.set_xscale("log")
        ax.axhline(0, color="0.7", lw=0.8)
        ax.set_title(f"{name}, seed {seed}")
        ax.set_xlabel("step + 1")
    axes[0].set_ylabel("coefficient on feature (logit units)")
    heads = sorted(head_history["head_name"].unique(), key=lambda n: int(n.split("H")[1]))
    handles = [Line2D([], [], color=f"C{i}", label=n) for i, n in enumerate(heads)]
    handles += [Line2D([], [], color="k", ls=ls, label=lab) for ls, lab in
                (("-", "conflict, task A"), ("--", "conflict, task B"), (":", "shared"))]
    axes[-1].legend(handles=handles, fontsize=7, loc="upper left")
    return fig


def plot_feature_heatmap(features: pd.DataFrame, conditions: Sequence[str] | None = None,
                         seed: int | None = None) -> Figure:
    """Heads x features heatmap of the feature-use coefficients, one panel per condition."""
    conditions = _conditions(features, conditions)
    seed = _seed(features, seed)
    fig, axes = _panels(len(conditions), 3.2, 3.4)
    for ax, name in zip(axes, conditions, strict=True):
        d = features[(features["condition"] == name) & (features["seed"] == seed)]
        values = d[list(_HEATMAP_COLUMNS)].to_numpy()
        lim = max(float(np.abs(values).max()), 1e-9)
        im = ax.imshow(values, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
        for (r, c), v in np.ndenumerate(values):
            ax.text(c, r, f"{v:.2f}", ha="center", va="center", fontsize=7,
                    color="white" if abs(v) > 0.6 * lim else "black")
        ax.set_xticks(range(len(_HEATMAP_COLUMNS)), _HEATMAP_COLUMNS, rotation=30, fontsize=8)
        ax.set_yticks(range(len(d)), d["head_name"])
        ax.set_title(f"{name}, seed {seed}", fontsize=9)
        fig.colorbar(im, ax=ax, shrink=0.8)
    return fig


def plot_ablation_bars(ablations: pd.DataFrame, conditions: Sequence[str] | None = None,
                       seed: int | None = None) -> Figure:
    """Change in task A and task B loss when each head is ablated (negative = improvement),
    one panel per condition."""
    conditions = _conditions(ablations, conditions)
    seed = _seed(ablations, seed)
    fig, axes = _panels(len(conditions), 3.2, 3.2)
    for ax, name in zip(axes, conditions, strict=True):
        d = ablations[(ablations["condition"] == name) & (ablations["seed"] == seed)]
        x = np.arange(len(d))
        ax.bar(x - 0.2, d["d_loss_A"], width=0.4, label="task A")
        ax.bar(x + 0.2, d["d_loss_B"], width=0.4, label="task B")
        ax.axhline(0, color="k", lw=0.8)
        ax.set_yscale("symlog", linthresh=0.02)
        ax.set_xticks(x, d["head_name"])
        ax.set_title(f"{name}, seed {seed}", fontsize=9)
    axes[0].set_ylabel("loss change when ablated (nats)")
    axes[0].legend(fontsize=8)
    return fig


def plot_gap_history(history: pd.DataFrame, conditions: Sequence[str] | None = None) -> Figure:
    """Held-out joint loss minus Bayes loss over training (each seed faint, median bold)."""
    conditions = _conditions(history, conditions)
    fig = Figure(figsize=(5, 3.6), layout="constrained")
    ax = fig.subplots()
    for i, name in enumerate(conditions):
        d = history[history["condition"] == name]
        for _, g in d.groupby("seed"):
            ax.plot(g["step"] + 1, g["gap"], color=f"C{i}", alpha=0.25, lw=0.8)
        med = d.groupby("step")["gap"].median()
        ax.plot(med.index + 1, med.to_numpy(), color=f"C{i}", lw=2, label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("step + 1")
    ax.set_ylabel("loss - Bayes loss (nats)")
    ax.legend(fontsize=8)
    return fig


def plot_tradeoff_vs_init(summary: pd.DataFrame, flag: str = "tradeoff") -> Figure:
    """Fraction of seeds with the trade-off against init scale, one line per head count."""
    fig = Figure(figsize=(4.5, 3.4), layout="constrained")
    ax = fig.subplots()
    markers = "osd^v<>"
    for i, (h, g) in enumerate(summary.groupby("n_heads")):
        g = g.sort_values("init_scale")
        # nudge each head count sideways so that equal fractions do not hide each other
        ax.plot(g["init_scale"] * 1.12 ** i, g[f"frac_{flag}"], marker=markers[i % 7],
                label=f"H = {h}")
    ax.set_xscale("log")
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("init scale")
    ax.set_ylabel(f"fraction of seeds ({flag})")
    ax.legend()
    return fig


def plot_gain_vs_cue(seeds: pd.DataFrame, configs: dict) -> Figure:
    """Per-seed ablation gain (mean of the two role heads' gains) against cue strength gamma,
    on a reversed axis so that the cue gets noisier to the right."""
    fig = Figure(figsize=(4.5, 3.4), layout="constrained")
    ax = fig.subplots()
    gamma = seeds["condition"].map(lambda c: configs[c].cue_strength)
    ax.scatter(gamma, seeds["gain"], alpha=0.5, label="seeds")
    means = seeds.assign(gamma=gamma).groupby("gamma")["gain"].mean()
    ax.plot(means.index, means.to_numpy(), "k-o", label="mean")
    ax.axhline(0, color="0.6", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.invert_xaxis()
    ax.set_xlabel("cue strength gamma (noisier to the right)")
    ax.set_ylabel("gain on the other task (nats)")
    ax.legend()
    return fig


def plot_summary(summary: pd.DataFrame) -> Figure:
    """Fraction of seeds with the trade-off and mean gain, per condition."""
    fig = Figure(figsize=(max(5.0, 1.1 * len(summary)), 3.4), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    x = np.arange(len(summary))
    ax1.bar(x, summary["frac_tradeoff"])
    ax1.set_ylabel("fraction of seeds with trade-off")
    ax1.set_ylim(0, 1)
    ax2.bar(x, summary["gain"])
    ax2.axhline(0, color="k", lw=0.8)
    ax2.set_ylabel("mean gain (nats)")
    for ax in (ax1, ax2):
        ax.set_xticks(x, summary["condition"], rotation=45, ha="right", fontsize=8)
    return fig


def _differing_only_in(configs: dict, *fields: str) -> list[str]:
    """Conditions whose config equals the first one's in every field except `fields`."""
    def rest(config) -> dict:
        return {k: v for k, v in config.to_dict().items() if k not in fields}

    names = list(configs)
    return [n for n in names if rest(configs[n]) == rest(configs[names[0]])]


def save_sweep_figures(result, folder: str | Path) -> list[Path]:
    """Write the figures that fit a `SweepResult` as PNGs into `folder`; returns the paths."""
    folder = Path(folder)
    summary = result.summary()
    figures = {"summary": plot_summary(summary),
               "feature_heatmap": plot_feature_heatmap(result.features),
               "ablation_bars": plot_ablation_bars(result.ablations),
               "gap_history": plot_gap_history(result.history)}
    if len(result.head_history):
        by_init = _differing_only_in(result.configs, "init_scale")
        figures["feature_trajectories"] = plot_feature_trajectories(result.head_history, by_init)
    grid = summary[summary["condition"].isin(
        _differing_only_in(result.configs, "init_scale", "n_heads"))]
    scales_per_h = grid.groupby("n_heads")["init_scale"].nunique()
    if len(scales_per_h) > 1 and (scales_per_h > 1).all():  # a grid, not scattered points
        figures["tradeoff_vs_init"] = plot_tradeoff_vs_init(grid)
    noisy = {n: c for n, c in result.configs.items() if c.cue == "noisy"}
    by_cue = _differing_only_in(noisy, "cue_strength") if noisy else []
    if len(by_cue) > 1:
        figures["gain_vs_cue"] = plot_gain_vs_cue(
            result.seeds[result.seeds["condition"].isin(by_cue)], result.configs)
    paths = []
    for name, fig in figures.items():
        path = folder / f"{name}.png"
        fig.savefig(path, dpi=110)
        paths.append(path)
    return paths
