"""The validated settings of a CEL run: what determines its numbers, checked once.

`CELConfig` is built before any model forward, so a bad setting (an unknown strategy, a
negative seed, a set size of 0) fails at once with one clear message instead of after
screening. Its options with a fixed set of values are the named types of `workbench.options`
(a string given for one is parsed into it), so this module imports no torch and the command
line builds its parser from it: the field defaults are the CLI's defaults. It round-trips
through JSON (`to_dict` writes each option as its string; `from_dict`); a results folder
stores it in `config.json`, and a rerun into the same folder must have an identical config.
"""

from __future__ import annotations

import dataclasses
import types
from dataclasses import dataclass
from enum import Enum

from workbench.environment import DEFAULT_THREADS as DEFAULT_THREADS
from workbench.environment import auto_threads as auto_threads
from workbench.environment import resolve_threads as resolve_threads
from workbench.errors import WorkbenchError
from workbench.guards import DEFAULT_RULE, GuardRule, labels, parse_guards
from workbench.options import AblationKind, ClusterMode, RankBy, SearchDtype
from workbench.screening.registry import get_method
from workbench.search.registry import strategy_names, strategy_settings

# torch's CPU threads while a run computes (`workbench.compute.Compute.threads`, `--threads`):
# not part of a config (no number depends on it beyond float rounding). `"auto"` takes the
# cores idle when the run starts, measured over a short window (`workbench.environment`,
# which imports no torch, so the command line resolves it before torch loads); re-exported
# here, where the command line and older code read them (above).

# Examples each knockout mask of the interaction search is scored on in a raced run
# (`CELConfig.knockout_examples`): the racing minimum (`workbench.racing.MIN_SLICE`). The
# knockouts only rank heads for the finalists, whose sets are then scored exactly and raced.
# Before issue 32 they used the first racing slice (an eighth of the split: 20 of SmolLM2
# ioi's 154, 75 of the embedded model's 600); on the planted models 16, 8 and 4 examples all
# kept 10/10 singles, pairs and triples at 144, 384 and 1024 heads (`docs/recall.md`), but on
# SmolLM2 x ioi 8 lost a finalist and the held-out gains of sizes 2 and 3 (`docs/speed.md`).
KNOCKOUT_EXAMPLES = 16
# Examples in the first look of each random baseline set's race over the held-out split
# (`CELConfig.baseline_examples`): the racing minimum. A random set far below the found one
# (nearly all of them: on SmolLM2 x ioi 613 of 613 stopped at the first look) is then decided
# on 16 examples instead of racing's first slice (an eighth of the split: 20 of SmolLM2
# ioi's 155, 75 of the embedded model's 600); a set near the found gain races on, to every
# example if need be, with `look_z` corrected over the one more look.
BASELINE_EXAMPLES = 16
# Random sets per size and baseline in the trade-off table's cloud (`CELConfig.tradeoff_sets`;
# `workbench.confirmation.confirm.tradeoff_table`): each costs a pass over a sample of the held-out
# split and of every side task. 10 before issue 32: on SmolLM2 x ioi with induction beside
# it the cloud was 168 s of a 1285 s run (`docs/speed.md`).
TRADEOFF_SETS = 5

# A quick look (`workbench cel --quick`, `run_cel(model, task, **QUICK)`): the settings of the
# SmolLM2 sweep of docs/real-model-cel.md. 40 examples per split drawn with the seed (16 per
# side task), attribution screening without its exact check, no per-head side columns, then
# every set of up to 2 among the top 6 candidates, scored exactly, and 20 random sets per
# size (from all heads and from the pool) on the held-out split. It trades power for time:
# sets of 3 heads, heads outside attribution's top 6 and pairs whose members show no single
# effect go unseen, and intervals on 40 examples are wide; a significant gain is still
# measured on held-out examples that chose nothing.
QUICK = types.MappingProxyType({
    "max_examples": 40,
    "side_examples": 16,
    "side_screening": False,
    "method": "attribution",
    "check_attribution": False,
    "strategies": ("exhaustive",),
    "top_m": 6,
    "max_size": 2,
    "n_random": 20,
})


