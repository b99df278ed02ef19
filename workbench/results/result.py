"""What a CEL run produces, and its results folder.

`CELResult` holds five tables and the config that made them:

- `heads`: the per-head screening table of the selection split (see `workbench.screening.screen`),
  plus `candidate` (bool) and `candidate_rank` (0 = best, -1 = not a candidate), and, when an
  attribution screen was checked against exact screening, `exact_d_<metric>` columns;
- `combos`: every head set the search evaluated: `strategy, size, heads`,
  `ablated_<objective>` (the objective's value with the set removed: the selection split's
  clean mean plus the set's gain), `n` (the selection examples the set was scored on: racing
  stops a set once decided, so some rest on a first slice) and `d_<metric>` (its gains over
  those `n` examples);
- `confirmation`: the best set of each size re-scored on the held-out split, with paired
  bootstrap intervals, its `percentile` among random head sets of the same size and
  `random_pct_ge`, the percent of them that do at least as well (both 0-100);
  `top_candidate` marks the set the search ranks first on the selection split, and `best` the
  set the run reports (`mark_best`): the top candidate when its held-out gain is significant
  (`p_holm < 1 - ci`) and not `gamed`, else the significant set not gamed with the largest
  selection-split gain, else none ("no significant enhancement");
- `side_effects`: the same sets' effects on every other task, in each task's own metrics;
- `tradeoff`: the gain on the main task against the change on every side task, for the
  confirmed sets and samples of the random baselines' sets (`workbench.results.tradeoff`).

`mark_best` never calls a `gamed` set best: one whose objective rises while the main task's
accuracy or answer log-prob falls significantly (`workbench.results.tradeoff.gamed`).

A results folder holds `config.json` (config, seeds, timings, summary, the `environment`
the run computed on: `workbench.environment`, and its `cost` in forward-times:
`workbench.results.cost`), one CSV per table, four plots
(`workbench.results.plots`) and `report.md` (rendered by `workbench.results.report`, which
`report`, `write_report` and `save` call; it reads the result and imports nothing from here).
Every file is written atomically (temporary file, then rename), so an interrupted run leaves
only complete files, and `run_cel` resumes from them; each table is recorded in `config.json`
with its hash (see `workbench.results.store`), and loading refuses a recorded table that is
missing or changed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from workbench.config import CELConfig
from workbench.results.report import (
    REPORT_FILE as REPORT_FILE,  # re-exported: sweep.py reads it here
)
from workbench.results.report import render_report, write_report
from workbench.results.store import (
    CONFIG_FILE as CONFIG_FILE,  # re-exported: sweep.py reads it here
)
from workbench.results.store import TABLES, ResultStore, read_folder
from workbench.results.tradeoff import gamed, gaming_note
from workbench.search.candidates import compared

RESULT_VERSION = 2
# a guarded run's Holm-corrected p-value of its guards, per confirmed set: where a
# confirmation table has it, a set whose guard fails (>= alpha) is said to fail it
GUARD_COLUMN = "guarded_p_holm"


def _empty() -> pd.DataFrame:
    return pd.DataFrame()


@dataclass
class CELResult:
    """The outcome of `run_cel`; see the module docstring for the tables."""

    config: CELConfig
    heads: pd.DataFrame = field(default_factory=_empty)
    combos: pd.DataFrame = field(default_factory=_empty)
    confirmation: pd.DataFrame = field(default_factory=_empty)
    side_effects: pd.DataFrame = field(default_factory=_empty)
    tradeoff: pd.DataFrame = field(default_factory=_empty)
    summary: dict = field(default_factory=dict)
    seeds: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    environment: dict = field(default_factory=dict)
    cost: dict = field(default_factory=dict)

    @property
    def alpha(self) -> float:
        """The significance level of the held-out p-values, `1 - ci`."""
        return float(self.summary.get("alpha", 1.0 - self.config.ci))

    @property
    def best(self) -> list[str]:
        """The head names of the best set: only a set whose held-out enhancement is
        significant (`p_holm < alpha`) is called best; `[]` when none is (see
        `top_candidate`)."""
        return flagged_heads(mark_best(self.confirmation, self.config.objective, self.alpha),
                            "best")

    @property
    def top_candidate(self) -> list[str]:
        """The head names of the set the search ranks first on the selection split,
        significant or not."""
        return flagged_heads(mark_best(self.confirmation, self.config.objective, self.alpha),
                            "top_candidate")

    @property
    def significant(self) -> bool:
        """True when some confirmed set's held-out enhancement is significant."""
        return bool(self.best)

    def run_file(self) -> dict:
        """`config.json`'s content; `environment` beside the config, not in it (a rerun on
        another machine resumes), and only where known."""
        env = {"environment": self.environment} if self.environment else {}
        if self.cost:  # forward-times, known where the CLI measured a forward
            env["cost"] = self.cost
        return {
            "format": "cel-result",
            "version": RESULT_VERSION,
            "config": self.config.to_dict(),
            "seeds": self.seeds,
            "timings": self.timings,
            "summary": self.summary,
            **env,
        }

    def summary_table(self) -> pd.DataFrame:
        """The confirmation in brief: one row per set size, each gain with its `n`:
        `select_d_<objective>` over `select_n` selection examples (the search's row of the
        set that holds that gain), `d_<objective>` over `heldout_n` held-out examples."""
        c = self.confirmation.copy()
        if c.empty:
            return pd.DataFrame()
        obj = self.config.objective
        if f"select_d_{obj}" in c and not self.combos.empty and "n" in self.combos:
            c["select_n"] = pd.array([select_n(self.combos, h, g, obj) for h, g in
                                      zip(c["heads"], c[f"select_d_{obj}"], strict=True)],
                                     dtype="Int64")
        if f"d_{obj}_n" in c:
            c["heldout_n"] = c[f"d_{obj}_n"]
        cols = [
            "size",
            "heads",
            f"select_d_{obj}",
            "select_n",
            f"d_{obj}",
            f"d_{obj}_lo",
            f"d_{obj}_hi",
            "heldout_n",
            "p_value",
            "p_holm",
            "guarded_p_holm",
            "random_mean",
            "percentile",
            "pool_random_mean",
            "pool_percentile",
            "gamed",
            "top_candidate",
            "best",
        ]
        return c[[col for col in cols if col in c]].copy()

    def save(self, folder: str | Path, plots: bool = True) -> Path:
        """Write the config JSON, the tables as CSV, the plots and `report.md` into `folder`
        (replacing the tables of an earlier result there)."""
        folder = Path(folder)
        with ResultStore(folder) as store:
            store.clear()
            store.save(self.run_file(), **{n: getattr(self, n) for n in TABLES
                                           if not getattr(self, n).empty})
            self.write_report(folder, plots)
        return folder

    def write_report(self, folder: Path, plots: bool = True) -> None:
        """Write the plots and `report.md` (atomically) into `folder`, with the explanation
        section when `folder/explanation/` explains this result's best set
        (`workbench.results.report.write_report`)."""
        write_report(self, folder, plots)

    @property
    def complete(self) -> bool:
        """True when the held-out confirmation (and side effects, if any) are present."""
        return not self.confirmation.empty and (
            not self.config.others or not self.side_effects.empty
        )

    @classmethod
    def load(cls, folder: str | Path) -> "CELResult":
        """Read a folder written by `save` or by `run_cel` (possibly interrupted: stages not
        reached are empty tables). Every recorded table must be there, unchanged; the columns
        of older versions are read under their current names (`workbench.results.store.RENAMED`)."""
        data, tables = read_folder(folder)
        return cls(
            config=CELConfig.from_dict(data["config"]),
            summary=data.get("summary", {}),
            seeds=data.get("seeds", {}),
            timings=data.get("timings", {}),
            environment=data.get("environment", {}),
            cost=data.get("cost", {}),
            **tables,
        )

    def report(self, plots: bool = True, explanation: list[str] | None = None) -> str:
        """A short Markdown report of the run; `explanation`: the Markdown lines of the
        explanation section (`workbench.results.explanation.explanation_section`), if any
        (`workbench.results.report.render_report`)."""
        return render_report(self, plots=plots, explanation=explanation)


