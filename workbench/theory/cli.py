"""`workbench theory`: train the theory model under a named sweep, print the summary, save
tables, config and figures.

    workbench theory                      # small vs large init, 8 seeds, full training
    workbench theory --quick              # CI: 4 seeds, 600 steps, a few seconds on one core
    workbench theory --sweep table --seeds 16 --out theory_table

This module holds the subcommand's parser (`add_parser`, which `workbench.cli.parser` calls only
when the command is `theory`, since it imports torch) and its body (`run`). Unlike the commands that
load a language model, `--threads` defaults to 1: the theory model is tiny, and on it more threads
only contend.
"""

from __future__ import annotations

import argparse
import time

import pandas as pd
import torch

from workbench.errors import WorkbenchError
from workbench.loading.model import resolve_device
from workbench.theory.config import TheoryConfig
from workbench.theory.sweep import DEFAULT_TOL, SWEEPS, quick_config, run_sweep

PRINT_COLUMNS = ("condition", "n_seeds", "gap", "conflict_top2", "frac_tradeoff_A",
                 "frac_tradeoff_B", "frac_tradeoff", "ablate_A_d_loss_A", "ablate_A_d_loss_B",
                 "ablate_A_d_acc_B", "gain", "gain_acc", "gain_best")


def add_parser(subparsers) -> None:
    """Register the `theory` subcommand on an argparse subparsers object."""
    p = subparsers.add_parser(
        "theory", help="train the multi-head attention theory model and measure head trade-offs",
        description="Train the simplified multi-head attention model on two tasks with a "
                    "conflicting feature, then ablate each head. Prints one row per condition "
                    "and writes CSV tables, configs.json and PNG figures to --out.")
    p.add_argument("--sweep", choices=sorted(SWEEPS), default="init",
                   help="conditions to run: init = small vs large init (default), table = the "
                        "table of docs/theory.md (controls, H, cue strength), scale = init x "
                        "heads, cue = cue strength")
    p.add_argument("--quick", action="store_true",
                   help="reduced settings for CI: 4 seeds, 600 steps, batch 1000")
    p.add_argument("--seeds", type=int, default=None, metavar="N",
                   help="number of seeds 0..N-1 (default 8, or 4 with --quick)")
    p.add_argument("--steps", type=int, default=None, metavar="N",
                   help="SGD steps (default 3000, or 600 with --quick)")
    p.add_argument("--tol", type=float, default=None, metavar="NATS",
                   help="loss changes below this count as neither gain nor harm (default 1e-3)")
    p.add_argument("--out", default="theory_results", metavar="DIR",
                   help="results folder, replaced atomically (default theory_results)")
    p.add_argument("--device", default="auto", help="auto (cuda, mps, cpu), cpu, cuda or mps")
    p.add_argument("--threads", type=int, default=1, metavar="N",
                   help="torch's CPU threads per operation (torch.set_num_threads) on a CPU "
                        "device (default 1: the model is tiny, and more threads only contend "
                        "on a busy machine)")
    p.add_argument("--no-figures", action="store_true", help="write tables only")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the sweep named by `args`; returns the exit status."""
    changes = {}
    if args.seeds is not None:
        if args.seeds < 1:
            raise WorkbenchError(f"--seeds must be >= 1; got {args.seeds}")
        changes["seeds"] = tuple(range(args.seeds))
    if args.steps is not None:
        changes["steps"] = args.steps
    base = quick_config(**changes) if args.quick else TheoryConfig(**changes)
    device = resolve_device(args.device)
    if args.threads < 1:
        raise WorkbenchError(f"--threads must be >= 1; got {args.threads}")
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    conditions = SWEEPS[args.sweep](base)
    print(f"theory sweep {args.sweep!r}: {len(conditions)} conditions x {base.n_seeds} seeds, "
          f"{base.steps} steps, device {device}")
    start = time.perf_counter()
    result = run_sweep(conditions, device=device, progress=True,
                       tol=DEFAULT_TOL if args.tol is None else args.tol)
    out = result.save(args.out, figures=not args.no_figures)
    summary = result.summary()
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(summary[list(PRINT_COLUMNS)].to_string(index=False, float_format="{:.4f}".format))
    print(f"wrote {out} in {time.perf_counter() - start:.1f} s")
    return 0
