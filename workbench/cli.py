"""The `workbench` command: `cel` (the main job), `theory`, `notebooks`.

    workbench                                  # = workbench cel with its defaults
    workbench cel --model gpt2 --task ioi --others induction --ablation mean --out cel_ioi
    workbench cel --model path/to/checkpoint --task my_task.jsonl --method attribution
    workbench theory --quick
    workbench notebooks

`workbench cel` without `--model` runs on the embedded default model (`workbench.zoo`), its
default task and side tasks; so does `--model embedded_llama` or another name of
`workbench.zoo.EMBEDDED_FAMILY`, on that model. When the embedded checkpoint is not on disk it
says so and runs the built-in demo instead: the hand-built micro model of `workbench.demo`
(2 layers x 4 heads, one harmful head and a harmful redundant pair), whose files are written to
a temporary folder.

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
    from workbench.search import STRATEGIES

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
        "--ablation",
        choices=["zero", "mean"],
        default="zero",
        help="replace a removed head's z by 0 or by its mean over the selection split",
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
        default=["exhaustive"],
        choices=sorted(STRATEGIES),
        help="search strategies, run in order on a shared cache",
    )
    p.add_argument("--top-m", type=int, default=8, help="candidates for the exhaustive search")
    p.add_argument(
        "--objective",
        default=None,
        help="metric to improve: accuracy, logprob or logit_diff (default: the task's)",
    )
    p.add_argument(
        "--n-random",
        type=int,
        default=200,
        help="random head sets per size in the held-out baseline",
    )
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--out",
        default=DEFAULT_OUT,
        metavar="DIR",
        help=f"results folder; a rerun resumes from it (default {DEFAULT_OUT})",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="delete an existing results folder in --out first"
    )
    p.add_argument("--device", default="auto", help="auto (cuda, mps, cpu), cpu, cuda, cuda:1, mps")
    p.add_argument("--dtype", default=None, help="e.g. float32, bf16 (default: the model's)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run_cel_command)


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
    subparsers = parser.add_subparsers(dest="command", metavar="{cel,theory,notebooks}")
    _add_cel_parser(subparsers)
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

    from workbench.loading import load_model
    from workbench.results import CONFIG_FILE, read_run_file
    from workbench.search import run_cel
    from workbench.tasks import load_task

    model_name, task_name, other_names, note = _resolve_inputs(args)
    if note:
        print(f"note: {note}", flush=True)
    out = Path(args.out)
    if args.overwrite and (out / CONFIG_FILE).is_file():
        read_run_file(out)  # only ever delete a CEL results folder
        shutil.rmtree(out)
    model = load_model(model_name, device=args.device, dtype=args.dtype)
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
    result = run_cel(
        model,
        task,
        others=others,
        kind=args.ablation,
        method=args.method,
        max_size=args.max_size,
        strategy=args.strategy,
        n_random=args.n_random,
        seed=args.seed,
        out_dir=out,
        objective=args.objective,
        top_m=args.top_m,
        n_boot=args.n_boot,
        model_name=model_name,
        progress=not args.quiet,
    )
    obj = result.config.objective
    clean = result.summary.get("clean", {})
    print()
    print(f"clean {obj}: " + ", ".join(f"{k} {v[obj]:.3f}" for k, v in clean.items() if obj in v))
    with pd.option_context(
        "display.width", 140, "display.max_columns", 20, "display.float_format", "{:.3f}".format
    ):
        print(result.summary_table().to_string(index=False))
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
    try:
        return int(args.func(args) or 0)
    except WorkbenchError as e:
        print(f"workbench: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
