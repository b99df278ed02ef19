"""What enhancement costs: the frontier of objective gain against guard loss, and the guards'
section of the report.

A guarded search (`workbench.guards`) keeps only sets that pass every guard; the sets it
scored on the way say what the guards cost. For each guard metric, the frontier (a Pareto
front) is the sets scored on every selection example that no other such set beats on both
the objective's gain and the guard metric's change: read from the top, the best gain at each
level of guard loss. `frontier.csv` holds it (`FRONTIER_COLUMNS`), `report.md` and
`view.html` show it. Every number is on the selection split, where the sets were chosen.
"""

from __future__ import annotations

import math

import pandas as pd

from workbench.guards import parse_guards
from workbench.search.candidates import compared
from workbench.tables import markdown_table

FRONTIER_FILE = "frontier.csv"
FRONTIER_COLUMNS = ("guard", "size", "heads", "objective", "gain", "guard_change", "feasible",
                    "n")


def frontier_table(combos: pd.DataFrame, objective: str, guards) -> pd.DataFrame:
    """The frontier of each guard on the main task (module docstring), `FRONTIER_COLUMNS`,
    each guard's rows from the largest guard change (least loss) to the smallest."""
    guards = [g for g in parse_guards(guards) or () if g.on_main]
    if combos is None or combos.empty or not guards or "n" not in combos:
        return pd.DataFrame(columns=list(FRONTIER_COLUMNS))
    combos = compared(combos)  # not the knockouts a lower-precision copy scored
    full = combos[combos["n"] == combos.groupby("size")["n"].transform("max")]
    full = full.drop_duplicates("heads", keep="last")
    rows = []
    for g in guards:
        col = f"d_{g.metric}"
        if col not in full:
            continue
        pts = full[[col, f"d_{objective}", "heads", "size", "n"]
                   + (["feasible"] if "feasible" in full else [])].dropna(subset=[col])
        pts = pts.sort_values([col, f"d_{objective}"], ascending=[False, False], kind="stable")
        best = -math.inf
        for r in pts.itertuples(index=False):
            gain = float(getattr(r, f"d_{objective}"))
            if gain > best:
                best = gain
                rows.append({"guard": g.label, "size": int(r.size), "heads": r.heads,
                             "objective": objective, "gain": gain,
                             "guard_change": float(getattr(r, col)),
                             "feasible": bool(getattr(r, "feasible", True) in (True, "True")),
                             "n": int(r.n)})
    return pd.DataFrame(rows, columns=list(FRONTIER_COLUMNS))


def guard_lines(result) -> list[str]:
    """The guards' section of `report.md` (none for an unguarded run): which guards, the
    rule, what passed held out, the closest candidate where none passed, and the frontier."""
    cfg, s = result.config, result.summary
    guards = parse_guards(cfg.guards) or ()
    if not guards:
        return []
    lines = ["", "## Guards: enhancement, not a gamed objective", "",
             f"The search maximised `{cfg.objective}` over the sets that pass every guard "
             f"({', '.join(f'`{g.label}`' for g in guards)}; rule `{cfg.guard_rule}` on the "
             "selection split), and a confirmed set must pass them held out: each guard's "
             "one-sided sign-flip test of a change above its tolerance, with the objective's, "
             "as one intersection-union test (`guarded_p_holm`, Holm across sizes)."]
    passing = s.get("passing_sizes")
    if passing is not None:
        lines += ["", f"Sizes whose set passes held out: {passing or 'none'}."]
    for size, info in sorted(s.get("infeasible", {}).items()):
        lines.append(f"Size {size}: no set passed the guards on the selection split; the "
                     f"closest, {info['heads']} (`d_{cfg.objective}` "
                     f"{info[f'd_{cfg.objective}']:+.3g}), fails {', '.join(info['failed'])}.")
    table = frontier_table(result.combos, cfg.objective, cfg.guards)
    if not table.empty:
        lines += ["", "What enhancement costs (`frontier.csv`): for each guard, the sets no "
                  "other set beats on both the gain and the guard's change (selection split; "
                  "from the least guard loss down):", ""]
        lines += markdown_table(table.groupby("guard", sort=False).head(8))
    return lines
