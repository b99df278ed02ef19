"""The explanation section of `report.md`: what the best set's heads do, read back from the
tables the explain stage (`workbench.explain.stage`) saved under `explanation/` (so rewriting the
report never needs the model), and the names of those files and figures.

Every name it prints means what it means in the rest of the folder (`docs/explain.md` *Names*
defines the explanation's own): the whole set's `d_<metric>` is the confirmation's, on the
same held-out examples, with the interval the confirmation would give it (`set_effect.csv`);
the per-head removal splits `d_mean_logit_diff`, not `d_logit_diff`, into its direct and
indirect parts. A head is said to push toward the answer or the wrong answer only when the
interval of its `dla_diff` excludes 0; otherwise it has "no clear direct effect". When the
explained set is not significant, the section opens with the banner `view.html` shows too
(`not_significant_banner`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.results.tradeoff import format_interval
from workbench.tables import load_table, markdown_table

EXPLANATION_DIR = "explanation"
EXPLANATION_FIGURE = "explanation.png"
ATTENTION_EXAMPLES_FIGURE = "attention_examples.png"
# the tables of `explanation/` the report section reads back (`set_effect` may be missing
# in a folder explained before it was written)
_SECTION_TABLES = ("roles", "comparison_roles", "dla_summary", "outcomes", "removal")
_OPTIONAL_TABLES = ("set_effect",)
# the metrics of the set's effect, in the order the section names them
_SET_METRICS = ("exact_match", "accuracy", "logprob", "logit_diff", "prob_diff")


def load_explanation(folder: str | Path) -> tuple[dict, dict[str, pd.DataFrame]] | None:
    """`(config, tables)` of `folder/explanation/`, or None when it is missing or partial."""
    target = Path(folder) / EXPLANATION_DIR
    try:
        config = json.loads((target / "config.json").read_text(encoding="utf-8"))
        tables = {n: _read(target / f"{n}.csv") for n in _SECTION_TABLES}
    except (OSError, ValueError):
        return None
    for n in _OPTIONAL_TABLES:
        path = target / f"{n}.csv"
        tables[n] = _read(path) if path.is_file() else pd.DataFrame()
    # a folder explained before `d_mean_logit_diff` had its own name
    tables["removal"] = tables["removal"].rename(columns={"delta_logit_diff": "d_mean_logit_diff"})
    return config, tables


def _read(path: Path) -> pd.DataFrame:
    try:
        return load_table(path)
    except pd.errors.EmptyDataError:  # an empty table (no comparison heads)
        return pd.DataFrame()


def not_significant_banner(config: dict) -> str | None:
    """The warning that opens the explanation of a set that is not significant (Markdown), or
    None for a significant one: `report.md` and `view.html` both show it."""
    if bool(config.get("significant", True)):
        return None
    return (f"**Not significant.** {config.get('note', '')}. Read what follows as a "
            "description of those heads, not of an established enhancement.")


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
    banner = not_significant_banner(config)
    if banner:
        lines += [f"> {banner}", ""]
    ci = _percent(config)
    lines.append(
        f"Heads {config['heads']}, explained with {config.get('kind')} ablation; comparison "
        f"heads {config.get('comparison') or '(none)'} are random heads of the same layers "
        "that were not removed. Attention is the mean fraction of the head's attention from "
        "the answer position on each token role; `dla_diff` is the head's direct logit "
        "attribution onto `mean_logit_diff`, the mean answer logit minus the mean wrong logit "
        "(nats, through the final layer norm at its clean scale), with its standard error over "
        f"examples and its {ci} interval (`dla_diff_lo`, `dla_diff_hi`). "
        "`docs/explain.md` (*Names*) defines every name of this section."
    )
    if config.get("generation"):
        lines += ["", GENERATION_NOTE.format(n=config.get("n_decisions"))]
    lines += ["", *_head_table(t)]
    lines += ["", *_removal_lines(t, config, result)]
    lines += ["", *head_readings(t), "", f"![explanation]({EXPLANATION_FIGURE})"]
    if (Path(folder) / ATTENTION_EXAMPLES_FIGURE).is_file():
        lines += ["", "### Attention on single examples", "", "Each panel is one example (its "
                  "outcome in brackets): the attention from the answer position of every removed "
                  "head (top rows) and comparison head (below the white line) over the prompt's "
                  "tokens; the numbers are in `explanation/attention_examples.csv`.", "",
                  f"![attention on single examples]({ATTENTION_EXAMPLES_FIGURE})"]
    return lines


GENERATION_NOTE = (
    "On this generation task the answer position is each of the {n} *decisions*: the position "
    "before a generated token that writes the extracted answer, read on the prompt plus the "
    "text generated so far (`explanation/decisions.csv`). There the answer is the token the "
    "clean model generates and the wrong answer the token the model without the heads writes "
    "instead (else the clean runner-up); roles `few-shot`, `question` and `generated` say "
    "where in that text a head looks; examples are fixed or broken by `exact_match` of the "
    "clean and the ablated generations (`explanation/outcomes.csv`).")


def _percent(config: dict) -> str:
    return f"{round(float(config.get('ci', 0.95)) * 100)} %"


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
    dla_cols = ["head_name", "dla_correct", "dla_wrong", "dla_diff", "dla_diff_se",
                "dla_diff_lo", "dla_diff_hi"]
    dla = t["dla_summary"][[c for c in dla_cols if c in t["dla_summary"]]]
    table = roles.merge(dla, on="head_name", how="left")
    shares = [*_role_columns(table), "entropy"]
    table[shares] = table[shares].astype(float).round(3)  # fractions; 4 significant digits
    # of 4e-06 say nothing more than 0.000
    cols = ["head_name", "group", "top_role", *_role_columns(table), "entropy", "dla_diff",
            "dla_diff_se", "dla_diff_lo", "dla_diff_hi", "dla_correct", "dla_wrong",
            "top_tokens"]
    return markdown_table(table[[c for c in cols if c in table]])


def _removal_lines(t: dict[str, pd.DataFrame], config: dict, result) -> list[str]:
    outcomes, removal = t["outcomes"], t["removal"]
    lines = []
    if not outcomes.empty and "outcome" in outcomes:
        counts = outcomes["outcome"].value_counts()
        lines.append(
            f"Removing the whole set fixes {int(counts.get('fixed', 0))} examples (wrong -> "
            f"right), breaks {int(counts.get('broken', 0))} and leaves "
            f"{int(counts.get('unchanged', 0))} alone." + _set_effect_text(t, config, result)
        )
    if not removal.empty and "d_mean_logit_diff" in removal:
        cols = [c for c in ("d_logit_diff", "d_mean_logit_diff", "direct_effect",
                            "indirect_effect") if c in removal]
        g = removal.groupby("head_name", sort=True)[cols].mean()
        metric = "d_logit_diff" in g and bool(np.isfinite(g["d_logit_diff"]).any())
        parts = [
            (f"{name}: `d_logit_diff` {r.d_logit_diff:+.3g}; " if metric else f"{name}: ")
            + f"`d_mean_logit_diff` {r.d_mean_logit_diff:+.3g} = direct "
            f"{r.direct_effect:+.3g} + through later layers {r.indirect_effect:+.3g}"
            for name, r in g.iterrows()
        ]
        lines.append("Removing one head alone changes, on average over these examples (nats): "
                     + "; ".join(parts) + ". `d_mean_logit_diff` (the change in the mean answer "
                     "logit minus the mean wrong logit) is the quantity that splits exactly "
                     "into the head's direct effect and the rest"
                     + (", and equals `d_logit_diff` where an example has one answer and one "
                        "wrong answer." if metric else "."))
    return lines


def _set_effect_text(t: dict[str, pd.DataFrame], config: dict, result) -> str:
    """`" On these 600 examples it changes `accuracy` by ... (...)."`, from `set_effect.csv`;
    "" where the folder has none."""
    effect = t.get("set_effect", pd.DataFrame())
    if effect.empty:
        return ""
    row = effect.iloc[0]
    parts = [f"`{m}` by {format_interval(row[f'd_{m}'], row[f'd_{m}_lo'], row[f'd_{m}_hi'])}"
             for m in _SET_METRICS if f"d_{m}" in row and pd.notna(row[f"d_{m}"])]
    if not parts:
        return ""
    n = int(row[f"d_{next(m for m in _SET_METRICS if f'd_{m}' in row)}_n"])
    kind = str(row.get("kind", config.get("kind")))
    run_kind = getattr(getattr(result.config, "kind", None), "value", None)
    split = config.get("split")
    if split != "heldout":
        same = (f"on the {split} split, so not the confirmation's numbers, which are held out")
    elif run_kind in (None, kind):
        same = "as the confirmation table measures them: the same set, examples and ablation"
    else:
        same = (f"under {kind} ablation: the confirmation's {run_kind} ablation needs "
                "counterfactual prompts the explanation does not run, so its numbers differ")
    unit = " over groups" if config.get("clustered") else ""
    return (f" On these {n} examples it changes " + ", ".join(parts)
            + f" (`d_<metric>`: ablated - clean, with its {_percent(config)} interval{unit}, "
            f"{same}).")


def head_readings(t: dict[str, pd.DataFrame]) -> list[str]:
    """One sentence per removed head, from the numbers above (no interpretation beyond
    them): a direction only where the interval of its `dla_diff` excludes 0, else "no clear
    direct effect"."""
    roles, comp, dla = t["roles"], t["comparison_roles"], t["dla_summary"]
    comp_dla = dla[dla["head_group"] != "removed"]["dla_diff"] if "head_group" in dla else []
    comp_mean = float(np.mean(comp_dla)) if len(comp_dla) else float("nan")
    out = []
    for r in roles.itertuples():
        # by column name: itertuples renames a column that is no identifier (`attn_few-shot`)
        share = roles.at[r.Index, f"attn_{r.top_role}"] if f"attn_{r.top_role}" in roles \
            else float("nan")
        d = dla[dla["head_name"] == r.head_name]
        line = (f"- **{r.head_name}** attends mostly to `{r.top_role}` ({share:.2f} of its "
                "attention)")
        if not d.empty:
            line += " and " + direct_reading(d.iloc[0])
            line += f"; comparison heads {comp_mean:+.3g})" if np.isfinite(comp_mean) else ")"
        out.append(line + ".")
    if not comp.empty:
        top = comp["top_role"].value_counts()
        out.append(f"- Comparison heads attend mostly to `{top.index[0]}` "
                   f"({int(top.iloc[0])} of {len(comp)}).")
    return out


def direct_reading(row) -> str:
    """What a head's `dla_summary` row says of its direct effect, up to the closing
    parenthesis: a direction only when its interval excludes 0."""
    diff = float(row["dla_diff"])
    lo, hi = (float(row[c]) if c in row and pd.notna(row[c]) else float("nan")
              for c in ("dla_diff_lo", "dla_diff_hi"))
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return f"has no measured direction (`dla_diff` {diff:+.3g}, no interval recorded"
    side = "the answer" if lo > 0 else "the wrong answer" if hi < 0 else None
    value = f"`dla_diff` {format_interval(diff, lo, hi)}"
    if side is None:
        return f"has no clear direct effect ({value}, an interval that includes 0"
    return f"directly pushes toward {side} ({value}"
