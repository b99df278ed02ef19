"""The explanation section of `report.md`: what the best set's heads do, read back from the
tables the explain stage (`workbench.explain.stage`) saved under `explanation/` (so rewriting the
report never needs the model), and the names of those files and figures.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.tables import load_table, markdown_table

EXPLANATION_DIR = "explanation"
EXPLANATION_FIGURE = "explanation.png"
ATTENTION_EXAMPLES_FIGURE = "attention_examples.png"
# the tables of `explanation/` the report section reads back
_SECTION_TABLES = ("roles", "comparison_roles", "dla_summary", "outcomes", "removal")


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


def explanation_section(folder: str | Path, result) -> list[str] | None:
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
    if (Path(folder) / ATTENTION_EXAMPLES_FIGURE).is_file():
        lines += ["", "### Attention on single examples", "", "Each panel is one example (its "
                  "outcome in brackets): the attention from the answer position of every removed "
                  "head (top rows) and comparison head (below the white line) over the prompt's "
                  "tokens; the numbers are in `explanation/attention_examples.csv`.", "",
                  f"![attention on single examples]({ATTENTION_EXAMPLES_FIGURE})"]
    return lines


def _role_columns(df: pd.DataFrame) -> list[str]:
    """The `attn_<role>` columns of a saved roles table (the schema of
    `workbench.explain.attention.summarize_attention`, read from the file)."""
    return [c for c in df.columns if c.startswith("attn_")]


def _head_table(t: dict[str, pd.DataFrame]) -> list[str]:
    roles = pd.concat(
        [t["roles"].assign(group="removed"), t["comparison_roles"].assign(group="comparison")]
        if not t["comparison_roles"].empty else [t["roles"].assign(group="removed")],
        ignore_index=True,
    )
    dla = t["dla_summary"][["head_name", "dla_correct", "dla_wrong", "dla_diff", "dla_diff_se"]]
    table = roles.merge(dla, on="head_name", how="left")
    shares = [*_role_columns(table), "entropy"]
    table[shares] = table[shares].astype(float).round(3)  # fractions; 4 significant digits
    # of 4e-06 say nothing more than 0.000
    cols = ["head_name", "group", "top_role", *_role_columns(table), "entropy", "dla_diff",
            "dla_diff_se", "dla_correct", "dla_wrong", "top_tokens"]
    return markdown_table(table[[c for c in cols if c in table]])


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
