"""The run's verdict in one line: which set is best, and what it costs, or why none is.

A set is called best only when its held-out enhancement is significant (and, in a guarded
run, it passes every guard held out: `workbench.guards`) and it does not game the objective.
The line says how many held-out examples the set turns right and wrong (`fixes`, `breaks`)
and names any side task whose accuracy it collapses (a significant fall to below half of the
clean accuracy), so a set that raises a difference metric by breaking the model cannot hide
behind its gain. When no set passes, it names the closest candidate, the guards it failed,
and what might find an enhancement instead.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

# a side task's accuracy "collapses" when it falls significantly to below this share of clean
COLLAPSE_SHARE = 0.5


def collapsed(side_effects: pd.DataFrame, heads: str, alpha: float) -> list[str]:
    """`["induction (accuracy 0.47 -> 0.00)", ...]`: the side tasks whose accuracy the set
    `heads` collapses (`COLLAPSE_SHARE`)."""
    if side_effects is None or side_effects.empty or "d_accuracy" not in side_effects:
        return []
    out = []
    rows = side_effects[side_effects["heads"].astype(str) == heads]
    for row in rows.itertuples(index=False):
        row = row._asdict()
        clean, d = row.get("clean_accuracy", math.nan), row.get("d_accuracy", math.nan)
        p = row.get("d_accuracy_p_holm", math.nan)
        if any(map(pd.isna, (clean, d, p))):
            continue
        if d < 0 and p < alpha and clean + d < COLLAPSE_SHARE * clean:
            out.append(f"{row['task']} (accuracy {clean:.2f} -> {clean + d:.2f})")
    return out


def _costs(result, heads: str) -> str:
    """`"; fixes 14 held-out examples, breaks 3; collapses induction (...)"`."""
    c = result.confirmation
    parts = []
    row = c[c["heads"].astype(str) == heads]
    if not row.empty and "fixes" in row:
        parts.append(f"fixes {int(row['fixes'].iloc[0])} held-out examples, breaks "
                     f"{int(row['breaks'].iloc[0])}")
    broken = collapsed(result.side_effects, heads, result.alpha)
    if broken:
        parts.append("collapses " + ", ".join(broken))
    return "".join(f"; {p}" for p in parts)


def _suggestions(result) -> str:
    """What might find an enhancement where no set passed."""
    config = result.config
    ideas = []
    if str(config.kind) == "zero":
        ideas.append("mean ablation (--ablation mean)")
    if config.objective != "logprob":
        ideas.append("the answer's log-prob as the objective (--objective logprob)")
    if result.summary.get("guards"):
        ideas.append("a tolerance on a guard (--guard main:accuracy:0.02)")
    return "; might find one: " + ", ".join(ideas) if ideas else ""


def best_line(result) -> str:
    """The CLI's line on the best set (module docstring)."""
    obj = result.config.objective
    baseline = (
        f"positive d_{obj} = removing the heads helps; percentile and random_pct_ge (0-100) "
        f"against up to {result.config.n_random} random sets of the same size, or all of them "
        "where there are fewer"
    )
    if result.best:
        heads = ",".join(result.best)
        return f"best set: {heads}{_costs(result, heads)}  ({baseline})"
    infeasible = result.summary.get("infeasible", {})
    top = result.top_candidate
    if not top and infeasible:
        size, closest = min(infeasible.items(), key=lambda kv: -kv[1][f"d_{obj}"])
        return (f"best set: none: no set passes the guards; closest: {closest['heads']} "
                f"(d_{obj} {closest[f'd_{obj}']:+.3g} on the selection split) fails "
                f"{', '.join(closest['failed'])}{_suggestions(result)}")
    if not top:
        return "best set: (none): no head set was confirmed"
    tops = ",".join(top)
    gamed = [k for k in result.summary.get("gamed_sizes", [])
             if k in result.summary.get("significant_sizes", [])]
    if gamed:
        return (f"best set: none: the significant set(s) of size(s) {gamed} game the objective "
                f"(above); top candidate: {tops}{_costs(result, tops)}{_suggestions(result)} "
                f"({baseline})")
    if result.summary.get("guards") and result.summary.get("significant_sizes"):
        return (f"best set: none: no significant set passes every guard held out "
                f"({', '.join(result.summary['guards'])}, one-sided, Holm across sizes); top "
                f"candidate: {tops}{_costs(result, tops)}{_suggestions(result)} ({baseline})")
    return (
        f"best set: none: no significant enhancement (p_holm >= {result.alpha:.2g} at every "
        f"size); top candidate: {tops}{_costs(result, tops)} ({baseline})"
    )


def result_lines(result) -> list[str]:
    """What `workbench cel` prints when a run ends, before the explanation: the clean scores,
    the confirmation table, the significant sizes, the guards' verdict, gamed sets, the other
    metrics, side effects and the best set. The README's example output is these lines of the
    embedded main job's golden folder (`tests/test_readme.py`)."""
    from workbench.results.report import clean_lines, console_lines

    lines = ["", *clean_lines(result.summary, result.config.objective, result.config.others)]
    with pd.option_context(
        "display.width", 140, "display.max_columns", 20, "display.float_format", "{:.3f}".format
    ):
        lines.append(result.summary_table().to_string(index=False))
    significant = result.summary.get("significant_sizes", [])
    alpha = result.summary.get("alpha", 0.05)
    lines.append(
        f"\nheld-out enhancement (one-sided sign-flip p, Holm-corrected across sizes, alpha "
        f"{alpha:.2g}): "
        + (f"significant at size(s) {significant}" if significant else "none significant")
    )
    guards = result.summary.get("guards")
    if guards:
        passing = result.summary.get("passing_sizes", [])
        lines.append(
            f"guards ({', '.join(guards)}; rule {result.config.guard_rule}): the search kept "
            "only sets that pass them on the selection split; held out (one-sided, with the "
            "objective's test, Holm across sizes) "
            + (f"passing at size(s) {passing}" if passing else "no set passes"))
    lines += console_lines(result)  # gamed sets, other metrics, side effects
    lines.append("\n" + best_line(result))
    if "attribution_rank_correlation" in result.summary:
        rho = result.summary["attribution_rank_correlation"]
        lines.append("attribution vs exact rank correlation: "
                     + ", ".join(f"{k} {v:.3f}" for k, v in rho.items()))
    return lines


def explained_line(heads: str, out: Path) -> str:
    """The line naming where the explanation of `heads` was written."""
    return f"explanation of {heads}: {out}/report.md, {out}/explanation/"


def results_line(out: Path) -> str:
    """The last line of `workbench cel`: where the results are."""
    return f"results: {out}/ (report.md, view.html, config.json, CSV tables, plots)"