@dataclass
class CELConfig:
    """Everything that determines a CEL run's numbers (not how fast they are computed).

    Attributes:
        model, task, others: names or paths as given; `*_fingerprint` identify their content.
        kind: an `AblationKind`: `"zero"`, `"mean"` (each task's mean over its own prompts;
            the main task's selection split) or `"resample"` (z from each example's
            counterfactual prompt).
        per_position: mean ablation with the mean at each position (equal-length prompts).
        method: single-head screening, the name of a registered screening method that CEL
            may use (`workbench.screening.registry.cel_methods`): `"exact"` or
            `"attribution"`.
        objective: the metric CEL maximises (the task's `metric` when None).
        secondary: the continuous companion metric (log-prob unless that is the objective);
            chosen from the objective when None.
        rank_by: a `RankBy`; `"objective"`: candidates and sets are ranked by the objective's
            gain, ties broken by the secondary's; `"secondary"`: the other way round.
        max_size: the largest head set searched and confirmed.
        strategies: names of registered search strategies (`workbench.search.registry`),
            run in order on one shared cache.
        strategy_settings: each strategy's own settings that are not fields here,
            `{strategy: {setting: value}}` (`workbench.search.registry.Setting`), checked
            against the strategies' records; a config without any writes no such key.
        top_m: candidates for the exhaustive strategy and the smallest candidate pool.
        beam_width: sets kept per size by the beam strategy.
        n_masks, knockout_p: random knockout masks of the compressed-sensing screen (auto
            when None).
        search_budget: masks the interaction search may score on the selection split
            (knockout masks, at least 64, plus finalist sets); None: `2.5 n + 500` for n heads,
            half that when `max_size` <= 2 (`workbench.search.finalists.default_budget`).
        knockout_examples: with `adaptive`, the examples each knockout mask is scored on (the
            first in racing's order; `KNOCKOUT_EXAMPLES`); None: the first racing slice, as
            before issue 32. Without `adaptive`: every example.
        n_random: random head sets per size in the held-out baseline.
        baseline_examples: with `adaptive`, the examples of the first look of each random
            baseline set's race over the held-out split (`BASELINE_EXAMPLES`); None: racing's
            first slice, as before issue 32.
        tradeoff_sets: random sets per size from each baseline in the trade-off table (at most
            a quarter of `n_random`; `TRADEOFF_SETS`).
        max_examples: use only `max_examples` examples of each split of the main task and of
            each side task, drawn with `seed` before fitting to the tokenizer
            (`Task.sample_per_split`), for quick looks; None: all.
        side_screening: screen every head on the side tasks too (the per-head side columns of
            the screening table); the side effects of the found sets are measured either way.
        side_examples: the same for the side tasks alone (None: `max_examples`); side effects
            cost a pass over every side task per set, so a quick look may measure them on fewer.
        n_boot, ci: paired bootstrap resamples and interval coverage.
        seed: the seed every random draw derives from.
        check_attribution: with `method="attribution"`, also run exact screening to report
            their rank correlation and the precision/recall of the helpful heads.
        cluster: a `ClusterMode`; held-out intervals and p-values resample examples
            (`"none"`), the tasks' `group` labels (`"group"`, at least 8 groups), or groups
            when a split has at least 8 of them and examples otherwise (`"auto"`).
        adaptive: race candidates on slices of a split (`workbench.racing`): exact screening
            stops scoring a head once what the search needs of it is decided (with the
            interaction search, its membership of the pool; with searches among the top
            candidates, once its removal clearly hurts the objective); side tasks' per-head
            columns and the search's knockouts use the first slice; the search's sets are
            raced within each size; a random baseline set stops once its interval leaves the
            found set's gain. The `n` columns say what each number rests on. False scores
            every candidate on every example and draws every random set.
        random_looks: with `adaptive`, draw each random baseline's sets in looks
            (`workbench.confirmation.baseline`: 50, 100, ... of the `n_random`) and stop once the
            share of random sets at least as good as the found set is decided against `1 - ci`; the
            percentile then rests on the sets drawn (`n_random` in the confirmation table).
            False draws all `n_random` sets.
        guards: `TASK:METRIC[:TOLERANCE]` specs (`workbench.guards.Guard`; TASK `main` for the
            main task): the search maximises the objective over sets that pass every guard,
            and a confirmed set must pass them on held-out examples. None: the defaults,
            chosen once the objective is known (the main task's accuracy and answer log-prob
            when the objective is a difference, else none); `()`: no guards. A run records
            the guards it used; a config without any writes no such key.
        guard_rule: a `GuardRule`: how a guard decides on the selection split.
        search_dtype: a `SearchDtype`; `"bfloat16"` screens and scores the search's
            knockouts on a bfloat16 copy of a float32 model (`workbench.precision`): they only
            rank heads, and `heads.csv` and the knockout rows of `combos.csv` hold bfloat16
            numbers; the sets the search compares (its finalists), the confirmation, the
            baselines, the side effects and the trade-off table run in the model's own dtype.
            Never raises the precision: on a bfloat16 model every stage is bfloat16 either
            way. `"auto"` is resolved when the run is prepared
            (`workbench.precision.auto_search_dtype`: bfloat16 on a device with native
            bfloat16 for a model at least 512 wide, else float32) and the run's config holds
            the choice. A config at `"float32"` (the default) writes no such key, so configs
            from before the option existed read back unchanged.
    """

    model: str
    task: str
    others: tuple[str, ...] = ()
    kind: AblationKind = AblationKind.ZERO
    per_position: bool = False
    method: str = "exact"
    objective: str | None = None
    secondary: str | None = None
    rank_by: RankBy = RankBy.OBJECTIVE
    max_size: int = 3
    strategies: tuple[str, ...] = ("interaction",)
    strategy_settings: dict = dataclasses.field(default_factory=dict)
    top_m: int = 8
    beam_width: int = 4
    n_masks: int | None = None
    knockout_p: float | None = None
    search_budget: int | None = None
    knockout_examples: int | None = KNOCKOUT_EXAMPLES
    n_random: int = 200
    baseline_examples: int | None = BASELINE_EXAMPLES
    tradeoff_sets: int = TRADEOFF_SETS
    max_examples: int | None = None
    side_examples: int | None = None
    side_screening: bool = True
    n_boot: int = 1000
    ci: float = 0.95
    seed: int = 0
    check_attribution: bool = True
    cluster: ClusterMode = ClusterMode.AUTO
    adaptive: bool = True
    random_looks: bool = True
    guards: tuple[str, ...] | None = None
    guard_rule: GuardRule = DEFAULT_RULE
    search_dtype: SearchDtype = SearchDtype.FLOAT32
    model_fingerprint: str = ""
    task_fingerprint: str = ""
    others_fingerprint: str = ""

    def __post_init__(self) -> None:
        self.kind = AblationKind.parse(self.kind)
        self.method = get_method(self.method, cel=True).name
        self.rank_by = RankBy.parse(self.rank_by)
        self.cluster = ClusterMode.parse(self.cluster)
        self.search_dtype = SearchDtype.parse(self.search_dtype)
        self.strategies = strategy_names(self.strategies)
        self.strategy_settings = strategy_settings(self.strategies, self.strategy_settings)
        guards = parse_guards(self.guards)
        self.guards = None if guards is None else tuple(labels(guards))
        self.guard_rule = GuardRule.parse(self.guard_rule)
        for name in ("per_position", "adaptive", "side_screening", "random_looks"):
            if not isinstance(getattr(self, name), bool):
                raise WorkbenchError(f"{name} must be true or false; got {getattr(self, name)!r}")
        if self.per_position and self.kind is not AblationKind.MEAN:
            raise WorkbenchError("per_position applies to mean ablation only; got kind "
                                 f"{self.kind.value!r}")
        self.others = tuple(str(o) for o in self.others)
        for name, value, low in (
            ("max_size", self.max_size, 1),
            ("top_m", self.top_m, 1),
            ("beam_width", self.beam_width, 1),
            ("n_random", self.n_random, 0),
            ("tradeoff_sets", self.tradeoff_sets, 0),
            ("n_boot", self.n_boot, 1),
            ("seed", self.seed, 0),
            # optional: None picks the strategy's default
            *(
                (name, value, low)
                for name, value, low in (
                    ("n_masks", self.n_masks, 2),
                    ("search_budget", self.search_budget, 1),
                    ("knockout_examples", self.knockout_examples, 1),
                    ("baseline_examples", self.baseline_examples, 1),
                    ("max_examples", self.max_examples, 1),
                    ("side_examples", self.side_examples, 1),
                )
                if value is not None
            ),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise WorkbenchError(f"{name} must be an integer >= {low}; got {value!r}")
        if self.knockout_p is not None and not 0.0 < self.knockout_p < 1.0:
            raise WorkbenchError(f"knockout_p must be in (0, 1); got {self.knockout_p}")
        if not 0.0 < self.ci < 1.0:
            raise WorkbenchError(f"ci must be in (0, 1); got {self.ci}")

    def to_dict(self) -> dict:
        """The fields as JSON values: options as their strings, tuples as lists; no
        `strategy_settings` when there are none, no `guards` when there are none and no
        `search_dtype` at float32 (so configs from before they existed are unchanged)."""
        d = dataclasses.asdict(self)
        if not d["strategy_settings"]:
            del d["strategy_settings"]
        if not d["guards"]:  # unguarded runs write what they wrote before guards existed
            del d["guards"], d["guard_rule"]
        if d["search_dtype"] is SearchDtype.FLOAT32:
            del d["search_dtype"]
        for key, value in d.items():
            if isinstance(value, Enum):
                d[key] = value.value
            elif isinstance(value, tuple):
                d[key] = list(value)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "CELConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise WorkbenchError(f"CEL config has unknown keys {unknown}; expected {sorted(known)}")
        if d.get("model_fingerprint") and "guards" not in d:
            # a run's resolved config without guards (`to_dict` writes none): it had none
            d = {**d, "guards": ()}
        return cls(**d)  # __post_init__ parses the options and makes the lists tuples

    def differences(self, other: "CELConfig") -> list[str]:
        """Names of the fields whose values differ."""
        a, b = self.to_dict(), other.to_dict()
        return [k for k in {**a, **b} if a.get(k) != b.get(k)]
