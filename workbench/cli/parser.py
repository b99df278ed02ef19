"""The `workbench` command line: the parser and `main`. `cel` (the main job), `sweep`,
`explain`, `view`, `compare`, `theory`, `notebooks`.

    workbench                                  # = workbench cel with its defaults
    workbench cel --model gpt2 --task ioi --others induction --ablation mean --out cel_ioi
    workbench sweep --models gpt2 embedded --tasks ioi embedded_map --ablation zero mean
    torchrun --nproc-per-node 2 -m workbench sweep   # the same, on 2 processes
    workbench cel --model path/to/checkpoint --task my_task.jsonl --method attribution
    workbench cel --model smollm2-135m --task ioi --quick   # a quick look, minutes
    workbench explain cel_ioi                  # (re)explain the best set of a results folder
    workbench view cel_ioi                     # (re)build cel_ioi/view.html, opens offline
    workbench compare cel_smollm2 cel_gemma    # results folders side by side
    workbench theory --quick
    workbench notebooks

This module builds the parser; the body of each subcommand is in `workbench.cli.commands`
(`compare`'s, `explain`'s and `theory`'s in `workbench.cli.compare`, `workbench.cli.explain`
and `workbench.theory.cli`). The options of a run are `CELConfig`'s fields: each flag's
default is the field's default and its choices are the values of its option type
(`workbench.options`), so neither is written here.

Under torchrun (`WORLD_SIZE > 1`) every command joins the process group first
(`workbench.distributed`). A rerun with the same options and `--out` resumes from the stages
already saved; Ctrl-C prints one line saying so and exits with status 130, and SIGTERM (what
`timeout`, SLURM and torchrun send) does the same with status 143: the folder's lock is
released and every file written so far is complete. Input errors, the parser's included,
print one line (`workbench: error: ...`) to stderr and exit with status 2; so does a write
that fails for lack of space, on a read-only file system or for lack of permission, each
with its own advice (`workbench.cli.exits`).

Start-up is kept short: building the parser and checking names and paths import neither torch
nor TransformerLens (`workbench.config`, `workbench.options`, `workbench.loading.names` and
`workbench.cli.commands` need neither at import), so `--help` and a typo answer in about a second;
the heavy modules are imported only once the inputs are known to be good.
"""

from __future__ import annotations

import argparse
import os
import sys

import workbench  # its version (the public names load on first use)
from workbench.cli.commands import (
    DEFAULT_OUT,
    notebooks_command,
    run_cel_command,
    run_sweep_command,
    view_command,
)
from workbench.cli.compare import DEFAULT_COMPARE_OUT, compare_command
from workbench.cli.exits import (
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    WRITE_ERRORS,
    Terminated,
    sigterm_interrupts,
    write_error_line,
)
from workbench.cli.explain import explain_command
from workbench.cli.options import add_load_options, add_run_options
from workbench.config import QUICK
from workbench.errors import WorkbenchError
from workbench.loading.shipped import REAL_MODELS
from workbench.options import SweepSplit
from workbench.zoo import EMBEDDED_FAMILY


class _Parser(argparse.ArgumentParser):
    """An `ArgumentParser` whose errors are one line, like every other input error."""

    def error(self, message: str):
        self.exit(2, f"workbench: error: {message} (`{self.prog} --help` lists the options)\n")


def _add_cel_parser(subparsers) -> argparse.ArgumentParser:

    p = subparsers.add_parser(
        "cel",
        help="find attention heads whose removal improves a task (the main job)",
        description="Capability Enhancement Localization: screen every head, search joint "
        "ablations, confirm the best sets on held-out examples against random head sets, and "
        "report side effects on other tasks. Writes CSV tables, config.json, plots and "
        "report.md to --out.",
    )
    p.add_argument(
        "--model",
        default=None,
        metavar="NAME|PATH",
        help=f"'embedded' (default; also {', '.join(EMBEDDED_FAMILY[1:])}), a shipped real "
        f"model ({', '.join(REAL_MODELS)}), a GGUF file (.gguf), a workbench checkpoint or "
        "Hugging Face folder, or a TransformerLens model name such as gpt2 (from the hub)",
    )
    p.add_argument(
        "--task",
        default=None,
        metavar="NAME|PATH",
        help="a task in tasks/ or tasks/benchmarks/ (by name) or a JSONL task file (default: "
        "the embedded model's default task)",
    )
    p.add_argument(
        "--others", nargs="*", default=None, metavar="TASK", help="tasks to report side effects on"
    )
    p.add_argument(
        "--out",
        default=DEFAULT_OUT,
        metavar="DIR",
        help=f"results folder; a rerun resumes from it (default {DEFAULT_OUT})",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="delete an existing results folder in --out first (refused while another run "
        "is writing it)",
    )
    p.add_argument(
        "--no-explain",
        action="store_true",
        help="skip the explanation of the best set in report.md (see `workbench explain`)",
    )
    add_run_options(p, several_kinds=False)
    p.set_defaults(func=run_cel_command)
    return p


