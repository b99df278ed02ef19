"""Pictures of the explanations: attention heatmaps, role bars, DLA bars, removal vs DLA.

Interactive attention views (`circuitsvis`) are deliberately not used: its default display
loads JavaScript from the internet, and the workbench must run offline. These helpers use
matplotlib only, build `matplotlib.figure.Figure` objects without `pyplot` (so nothing global
changes and a notebook shows each figure once), and return them. `plot_attention` and
`plot_answer_attention` run the model; the others draw the tables of a `HeadExplanation`.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd
import torch

from workbench.errors import WorkbenchError
from workbench.explain.attention import role_columns
from workbench.explain.capture import as_batch, capture
from workbench.heads import HeadSet, HeadSpec
from workbench.hooked import HookedModel
from workbench.logits import forward_kwargs
from workbench.tables import head_name
from workbench.tasks.encoding import TaskBatch
from workbench.tasks.task import Task


def _figure(n_rows: int, n_cols: int, width: float, height: float):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * n_cols, height * n_rows), layout="constrained")
    axes = fig.subplots(n_rows, n_cols, squeeze=False)
    return fig, axes


def plot_attention(
    model: HookedModel,
    task: Task | TaskBatch | str,
    heads: Iterable[HeadSpec] | HeadSet,
    example: int | str = 0,
    split: str | None = "heldout",
):
    """Full attention patterns of some heads on one example, with token labels.

    Args:
        example: the example's index in the split, or its id.

    Returns:
        A matplotlib `Figure`, one heatmap (query rows x key columns) per head.
    """
    batch = as_batch(model, task, split)
    if isinstance(example, str):
        if example not in batch.task.ids:
            raise WorkbenchError(f"example id {example!r} is not in this split")
        example = batch.task.ids.index(example)
    one = batch.rows([example])
    head_set = HeadSet.of(model, heads)
    n = int(one.lengths[0])
    names = {f"blocks.{l}.attn.hook_pattern" for l, _ in head_set}
    with torch.no_grad():
        _, cache = model.run_with_cache(
            one.tokens, names_filter=lambda x: x in names, **forward_kwargs(model)
        )
    toks = one.str_tokens[0]
    fig, axes = _figure(1, len(head_set), max(3.0, 0.35 * n + 1.5), max(3.0, 0.35 * n + 1.0))
    for ax, (layer, head) in zip(axes[0], head_set, strict=True):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"][0, head, :n, :n].cpu().numpy()
        im = ax.imshow(pattern, cmap="Blues", vmin=0.0, vmax=1.0)
        ax.set_xticks(range(n), toks, rotation=90, fontsize=8)
        ax.set_yticks(range(n), toks, fontsize=8)
        ax.set_xlabel("key (attended) token")
        ax.set_title(head_name(layer, head))
    axes[0][0].set_ylabel("query token")
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="attention")
    fig.suptitle(f"{batch.task.name}: example {batch.task.ids[example]}")
    return fig


def plot_answer_attention(
    model: HookedModel,
    task: Task | TaskBatch | str,
    head: HeadSpec,
    split: str | None = "heldout",
    n_examples: int = 8,
):
    """One head's attention from the answer position on several examples, tokens in the cells.

    Returns:
        A matplotlib `Figure`: rows are examples, columns positions, colour is attention.
    """
    batch = as_batch(model, task, split)
    batch = batch.rows(slice(0, n_examples))
    ((layer, h),) = HeadSet.of(model, [head]).heads
    cap = capture(model, batch)
    width = int(batch.lengths.max())
    attn = cap.attn[:, layer, h, :width].cpu().numpy()
    fig, axes = _figure(1, 1, 0.7 * width + 1.5, 0.45 * len(batch) + 1.2)
    ax = axes[0][0]
    im = ax.imshow(attn, cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
    for i, toks in enumerate(batch.str_tokens):
        for j, t in enumerate(toks):
            ax.text(
                j,
                i,
                t,
                ha="center",
                va="center",
                fontsize=7,
                color="white" if attn[i, j] > 0.6 else "black",
            )
    ax.set_yticks(range(len(batch)), batch.task.ids, fontsize=7)
    ax.set_xlabel("position")
    ax.set_title(f"{head_name(layer, h)}: attention from the answer position")
    fig.colorbar(im, ax=ax, label="attention")
    return fig


def plot_role_bars(roles: pd.DataFrame, by: str | None = None):
    """Mean attention per role for each head, as bars (one panel per head).

    Args:
        roles: `summarize_attention` output (`HeadExplanation.roles` or `.roles_by_outcome`).
        by: a column to draw as side-by-side bars (e.g. `"outcome"`); found automatically
            when the table has an `outcome` column.

    Returns:
        A matplotlib `Figure`.
    """
    if by is None and "outcome" in roles:
        by = "outcome"
    role_cols = role_columns(roles)
    names = list(dict.fromkeys(roles["head_name"]))
    fig, axes = _figure(1, len(names), max(3.0, 0.5 * len(role_cols) + 1.5), 3.2)
    x = np.arange(len(role_cols))
    for ax, name in zip(axes[0], names, strict=True):
        df = roles[roles["head_name"] == name]
        groups = [(None, df)] if by is None else list(df.groupby(by, sort=True))
        width = 0.8 / len(groups)
        for k, (value, g) in enumerate(groups):
            label = None if value is None else f"{value} (n={int(g['n'].sum())})"
            ax.bar(
                x + (k - (len(groups) - 1) / 2) * width,
                g[role_cols].to_numpy()[0],
                width,
                label=label,
            )
        ax.set_xticks(x, [c[len("attn_") :] for c in role_cols], rotation=45, ha="right")
        ax.set_ylim(0, 1)
        ax.set_title(name)
        if by is not None:
            ax.legend(fontsize=7)
    axes[0][0].set_ylabel("mean attention from answer position")
    return fig


def plot_dla(dla_summary: pd.DataFrame):
    """Mean direct logit attribution of each head onto the answer, the wrong answer and their
    difference, removed heads next to comparison heads.

    Returns:
        A matplotlib `Figure`.
    """
    df = dla_summary.sort_values(["head_group", "layer", "head"], ascending=[False, True, True])
    fig, axes = _figure(1, 1, max(4.0, 0.9 * len(df) + 2.0), 3.5)
    ax = axes[0][0]
    x = np.arange(len(df))
    for k, col in enumerate(("dla_correct", "dla_wrong", "dla_diff")):
        ax.bar(
            x + (k - 1) * 0.27,
            df[col],
            0.27,
            label=col,
            yerr=df["dla_diff_se"] if col == "dla_diff" else None,
        )
    labels = [f"{n}\n({g})" for n, g in zip(df["head_name"], df["head_group"], strict=True)]
    ax.set_xticks(x, labels)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_ylabel("direct logit attribution (nats)")
    ax.legend(fontsize=8)
    return fig


def plot_removal_vs_dla(removal: pd.DataFrame):
    """Per example: a head's direct logit attribution `dla_diff` (x) against the change in
    `mean_logit_diff` when it is ablated, `d_mean_logit_diff` (y). Points on the dashed line
    `y = -x` are fully explained by the head's direct effect (for zero ablation); the vertical
    distance is the effect through later layers.

    Returns:
        A matplotlib `Figure`, one panel per head.
    """
    names = list(dict.fromkeys(removal["head_name"]))
    fig, axes = _figure(1, len(names), 3.6, 3.4)
    for ax, name in zip(axes[0], names, strict=True):
        df = removal[removal["head_name"] == name]
        groups = list(df.groupby("outcome", sort=True)) if "outcome" in df else [(None, df)]
        for value, g in groups:
            ax.scatter(g["dla_diff"], g["d_mean_logit_diff"], s=12, alpha=0.7, label=value)
        lo = float(min(df["dla_diff"].min(), -df["d_mean_logit_diff"].max(), 0.0))
        hi = float(max(df["dla_diff"].max(), -df["d_mean_logit_diff"].min(), 0.0))
        ax.plot([lo, hi], [-lo, -hi], ls="--", color="gray", lw=1)
        ax.axhline(0, color="black", lw=0.5)
        ax.axvline(0, color="black", lw=0.5)
        ax.set_xlabel("dla_diff (nats)")
        ax.set_title(name)
        if groups[0][0] is not None:
            ax.legend(fontsize=7)
    axes[0][0].set_ylabel("d_mean_logit_diff when ablated (nats)")
    return fig


def plot_attention_examples(table: pd.DataFrame):
    """Attention from the answer position on single examples, removed heads above comparison
    heads, tokens as labels and values in the cells.

    Args:
        table: `attention_examples` output (`HeadExplanation.attention_examples`).

    Returns:
        A matplotlib `Figure`, one panel per example: rows are heads (removed, then below the
        white line the comparison heads, with grey labels), columns the prompt's positions;
        each panel's image holds exactly the table's `attention` values.
    """
    if table.empty:
        raise WorkbenchError("the attention-examples table is empty: no example to draw")
    ids = list(dict.fromkeys(table["id"]))
    width = int(table.groupby("id")["pos"].max().max()) + 1
    n_heads = int(table.groupby("id")["head_name"].nunique().max())
    fig, axes = _figure(len(ids), 1, 0.62 * width + 2.2, 0.34 * n_heads + 1.3)
    for ax, ex_id in zip(axes[:, 0], ids, strict=True):
        df = table[table["id"] == ex_id]
        names = list(dict.fromkeys(df["head_name"]))
        grid = df.pivot(index="head_name", columns="pos", values="attention").loc[names]
        values = grid.to_numpy()  # (heads, positions)
        im = ax.imshow(values, cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
        tokens = df.drop_duplicates("pos").sort_values("pos")["token"].tolist()
        ax.set_xticks(range(len(tokens)), tokens, rotation=60, ha="right", fontsize=8)
        ax.set_yticks(range(len(names)), names, fontsize=8)
        groups = df.drop_duplicates("head_name").set_index("head_name")["head_group"]
        for label, name in zip(ax.get_yticklabels(), names, strict=True):
            label.set_color("black" if groups[name] == "removed" else "dimgray")
        n_removed = int((groups == "removed").sum())
        if 0 < n_removed < len(names):
            ax.axhline(n_removed - 0.5, color="white", lw=3)
        for (r, c), v in np.ndenumerate(values):
            if v >= 0.05:
                ax.text(c, r, f"{v:.2f}", ha="center", va="center", fontsize=6,
                        color="white" if v > 0.6 else "black")
        outcome = f" ({df['outcome'].iloc[0]})" if "outcome" in df else ""
        ax.set_title(f"example {ex_id}{outcome}: attention from the answer position "
                     f"({tokens[-1]!r})", fontsize=9)
    axes[-1, 0].set_xlabel("key (attended) token")
    fig.colorbar(im, ax=axes[:, 0].tolist(), shrink=0.8, label="attention")
    fig.suptitle("removed heads (black labels) above the white line, comparison heads (grey) "
                 "below", fontsize=9)
    return fig
