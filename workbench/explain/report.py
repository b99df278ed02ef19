"""The explanation in a results folder: what the best set's heads do, next to heads that were kept.

CEL finds heads whose removal helps; this module says, in the run's own `report.md`, what
those heads were doing, from three angles of `explain_heads` on the held-out split:

- **attention by token role**: where each removed head looks from the answer position, and
  where comparison heads (random heads of the same layers that were not removed) look;
- **direct logit attribution**: what each head writes onto the answer minus the wrong answer,
  removed heads next to comparison heads; a removed head that helps by being removed should
  often push the wrong answer here;
- **removal**: which examples removing the whole set fixes or breaks, and how much of one
  head's effect is its direct output (the rest goes through later layers).

`explain_folder` computes it for a finished run (the best set, or the top candidate, marked
as not significant, when no set is) and writes `explanation/` (the tables and their
`config.json`), `explanation.png` and the report section; `workbench cel` calls it at the end
of a run and `workbench explain --out DIR` calls it on any results folder.
`explanation_section` renders the section from the saved tables, so rewriting `report.md`
never needs the model.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.explain.attention import role_columns
from workbench.explain.explanation import HeadExplanation, explain_heads
from workbench.results import CELResult
from workbench.store import ResultStore, write_json
from workbench.tables import load_table

EXPLANATION_DIR = "explanation"
EXPLANATION_FIGURE = "explanation.png"
# the tables the report section reads back
_SECTION_TABLES = ("roles", "comparison_roles", "dla_summary", "outcomes", "removal")


def explain_folder(
    folder: str | Path, model, task, result: CELResult, split: str = "heldout"
) -> HeadExplanation | None:
    """Explain `result`'s best set (or its top candidate) and write it into `folder`:
    `explanation/*.csv`, `explanation.png` and the section of `report.md`.

    Args:
        folder: the run's results folder (locked while writing).
        model, task: the model and main task the run was made from.
        result: the finished run (`CELResult.load(folder)`).
        split: the split to explain on (held out by default: the heads were chosen on
            `select`).

    Returns:
        The `HeadExplanation`, or None when the run confirmed no head set.
    """
    if not result.top_candidate:
        return None
    folder = Path(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the report says so instead
        ex = explain_heads(model, task, result, split=split)
    ex.config["top_candidate"] = ",".join(result.top_candidate)
    with ResultStore(folder):
        target = folder / EXPLANATION_DIR
        ex.save(target)
        write_json(target / "config.json", ex.config)  # atomically, after the tables
        from workbench.plots import save_figure

        save_figure(explanation_figure(ex.roles, ex.comparison_roles, ex.dla_summary),
                    folder / EXPLANATION_FIGURE)
        result.write_report(folder, plots=(folder / "heads_heatmap.png").is_file())
    return ex


def load_explanation(folder: str | Path) -> tuple[dict, dict[str, pd.DataFrame]] | None:
    """`(config, tables)` of `folder/explanation/`, or None when it is missing or partial."""
    target = Path(folder) / EXPLANATION_DIR
    try:
        config = json.loads((target / "config.json").read_text(encoding="utf-8"))
        tables = {n: _read(target / f"{n}.csv") for n in _SECTION_TABLES}
    except (OSError, ValueError):
        return None
    return config, tables


def _read(path: Path) -> pd.DataFrame:
    try:
        return load_table(path)
    except pd.errors.EmptyDataError:  # an empty table (no comparison heads)
        return pd.DataFrame()


def explanation_section(folder: str | Path, result: CELResult) -> list[str] | None:
    """The Markdown lines of the report's explanation section, from `folder/explanation/`;
    None when there is none, or it explains another set than the result's best (or top
    candidate)."""
    loaded = load_explanation(folder)
    if loaded is None:
        return None
    config, t = loaded
    explained = result.best or result.top_candidate
    if config.get("heads") != ",".join(explained):
        return None
    significant = bool(config.get("significant", True))
    lines = [
        f"## What the {'best set' if significant else 'top candidate'}'s heads do "
        f"({config.get('split')} split, {config.get('n_examples')} examples)",
        "",
    ]
    if not significant:
        lines += [f"> **Not significant.** {config.get('note', '')}. Read what follows as a "
                  "description of those heads, not of an established enhancement.", ""]
    lines.append(
        f"Heads {config['heads']}, explained with {config.get('kind')} ablation; comparison "
        f"heads {config.get('comparison') or '(none)'} are random heads of the same layers "
        "that were not removed. Attention is the mean fraction of the head's attention from "
        "the answer position on each token role; `dla_diff` is the head's direct logit "
        "attribution onto the answer minus the wrong answer (nats, through the final layer "
        "norm at its clean scale), with its standard error over examples."
    )
    lines += ["", *_head_table(t)]
    lines += ["", *_removal_lines(t)]
    lines += ["", *_reading(t), "", f"![explanation]({EXPLANATION_FIGURE})"]
    return lines


def _head_table(t: dict[str, pd.DataFrame]) -> list[str]:
    from workbench.results import _markdown

    roles = pd.concat(
        [t["roles"].assign(group="removed"), t["comparison_roles"].assign(group="comparison")]
        if not t["comparison_roles"].empty else [t["roles"].assign(group="removed")],
        ignore_index=True,
    )
    dla = t["dla_summary"][["head_name", "dla_correct", "dla_wrong", "dla_diff", "dla_diff_se"]]
    table = roles.merge(dla, on="head_name", how="left")
    shares = [*role_columns(table), "entropy"]
    table[shares] = table[shares].astype(float).round(3)  # fractions; 4 significant digits
    # of 4e-06 say nothing more than 0.000
    cols = ["head_name", "group", "top_role", *role_columns(table), "entropy", "dla_diff",
            "dla_diff_se", "dla_correct", "dla_wrong", "top_tokens"]
    return _markdown(table[[c for c in cols if c in table]])


def _removal_lines(t: dict[str, pd.DataFrame]) -> list[str]:
    outcomes, removal = t["outcomes"], t["removal"]
    lines = []
    if not outcomes.empty and "outcome" in outcomes:
        counts = outcomes["outcome"].value_counts()
        lines.append(
            f"Removing the whole set fixes {int(counts.get('fixed', 0))} examples (wrong -> "
            f"right), breaks {int(counts.get('broken', 0))} and leaves "
            f"{int(counts.get('unchanged', 0))} alone."
        )
    if not removal.empty:
        g = removal.groupby("head_name", sort=True)[
            ["delta_logit_diff", "direct_effect", "indirect_effect"]].mean()
        parts = [
            f"{name}: {r.delta_logit_diff:+.3g} (direct {r.direct_effect:+.3g}, through later "
            f"layers {r.indirect_effect:+.3g})" for name, r in g.iterrows()
        ]
        lines.append("Removing one head alone changes the answer-minus-wrong logit difference "
                     "by, on average (nats): " + "; ".join(parts) + ".")
    return lines


def _reading(t: dict[str, pd.DataFrame]) -> list[str]:
    """One sentence per removed head, from the numbers above (no interpretation beyond
    them)."""
    roles, comp, dla = t["roles"], t["comparison_roles"], t["dla_summary"]
    comp_dla = dla[dla["head_group"] != "removed"]["dla_diff"] if "head_group" in dla else []
    comp_mean = float(np.mean(comp_dla)) if len(comp_dla) else float("nan")
    out = []
    for r in roles.itertuples():
        share = getattr(r, f"attn_{r.top_role}", float("nan"))
        d = dla[dla["head_name"] == r.head_name]
        line = (f"- **{r.head_name}** attends mostly to `{r.top_role}` ({share:.2f} of its "
                "attention)")
        if not d.empty:
            diff = float(d["dla_diff"].iloc[0])
            side = "the wrong answer" if diff < 0 else "the answer"
            line += f" and directly pushes toward {side} (`dla_diff` {diff:+.3g}"
            line += f"; comparison heads {comp_mean:+.3g})" if np.isfinite(comp_mean) else ")"
        out.append(line + ".")
    if not comp.empty:
        top = comp["top_role"].value_counts()
        out.append(f"- Comparison heads attend mostly to `{top.index[0]}` "
                   f"({int(top.iloc[0])} of {len(comp)}).")
    return out


def explanation_figure(roles: pd.DataFrame, comparison_roles: pd.DataFrame,
                       dla_summary: pd.DataFrame):
    """Two panels: mean attention by token role (removed heads solid, comparison heads
    hatched) and direct logit attribution per head (answer - wrong, with standard errors).

    Returns:
        A matplotlib `Figure`.
    """
    from matplotlib.figure import Figure

    groups = [("removed", roles)]
    if not comparison_roles.empty:
        groups.append(("comparison", comparison_roles))
    role_cols = list(dict.fromkeys(c for _, g in groups for c in role_columns(g)))
    heads = [(name, g, row) for name, g in groups for _, row in g.iterrows()]
    fig = Figure(figsize=(max(7.0, 0.9 * len(heads) + 5.0), 3.6), layout="constrained")
    ax_role, ax_dla = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    x = np.arange(len(role_cols))
    width = 0.8 / max(len(heads), 1)
    for k, (group, _, row) in enumerate(heads):
        values = [float(row.get(c, 0.0)) if pd.notna(row.get(c)) else 0.0 for c in role_cols]
        ax_role.bar(x + (k - (len(heads) - 1) / 2) * width, values, width,
                    label=f"{row['head_name']} ({group})",
                    hatch="//" if group == "comparison" else None,
                    alpha=0.6 if group == "comparison" else 1.0)
    ax_role.set_xticks(x, [c[len("attn_"):] for c in role_cols], rotation=30, ha="right")
    ax_role.set_ylim(0, 1)
    ax_role.set_ylabel("mean attention from answer position")
    ax_role.set_title("Where the heads look", fontsize=9)
    ax_role.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    d = dla_summary.sort_values(["head_group", "layer", "head"], ascending=[False, True, True])
    colors = ["C3" if g == "removed" else "C7" for g in d["head_group"]]
    ax_dla.bar(np.arange(len(d)), d["dla_diff"], yerr=d["dla_diff_se"], color=colors, capsize=3)
    ax_dla.set_xticks(np.arange(len(d)), d["head_name"], rotation=45, ha="right", fontsize=7)
    ax_dla.axhline(0, color="black", lw=0.8)
    ax_dla.set_ylabel("DLA, answer - wrong (nats)")
    ax_dla.set_title("What they write to the logits\n(red: removed, grey: comparison)",
                     fontsize=9)
    return fig
