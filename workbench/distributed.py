"""Running CEL on several processes with torch.distributed, launched the PyTorch way.

    torchrun --nproc-per-node 2 -m workbench sweep --models a b --tasks t1 t2
    torchrun --nproc-per-node 4 -m workbench cel --model gpt2 --task ioi --out cel_ioi

Every process (rank) loads the same model and task; there are two ways to share the work:

- **Mask sharding** (inside one CEL run): every stage evaluates head masks through
  `MaskScorer.score` (single heads in screening, head sets in the search, knockout masks,
  the best sets and the random baseline in confirmation, side effects). With more than one
  rank, `score` hands the masks to `score_sharded`: each rank scores one contiguous shard and
  the shards are gathered, so every rank returns the full `[n_masks, batch]` scores. Each
  mask's score is computed exactly as in one process: the shards are cut only between the
  groups of masks that one process would evaluate together in one forward (`masks_per_pass`),
  so the arithmetic per mask, and hence every number, is bit for bit the same on CPU. Shards
  are balanced by cost: a mask whose first ablated layer is `l` reruns `n_layers - l` layers
  (prefix reuse) plus about one layer's worth of fixed work, so the split is by cumulative cost,
  not by count.
- **Cell sharding** (a sweep, `workbench.sweep`): the cells of a models x tasks x kinds grid
  are dealt to the ranks in turn; each rank runs its cells alone (`local()` turns mask
  sharding off) and rank 0 aggregates after a barrier.

The process group is set up from torchrun's environment (`RANK`, `WORLD_SIZE`,
`MASTER_ADDR`, `MASTER_PORT`, `LOCAL_RANK`) when `WORLD_SIZE > 1`: gloo for CPU models,
NCCL for CUDA (one GPU per local rank). With one process nothing here changes anything.
Only rank 0 writes a run's files; the other ranks run in a private copy of the results
folder (`rank_out_dir`), so they resume from the same stage files as rank 0.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import math
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from jaxtyping import Float
from torch import Tensor

from workbench.errors import WorkbenchError

# Backend per device type: gloo runs collectives on CPU tensors, NCCL on CUDA tensors.
BACKENDS = {"cpu": "gloo", "cuda": "nccl"}
# A sweep's ranks wait at a barrier until the slowest rank finishes its cells, which can take
# hours; torch's default of 30 minutes would kill a healthy sweep.
TIMEOUT_ENV = "WORKBENCH_DIST_TIMEOUT_MIN"
DEFAULT_TIMEOUT_MIN = 24 * 60

_state = threading.local()


def env_world_size() -> int:
    """`WORLD_SIZE` as torchrun sets it (1 when not launched by torchrun)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise WorkbenchError(
            f"WORLD_SIZE must be an integer; got {os.environ.get('WORLD_SIZE')!r}"
        ) from None


def is_distributed() -> bool:
    """True when a process group with more than one rank is initialised."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def is_main() -> bool:
    """True on rank 0 (and in a single process): the rank that writes files and prints."""
    return rank() == 0


def init_from_env(device: str = "auto", init_method: str | None = None) -> bool:
    """Join the process group described by torchrun's environment variables.

    Args:
        device: the device the models will run on; `"auto"` picks CUDA where available.
            CUDA selects NCCL and binds this process to GPU `LOCAL_RANK`; anything else gloo.
        init_method: where ranks meet; None reads `MASTER_ADDR`/`MASTER_PORT` (torchrun),
            `"file:///shared/path"` uses a file store (no listening socket for the store).

    Returns:
        True when running distributed (`WORLD_SIZE > 1`); False (and nothing done) otherwise.
    """
    if env_world_size() <= 1:
        return False
    if is_distributed():
        return True
    needed = ("RANK", "MASTER_ADDR", "MASTER_PORT") if init_method is None else ("RANK",)
    missing = [v for v in needed if v not in os.environ]
    if missing:
        raise WorkbenchError(
            f"WORLD_SIZE is {env_world_size()} but {missing} are not set; launch with torchrun "
            "(torchrun --nproc-per-node N -m workbench ...)"
        )
    device_type = _device_type(device)
    if device_type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    minutes = float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_MIN))
    dist.init_process_group(
        backend=BACKENDS.get(device_type, "gloo"),
        init_method=init_method,
        rank=int(os.environ["RANK"]),
        world_size=env_world_size(),
        timeout=timedelta(minutes=minutes),
    )
    return True


def shutdown() -> None:
    """Leave the process group (after a final barrier) if one is initialised."""
    if dist.is_available() and dist.is_initialized():
        if dist.get_world_size() > 1:
            dist.barrier()
        dist.destroy_process_group()


def _device_type(device: str | torch.device) -> str:
    if str(device) == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(device).type


def local_device(device: str = "auto") -> str:
    """The device this rank should load its model on: `cuda:LOCAL_RANK` for CUDA runs."""
    if is_distributed() and _device_type(device) == "cuda" and ":" not in str(device):
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    return device


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def _comm_device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def broadcast_object(obj):
    """Rank 0's `obj` on every rank."""
    if not is_distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_objects(obj) -> list:
    """Every rank's `obj`, in rank order, on every rank."""
    if not is_distributed():
        return [obj]
    out: list = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


