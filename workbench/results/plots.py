"""CEL plots: where single heads help, how the gain grows with set size, what it costs elsewhere.

Figures are built with matplotlib's object API (`Figure`, no `pyplot`), so importing or
calling this module changes no global state (no backend switch, no style) and works headless.

- `heads_heatmap`: layer x head maps of the single-head effect (red = removal helps): the
  objective on the selection split, and one panel per side task; a dot where the interval
  excludes 0, hatching where racing measured the head on fewer examples than the split
  holds, the heads the search scored sets of outlined and the best set starred (the top
  candidate crossed when no set is significant), all said in the legend, and titled as
  estimates where the screening method estimates;
- `gain_vs_size`: the held-out gain of the best set of each size with its bootstrap interval,
  next to the selection-split gain and the mean / 95th percentile of random sets (the legend
  sits beside the axes, clear of the random band);
- `side_effects_bars`: the effect of each best set on every other task, with intervals;
- `tradeoff_plot`: the trade-off (`workbench.results.tradeoff`): the held-out gain on the main task
  (x) against the change on each side task (y), for the confirmed sets and samples of both
  random baselines' sets, all with intervals; one panel per side task and metric (accuracy,
  log-prob), and several runs (say, two model families) side by side. It is the real-model
  counterpart of the theory model's "helps one task, hurts the other" figure.

`PLOT_FUNCTIONS` names the file each one is saved as (`save_plots`); `workbench.results.report`
links those files from `report.md`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from workbench.heads import parse_head
from workbench.results.tradeoff import GUARD_METRICS
from workbench.screening.registry import screening_estimate
from workbench.search.registry import searched_heads
from workbench.tables import table_to_matrix


def heads_heatmap(result) -> Figure:
    """Layer x head heatmaps of the single-head effects in the screening table.

    One panel for the main task's objective on the selection split, then one per side task
    whose effects the table holds (its objective, or accuracy where the objective needs a
    wrong answer the side task lacks). In every panel a dot marks a head whose interval
    excludes 0, and hatching a head measured on fewer examples than the split holds (racing
    stopped it early; `workbench.results.export.single_heads` gives each `n`). On the main panel
    the heads whose sets the search scored are outlined (`searched_heads`: the interaction
    search's finalists, exhaustive's top `top_m` candidates) and the best set starred (the top
    candidate crossed when no set is significant). Under a screening method that estimates
    (`ScreenMethod.exact` False: attribution) the titles and the colour bar say the effects
    are its estimates. The legend below says so.
    """
    panels = heatmap_panels(result)
    width = max(5.0, 1.5 + 0.45 * _n_heads(result))
    fig = Figure(figsize=(width * max(1, len(panels)),
                          max(3.0, 1.4 + 0.4 * _n_layers(result)) + 0.8),
                 layout="constrained")
    if not panels:
        ax = fig.add_subplot()
        ax.set_axis_off()
        return fig
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    handles = {}
    for ax, panel in zip(axes, panels, strict=True):
        handles.update(_heat_panel(fig, ax, result, panel))
    searched = searched_heads(result.summary, result.config)
    names = {h for heads in searched.values() for h in heads}
    what = "; ".join(f"{name}: {len(heads)}" for name, heads in searched.items())
    text = "heads whose sets the search scored ({}; main task only)"
    if not names and "candidate" in result.heads:  # a folder without the search's notes
        names = set(result.heads.loc[result.heads["candidate"].astype(bool), "head_name"])
        text = "candidate heads (the folder does not say which the search scored{}; main " \
               "task only)"
        what = ""
    outlined = result.heads[result.heads["head_name"].isin(names)]
    for layer, head in zip(outlined["layer"], outlined["head"], strict=True):
        axes[0].add_patch(_rect(head, layer))
    if len(outlined):
        handles["outline"] = (_rect(0, 0), f"outlined: the {len(outlined)} "
                              + text.format(what))
    best = _mark_best(axes[0], result)
    if best is not None:
        handles["best"] = best
    fig.legend([h for h, _ in handles.values()], [t for _, t in handles.values()], fontsize=7,
               loc="outside lower center", ncol=1 if len(panels) == 1 else 2, frameon=False)
    return fig


def heatmap_panels(result) -> list[dict]:
    """The panels of `heads_heatmap`: for the main task and each side task with per-head
    columns, the column names of its effect, interval and `n`, the examples its split
    holds (`full_n`), and its title."""
    heads, obj, s = result.heads, result.config.objective, result.summary
    if heads.empty or f"d_{obj}" not in heads:
        return []
    counts = s.get("n_examples", {})
    panels = [_panel(heads, obj, "", counts.get("select"),
                     f"{result.config.task} (main task), selection split")]
    for task in result.config.others:
        metric = next((m for m in (obj, "accuracy") if f"d_{m}_{task}" in heads
                       and heads[f"d_{m}_{task}"].notna().any()), None)
        if metric is not None:
            panels.append(_panel(heads, metric, f"_{task}", counts.get(task),
                                 f"{task} (side task), its examples"))
    return panels


def _panel(heads, metric: str, suffix: str, full_n, title: str) -> dict:
    n = f"d_{metric}_n{suffix}"
    if full_n is None and n in heads:
        full_n = float(heads[n].max())
    return {"value": f"d_{metric}{suffix}", "lo": f"d_{metric}_lo{suffix}",
            "hi": f"d_{metric}_hi{suffix}", "n": n, "full_n": full_n, "metric": metric,
            "title": title}


def _heat_panel(fig, ax, result, panel: dict) -> dict:
    """Draw one heatmap panel; return the legend entries it needs."""
    from matplotlib.lines import Line2D

    heads = result.heads
    m = table_to_matrix(heads, panel["value"])
    lim = float(np.nanmax(np.abs(m))) if np.isfinite(m).any() else 1.0
    im = ax.imshow(m, cmap="RdBu_r", vmin=-lim or -1, vmax=lim or 1, aspect="auto")
    estimate = screening_estimate(result.config.method)
    fig.colorbar(im, ax=ax, label=f"d_{panel['metric']} (ablated - clean)"
                 + (f", {estimate}" if estimate else ""))
    entries = {}
    if panel["n"] in heads and panel["full_n"]:
        short = heads[heads[panel["n"]].astype(float) < float(panel["full_n"])]
        for layer, head in zip(short["layer"], short["head"], strict=True):
            ax.add_patch(_hatch(head, layer))
        if len(short):
            entries["hatch"] = (_hatch(0, 0), "hatched: measured on fewer examples than the "
                                "split holds (racing stopped it early; n in report.md)")
    if panel["lo"] in heads and panel["hi"] in heads:
        lo, hi = heads[panel["lo"]].astype(float), heads[panel["hi"]].astype(float)
        sig = heads[(lo > 0) | (hi < 0)]
        ci = int(round(100 * result.config.ci))
        ax.plot(sig["head"] + 0.3, sig["layer"] - 0.3, linestyle="none", marker="o", ms=3.5,
                color="black", label="_significant")
        if len(sig):
            entries["dot"] = (Line2D([], [], linestyle="none", marker="o", ms=3.5,
                                     color="black"),
                              f"dot: the {ci} % interval excludes 0")
    # Layers and heads are indices: the default locator puts ticks at -0.5, 0.5, ... when
    # there are few of them. min_n_ticks=1 keeps a single layer at tick 0, not 0.1 steps.
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    what = (f"Removing one head, {estimate} (not measured)" if estimate else
            "Removing one head")
    ax.set_title(f"{what}: {panel['title']}", fontsize=9)
    return entries


def gain_vs_size(result) -> Figure:
    """Held-out gain of the best set of each size, with intervals and the random baseline."""
    obj = result.config.objective
    fig = Figure(figsize=(7, 3.5), layout="constrained")
    ax = fig.add_subplot()
    c = result.confirmation
    if c.empty:
        ax.set_axis_off()
        return fig
    size = c["size"].to_numpy()
    gain = c[f"d_{obj}"].to_numpy(dtype=float)
    err = np.vstack(
        [
            gain - c[f"d_{obj}_lo"].to_numpy(dtype=float),
            c[f"d_{obj}_hi"].to_numpy(dtype=float) - gain,
        ]
    )
    ax.errorbar(size, gain, yerr=err, marker="o", capsize=4, label="best set, held out")
    if f"select_d_{obj}" in c:
        ax.plot(size, c[f"select_d_{obj}"], "s--", alpha=0.6, label="best set, selection")
    if "random_mean" in c:
        ax.plot(size, c["random_mean"], "k:", label="random sets, mean")
        ax.fill_between(
            size,
            c["random_mean"],
            c["random_q95"],
            color="k",
            alpha=0.1,
            label="random sets, mean to 95th pct",
        )
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xticks(size)
    ax.set_xlabel("heads removed")
    ax.set_ylabel(f"d_{obj}")
    ax.set_title("Gain vs set size")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    return fig


def side_effects_bars(result) -> Figure:
    """Effect of each best set on every other task (objective metric), with intervals."""
    obj = result.config.objective
    fig = Figure(figsize=(5.5, 3.5))
    ax = fig.add_subplot()
    s = result.side_effects
    if s.empty or f"d_{obj}" not in s:
        ax.text(0.5, 0.5, "no other tasks", ha="center", va="center")
        ax.set_axis_off()
        return fig
    tasks = list(dict.fromkeys(s["task"]))
    sizes = sorted(s["size"].unique())
    width = 0.8 / len(sizes)
    for i, k in enumerate(sizes):
        part = s[s["size"] == k].set_index("task").reindex(tasks)
        gain = part[f"d_{obj}"].to_numpy(dtype=float)
        err = np.vstack(
            [
                gain - part[f"d_{obj}_lo"].to_numpy(dtype=float),
                part[f"d_{obj}_hi"].to_numpy(dtype=float) - gain,
            ]
        )
        ax.bar(
            np.arange(len(tasks)) + (i - (len(sizes) - 1) / 2) * width,
            gain,
            width,
            yerr=err,
            capsize=3,
            label=f"size {k}: {part['heads'].iloc[0]}",
        )
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xticks(np.arange(len(tasks)), tasks, rotation=20, ha="right")
    ax.set_ylabel(f"d_{obj}")
    ax.set_title("Side effects of the best sets")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


_ORIGINS = {  # how each kind of set is drawn: marker, colour, label
    "random": ("o", "0.55", "random sets (all heads)"),
    "pool": ("^", "tan", "random sets (pool)"),
}


def tradeoff_plot(results, metrics=GUARD_METRICS) -> Figure:
    """Gain on the main task against the change on every side task, with intervals.

    Args:
        results: a `CELResult`, or a mapping `name -> CELResult` drawn side by side (each
            run's panels titled with its name), e.g. one run per model family.
        metrics: the side metrics, one row of panels each.

    Returns:
        A figure with one panel per run, side task and metric: every set of the run's
        `tradeoff` table is a point at (held-out gain, side change) with both intervals;
        the confirmed sets are coloured by size, the random baselines' sets grey (all heads)
        and tan (the pool). Upper right: helps both; lower right: the trade-off.
    """
    runs = dict(results) if isinstance(results, dict) else {"": results}
    columns = [(name, r, task) for name, r in runs.items() if not r.tradeoff.empty
               for task in dict.fromkeys(r.tradeoff["task"])]
    # the rows of metrics the tables hold (a next-token side task has no `acc`, a
    # multiple-choice one no `accuracy`): no panel row without data
    held = {m for _, r, _ in columns for m in r.tradeoff["metric"]}
    metrics = [m for m in metrics if m in held] or list(metrics)[:1]
    fig = Figure(figsize=(max(4.5, 3.4 * len(columns)), 0.6 + 3.0 * len(metrics)),
                 layout="constrained")
    if not columns:
        ax = fig.add_subplot()
        ax.text(0.5, 0.5, "no side tasks", ha="center", va="center")
        ax.set_axis_off()
        return fig
    axes = fig.subplots(len(metrics), len(columns), squeeze=False)
    for j, (name, result, task) in enumerate(columns):
        t = result.tradeoff
        for i, metric in enumerate(metrics):
            ax = axes[i][j]
            part = t[(t["task"] == task) & (t["metric"] == metric)]
            _tradeoff_panel(ax, part)
            ax.axhline(0.0, color="grey", lw=0.8)
            ax.axvline(0.0, color="grey", lw=0.8)
            ax.set_title(f"{name}: {task}" if name else task, fontsize=8)
            ax.set_ylabel(f"change in {metric}", fontsize=8)
            ax.set_xlabel(f"gain in {result.config.objective} ({result.config.task}, held out)",
                          fontsize=8)
            ax.tick_params(labelsize=7)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="outside lower center",
               ncol=min(5, max(1, len(labels))))
    return fig


def _tradeoff_panel(ax, part) -> None:
    for origin, (marker, colour, label) in _ORIGINS.items():
        p = part[part["origin"] == origin]
        if len(p):
            _points(ax, p, marker=marker, color=colour, alpha=0.5, label=label, ms=4)
    found = part[part["origin"] == "found"]
    for k, (_, row) in enumerate(found.iterrows()):
        _points(ax, found.loc[[row.name]], marker="*", color=f"C{k}", ms=11,
                label=f"confirmed set, size {int(row['size'])}", zorder=3)


def _points(ax, p, **style) -> None:
    """Each row of a trade-off table as a point with its two intervals."""
    x, y = p["gain"].to_numpy(dtype=float), p["side_d"].to_numpy(dtype=float)
    xerr = np.vstack([x - p["gain_lo"].to_numpy(dtype=float),
                      p["gain_hi"].to_numpy(dtype=float) - x])
    yerr = np.vstack([y - p["side_d_lo"].to_numpy(dtype=float),
                      p["side_d_hi"].to_numpy(dtype=float) - y])
    ax.errorbar(x, y, xerr=xerr, yerr=yerr, linestyle="none", elinewidth=0.8, capsize=0,
                **style)


PLOT_FUNCTIONS = {
    "heads_heatmap.png": heads_heatmap,
    "gain_vs_size.png": gain_vs_size,
    "side_effects.png": side_effects_bars,
    "tradeoff.png": tradeoff_plot,
}


# what a plot draws, where it can be missing: a run with no side tasks has no side effects
# and no trade-off, and a figure that says only "no side tasks" is not made
_DRAWS = {"side_effects.png": "side_effects", "tradeoff.png": "tradeoff"}


def drawn_plots(result) -> list[str]:
    """The plots of `PLOT_FUNCTIONS` that have data in `result`, in order (the ones
    `save_plots` writes and `report.md` shows)."""
    return [name for name in PLOT_FUNCTIONS
            if name not in _DRAWS or not getattr(result, _DRAWS[name]).empty]


def save_plots(result, folder: str | Path) -> list[Path]:
    """Write the plots of `drawn_plots` into `folder` (atomically; one of `PLOT_FUNCTIONS` with
    no data left there by an earlier write is removed); return the paths."""
    folder = Path(folder)
    drawn = drawn_plots(result)
    paths = []
    for name, fn in PLOT_FUNCTIONS.items():
        if name in drawn:
            paths.append(save_figure(fn(result), folder / name))
        else:
            (folder / name).unlink(missing_ok=True)
    return paths


def save_figure(fig, path: str | Path) -> Path:
    """Write `fig` as PNG atomically (a temporary file, then rename)."""
    path = Path(path)
    tmp = path.with_name(f"tmp-{path.name}")
    try:
        fig.savefig(tmp, dpi=110, format="png")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _n_layers(result) -> int:
    return int(result.heads["layer"].max()) + 1 if not result.heads.empty else 1


def _n_heads(result) -> int:
    return int(result.heads["head"].max()) + 1 if not result.heads.empty else 1


def _mark_best(ax, result) -> tuple | None:
    """Star the best set's heads (cross the top candidate's when no set is significant);
    return its legend entry `(artist, text)`, or None when there is no set."""
    best = result.best
    heads, label, marker = (best, "best set", "*") if best else (
        result.top_candidate, "top candidate (not significant)", "X")
    if not heads:
        return None
    layers_heads = [parse_head(h) for h in heads]
    points = ax.scatter([h for _, h in layers_heads], [l for l, _ in layers_heads],
                        marker=marker, s=140, c="gold", edgecolors="black", linewidths=0.8,
                        zorder=3)
    return points, f"{label}: {','.join(heads)}"


def _rect(head: int, layer: int):
    from matplotlib.patches import Rectangle

    return Rectangle((head - 0.5, layer - 0.5), 1, 1, fill=False, edgecolor="black", lw=1.5)


def _hatch(head: int, layer: int):
    from matplotlib.patches import Rectangle

    return Rectangle((head - 0.5, layer - 0.5), 1, 1, fill=False, edgecolor="0.45", lw=0.0,
                     hatch="////")
