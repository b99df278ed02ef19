"""The configuration of one theory experiment: data, model, training and evaluation.

One `TheoryConfig` fixes everything a run depends on, including the seeds (the seeds differ
only in the initialisation; all seeds of a run see the same data stream, so a seed's result
does not depend on which other seeds are trained alongside it). It validates itself on
construction and round-trips through `to_dict` / `from_dict` so every results folder can save
the config that made it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from workbench.errors import WorkbenchError
from workbench.options import choose
from workbench.theory.data import CUES
from workbench.theory.model import PARAMETRISATIONS


@dataclass(frozen=True)
class TheoryConfig:
    """Settings of one theory run (the defaults are the paper's construction).

    Attributes:
        n_heads: attention heads H.
        d_head: rows of each head's key and query matrices (ignored by `"bilinear"`).
        parametrisation: a key of `PARAMETRISATIONS`: `"kq"` (separate K_h, Q_h) or
            `"bilinear"` (one free matrix W_h per head).
        cue: a key of `CUES`: `"noisy"`, `"clean"` or `"none"`.
        cue_strength: gamma, the cue's mean is `gamma * t` (noisy cue only).
        mu_shared, mu_conflict, sigma: feature means and noise.
        n_filler, filler_noise: number of filler tokens and the std of their content.
        init_scale: std of the Gaussian initialisation of every parameter.
        lr, batch_size, steps: plain SGD on the logistic loss, a fresh batch each step.
        n_eval: held-out samples (half per task) for losses, feature use and ablations.
        n_records: training checkpoints recorded on a log-spaced step grid (0 = none).
        n_probe: held-out samples used at each recorded checkpoint.
        seeds: one independently initialised model per seed, trained in one vectorised run.
        data_seed: seeds the training stream; the evaluation sets use `data_seed + 1`, `+ 2`.
    """

    n_heads: int = 4
    d_head: int = 4
    parametrisation: str = "kq"
    cue: str = "noisy"
    cue_strength: float = 1.0
    mu_shared: float = 1.0
    mu_conflict: float = 1.0
    sigma: float = 1.0
    n_filler: int = 4
    filler_noise: float = 1.0
    init_scale: float = 1e-3
    lr: float = 5.0
    batch_size: int = 2000
    steps: int = 3000
    n_eval: int = 100_000
    n_records: int = 30
    n_probe: int = 10_000
    seeds: tuple[int, ...] = field(default_factory=lambda: tuple(range(8)))
    data_seed: int = 1234

    def __post_init__(self):
        object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))
        positive_ints = {"n_heads": self.n_heads, "d_head": self.d_head, "steps": self.steps}
        for name, value in positive_ints.items():
            if not isinstance(value, int) or value < 1:
                raise WorkbenchError(f"{name} must be an integer >= 1; got {value!r}")
        if not isinstance(self.n_filler, int) or self.n_filler < 0:
            raise WorkbenchError(f"n_filler must be an integer >= 0; got {self.n_filler!r}")
        if not isinstance(self.n_records, int) or self.n_records < 0:
            raise WorkbenchError(f"n_records must be an integer >= 0; got {self.n_records!r}")
        for name in ("batch_size", "n_eval", "n_probe"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 2 or value % 2:
                raise WorkbenchError(
                    f"{name} must be an even integer >= 2 (the two tasks are balanced); "
                    f"got {value!r}")
        choose(self.parametrisation, sorted(PARAMETRISATIONS), "parametrisation")
        choose(self.cue, sorted(CUES), "cue kind")
        for name in ("sigma", "init_scale", "lr"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise WorkbenchError(f"{name} must be a finite number > 0; got {value!r}")
        for name in ("cue_strength", "mu_shared", "mu_conflict", "filler_noise"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise WorkbenchError(f"{name} must be a finite number >= 0; got {value!r}")
        if not self.seeds:
            raise WorkbenchError("seeds must name at least one seed; got an empty tuple")
        if len(set(self.seeds)) != len(self.seeds):
            raise WorkbenchError(f"seeds must be distinct; got {self.seeds}")

    @property
    def n_seeds(self) -> int:
        return len(self.seeds)

    def replace(self, **changes) -> TheoryConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """A JSON-ready dict (seeds as a list)."""
        out = dataclasses.asdict(self)
        out["seeds"] = list(self.seeds)
        return out

    @classmethod
    def from_dict(cls, data: dict) -> TheoryConfig:
        """Inverse of `to_dict`; unknown keys raise `WorkbenchError`."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise WorkbenchError(f"unknown TheoryConfig keys {unknown}; expected some of "
                                 f"{sorted(known)}")
        data = dict(data)
        if "seeds" in data:
            data["seeds"] = tuple(data["seeds"])
        return cls(**data)
