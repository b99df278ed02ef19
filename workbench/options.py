"""The options of a CEL run as named types, and one way to parse them (imports no torch).

Each option with a fixed set of values is an `Option`: a `str` Enum, so a member equals its
string (`AblationKind.MEAN == "mean"`), prints as it (`f"{kind}"` is `"mean"`) and writes as
it to JSON and CSV. `Option.parse` (or `choose`) turns user input into a member, or raises a
`WorkbenchError` that names the option, the value received and the values expected. The
command line takes its choices from these types, so a value is declared once.
"""

from __future__ import annotations

import difflib
from enum import Enum

from workbench.errors import WorkbenchError


def choose(value, options, what: str):
    """`value` if it is one of `options` (an `Option` type, or strings), else a clear error.

    Returns:
        The `Option` member for an Enum type; `value` itself for a collection of strings.

    Example:
        >>> choose("mean", AblationKind, "ablation kind")
        <AblationKind.MEAN: 'mean'>
        >>> choose("maen", AblationKind, "ablation kind")  # WorkbenchError: ... did you mean
    """
    if isinstance(options, type) and issubclass(options, Enum):
        try:
            return options(value)
        except ValueError:
            allowed = [o.value for o in options]
    else:
        allowed = list(options)
        if value in allowed:
            return value
    close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise WorkbenchError(f"{what} {value!r} is unknown; expected one of {allowed}{hint}")


def did_you_mean(name: str, choices) -> str:
    """`"; did you mean 'x'?"` (or `'x' or 'y'`) for close matches of `name`, else `""`."""
    by_lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.6)
    if not close:
        return ""
    return "; did you mean " + " or ".join(repr(by_lower[c]) for c in close) + "?"


class Option(str, Enum):
    """A named option whose values are strings (see the module docstring)."""

    def __init_subclass__(cls, what: str = "", **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls._label = what or cls.__name__

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def what(cls) -> str:
        """How error messages name this option (the class keyword `what`)."""
        return cls._label

    @classmethod
    def parse(cls, value) -> "Option":
        return choose(value, cls, cls.what())

    @classmethod
    def values(cls) -> list[str]:
        return [m.value for m in cls]


class AblationKind(Option, what="ablation kind"):
    """How a removed head's `z` is replaced.

    ZERO: by 0.
    MEAN: by the head's mean `z` over a reference set (`HeadMeans`): averaged over every real
        (non-padding) token position of every reference prompt, or, when the means were
        computed with `per_position=True` on equal-length prompts, the mean at each position.
    RESAMPLE: by the head's `z` at the same position of the same example's counterfactual
        prompt (`compute_resample_z`), so the batch must match the counterfactual batch row
        for row.
    """

    ZERO = "zero"
    MEAN = "mean"
    RESAMPLE = "resample"


class RankBy(Option, what="rank_by"):
    """`objective`: candidates and sets are ranked by the objective's gain, ties broken by
    the secondary metric's; `secondary`: the other way round."""

    OBJECTIVE = "objective"
    SECONDARY = "secondary"


class ClusterMode(Option, what="cluster"):
    """What held-out intervals and p-values resample: single examples (`none`), the tasks'
    `group` labels (`group`), or groups when a split has enough of them (`auto`)."""

    AUTO = "auto"
    GROUP = "group"
    NONE = "none"


class RaceRule(Option, what="race_rule"):
    """What racing decides of a head in screening (`workbench.racing.SCREEN_RULES`):
    `hurts`, until its removal clearly hurts; `pool`, until its membership of the search
    pool is decided."""

    HURTS = "hurts"
    POOL = "pool"


class SweepSplit(Option, what="split"):
    """How a sweep is split across processes: `cells` (whole runs), `masks` (each run's
    masks), or `auto`."""

    AUTO = "auto"
    CELLS = "cells"
    MASKS = "masks"


class AnswerTokens(Option, what="answer_tokens"):
    """`single`: every answer is one token in context; `multi`: answers may be several."""

    SINGLE = "single"
    MULTI = "multi"


class SplitBy(Option, what="split_by"):
    """Examples without a `split` are split at random by `example`, or by `group`."""

    EXAMPLE = "example"
    GROUP = "group"


class AnswerScope(Option, what="answer_scope"):
    """What accuracy's argmax ranges over: `vocab`, the whole vocabulary; `candidates`, the
    task's `candidates`, or each example's answers and wrong answers when it lists none."""

    VOCAB = "vocab"
    CANDIDATES = "candidates"


# The names `--dtype` and `load_model(dtype=...)` take besides `auto`, each with the name of
# the torch dtype it means (`workbench.loading.model` maps them), and torch's device types:
# the command line checks both before torch is imported (`check_device_name`).
DTYPE_NAMES = {"float32": "float32", "fp32": "float32", "float16": "float16",
               "fp16": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16",
               "float64": "float64"}
DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu", "hip", "xla", "meta", "hpu", "mtia", "ipu",
                "privateuseone")


def check_device_name(device: str | None) -> None:
    """Refuse a `--device` that is no torch device (`auto`, `cpu`, `cuda`, `cuda:1`, ...),
    without importing torch; whether the device is there is checked when the model loads."""
    text = "auto" if device is None else str(device)
    kind, _, index = text.partition(":")
    if text != "auto" and (kind not in DEVICE_TYPES or (index and not index.isdigit())
                           or (":" in text and not index)):
        raise WorkbenchError(f"device {device!r} is not a torch device; expected 'auto', 'cpu', "
                             "'cuda', 'cuda:0', 'mps'")


def check_dtype_name(dtype: str | None) -> None:
    """Refuse a `--dtype` that is none of `DTYPE_NAMES` or `auto`, without importing torch."""
    if dtype is not None and str(dtype) != "auto" and str(dtype) not in DTYPE_NAMES:
        raise WorkbenchError(
            f"dtype {dtype!r} is unknown; expected 'auto' or one of {sorted(DTYPE_NAMES)}")


class SearchDtype(Option, what="search dtype"):
    """The precision of the passes that only rank heads (`CELConfig.search_dtype`): `float32`
    (the model as loaded), or `bfloat16`: a bfloat16 copy of the model screens every head and
    scores the search's knockouts; the sets the search compares, the confirmation, the random
    baselines, the trade-off table and the explanation run on the model as loaded. `auto`:
    bfloat16 where the device has native bfloat16 matmuls and the model is wide enough for
    them to pay, else float32 (`workbench.precision.auto_search_dtype`). The default is float32:
    bfloat16 screening moves the pool, and with it the sets found (planted triples lost,
    SmolLM2 x greater_than's triple changed; docs/speed.md)."""

    AUTO = "auto"
    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"


class Racing(Option, what="racing"):
    """`--racing`: whether candidates are scored on growing slices of a split until decided
    (`CELConfig.adaptive`). `on`, `off`: outright; `auto`: on, except on a GPU where a
    measured pass over the first slice costs nearly a full pass (`workbench.racing.
    auto_racing`), and a resumed run keeps its folder's choice."""

    AUTO = "auto"
    ON = "on"
    OFF = "off"
