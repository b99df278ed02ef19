"""What a CEL run produces, and its results folder.

`CELResult` holds four tables and the config that made them:

- `heads`: the per-head screening table of the selection split (see `workbench.screening`),
  plus `candidate` (bool) and `candidate_rank` (0 = best, -1 = not a candidate), and, when an
  attribution screen was checked against exact screening, `exact_d_<metric>` columns;
- `combos`: every head set the search evaluated: `strategy, size, heads, score` (the mean
  objective on the selection split with the set removed) and `d_<metric>` (gains on the
  selection split);
- `confirmation`: the best set of each size re-scored on the held-out split, with paired
  bootstrap intervals and its percentile among random head sets of the same size;
- `side_effects`: the same sets' effects on every other task.

A results folder holds `config.json` (config, seeds, timings, summary), one CSV per table,
three plots and `report.md`. Every file is written atomically (temporary file, then rename),
so an interrupted run leaves only complete files, and `run_cel` resumes from them.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from workbench.ablation import AblationKind
from workbench.errors import WorkbenchError
from workbench.tables import load_table, save_table

RESULT_VERSION = 1
CONFIG_FILE = "config.json"
TABLES = ("heads", "combos", "confirmation", "side_effects")
PLOTS = ("heads_heatmap.png", "gain_vs_size.png", "side_effects.png")
REPORT_FILE = "report.md"


@dataclass
class CELConfig:
    """Everything that determines a CEL run's numbers (not how fast they are computed).

    Attributes:
        model, task, others: names or paths as given; `*_fingerprint` identify their content.
        kind: `"zero"` or `"mean"` ablation (mean over the selection split's prompts).
        method: single-head screening, `"exact"` or `"attribution"`.
        objective: the metric CEL maximises (the task's `metric` when None).
        secondary: the continuous companion metric (log-prob unless that is the objective);
            chosen from the objective when None.
        rank_by: `"objective"`: candidates and sets are ranked by the objective's gain, ties
            broken by the secondary's; `"secondary"`: the other way round.
        max_size: the largest head set searched and confirmed.
        strategies: names in `workbench.search.STRATEGIES`, run in order on one shared cache.
        top_m: candidates for the exhaustive strategy and the smallest candidate pool.
        beam_width: sets kept per size by the beam strategy.
        n_masks, knockout_p: random knockout masks of the compressed-sensing screen (auto
            when None).
        n_random: random head sets per size in the held-out baseline.
        n_boot, ci: paired bootstrap resamples and interval coverage.
        seed: the seed every random draw derives from.
        check_attribution: with `method="attribution"`, also run exact screening to report
            their rank correlation.
    """

    model: str
    task: str
    others: tuple[str, ...] = ()
    kind: str = "zero"
    method: str = "exact"
    objective: str | None = None
    secondary: str | None = None
    rank_by: str = "objective"
    max_size: int = 3
    strategies: tuple[str, ...] = ("exhaustive",)
    top_m: int = 8
    beam_width: int = 4
    n_masks: int | None = None
    knockout_p: float | None = None
    n_random: int = 200
    n_boot: int = 1000
    ci: float = 0.95
    seed: int = 0
    check_attribution: bool = True
    model_fingerprint: str = ""
    task_fingerprint: str = ""

    def __post_init__(self) -> None:
        from workbench.screening import ScreenMethod
        from workbench.search import STRATEGIES

        self.kind = AblationKind.parse(self.kind).value
        self.method = ScreenMethod.parse(self.method).value
        if self.method == "naive":
            raise WorkbenchError(
                "CEL screening method must be 'exact' or 'attribution'; "
                "'naive' is the slow reference for tests and benchmarks"
            )
        if isinstance(self.strategies, str):
            self.strategies = (self.strategies,)
        self.strategies = tuple(self.strategies)
        self.others = tuple(str(o) for o in self.others)
        if self.rank_by not in ("objective", "secondary"):
            raise WorkbenchError(
                f"rank_by {self.rank_by!r} is unknown; expected 'objective' or 'secondary'"
            )
        if not self.strategies:
            raise WorkbenchError("at least one search strategy is needed")
        for s in self.strategies:
            if s not in STRATEGIES:
                raise WorkbenchError(
                    f"search strategy {s!r} is unknown; expected one of {sorted(STRATEGIES)}"
                )
        for name, value, low in (
            ("max_size", self.max_size, 1),
            ("top_m", self.top_m, 1),
            ("beam_width", self.beam_width, 1),
            ("n_random", self.n_random, 0),
            ("n_boot", self.n_boot, 1),
        ):
            if not isinstance(value, int) or value < low:
                raise WorkbenchError(f"{name} must be an integer >= {low}; got {value!r}")
        if self.n_masks is not None and self.n_masks < 2:
            raise WorkbenchError(f"n_masks must be >= 2; got {self.n_masks}")
        if self.knockout_p is not None and not 0.0 < self.knockout_p < 1.0:
            raise WorkbenchError(f"knockout_p must be in (0, 1); got {self.knockout_p}")
        if not 0.0 < self.ci < 1.0:
            raise WorkbenchError(f"ci must be in (0, 1); got {self.ci}")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["others"], d["strategies"] = list(self.others), list(self.strategies)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "CELConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise WorkbenchError(f"CEL config has unknown keys {unknown}; expected {sorted(known)}")
        d = dict(d)
        d["others"] = tuple(d.get("others", ()))
        d["strategies"] = tuple(d.get("strategies", ("exhaustive",)))
        return cls(**d)

    def differences(self, other: "CELConfig") -> list[str]:
        """Names of the fields whose values differ."""
        a, b = self.to_dict(), other.to_dict()
        return [k for k in a if a[k] != b[k]]


def write_json(path: Path, obj) -> Path:
    """Write JSON atomically."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(obj, indent=1, sort_keys=True, default=_json_default))
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)  # only after a failure or an interrupt
    return path


def _json_default(obj):
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    raise TypeError(f"cannot write {type(obj).__name__} to JSON")


def read_run_file(folder: str | Path) -> dict:
    """The parsed `config.json` of a results folder."""
    path = Path(folder) / CONFIG_FILE
    if not path.is_file():
        raise WorkbenchError(f"{str(folder)!r} is not a CEL results folder (no {CONFIG_FILE})")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise WorkbenchError(f"{path} is not valid JSON: {e}") from None
    if data.get("format") != "cel-result" or "config" not in data:
        raise WorkbenchError(f"{path} is not a CEL results config (format 'cel-result')")
    return data


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
    summary: dict = field(default_factory=dict)
    seeds: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)

    @property
    def best(self) -> list[str]:
        """The head names of the best set (largest confirmed gain on the selection split)."""
        if self.confirmation.empty:
            return []
        row = self.confirmation[self.confirmation["best"].astype(bool)]
        if row.empty:
            return []
        return [h for h in str(row.iloc[0]["heads"]).split(",") if h]

    def run_file(self) -> dict:
        return {
            "format": "cel-result",
            "version": RESULT_VERSION,
            "config": self.config.to_dict(),
            "seeds": self.seeds,
            "timings": self.timings,
            "summary": self.summary,
        }

    def summary_table(self) -> pd.DataFrame:
        """The confirmation in brief: one row per set size."""
        c = self.confirmation
        if c.empty:
            return pd.DataFrame()
        obj = self.config.objective
        cols = [
            "size",
            "heads",
            f"select_d_{obj}",
            f"d_{obj}",
            f"d_{obj}_lo",
            f"d_{obj}_hi",
            "random_mean",
            "percentile",
            "random_share_ge",
            "best",
        ]
        return c[[col for col in cols if col in c]].copy()

    def save(self, folder: str | Path, plots: bool = True) -> Path:
        """Write the config JSON, the tables as CSV, the plots and `report.md` into `folder`."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        write_json(folder / CONFIG_FILE, self.run_file())
        for name in TABLES:
            df = getattr(self, name)
            if not df.empty:
                save_table(df, folder / f"{name}.csv")
        if plots:
            from workbench.plots import save_plots

            save_plots(self, folder)
        tmp = folder / (REPORT_FILE + ".tmp")
        try:
            tmp.write_text(self.report(plots=plots))
            tmp.replace(folder / REPORT_FILE)
        finally:
            tmp.unlink(missing_ok=True)
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> "CELResult":
        """Read a folder written by `save` (or by an interrupted `run_cel`)."""
        folder = Path(folder)
        data = read_run_file(folder)
        tables = {}
        for name in TABLES:
            path = folder / f"{name}.csv"
            tables[name] = load_table(path) if path.is_file() else pd.DataFrame()
        return cls(
            config=CELConfig.from_dict(data["config"]),
            summary=data.get("summary", {}),
            seeds=data.get("seeds", {}),
            timings=data.get("timings", {}),
            **tables,
        )

    def report(self, plots: bool = True) -> str:
        """A short Markdown report of the run."""
        cfg, s = self.config, self.summary
        obj = cfg.objective
        lines = [f"# CEL: {cfg.task} on {cfg.model}", ""]
        lines.append(
            f"{cfg.kind} ablation, {cfg.method} screening, objective `{obj}` "
            f"(secondary `{cfg.secondary}`, ranked by {cfg.rank_by} first), sets up to size "
            f"{cfg.max_size}, strategies {', '.join(cfg.strategies)}, seed {cfg.seed}."
        )
        lines.append("Effects are ablated minus clean: positive means removing the heads helps.")
        lines.append("")
        if s.get("n_examples"):
            n = s["n_examples"]
            lines.append(
                f"Examples: {n.get('select')} for selection, {n.get('heldout')} held out "
                "(no example in both)."
            )
        if s.get("clean"):
            lines.append("")
            lines.append("Clean model:")
            lines.append("")
            lines += _markdown(pd.DataFrame(s["clean"]).T.reset_index(names="split/task"))
        if not self.confirmation.empty:
            lines += ["", "## Best head sets, confirmed on held-out examples", ""]
            lines += _markdown(self.summary_table())
            lines.append("")
            lines.append(
                f"`d_{obj}` is the held-out gain with its {int(cfg.ci * 100)} % paired "
                "bootstrap interval; `percentile` ranks it among "
                f"{cfg.n_random} random head sets of the same size (all of them where there "
                "are fewer; ties count half) and `random_share_ge` is the share of those sets "
                "that do at least as well."
            )
        if not self.side_effects.empty:
            lines += ["", "## Side effects on other tasks", ""]
            cols = ["size", "heads", "task", f"d_{obj}", f"d_{obj}_lo", f"d_{obj}_hi", "d_logprob"]
            lines += _markdown(self.side_effects[[c for c in cols if c in self.side_effects]])
        if not self.heads.empty:
            lines += ["", "## Single heads (selection split)", ""]
            cols = ["head_name", f"d_{obj}", f"d_{obj}_lo", f"d_{obj}_hi"]
            if cfg.secondary:
                cols.append(f"d_{cfg.secondary}")
            cols.append("candidate_rank")
            top = (
                self.heads[self.heads["candidate"].astype(bool)]
                if "candidate" in self.heads
                else self.heads
            )
            top = top.sort_values("candidate_rank") if "candidate_rank" in top else top
            lines += _markdown(top[[c for c in cols if c in top]].head(10))
        if s.get("attribution_rank_correlation"):
            rho = s["attribution_rank_correlation"]
            lines += [
                "",
                "Attribution vs exact screening, Spearman rank correlation: "
                + ", ".join(f"{k} {v:.3f}" for k, v in rho.items())
                + ".",
            ]
        if s.get("cs_coefficients"):
            lines += [
                "",
                "Compressed-sensing screen, positive coefficients: "
                + ", ".join(f"{k} {v:+.3g}" for k, v in s["cs_coefficients"].items())
                + ".",
            ]
        if self.timings:
            lines += [
                "",
                "Timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in self.timings.items()) + ".",
            ]
        if plots:
            lines += ["", *(f"![{p[:-4]}]({p})" for p in PLOTS)]
        return "\n".join(lines) + "\n"


def _fmt(v) -> str:
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.4g}"
    return str(v)


def _markdown(df: pd.DataFrame) -> list[str]:
    if df.empty:
        return ["(none)"]
    header = "| " + " | ".join(str(c) for c in df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    rows = ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return [header, rule, *rows]