# ---------------------------------------------------------------------------------------------
# Which ranks do what


@contextlib.contextmanager
def local() -> Iterator[None]:
    """Within this block `MaskScorer.score` scores every mask on this rank alone (no
    collectives): for work that one rank does by itself, like a sweep cell."""
    depth = getattr(_state, "local", 0)
    _state.local = depth + 1
    try:
        yield
    finally:
        _state.local = depth


def shards_masks() -> bool:
    """True when `MaskScorer.score` should shard its masks across ranks."""
    return is_distributed() and getattr(_state, "local", 0) == 0


def balanced_bounds(costs: Sequence[float], n_parts: int) -> list[tuple[int, int]]:
    """Cut a sequence of atoms with `costs` into `n_parts` contiguous `(start, stop)` ranges of
    about equal total cost (deterministic; a part may be empty)."""
    if n_parts < 1:
        raise WorkbenchError(f"n_parts must be >= 1; got {n_parts}")
    total = float(sum(costs))
    # Each atom goes to the part its cost midpoint falls in, so the parts are contiguous and
    # differ in cost by at most about one atom.
    counts, acc = [0] * n_parts, 0.0
    for c in costs:
        mid = acc + float(c) / 2
        part = min(n_parts - 1, int(mid * n_parts / total)) if total > 0 else 0
        counts[part] += 1
        acc += float(c)
    cuts = [0]
    for k in counts:
        cuts.append(cuts[-1] + k)
    return list(zip(cuts[:-1], cuts[1:], strict=True))


def cells_of_rank(n_cells: int, rank_: int | None = None, world: int | None = None) -> list[int]:
    """The cell indices a rank runs: cell `i` goes to rank `i % world`."""
    rank_ = rank() if rank_ is None else rank_
    world = world_size() if world is None else world
    return list(range(rank_, n_cells, world))


def _first_layers(masks: Tensor, n_layers: int) -> Tensor:
    # As in `MaskScorer._score_prefix`: the first ablated layer, n_layers for the empty mask.
    any_layer = masks.flatten(2).amax(-1) > 0  # (M, L)
    return torch.where(
        any_layer.any(-1),
        any_layer.float().argmax(-1),
        torch.full_like(any_layer[:, 0], n_layers, dtype=torch.long),
    ).cpu()


def _pass_granularity(scorer) -> int:
    """A multiple of every `masks_per_pass` the scorer uses, so that shards cut at multiples
    of it (within one first-layer group) leave each tiled forward's masks together."""
    sizes = {scorer.masks_per_pass(chunk) for chunk in scorer.chunks()}
    return math.lcm(*sizes) if sizes else 1


def shard_plan(scorer, masks: Tensor, n_parts: int) -> tuple[Tensor, list[tuple[int, int]]]:
    """How `score_sharded` splits masks: `(order, bounds)`; rank `r` scores
    `masks[order[start:stop]]` with `(start, stop) = bounds[r]`.

    With prefix reuse, masks are ordered (stably) by first ablated layer, as one process
    evaluates them, and cut only between groups of `masks_per_pass` masks of one layer, each
    mask costing `n_layers - first_layer + 1`. Otherwise every mask is a full forward of its own:
    the order is unchanged and each mask is an atom of cost 1.
    """
    n = masks.shape[0]
    if scorer.metric is not None or not scorer.reuse_prefix:
        order = torch.arange(n)
        return order, balanced_bounds([1.0] * n, n_parts)
    L = scorer.n_layers
    first = _first_layers(masks, L)
    order = torch.sort(first, stable=True).indices
    sorted_first = first[order].tolist()
    g = _pass_granularity(scorer)
    atoms, costs, start = [], [], 0
    while start < n:
        layer = sorted_first[start]
        stop = start
        while stop < n and stop - start < g and sorted_first[stop] == layer:
            stop += 1
        atoms.append((start, stop))
        # An empty mask costs nothing (it copies the clean scores); any other costs the rerun
        # of the layers from `layer` on plus about one layer's worth of fixed work (the
        # unembedding, hooks, copies). Measured at GPT-2-small shape, 32 prompts, one thread:
        # 1.32 s per mask at layer 0, 0.72 at 6, 0.33 at 10, 0.24 at 11, i.e. 0.10 s per layer
        # + 0.12 s.
        costs.append((stop - start) * (L - layer + 1) if layer < L else 0)
        start = stop
    bounds = []
    for a, b in balanced_bounds(costs, n_parts):
        lo = atoms[a][0] if a < len(atoms) else n
        bounds.append((lo, atoms[b - 1][1] if b > a else lo))
    return order, bounds


