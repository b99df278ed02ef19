"""The run's verdict in one line: which set is best, and what it costs, or why none is.

A set is called best only when its held-out enhancement is significant (and, in a guarded
run, it passes every guard held out: `workbench.guards`) and it does not game the objective.
The line says how many held-out examples the set turns right and wrong (`fixes`, `breaks`)
and names any side task whose accuracy it collapses (a significant fall to below half of the
clean accuracy), so a set that raises a difference metric by breaking the model cannot hide
behind its gain. When no set passes, it names the closest candidate, the guards it failed,
and what might find an enhancement instead.

`result_lines` is all that `workbench cel` prints when a run ends, that line last: the clean
scores (`clean_lines`), the confirmation table, the significant sizes, the guards' verdict and
`console_lines` (gamed sets, the main task's other metrics, the side effects of the set it
reports). `report.md` (`workbench.results.report`) tells the same at length and takes
`gaming_lines` and `split_order` from here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from workbench.results.tradeoff import gaming_note, main_metrics_table, side_table

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


def console_lines(result) -> list[str]:
    """What the command line prints after the confirmation table: the sets that game the
    objective, every other metric of the main task, and the side effects of the set it
    reports (the best, else the top candidate) in each side task's own metrics."""
    obj, c = result.config.objective, result.confirmation
    lines = gaming_lines(result, "gamed:")
    others = main_metrics_table(c, obj)
    if len(others.columns) > 2:
        lines += ["", "the main task's other metrics, held out (interval; p_holm: two-sided, "
                  "Holm across sizes):", others.to_string(index=False,
                                                          float_format="{:.3g}".format)]
    heads = ",".join(result.best or result.top_candidate)
    side = side_table(result.side_effects) if not result.side_effects.empty else None
    if side is not None and heads:
        mine = side[side["heads"] == heads]
        lines += ["", f"side effects of {heads} (p_holm: two-sided, Holm across all side rows "
                  "per metric):"]
        for task, g in mine.groupby("task", sort=False):
            lines.append(f"  {task}: " + ", ".join(
                f"{r.metric} {r.d:+.3g} [{r.d_lo:+.3g}, {r.d_hi:+.3g}] p_holm {r.p_holm:.2g}"
                for r in g.itertuples()))
    return lines


def clean_lines(summary: dict, objective: str, others: Sequence[str] = ()) -> list[str]:
    """The command line's clean scores: the objective on every split and task it applies
    to, then each task it does not apply to (no wrong answer) in its own metrics; the side
    tasks in the order `others` gives (else as recorded)."""
    clean = summary.get("clean", {})
    order = split_order(clean, others)
    has = [k for k in order if _finite(clean[k].get(objective))]
    lines = [f"clean {objective}: " + ", ".join(f"{k} {clean[k][objective]:.3f}" for k in has)]
    for k in order:
        if k not in has:
            own = ", ".join(f"{m} {v:.3f}" for m, v in clean[k].items() if _finite(v))
            lines.append(f"clean {k} (no {objective}): {own}")
    return lines


def _finite(v) -> bool:
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def split_order(clean: dict, others: Sequence[str] = ()) -> list[str]:
    """The keys of a run's clean scores in report order: `select`, then `heldout`, then the
    side tasks in the order `others` gives, then any other in their recorded order (a run
    records them in its config's order; a JSON copy with sorted keys does not)."""
    first = [k for k in ("select", "heldout", *others) if k in clean]
    return first + [k for k in clean if k not in first]


def gaming_lines(result, lead: str) -> list[str]:
    """One line per confirmed set that games the objective (`workbench.results.tradeoff`)."""
    c, obj = result.confirmation, result.config.objective
    alpha = result.summary.get("alpha", 1 - result.config.ci)
    return [f"{lead} size {int(r['size'])} ({r['heads']}) {gaming_note(r, obj, alpha)}; it is "
            "not called best." for _, r in c.iterrows() if gaming_note(r, obj, alpha)]
