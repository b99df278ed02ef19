"""`beam`: greedy forward selection that keeps the `beam_width` best sets of each size."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from workbench.search.registry import CostInputs, Setting, Strategy, register, settings_as

NAME = "beam"


@dataclass(frozen=True)
class BeamSettings:
    """The beam search's settings (`CELConfig` fields of the same names)."""

    beam_width: int = 4  # sets kept per size


def beam(space, settings: BeamSettings | Mapping | None = None) -> None:
    """Beam search: extend each of the `beam_width` best sets by one pool head per step."""
    width = settings_as(BeamSettings, settings).beam_width
    beams: list[tuple] = [()]
    for _ in range(space.max_size):
        trials = list(
            dict.fromkeys(
                tuple(sorted(b + (h,))) for b in beams for h in space.candidates if h not in b
            )
        )
        if not trials:
            return
        keys = space.score_sets(trials, NAME)
        order = sorted(range(len(trials)), key=lambda i: keys[i], reverse=True)
        beams = [trials[i] for i in order[:width]]


def _cost(inputs: CostInputs, settings: Mapping) -> tuple[float, float]:
    config = inputs.config
    return 0.0, inputs.n_heads * config.max_size * config.beam_width


STRATEGY = register(Strategy(
    NAME, beam, "greedy selection keeping the beam_width best sets of each size", _cost,
    ranked=True, settings_type=BeamSettings,
    settings=(Setting("beam_width", BeamSettings.beam_width, "sets kept per size", low=1,
                      field=True),)))
