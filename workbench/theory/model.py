"""The simplified multi-head softmax-attention model, vectorised over seeds.

For a context `X = (x_1 .. x_T)` and a query `q`, head `h` scores every token with a bilinear
form, attends with a softmax over positions and reads out a scalar value:

    f(X, q) = sum_h sum_i softmax_i(x_i^T K_h^T Q_h q) * v_h^T x_i

There is no residual stream and no output matrix: `v_h` is the head's value and output in
one, so zeroing a head's scalar output removes exactly that head. One model object holds
`n_seeds` independent copies (a leading `seed` axis on every parameter); the copies never
interact, so summing their losses and taking one gradient trains them all at once.

Two parametrisations of the score matrix `M_h` (with score `x^T M_h q`) are in
`PARAMETRISATIONS`: `"kq"` (`M_h = K_h^T Q_h`, K_h and Q_h of shape `d_head x 10`, the paper's
model) and `"bilinear"` (one free `10 x 10` matrix `W_h`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor, nn

from workbench.errors import WorkbenchError
from workbench.loading.model import resolve_device
from workbench.theory.data import D_MODEL


@dataclass(frozen=True)
class Parametrisation:
    """How a head's score matrix is built: parameter shapes `(n_heads, ...)` and `M_h`."""

    shapes: Callable[[int, int], dict[str, tuple[int, ...]]]
    score_matrix: Callable[[dict[str, Tensor]], Tensor]


PARAMETRISATIONS: dict[str, Parametrisation] = {
    "kq": Parametrisation(
        shapes=lambda h, r: {"K": (h, r, D_MODEL), "Q": (h, r, D_MODEL), "v": (h, D_MODEL)},
        score_matrix=lambda p: torch.einsum("shrd,shre->shde", p["K"], p["Q"]),
    ),
    "bilinear": Parametrisation(
        shapes=lambda h, r: {"W": (h, D_MODEL, D_MODEL), "v": (h, D_MODEL)},
        score_matrix=lambda p: p["W"],
    ),
}


class MultiHeadAttentionModel(nn.Module):
    """`n_seeds` independent one-layer softmax-attention models with `n_heads` heads each.

    Args:
        config: a `TheoryConfig` (uses `n_heads`, `d_head`, `parametrisation`, `init_scale`,
            `seeds`).
        device, dtype: where the parameters live.

    Every parameter has shape `(n_seeds, n_heads, ...)` and is drawn from
    `N(0, init_scale^2)` by a generator seeded with that seed, so a seed's initialisation does
    not depend on the other seeds (it does depend on the device's generator).
    """

    def __init__(self, config, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float32):
        super().__init__()
        device = resolve_device(device)
        self.n_heads = config.n_heads
        self.n_seeds = config.n_seeds
        self.seeds = config.seeds
        self.parametrisation = PARAMETRISATIONS[config.parametrisation]
        shapes = self.parametrisation.shapes(config.n_heads, config.d_head)
        per_seed: dict[str, list[Tensor]] = {name: [] for name in shapes}
        for seed in config.seeds:
            gen = torch.Generator(device=device).manual_seed(seed)
            for name, shape in shapes.items():
                per_seed[name].append(config.init_scale * torch.randn(
                    shape, generator=gen, device=device, dtype=dtype))
        self.params = nn.ParameterDict(
            {name: nn.Parameter(torch.stack(ts)) for name, ts in per_seed.items()})

    def score_matrix(self) -> Float[Tensor, "seed head_index d_model d_model"]:
        """`M_h` with score `x^T M_h q` for every seed and head."""
        return self.parametrisation.score_matrix(dict(self.params))

    def _scores(self, x: Tensor, q: Tensor) -> Tensor:
        """Attention scores laid out `(batch, seed * head, pos)` so that one `bmm` makes them."""
        m = self.score_matrix()
        n_seeds, n_heads, d_model, _ = m.shape
        mq = torch.einsum("shde,be->bshd", m, q).reshape(-1, n_seeds * n_heads, d_model)
        return torch.bmm(mq, x.transpose(1, 2))  # (B, S*H, T)

    def _unflatten(self, t: Tensor) -> Tensor:
        """`(batch, seed * head, ...)` -> `(seed, batch, head, ...)`."""
        t = t.reshape(t.shape[0], self.n_seeds, self.n_heads, *t.shape[2:])
        return t.transpose(0, 1)

    def attention(self, x: Float[Tensor, "batch pos d_model"], q: Float[Tensor, "batch d_model"]
                  ) -> Float[Tensor, "seed batch head_index pos"]:
        """Softmax attention pattern of every head over the context positions."""
        return self._unflatten(self._scores(x, q).softmax(-1))

    def head_outputs(self, x: Float[Tensor, "batch pos d_model"],
                     q: Float[Tensor, "batch d_model"]) -> Float[Tensor, "seed batch head_index"]:
        """Each head's scalar contribution to the logit."""
        scores = self._scores(x, q)  # (B, S*H, T)
        # torch's softmax is slow on a length-7 last axis on CPU; the explicit form is 4x
        # faster end to end. Subtracting the (detached) max keeps it stable and leaves both
        # the value and the gradient unchanged, since softmax is shift invariant.
        weights = (scores - scores.detach().amax(-1, keepdim=True)).exp()
        v = self.params["v"].reshape(self.n_seeds * self.n_heads, -1)  # (S*H, D)
        values = torch.matmul(x, v.T).transpose(1, 2)  # (B, S*H, T)
        out = (weights * values).sum(-1) / weights.sum(-1)  # (B, S*H)
        return self._unflatten(out)

    def forward(self, x: Float[Tensor, "batch pos d_model"], q: Float[Tensor, "batch d_model"],
                head_mask: Tensor | Sequence[float] | None = None
                ) -> Float[Tensor, "seed batch"]:
        """The logit `f(X, q)`; `head_mask` (`(n_heads,)` or `(n_seeds, n_heads)`) scales
        each head's output, so a 0 entry ablates that head."""
        out = self.head_outputs(x, q)
        return apply_head_mask(out, head_mask)


def apply_head_mask(head_out: Float[Tensor, "seed batch head_index"],
                    head_mask: Tensor | Sequence[float] | None = None
                    ) -> Float[Tensor, "seed batch"]:
    """Sum head outputs into the logit, each head scaled by its mask entry (1 if no mask)."""
    if head_mask is None:
        return head_out.sum(-1)
    mask = torch.as_tensor(head_mask, dtype=head_out.dtype, device=head_out.device)
    n_seeds, _, n_heads = head_out.shape
    if mask.shape not in ((n_heads,), (n_seeds, n_heads)):
        raise WorkbenchError(f"head_mask has shape {tuple(mask.shape)}; expected ({n_heads},) "
                             f"or ({n_seeds}, {n_heads})")
    if mask.dim() == 1:
        mask = mask.expand(n_seeds, n_heads)
    return torch.einsum("sbh,sh->sb", head_out, mask)
