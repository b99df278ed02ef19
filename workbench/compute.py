"""How a run computes, not what it computes: `Compute`, and the budgets it resolves per device.

Every scorer bounds its memory by budgets, not by the size of a split: a forward holds at most
`token_budget` tokens (rows x padded length) and `max_rows` rows, and the per-layer residuals
that exact scoring restarts from are kept between calls up to `cache_bytes`. On a GPU many
head masks share one forward (as many as a share of its free memory holds); on a CPU masks
are tiled only up to the size where its matmuls reach full speed (`CPU_TOKEN_TARGET`).
One frozen `Compute` carries these settings from the command line through `run_cel` to every
scorer; none of them changes a number (a test checks the scores against one mask per
forward).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from workbench.environment import (
    DEFAULT_THREADS,
    ThreadChoice,
    check_threads,
    resolve_threads,
    stage_threads,
)
from workbench.errors import WorkbenchError
from workbench.hooked import HookedModel

DEFAULT_TOKEN_BUDGET = 16384
CPU_TOKEN_TARGET = 3072  # tokens per forward where a CPU's matmuls reach their full speed
DEFAULT_CACHE_BYTES = 1 << 30


GPU_TOKEN_CAP = 1 << 20  # a bound on one forward even on the largest accelerator
GPU_MEMORY_SHARE = 0.3  # of the free accelerator memory one forward's activations may take


def device_token_budget(cfg, free_bytes: int | None = None) -> int:
    """The default token budget of one forward on `cfg.device`: `DEFAULT_TOKEN_BUDGET` on a
    CPU (where masks are tiled only up to `CPU_TOKEN_TARGET` tokens, see
    `default_masks_per_pass`); on an accelerator as many tokens as `GPU_MEMORY_SHARE` of its
    free memory holds, so that many masks share one forward.

    Per token a forward keeps about `8 d_model + 2 d_mlp` activations plus `2 n_heads x 256`
    attention scores (prompts up to 256 tokens) alive at once, in the model's dtype.
    `free_bytes` overrides the measured free memory (for tests).
    """
    device = torch.device(cfg.device)
    if device.type == "cpu":
        return DEFAULT_TOKEN_BUDGET
    if free_bytes is None:
        if device.type != "cuda":
            return DEFAULT_TOKEN_BUDGET * 4
        free_bytes, _ = torch.cuda.mem_get_info(device)
    elem = torch.empty((), dtype=cfg.dtype).element_size()
    d_mlp = cfg.d_mlp or 0
    per_token = elem * (8 * cfg.d_model + 2 * d_mlp + 2 * cfg.n_heads * 256)
    return int(max(DEFAULT_TOKEN_BUDGET, min(GPU_TOKEN_CAP, free_bytes * GPU_MEMORY_SHARE
                                              // per_token)))


def default_masks_per_pass(model: HookedModel, n_examples: int, n_tokens: int,
                           token_budget: int) -> int:
    # Measured on a 2-core CPU, SmolLM2-135M, 20 prompts x 20 tokens (a racing slice), seconds
    # per mask: 1.12 one mask per pass, 0.80 four (1600 tokens), 0.73 eight (3200), 0.90
    # sixteen (6400); on the GPT-2-small shape, 64 x 20 tokens: 3.06 one, 3.22 four (5120).
    # So a CPU tiles masks up to about CPU_TOKEN_TARGET tokens, and a full split of that
    # size or more gets one mask per pass. A GPU is underused by one small batch; the token
    # budget bounds activation and attention-pattern memory for long prompts.
    if torch.device(model.cfg.device).type == "cpu":
        return max(1, min(token_budget, CPU_TOKEN_TARGET) // max(1, n_examples * n_tokens))
    return max(1, token_budget // max(1, n_examples * n_tokens))


@dataclass(frozen=True)
class Compute:
    """How a run computes (not part of a run's config: no number depends on it).

    Attributes:
        max_rows: the most rows (masks x examples) per forward; None: 1024 on a CPU, the token
            budget elsewhere.
        masks_per_pass: masks per tiled forward; None picks per device
            (`default_masks_per_pass`).
        token_budget: the most tokens (rows x padded length) per forward; None picks per
            device (`device_token_budget`).
        cache_bytes: the most bytes of cached residuals a scorer keeps between calls.
        offload: keep those caches in CPU memory.
        progress: show progress: tqdm bars at a terminal, plain lines in a log
            (`workbench.progress`).
        threads: torch's intra-op CPU threads while a run computes, restored afterwards
            (`threads_set`); default `"auto"`, the cores idle when the process first asks,
            measured over a short window (`workbench.environment.thread_choice`); None
            leaves torch's setting alone.
        share_prefix: run the blocks that several masks run identically once
            (`workbench.scoring.sharing`, equal to restarting every mask to ~1e-5). None (the
            default, "auto"): in one process, for the masks of a layer whose sharing saves
            enough blocks (`workbench.scoring.sharing.sharing_pays`: the interaction search's
            finalist sets, not random knockouts), with the masks that restart at different
            layers and the shared walks' lone masks joined into common passes
            (`workbench.scoring.sharing.ChunkRun.joined`); never in a torch.distributed group,
            where a mask's score would depend on which masks its rank's shard holds; there
            two ranks write what one process writes with `share_prefix=False`, bit for bit
            (`tests/test_distributed.py`). True shares every layer's masks, each trie
            node's lone masks in passes of their own; False restarts every mask at its first
            ablated layer, each layer's masks in passes of their own (the references of the
            tests).
    """

    max_rows: int | None = None
    masks_per_pass: int | None = None
    token_budget: int | None = None
    cache_bytes: int = DEFAULT_CACHE_BYTES
    offload: bool = False
    progress: bool = True
    threads: int | str | None = DEFAULT_THREADS
    share_prefix: bool | None = None

    def __post_init__(self) -> None:
        check_threads(self.threads)  # "auto" is measured when a run first computes
        for name in ("max_rows", "masks_per_pass", "token_budget"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise WorkbenchError(f"{name} must be an integer >= 1; got {value!r}")
        if isinstance(self.cache_bytes, bool) or not isinstance(self.cache_bytes, int) \
                or self.cache_bytes < 0:
            raise WorkbenchError(f"cache_bytes must be an integer >= 0; got {self.cache_bytes!r}")
        for name in ("offload", "progress"):
            if not isinstance(getattr(self, name), bool):
                raise WorkbenchError(f"{name} must be true or false; got {getattr(self, name)!r}")
        if self.share_prefix is not None and not isinstance(self.share_prefix, bool):
            raise WorkbenchError("share_prefix must be true, false or None (auto); got "
                                 f"{self.share_prefix!r}")

    def replace(self, **changes) -> Compute:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def split_settings(cls, settings: dict, base: Compute | None = None) -> Compute:
        """`base` (default `Compute()`) with the `Compute` fields popped from `settings`."""
        names = {f.name for f in dataclasses.fields(cls)}
        changes = {k: settings.pop(k) for k in list(settings) if k in names}
        return (base or cls()).replace(**changes)

    def budgets(self, cfg) -> tuple[int, int]:
        """`(token_budget, max_rows)` for a model with config `cfg`: the given values, or
        the device's defaults."""
        token_budget = self.token_budget or device_token_budget(cfg)
        if self.max_rows is not None:
            return token_budget, self.max_rows
        on_cpu = torch.device(cfg.device).type == "cpu"
        return token_budget, 1024 if on_cpu else token_budget

    def retake_threads(self, device) -> ThreadChoice | None:
        """With `threads="auto"` on a CPU `device`: torch's threads set to the cores idle now
        (`workbench.environment.stage_threads`), and that choice; None otherwise (a fixed
        count, torch's setting, a GPU). A run calls it when each computing stage starts."""
        if torch.device(device).type != "cpu":
            return None
        choice = stage_threads(self.threads)
        if choice is None or choice.threads is None:
            return None
        torch.set_num_threads(choice.threads)
        return choice

    @contextmanager
    def threads_set(self) -> Iterator[None]:
        """torch's intra-op threads set to `threads` for the duration (when given)."""
        threads = resolve_threads(self.threads)
        if threads is None:
            yield
            return
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            yield
        finally:
            torch.set_num_threads(before)


QUIET = Compute(progress=False)  # the default of the library functions: no progress bars