def mark_best(confirmation: pd.DataFrame, objective: str, alpha: float) -> pd.DataFrame:
    """The confirmation table with `top_candidate` (the set the search ranks first on the
    selection split: the `best` flag of `confirm_sets`), `gamed` (the objective rises while
    the main task's accuracy or answer log-prob falls significantly: `workbench.results.tradeoff`)
    and `best` (the set to report): the top candidate when its `p_holm < alpha` (in a guarded
    run its `guarded_p_holm`: it also passes every guard held out) and it is not gamed, else
    the significant set not gamed with the largest selection-split gain (the smallest such
    size on ties), else none. Idempotent."""
    c = confirmation.copy()
    if c.empty or "best" not in c:
        return c
    c["top_candidate"] = (c["top_candidate"] if "top_candidate" in c else c["best"]).astype(bool)
    c["gamed"] = gamed(c, objective, alpha)
    # a guarded run's sets must also pass every guard held out (`workbench.guards`)
    column = "guarded_p_holm" if "guarded_p_holm" in c else "p_holm"
    significant = (c[column] < alpha) if column in c else pd.Series(False, index=c.index)
    significant &= ~c["gamed"]
    best = c["top_candidate"] & significant
    if not best.any() and significant.any():
        key = f"select_d_{objective}"
        gains = c.loc[significant, key] if key in c else -c.loc[significant, "size"]
        best = c.index == gains.astype(float).idxmax()  # first maximum: rows go by size
    c["best"] = pd.Series(best, index=c.index).astype(bool)
    return c