def _add_sweep_parser(subparsers) -> argparse.ArgumentParser:

    p = subparsers.add_parser(
        "sweep",
        help="CEL on a grid of models x tasks x ablation kinds, in one table",
        description="Run `workbench cel` on every cell of models x tasks x ablation kinds (one "
        "results folder per cell in --out, resumable per cell) and write the best set of every "
        "cell to sweep.csv and sweep.png. Without --models: the embedded model family on its "
        "default task. With --models and no --tasks: each model on its own tasks.",
    )
    p.add_argument(
        "--models",
        nargs="*",
        default=None,
        metavar="NAME|PATH",
        help="models to run, as for `cel --model` (default: the embedded model family)",
    )
    p.add_argument(
        "--tasks",
        nargs="*",
        default=None,
        metavar="NAME|PATH",
        help="tasks to run, as for `cel --task`; every model runs every task, and a cell whose "
        "task does not fit the model's tokenizer is skipped (default: each model's own tasks: "
        "the embedded family's default task, the hub tasks for every other model)",
    )
    p.add_argument(
        "--others",
        nargs="*",
        default=None,
        metavar="TASK",
        help="side-effect tasks of every cell (default: the model's other own tasks without "
        "--tasks, else the sweep's other tasks; those that do not fit a model are left out)",
    )
    p.add_argument(
        "--split",
        choices=SweepSplit.values(),
        default=SweepSplit.AUTO,
        help="under torchrun: deal cells to ranks, or run each cell on all ranks with its "
        "masks split (auto: cells when there are at least as many as ranks) (default "
        "%(default)s)",
    )
    p.add_argument(
        "--out",
        default="sweep_results",
        metavar="DIR",
        help="sweep folder: one results folder per cell, sweep.csv and sweep.png; a rerun "
        "resumes every cell (default sweep_results)",
    )
    p.add_argument("--no-plots", action="store_true", help="write no plots")
    add_run_options(p, several_kinds=True)
    p.set_defaults(func=run_sweep_command)
    return p


def _add_explain_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "explain",
        help="explain the best head set of a results folder (attention by role, direct logit "
        "attribution, comparison heads) and add it to its report.md",
        description="Load the model and task recorded in a CEL results folder, explain its "
        "best head set (or, when no set is significant, the top candidate, marked as such) "
        "on the held-out split, and write the tables to DIR/explanation/, the figure to "
        "DIR/explanation.png and a section to DIR/report.md. `workbench cel` does this at "
        "the end of every run.",
    )
    p.add_argument("folder", nargs="?", default=None, metavar="DIR",
                   help="a CEL results folder (or give it as --out DIR)")
    p.add_argument("--out", default=None, metavar="DIR", help="the same as DIR")
    p.add_argument(
        "--model",
        default=None,
        metavar="NAME|PATH",
        help="the model, when the name recorded in the folder does not load it (its "
        "fingerprint must match the recorded one)",
    )
    p.add_argument(
        "--task",
        default=None,
        metavar="NAME|PATH",
        help="the task, when the task file recorded in the folder's config.json is gone or "
        "the folder records none (its fingerprint must match the recorded one)",
    )
    p.add_argument(
        "--split",
        choices=["heldout", "select"],
        default="heldout",
        help="the split whose examples the explanation is computed on (default %(default)s)",
    )
    add_load_options(p)
    p.set_defaults(func=explain_command)


def _add_view_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "view",
        help="(re)build a results folder's view.html: its tables and plots in one page that "
        "opens offline",
        description="Build DIR/view.html from a CEL results folder's files (no model needed): "
        "the per-head table (sortable, filterable), the found sets with their held-out "
        "confirmation and intervals, side effects, the explanation's tables and the plots, "
        "in one self-contained file that loads nothing from the network. `workbench cel` "
        "writes it at the end of every run.",
    )
    p.add_argument("folder", metavar="DIR", help="a CEL results folder")
    p.add_argument("--static", action="store_true",
                   help="leave out the interactive per-head heatmap (plotly.js inlined, about "
                   "5 MB), which is added when the extra [interactive] is installed; the PNG "
                   "heatmap is always there")
    p.set_defaults(func=view_command)


