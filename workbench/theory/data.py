"""Data for the theory model: two tasks whose conflicting feature predicts the label with
opposite signs.

Every sample has a task `t` (A = +1, B = -1, exactly balanced in a batch) and a label
`y = ±1`. Two features are drawn:

    u_s = mu_s * y     + sigma * eps_1     (shared: predicts y the same way in both tasks)
    u_c = t * mu_c * y + sigma * eps_2     (conflicting: sign flips with the task)

Averaged over both tasks `u_c` is uncorrelated with `y`, so a model can only use it by
reading the task from the query. The context is 7 tokens in a 10-dimensional orthonormal
basis: a sink token, a shared token `e_shared + u_s e_s`, a conflict token
`e_conflict + u_c e_c` and `n_filler` filler tokens `e_filler + noise (e_s, e_c)`. The query
is `e_bias` plus a task cue chosen from `CUES`:

* `"noisy"`: `m e_m` with `m = gamma t + N(0, 1)` (names the right task with probability
  `Phi(gamma)`, about 84% at gamma = 1);
* `"clean"`: `e_A` in task A and `e_B` in task B (the task is known exactly);
* `"none"`: nothing (the task is unknowable).

Because the task is ambiguous under the noisy cue, the best joint predictor must hedge, and
that is what lets an ablated head help one task (see `workbench.theory.bayes`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from workbench.errors import WorkbenchError

D_MODEL = 10
N_SPECIAL = 3  # sink, shared, conflict tokens come first in every context


class Basis:
    """Indices of the orthonormal directions (standard basis vectors of R^10)."""

    SINK, SHARED, CONFLICT, FILLER = 0, 1, 2, 3  # token types
    E_S, E_C = 4, 5  # content: shared and conflicting feature
    BIAS, CUE, CUE_A, CUE_B = 6, 7, 8, 9  # query: bias, noisy cue, clean indicators


@dataclass(frozen=True)
class Batch:
    """One batch of contexts and queries with the latent variables that made them.

    Attributes:
        x: `(batch, pos, d_model)` token vectors; position 0 is the sink, 1 the shared token,
            2 the conflict token, the rest fillers.
        q: `(batch, d_model)` queries.
        task: `(batch,)` +1 for task A, -1 for task B.
        y: `(batch,)` labels ±1.
        u_s, u_c: `(batch,)` the shared and conflicting feature values.
        m: `(batch,)` the scalar cue (zero unless the cue is `"noisy"`).
    """

    x: Float[Tensor, "batch pos d_model"]
    q: Float[Tensor, "batch d_model"]
    task: Float[Tensor, " batch"]
    y: Float[Tensor, " batch"]
    u_s: Float[Tensor, " batch"]
    u_c: Float[Tensor, " batch"]
    m: Float[Tensor, " batch"]

    def __len__(self) -> int:
        return self.y.shape[0]

    def select(self, index: Tensor) -> Batch:
        """The sub-batch at `index` (a boolean mask or integer indices)."""
        return Batch(*(getattr(self, f)[index] for f in self.__dataclass_fields__))


def _cue_noisy(q, task, gamma, gen):
    m = gamma * task + torch.randn(task.shape, generator=gen, device=task.device, dtype=q.dtype)
    q[:, Basis.CUE] = m
    return m


def _cue_clean(q, task, gamma, gen):
    q[:, Basis.CUE_A] = (task > 0).to(q.dtype)
    q[:, Basis.CUE_B] = (task < 0).to(q.dtype)
    return torch.zeros_like(task)


def _cue_none(q, task, gamma, gen):
    return torch.zeros_like(task)


# name -> writes the cue into the query in place and returns the scalar cue m
CUES: dict[str, Callable[..., Tensor]] = {
    "noisy": _cue_noisy,
    "clean": _cue_clean,
    "none": _cue_none,
}


def make_batch(config, n: int, generator: torch.Generator, device: torch.device | str = "cpu",
               dtype: torch.dtype = torch.float32) -> Batch:
    """Draw `n` samples (the first half task A, the second half task B).

    Args:
        config: a `TheoryConfig` (uses the feature means, noise, filler and cue settings).
        n: batch size; must be even so both tasks get exactly `n / 2` samples.
        generator: a torch generator on `device`; the batch is a function of its state.
        device, dtype: where and in what precision to build the tensors.

    Returns:
        A `Batch` with `x` of shape `(n, 3 + n_filler, 10)` and `q` of shape `(n, 10)`.
    """
    if n < 2 or n % 2:
        raise WorkbenchError(
            f"batch size must be an even number >= 2 (tasks are balanced); got {n}")
    kw = {"generator": generator, "device": device, "dtype": dtype}
    half = n // 2
    task = torch.cat([torch.ones(half, device=device, dtype=dtype),
                      -torch.ones(half, device=device, dtype=dtype)])
    y = torch.randint(0, 2, (n,), generator=generator, device=device).to(dtype) * 2 - 1
    eps = torch.randn(n, 2, **kw)
    u_s = config.mu_shared * y + config.sigma * eps[:, 0]
    u_c = task * config.mu_conflict * y + config.sigma * eps[:, 1]

    n_pos = N_SPECIAL + config.n_filler
    x = torch.zeros(n, n_pos, D_MODEL, device=device, dtype=dtype)  # (B, T, D)
    x[:, 0, Basis.SINK] = 1
    x[:, 1, Basis.SHARED] = 1
    x[:, 1, Basis.E_S] = u_s
    x[:, 2, Basis.CONFLICT] = 1
    x[:, 2, Basis.E_C] = u_c
    x[:, N_SPECIAL:, Basis.FILLER] = 1
    x[:, N_SPECIAL:, Basis.E_S:Basis.E_C + 1] = config.filler_noise * torch.randn(
        n, config.n_filler, 2, **kw)

    q = torch.zeros(n, D_MODEL, device=device, dtype=dtype)
    q[:, Basis.BIAS] = 1
    m = CUES[config.cue](q, task, config.cue_strength, generator)
    return Batch(x=x, q=q, task=task, y=y, u_s=u_s, u_c=u_c, m=m)