def best_reasons(confirmation: pd.DataFrame, objective: str, alpha: float) -> pd.Series:
    """Why each confirmed set is, or is not, called best: `mark_best`'s rule in words, one
    string per row (`view.html`'s `why` column). A set that is not best is not significant
    (`p_holm >= alpha`), gamed (what it games, `workbench.results.tradeoff.gaming_note`),
    failing a guard (`GUARD_COLUMN`, where the table has it), or, significant and clean, not
    the set chosen (the top candidate, or the largest selection gain): each that applies."""
    c = mark_best(confirmation, objective, alpha)
    if c.empty or "best" not in c:
        return pd.Series([""] * len(c), index=c.index, dtype=object)
    chosen = c.loc[c["best"], "size"].tolist()
    reasons = []
    for _, row in c.iterrows():
        p = float(row.get("p_holm", math.nan))
        significant = p < alpha  # False for NaN
        guard = float(row.get(GUARD_COLUMN, math.nan))
        if row["best"]:
            how = ("the top candidate" if row["top_candidate"] else
                   "the largest selection gain among the significant sets (the top candidate "
                   "is not significant or is gamed)")
            reasons.append(f"best: significant (p_holm {p:.2g} < {alpha:.2g}), not gamed, {how}")
            continue
        parts = []
        if not significant:
            parts.append(f"not significant (p_holm {p:.2g} >= {alpha:.2g})" if p == p else
                         "not significant (no p_holm)")
        if row["gamed"]:
            parts.append("gamed: " + (gaming_note(row, objective, alpha) or f"{objective} rises "
                                      "while accuracy or log-prob falls significantly"))
        if guard >= alpha:
            parts.append(f"fails a guard ({GUARD_COLUMN} {guard:.2g} >= {alpha:.2g})")
        if not parts and chosen:
            top = bool(c.loc[c["best"], "top_candidate"].iloc[0])
            parts.append(f"significant and not gamed, but not the top candidate (size "
                         f"{chosen[0]}, ranked first on the selection split, is best)" if top
                         else f"significant and not gamed, but size {chosen[0]} has a larger "
                         "selection-split gain and is best")
        if not parts:
            parts.append("significant and not gamed, but no set is best")
        reasons.append("; ".join(parts))
    return pd.Series(reasons, index=c.index, dtype=object)


def select_n(combos: pd.DataFrame, heads: str, gain: float, objective: str) -> int | None:
    """The selection examples behind a confirmed set's selection-split gain `gain`: the `n`
    of the search's row of `heads` whose `d_<objective>` is nearest to it (the most examples
    on ties; None when the search has no row of the set). Folders written before
    `workbench.search.candidates.set_record` took the set's first row, not its fullest."""
    combos = compared(combos)  # not the knockouts a lower-precision copy scored
    rows = combos[combos["heads"].astype(str) == str(heads)]
    if rows.empty:
        return None
    gap = (rows[f"d_{objective}"].astype(float) - float(gain)).abs()
    return int(rows.loc[gap == gap.min(), "n"].max())


def flagged_heads(confirmation: pd.DataFrame, column: str) -> list[str]:
    """The head names of the first row of `confirmation` whose bool `column` is true."""
    if confirmation.empty or column not in confirmation:
        return []
    row = confirmation[confirmation[column].astype(bool)]
    if row.empty:
        return []
    return [h for h in str(row.iloc[0]["heads"]).split(",") if h]