def _add_compare_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "compare",
        help="results folders side by side (model families, ablations, tasks): one table, "
        "one figure",
        description="Compare CEL results folders: every confirmed set of each run with its "
        "objective, held-out accuracy and log-prob changes with intervals and n, the flags "
        "best, significant and gamed, the side effects, and each run's environment. Runs on "
        "another task or objective are printed in a block of their own. Writes compare.csv "
        "(the table of workbench.compare) and compare.png to --out.",
    )
    p.add_argument("folders", nargs="+", metavar="DIR",
                   help="two or more CEL results folders")
    p.add_argument("--out", default=DEFAULT_COMPARE_OUT, metavar="DIR",
                   help="folder for compare.csv and compare.png (default %(default)s)")
    p.add_argument("--no-plots", action="store_true", help="write no figure")
    p.set_defaults(func=compare_command)


def _add_notebooks_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "notebooks",
        help="how to open the curated notebooks",
        description="Print how to open the notebooks in notebooks/.",
    )
    p.set_defaults(func=notebooks_command)


THEORY_HELP = "train the multi-head attention theory model and measure head trade-offs"


def build_parser(command: str | None = None, quick: bool = False) -> argparse.ArgumentParser:
    """The `workbench` parser. The `theory` subcommand's options need torch, so they are
    added only when `command` is `"theory"`; otherwise it is listed with its help line.
    With `quick`, the defaults of `cel` and `sweep` are the `--quick` preset's
    (`workbench.config.QUICK`), so a flag given beside `--quick` still wins."""
    parser = _Parser(
        prog="workbench",
        description="Capability Enhancement Localization on TransformerLens models. "
        "With no subcommand, runs `workbench cel` with its defaults.",
    )
    parser.add_argument("--version", action="version",
                        version=f"workbench {workbench.__version__}")
    subparsers = parser.add_subparsers(
        dest="command", metavar="{cel,sweep,explain,view,compare,theory,notebooks}"
    )
    runs = (_add_cel_parser(subparsers), _add_sweep_parser(subparsers))
    if quick:
        preset = {k: [*v] if isinstance(v, tuple) else getattr(v, "value", v)
                  for k, v in QUICK.items()}
        for p in runs:
            p.set_defaults(**preset)
    _add_explain_parser(subparsers)
    _add_view_parser(subparsers)
    _add_compare_parser(subparsers)
    if command == "theory":
        try:
            from workbench.theory.cli import add_parser as add_theory_parser
        except ImportError:
            add_theory_parser = None
        if add_theory_parser is not None:
            add_theory_parser(subparsers)
    else:
        subparsers.add_parser("theory", help=THEORY_HELP, add_help=False)
    _add_notebooks_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `workbench` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")):
        argv = ["cel", *argv]  # options without a subcommand are options of `cel`
    args = build_parser(argv[0]).parse_args(argv)
    if getattr(args, "quick", False):  # parsed again with the preset as the defaults
        args = build_parser(argv[0], quick=True).parse_args(argv)
    try:
        with sigterm_interrupts():
            return _run(args)
    except WorkbenchError as e:
        print(f"workbench: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        if e.errno not in WRITE_ERRORS:
            raise
        print(f"workbench: error: {write_error_line(e, getattr(args, 'out', None))}",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        out = getattr(args, "out", None)
        resume = f"; rerun the same command to resume from {out}" if args.command in (
            "cel", "sweep") else ""
        what = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
        print(f"\n{what}{resume}", file=sys.stderr)
        return EXIT_TERMINATED if isinstance(e, Terminated) else EXIT_INTERRUPTED


def _run(args) -> int:
    if not _launched_by_torchrun():
        return int(args.func(args) or 0)
    from workbench import distributed

    distributed.init_from_env(getattr(args, "device", "auto"))
    with distributed.quiet_unless_main():
        status = int(args.func(args) or 0)
    distributed.shutdown()
    return status


def _launched_by_torchrun() -> bool:
    """True when torchrun started several processes (`WORLD_SIZE > 1`); checked without
    importing torch (`workbench.distributed` validates the value)."""
    return os.environ.get("WORLD_SIZE", "1").strip() not in ("", "1")


if __name__ == "__main__":
    sys.exit(main())