def _masks_digest(masks: Tensor) -> int:
    raw = masks.detach().to("cpu", torch.float32).contiguous().numpy().tobytes()
    digest = hashlib.blake2b(raw + str(tuple(masks.shape)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**62 - 1)


def _check_same_masks(masks: Tensor) -> None:
    dev = _comm_device()
    mine = torch.tensor([_masks_digest(masks)], dtype=torch.long, device=dev)
    every = [torch.empty_like(mine) for _ in range(world_size())]
    dist.all_gather(every, mine)
    if len({int(t.item()) for t in every}) > 1:
        raise WorkbenchError(
            f"ranks disagree on the {masks.shape[0]} masks to score (rank {rank()}); every "
            "rank must run the same stages with the same inputs (resume from the same folder)"
        )


def score_sharded(
    scorer,
    masks: Float[Tensor, "n_masks layer head_index"],
    progress: bool = False,
    desc: str = "masks",
    rows: Tensor | None = None,
) -> dict[str, Float[Tensor, "n_masks batch"]]:
    """`scorer.score(masks, rows=rows)` with the masks split across ranks and the scores
    gathered.

    Every rank must call it with the same masks (checked). The result equals one process's,
    bit for bit on CPU: each rank scores its shard through the same code path, and shards
    keep together the masks one process evaluates in one forward (`shard_plan`).
    """
    _check_same_masks(masks)
    if masks.shape[0] == 0:
        with local():
            return scorer.score(masks, progress=False, desc=desc, rows=rows)
    order, bounds = shard_plan(scorer, masks, world_size())
    start, stop = bounds[rank()]
    mine = order[start:stop].to(masks.device)
    with local():
        own = scorer.score(masks[mine], progress=progress and is_main(), desc=desc, rows=rows)
    longest = max(b - a for a, b in bounds)
    dev = _comm_device()
    out = {}
    for name, v in own.items():
        padded = torch.zeros((longest, *v.shape[1:]), dtype=v.dtype, device=dev)
        padded[: v.shape[0]] = v.to(dev)
        parts = [torch.empty_like(padded) for _ in bounds]
        dist.all_gather(parts, padded)
        in_order = torch.cat([p[: b - a] for p, (a, b) in zip(parts, bounds, strict=True)])
        full = torch.empty_like(in_order)
        full[order.to(dev)] = in_order
        out[name] = full.to(v.device)
    return out


# ---------------------------------------------------------------------------------------------
# Files and output


@contextlib.contextmanager
def rank_out_dir(out: str | Path | None) -> Iterator[Path | None]:
    """The results folder this rank passes to `run_cel`: `out` on rank 0; on the others a
    private copy of `out` as it was when every rank arrived (so all ranks resume from the same
    stage files), deleted afterwards. Only rank 0's files are kept."""
    if out is None or not is_distributed():
        yield None if out is None else Path(out)
        return
    out = Path(out)
    barrier()  # rank 0 may have cleared `out` (--overwrite) before arriving here
    if is_main():
        barrier()  # the others copy `out` before rank 0 writes to it
        yield out
        return
    scratch = Path(tempfile.mkdtemp(prefix=f"workbench-rank{rank()}-"))
    try:
        copy = scratch / out.name
        if out.is_dir():
            # Locks and half-written temporary files belong to rank 0's writing, not to the run.
            shutil.copytree(out, copy, ignore=shutil.ignore_patterns("*.lock", "*.tmp", "tmp-*"))
        barrier()
        yield copy
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def quiet_unless_main() -> Iterator[None]:
    """Discard what ranks other than 0 print to stdout (rank 0 speaks for the run)."""
    if is_main():
        yield
        return
    with contextlib.redirect_stdout(io.StringIO()):
        yield


__all__ = [
    "BACKENDS",
    "balanced_bounds",
    "barrier",
    "cells_of_rank",
    "init_from_env",
    "is_distributed",
    "is_main",
    "local",
    "local_device",
    "rank",
    "rank_out_dir",
    "score_sharded",
    "shard_plan",
    "shards_masks",
    "shutdown",
    "world_size",
]
