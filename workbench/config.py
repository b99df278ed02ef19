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
from workbench.search.finalists import KNOCKOUT_EXAMPLES as KNOCKOUT_EXAMPLES
from workbench.search.registry import strategy_names, strategy_settings

# torch's CPU threads while a run computes (`workbench.compute.Compute.threads`, `--threads`):
# not part of a config (no number depends on it beyond float rounding). `"auto"` takes the
# cores idle when the run starts, measured over a short window (`workbench.environment`,
# which imports no torch, so the command line resolves it before torch loads); re-exported
# here, where the command line and older code read them (above).

# Examples in the first look of each random baseline set's race over the held-out split
# (`CELConfig.baseline_examples`): the racing minimum. A random set far below the found one
# (nearly all of them: on SmolLM2 x ioi 613 of 613 stopped at the first look) is then decided
# on 16 examples instead of racing's first slice (an eighth of the split: 20 of SmolLM2
# ioi's 155, 75 of the embedded model's 600); a set near the found gain races on, to every
# example if need be, with `look_z` corrected over the one more look.
BASELINE_EXAMPLES = 16
# Random sets per size and baseline in the trade-off table's cloud (`CELConfig.tradeoff_sets`;
# `workbench.confirmation.confirm.tradeoff_table`): each costs a pass over a sample of the held-out
# split and of every side task: at 10 sets, on SmolLM2 x ioi with induction beside it, the
# cloud was 168 s of a 1285 s run (`docs/history/speed.md`).
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

    One line per field below; what each does in full: `docs/main-job.md`, "The config, field
    by field".
    """

    model: str  # the model's name or path, as given
    task: str  # the main task's name or path, as given
    others: tuple[str, ...] = ()  # side tasks, names or paths, as given
    kind: AblationKind = AblationKind.ZERO  # zero, mean (each task's own prompts) or resample
    per_position: bool = False  # mean ablation with the mean at each position
    method: str = "exact"  # screening method CEL may use: "exact" or "attribution"
    objective: str | None = None  # the metric CEL maximises; None: the task's metric
    secondary: str | None = None  # continuous companion metric; None: chosen from the objective
    rank_by: RankBy = RankBy.OBJECTIVE  # rank by the objective's gain, or by the secondary's
    max_size: int = 3  # the largest head set searched and confirmed
    strategies: tuple[str, ...] = ("interaction",)  # search strategies, run in order
    strategy_settings: dict = dataclasses.field(default_factory=dict)  # {strategy: {name: value}}
    top_m: int = 8  # candidates for exhaustive search; the smallest candidate pool
    beam_width: int = 4  # sets kept per size by beam search
    n_masks: int | None = None  # compressed sensing's knockout masks; None: auto
    knockout_p: float | None = None  # compressed sensing's knockout probability; None: auto
    search_budget: int | None = None  # interaction's masks; None: 2.5 n + 500 (half for pairs)
    knockout_examples: int | None = KNOCKOUT_EXAMPLES  # raced knockouts' examples; None: slice 1
    n_random: int = 200  # random head sets per size in each held-out baseline
    baseline_examples: int | None = BASELINE_EXAMPLES  # baseline sets' first look; None: slice 1
    tradeoff_sets: int = TRADEOFF_SETS  # random sets per size and baseline in the trade-off
    max_examples: int | None = None  # examples per split, drawn with the seed; None: all
    side_examples: int | None = None  # the same for side tasks; None: max_examples
    side_screening: bool = True  # screen every head on the side tasks too
    n_boot: int = 1000  # paired bootstrap resamples
    ci: float = 0.95  # interval coverage
    seed: int = 0  # the seed every random draw derives from
    check_attribution: bool = True  # under attribution, also screen exactly and compare
    cluster: ClusterMode = ClusterMode.AUTO  # resample examples, groups, or groups when >= 8
    adaptive: bool = True  # race candidates on growing slices (`workbench.racing`)
    random_looks: bool = True  # draw random baseline sets in looks, stop once decided
    guards: tuple[str, ...] | None = None  # TASK:METRIC[:TOL]; None: defaults; (): none
    guard_rule: GuardRule = DEFAULT_RULE  # how a guard decides on the selection split
    search_dtype: SearchDtype = SearchDtype.FLOAT32  # bfloat16 ranks heads; "auto" picks
    model_fingerprint: str = ""  # hash of the model's bytes
    task_fingerprint: str = ""  # hash of the main task, header included
    others_fingerprint: str = ""  # hash of the side tasks

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
