"""Head specifications: which attention heads to ablate, validated against a model.

A head is `(layer, head)`; users may write it as a tuple, as `"L9H6"`, or as `"9.6"`. A
`HeadSet` is an immutable, sorted, duplicate-free set of heads that has been checked against
a model's `n_layers` and `n_heads`, so every later stage can index tensors with it safely.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from workbench.errors import WorkbenchError
from workbench.tables import head_name

Head = tuple[int, int]
HeadSpec = Head | str

_HEAD_RE = re.compile(r"^\s*(?:L(\d+)H(\d+)|(\d+)\.(\d+))\s*$", re.IGNORECASE)


def parse_head(spec) -> Head:
    """Parse one head spec: `(9, 6)`, `"L9H6"` or `"9.6"` -> `(9, 6)`."""
    if isinstance(spec, str):
        m = _HEAD_RE.match(spec)
        if not m:
            raise WorkbenchError(
                f"head spec {spec!r} is not of the form 'L<layer>H<head>', e.g. 'L9H6'"
            )
        a, b, c, d = m.groups()
        return (int(a), int(b)) if a is not None else (int(c), int(d))
    if (
        isinstance(spec, (tuple, list))
        and len(spec) == 2
        and all(
            isinstance(x, int) or (isinstance(x, torch.Tensor) and x.numel() == 1) for x in spec
        )
    ):
        layer, head = int(spec[0]), int(spec[1])
        if layer < 0 or head < 0:
            # Python would index from the end; a head name like L1H-1 would mean nothing
            raise WorkbenchError(
                f"head spec {spec!r} has a negative index; layers and heads count from 0 "
                "(negative indexing from the end is not supported)"
            )
        return layer, head
    raise WorkbenchError(
        f"head spec {spec!r} is neither a (layer, head) pair of ints nor a string like 'L9H6'"
    )


def _model_shape(model_or_shape) -> tuple[int, int]:
    if isinstance(model_or_shape, tuple):
        return model_or_shape
    cfg = getattr(model_or_shape, "cfg", None)
    if cfg is None:
        raise WorkbenchError("expected a hooked model with .cfg (n_layers, n_heads) or a shape")
    return int(cfg.n_layers), int(cfg.n_heads)


@dataclass(frozen=True)
class HeadSet:
    """A validated, sorted set of heads of one model shape.

    Build it with `HeadSet.of(model, ["L1H2", (0, 3)])`; iterate to get `(layer, head)`
    pairs; `str(hs)` gives `"L0H3,L1H2"`.
    """

    heads: tuple[Head, ...]
    n_layers: int
    n_heads: int

    @classmethod
    def of(cls, model_or_shape, specs: Iterable[HeadSpec] | HeadSpec | None) -> "HeadSet":
        """Parse and validate `specs` against a model (or an `(n_layers, n_heads)` shape).

        A string with commas (`"L0H1,L1H2"`) is split; None or `[]` gives the empty set.
        """
        n_layers, n_heads = _model_shape(model_or_shape)
        if isinstance(specs, HeadSet):
            specs = specs.heads
        if specs is None:
            specs = []
        elif isinstance(specs, str):
            specs = [s for s in specs.split(",") if s.strip()]
        elif (
            isinstance(specs, tuple) and len(specs) == 2 and all(isinstance(x, int) for x in specs)
        ):
            specs = [specs]
        heads = sorted({parse_head(s) for s in specs})
        for layer, head in heads:
            if not (0 <= layer < n_layers and 0 <= head < n_heads):
                raise WorkbenchError(
                    f"head {head_name(layer, head)} is out of range: the model has "
                    f"n_layers={n_layers} and n_heads={n_heads} (layers 0..{n_layers - 1}, "
                    f"heads 0..{n_heads - 1})"
                )
        return cls(tuple(heads), n_layers, n_heads)

    def __iter__(self) -> Iterator[Head]:
        return iter(self.heads)

    def __len__(self) -> int:
        return len(self.heads)

    def __str__(self) -> str:
        return ",".join(head_name(l, h) for l, h in self.heads)

    @property
    def names(self) -> list[str]:
        return [head_name(l, h) for l, h in self.heads]

    def by_layer(self) -> dict[int, list[int]]:
        """Layer -> sorted list of heads in that layer (only layers that have heads)."""
        out: dict[int, list[int]] = {}
        for layer, head in self.heads:
            out.setdefault(layer, []).append(head)
        return out

    def mask(self, device=None) -> Float[Tensor, "layer head_index"]:
        """A `(n_layers, n_heads)` 0/1 tensor with 1 where a head is in the set."""
        m = torch.zeros(self.n_layers, self.n_heads, device=device)
        for layer, head in self.heads:
            m[layer, head] = 1.0
        return m

    def union(self, other: Iterable[HeadSpec]) -> "HeadSet":
        return HeadSet.of(
            (self.n_layers, self.n_heads),
            [*self.heads, *HeadSet.of((self.n_layers, self.n_heads), other).heads],
        )


def all_heads(model_or_shape) -> HeadSet:
    """Every head of the model."""
    n_layers, n_heads = _model_shape(model_or_shape)
    return HeadSet.of(
        (n_layers, n_heads), [(l, h) for l in range(n_layers) for h in range(n_heads)]
    )
