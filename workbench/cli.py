"""The `workbench` command: `cel` (the main job), `sweep`, `theory`, `notebooks`.

    workbench                                  # = workbench cel with its defaults
    workbench cel --model gpt2 --task ioi --others induction --ablation mean --out cel_ioi
    workbench sweep --models gpt2 embedded --tasks ioi embedded_map --ablation zero mean
    torchrun --nproc-per-node 2 -m workbench sweep   # the same, on 2 processes
    workbench cel --model path/to/checkpoint --task my_task.jsonl --method attribution
    workbench theory --quick
    workbench notebooks

`workbench cel` without `--model` runs on the embedded default model (`workbench.zoo`), its
default task and side tasks; so does `--model embedded_llama` or another name of
`workbench.zoo.EMBEDDED_FAMILY`, on that model. When the embedded checkpoint is not on disk it
says so and runs the built-in demo instead: the hand-built micro model of `workbench.demo`
(2 layers x 4 heads, one harmful head and a harmful redundant pair), whose files are written to
a temporary folder.

`workbench sweep` without `--models` runs the embedded model family (`workbench.zoo`) on its
default task and prints the cross-family table (`workbench.sweep`). Under torchrun
(`WORLD_SIZE > 1`) every command joins the process group first (`workbench.distributed`).

A rerun with the same options and `--out` resumes from the stages already saved. Input errors
print one line (`workbench: error: ...`) to stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from workbench.errors import WorkbenchError

DEFAULT_OUT = "cel_results"
REPO_ROOT = Path(__file__).resolve().parent.parent


def _add_cel_parser(subparsers) -> None:

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
        help="'embedded' (default), a workbench checkpoint or Hugging Face folder, or "
        "a TransformerLens model name",
    )
    p.add_argument(
        "--task",
        default=None,
        metavar="NAME|PATH",
        help="a task in tasks/ or a JSONL task file (default: the embedded model's default task)",
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
        "--overwrite", action="store_true", help="delete an existing results folder in --out first"
    )
    _add_run_options(p, several_kinds=False)
    p.set_defaults(func=run_cel_command)


def _add_run_options(p, several_kinds: bool) -> None:
    """The options of a CEL run, shared by `cel` and `sweep` (`sweep` takes several kinds)."""
    from workbench.ablation import AblationKind
    from workbench.search import STRATEGIES

    p.add_argument(
        "--ablation",
        choices=[k.value for k in AblationKind],
        default=["zero"] if several_kinds else "zero",
        nargs="+" if several_kinds else None,
        help="replace a removed head's z by 0, by its mean over each task's prompts, or by its "
        "z on the example's counterfactual prompt (tasks with 'counterfactual' fields)",
    )
    p.add_argument(
        "--per-position",
        action="store_true",
        help="mean ablation with the mean at each position (prompts of equal length)",
    )
    p.add_argument(
        "--token-budget",
        type=int,
        default=None,
        metavar="N",
        help="the most tokens (rows x padded length) in one forward; bounds memory",
    )
    p.add_argument(
        "--method",
        choices=["exact", "attribution"],
        default="exact",
        help="single-head screening: exact (prefix reuse) or attribution (gradients)",
    )
    p.add_argument("--max-size", type=int, default=3, help="largest head set to search")
    p.add_argument(
        "--strategy",
        nargs="+",
        default=["interaction"],
        choices=sorted(STRATEGIES),
        help="search strategies, run in order on a shared cache (default interaction: "
        "knockouts over the heads that do not clearly hurt, then exact scoring of finalists)",
    )
    p.add_argument(
        "--cluster",
        choices=["auto", "group", "none"],
        default="auto",
        help="held-out intervals and p-values resample the tasks' groups (auto: when a split "
        "has at least 8) or single examples",
    )
    p.add_argument("--top-m", type=int, default=8, help="candidates for the exhaustive search")
    p.add_argument(
        "--search-budget",
        type=int,
        default=None,
        help="forward-equivalents the interaction search may spend on the selection split "
        "(default: 5 x heads + 1000)",
    )
    p.add_argument(
        "--objective",
        default=None,
        help="metric to improve: accuracy, logprob, logit_diff or prob_diff (default: the task's)",
    )
    p.add_argument(
        "--n-random",
        type=int,
        default=200,
        help="random head sets per size in the held-out baseline",
    )
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", help="auto (cuda, mps, cpu), cpu, cuda, cuda:1, mps")
    p.add_argument(
        "--dtype",
        default=None,
        help="auto (bfloat16 on CUDA GPUs, float32 on CPU/MPS), float32, bfloat16, float16 "
        "(default: float32 for hub and Hugging Face models; bf16 halves GPU memory)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def run_options(args) -> dict:
    """The `run_cel` settings given by `_add_run_options` flags."""
    return dict(
        method=args.method,
        max_size=args.max_size,
        strategy=args.strategy,
        n_random=args.n_random,
        seed=args.seed,
        objective=args.objective,
        top_m=args.top_m,
        search_budget=args.search_budget,
        n_boot=args.n_boot,
        per_position=args.per_position,
        cluster=args.cluster,
        **({"token_budget": args.token_budget} if args.token_budget else {}),
    )


def _add_sweep_parser(subparsers) -> None:

    p = subparsers.add_parser(
        "sweep",
        help="CEL on a grid of models x tasks x ablation kinds, in one table",
        description="Run `workbench cel` on every cell of models x tasks x ablation kinds (one "
        "results folder per cell in --out, resumable per cell) and write the best set of every "
        "cell to sweep.csv and sweep.png. Without --models: the embedded model family on its "
        "default task.",
    )
    p.add_argument("--models", nargs="*", default=None, metavar="NAME|PATH")
    p.add_argument("--tasks", nargs="*", default=None, metavar="NAME|PATH")
    p.add_argument(
        "--others",
        nargs="*",
        default=None,
        metavar="TASK",
        help="side-effect tasks of every cell (default: the sweep's other tasks)",
    )
    p.add_argument(
        "--split",
        choices=["auto", "cells", "masks"],
        default="auto",
        help="under torchrun: deal cells to ranks, or run each cell on all ranks with its "
        "masks split (auto: cells when there are at least as many as ranks)",
    )
    p.add_argument("--out", default="sweep_results", metavar="DIR")
    p.add_argument("--no-plots", action="store_true", help="write no plots")
    _add_run_options(p, several_kinds=True)
    p.set_defaults(func=run_sweep_command)


def _add_notebooks_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "notebooks",
        help="how to open the curated notebooks",
        description="Print how to open the notebooks in notebooks/.",
    )
    p.set_defaults(func=notebooks_command)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="workbench",
        description="Capability Enhancement Localization on TransformerLens models. "
        "With no subcommand, runs `workbench cel` with its defaults.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="{cel,sweep,theory,notebooks}")
    _add_cel_parser(subparsers)
    _add_sweep_parser(subparsers)
    try:
        from workbench.theory.cli import add_parser as add_theory_parser
    except ImportError:
        add_theory_parser = None
    if add_theory_parser is not None:
        add_theory_parser(subparsers)
    _add_notebooks_parser(subparsers)
    return parser


def _embedded_defaults() -> tuple[str, list[str]] | None:
    """`(default task, side tasks)` when the embedded checkpoint is on disk, else None."""
    try:
        from workbench.checkpoint import is_checkpoint
        from workbench.zoo import DEFAULT_TASK, EMBEDDED_PATH, SIDE_TASKS
    except ImportError:
        return None
    if not is_checkpoint(EMBEDDED_PATH):
        return None
    return DEFAULT_TASK, list(SIDE_TASKS)


def _resolve_inputs(args) -> tuple[str, str, list[str], str | None]:
    """`(model, task, others, note)`: fill the defaults; `note` says when the demo is used."""
    others = args.others
    if args.model is None or args.model == "embedded":
        defaults = _embedded_defaults()
        if defaults is not None:
            task = args.task or defaults[0]
            return "embedded", task, defaults[1] if others is None else others, None
        if args.model == "embedded":
            raise WorkbenchError(
                "the embedded model is not on disk yet (workbench.zoo."
                "EMBEDDED_PATH); pass --model NAME|PATH"
            )
        if args.task is not None:
            raise WorkbenchError("--task needs --model (the embedded model is not on disk)")
        from workbench.demo import write_demo

        folder = Path(tempfile.mkdtemp(prefix="workbench-demo-"))
        model_dir, main, side = write_demo(folder)
        note = (
            "the embedded model is not on disk, so this is the built-in demo: the hand-"
            "built micro model of workbench.demo (L0H3 hurts; L0H1 + L1H1 hurt jointly)"
        )
        return str(model_dir), str(main), [str(side)] if others is None else others, note
    from workbench.zoo import DEFAULT_TASK, EMBEDDED_FAMILY, SIDE_TASKS

    if args.model in EMBEDDED_FAMILY:  # the family members share the embedded tasks
        task = args.task or DEFAULT_TASK
        return args.model, task, list(SIDE_TASKS) if others is None else others, None
    if args.task is None:
        raise WorkbenchError(f"--task is required with --model {args.model!r}")
    return args.model, args.task, others or [], None


def run_cel_command(args) -> int:
    """Run `workbench cel`; returns the exit status."""
    import pandas as pd

    from workbench import distributed
    from workbench.loading import load_model
    from workbench.pipeline import run_cel
    from workbench.store import CONFIG_FILE, read_run_file
    from workbench.tasks import load_task

    model_name, task_name, other_names, note = _resolve_inputs(args)
    if note:
        print(f"note: {note}", flush=True)
    out = Path(args.out)
    if args.overwrite and distributed.is_main() and (out / CONFIG_FILE).is_file():
        read_run_file(out)  # only ever delete a CEL results folder
        shutil.rmtree(out)
    model = load_model(model_name, device=distributed.local_device(args.device), dtype=args.dtype)
    task = load_task(task_name)
    others = [load_task(o) for o in other_names]
    if note:  # the demo's files are loaded; the results folder records what matters
        shutil.rmtree(Path(model_name).parent, ignore_errors=True)
        model_name = "demo"
    cfg = model.cfg
    n_sel = len([e for e in task.examples if e.split == "select"])
    print(
        f"model {model_name}: {cfg.n_layers} layers x {cfg.n_heads} heads on {cfg.device}; "
        f"task {task.name}: {n_sel} selection / {len(task) - n_sel} held-out examples; "
        f"side tasks: {', '.join(o.name for o in others) or 'none'}",
        flush=True,
    )
    if (out / CONFIG_FILE).is_file():
        print(f"resuming from {out}", flush=True)
    with distributed.rank_out_dir(out) as run_out:  # only rank 0 writes to `out`
        result = run_cel(
            model,
            task,
            others=others,
            kind=args.ablation,
            out_dir=run_out,
            model_name=model_name,
            progress=not args.quiet and distributed.is_main(),
            **run_options(args),
        )
    obj = result.config.objective
    clean = result.summary.get("clean", {})
    print()
    print(f"clean {obj}: " + ", ".join(f"{k} {v[obj]:.3f}" for k, v in clean.items() if obj in v))
    with pd.option_context(
        "display.width", 140, "display.max_columns", 20, "display.float_format", "{:.3f}".format
    ):
        print(result.summary_table().to_string(index=False))
    significant = result.summary.get("significant_sizes", [])
    alpha = result.summary.get("alpha", 0.05)
    print(
        f"\nheld-out enhancement (one-sided sign-flip p, Holm-corrected across sizes, alpha "
        f"{alpha:.2g}): "
        + (f"significant at size(s) {significant}" if significant else "none significant")
    )
    best = ",".join(result.best) or "(none)"
    print(
        f"\nbest set: {best}  (positive d_{obj} = removing the heads helps; percentile and "
        f"random_share_ge against up to {result.config.n_random} random sets of the same size, "
        "or all of them where there are fewer)"
    )
    if "attribution_rank_correlation" in result.summary:
        rho = result.summary["attribution_rank_correlation"]
        print(
            "attribution vs exact rank correlation: "
            + ", ".join(f"{k} {v:.3f}" for k, v in rho.items())
        )
    print(f"results: {out}/ (report.md, config.json, CSV tables, plots)")
    return 0


def _sweep_inputs(args) -> tuple[list[str], list[str], list[str] | None]:
    """`(models, tasks, others)`; without --models the embedded family on its default task."""
    if args.models:
        if not args.tasks:
            raise WorkbenchError("--tasks is required with --models")
        return list(args.models), list(args.tasks), args.others
    import workbench.zoo as zoo

    family = list(getattr(zoo, "EMBEDDED_FAMILY", ("embedded",)))
    if _embedded_defaults() is None:
        raise WorkbenchError(
            "the embedded model family is not on disk (workbench.zoo); pass --models and --tasks"
        )
    tasks = list(args.tasks) if args.tasks else [zoo.DEFAULT_TASK]
    others = args.others if args.others is not None else list(zoo.SIDE_TASKS)
    return family, tasks, others


def run_sweep_command(args) -> int:
    """Run `workbench sweep`; returns the exit status."""
    import pandas as pd

    from workbench.sweep import TABLE_FILE, run_sweep

    models, tasks, others = _sweep_inputs(args)
    print(
        f"sweep: {len(models)} models x {len(tasks)} tasks x {len(args.ablation)} ablation kinds"
        f" -> {args.out}/",
        flush=True,
    )
    table = run_sweep(
        models,
        tasks,
        kinds=args.ablation,
        out=args.out,
        others=others,
        device=args.device,
        dtype=args.dtype,
        progress=not args.quiet,
        plot=not args.no_plots,
        split=args.split,
        **run_options(args),
    )
    cols = [
        "model",
        "task",
        "kind",
        "objective",
        "best",
        "gain",
        "gain_lo",
        "gain_hi",
        "percentile",
        "side_worst",
        "side_worst_task",
    ]
    shown = table[cols].copy()
    for c in ("model", "task"):  # paths print as their last part
        shown[c] = [Path(str(v)).name for v in shown[c]]
    print()
    with pd.option_context(
        "display.width", 160, "display.max_columns", 20, "display.float_format", "{:.3f}".format
    ):
        print(shown.to_string(index=False))
    print(
        "\ngain: held-out gain of the best set (ablated - clean, objective units) with its "
        "bootstrap interval; percentile among random sets of the same size; side_worst: its "
        "most negative effect on another task"
    )
    print(f"table: {args.out}/{TABLE_FILE}, plot: {args.out}/sweep.png, cells: {args.out}/*/")
    return 0


def notebooks_command(args) -> int:
    folder = REPO_ROOT / "notebooks"
    print("The curated notebooks import from `workbench`. Open them with:\n")
    print('    .venv/bin/pip install -e ".[notebooks]"')
    print(f"    .venv/bin/jupyter lab {folder if folder.is_dir() else 'notebooks/'}\n")
    if folder.is_dir():
        for nb in sorted(folder.glob("*.ipynb")):
            print(f"    {nb.name}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `workbench` console script; returns the exit status."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = ["cel", *argv]  # options without a subcommand are options of `cel`
    args = parser.parse_args(argv)
    from workbench import distributed

    try:
        distributed.init_from_env(getattr(args, "device", "auto"))
        with distributed.quiet_unless_main():
            status = int(args.func(args) or 0)
        distributed.shutdown()
        return status
    except WorkbenchError as e:
        print(f"workbench: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
