"""What the two Hugging Face reference scorers share (`mc_reference.py`, `gen_reference.py`).

Each reads a shipped task file with plain `json` (not the workbench's loader), reads each real
model as transformers' own reading of the same GGUF file the workbench loads, scores every
task, and prints one table row per model, task and split with Wilson 95% intervals. This
module holds the file reader, the interval, the shared command line and the loop over models
and tasks; each scorer brings its own scoring and its own rows.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

TASKS_DIR = Path(__file__).resolve().parent.parent / "tasks" / "benchmarks"
DEFAULT_MODELS = ("smollm2-135m", "gemma-3-270m")
Z95 = 1.959963984540054


def read_task(path: Path) -> tuple[dict, list[dict]]:
    """The header and the examples of a JSON Lines task file."""
    lines = path.read_text(encoding="utf-8-sig").splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    return records[0]["task"], records[1:]


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials."""
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def interval(k: int, n: int) -> str:
    """`k / n [low, high]` with the Wilson interval, three decimals."""
    lo, hi = wilson(k, n)
    return f"{k / n:.3f} [{lo:.3f}, {hi:.3f}]"


def parser(doc: str, tasks: tuple[str, ...]) -> argparse.ArgumentParser:
    """The options both scorers take: models, tasks (names in tasks/benchmarks/ or paths),
    the first N examples per split, and the thread count."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    p.add_argument("--tasks", nargs="+", default=list(tasks),
                   help="task names in tasks/benchmarks/ or paths to task files")
    p.add_argument("--limit", type=int, default=None, help="first N examples per split")
    p.add_argument("--threads", type=int, default=None)
    return p


def each_task(args: argparse.Namespace) -> Iterator[tuple[str, Path, object, object]]:
    """Print the machine, then yield (model name, task path, HF model, tokenizer) for every
    model of `args.models` (read once each, its read time printed) and task of `args.tasks`."""
    from workbench.loading.gguf import read_gguf
    from workbench.loading.shipped import REAL_MODELS

    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"# machine: {platform.processor() or platform.machine()}, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}")
    for name in args.models:
        start = time.perf_counter()
        model, tokenizer = read_gguf(REAL_MODELS[name].path())
        print(f"\n## {name}: read in {time.perf_counter() - start:.0f} s")
        for task in args.tasks:
            path = Path(task) if task.endswith(".jsonl") else TASKS_DIR / f"{task}.jsonl"
            yield name, path, model, tokenizer


def timed(score: Callable[[], dict]) -> tuple[dict, float]:
    """`score()` and the seconds it took."""
    start = time.perf_counter()
    result = score()
    return result, time.perf_counter() - start
