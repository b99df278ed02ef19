"""The `workbench` command: `cel` (the main job), `sweep`, `explain`, `theory`, `notebooks`.

    workbench                                  # = workbench cel with its defaults
    workbench cel --model gpt2 --task ioi --others induction --ablation mean --out cel_ioi
    workbench sweep --models gpt2 embedded --tasks ioi embedded_map --ablation zero mean
    torchrun --nproc-per-node 2 -m workbench sweep   # the same, on 2 processes
    workbench cel --model path/to/checkpoint --task my_task.jsonl --method attribution
    workbench cel --model smollm2-135m --task ioi --threads 1   # 1 thread: a busy machine
    workbench explain --out cel_ioi            # (re)explain the best set of a results folder
    workbench theory --quick
    workbench notebooks

This module holds the parser and one function per subcommand (`run_cel_command`,
`run_sweep_command`, `explain_command`, `notebooks_command`; `theory`'s are in
`workbench.theory.cli`), which check the inputs, load the model and print the results. The
options of a run are `CELConfig`'s fields: each flag's default is the field's default and its
choices are the values of its option type (`workbench.options`), so neither is written here.

`workbench cel` without `--model` runs on the embedded default model (`workbench.zoo`), its
default task and side tasks; so does `--model embedded_llama` or another name of
`workbench.zoo.EMBEDDED_FAMILY`, on that model. When the embedded checkpoint is not on disk it
says so and runs the built-in demo instead: the hand-built micro model of `workbench.demo`
(2 layers x 4 heads, one harmful head and a harmful redundant pair), whose files are written to
a temporary folder.

`workbench sweep` without `--models` runs the embedded model family (`workbench.zoo`) on its
default task and prints the cross-family table (`workbench.sweep`); with `--models` and no
`--tasks` each model runs its own tasks (`workbench sweep --models smollm2-135m embedded`:
SmolLM2 on the hub tasks, the embedded model on its language's task). Under torchrun
(`WORLD_SIZE > 1`) every command joins the process group first (`workbench.distributed`).

A rerun with the same options and `--out` resumes from the stages already saved; Ctrl-C
prints one line saying so and exits with status 130. Input errors print one line
(`workbench: error: ...`) to stderr and exit with status 2.

Start-up is kept short: building the parser and checking names and paths import neither torch
nor TransformerLens (`workbench.config`, `workbench.options` and `workbench.names` need
neither), so `--help` and a typo answer in about a second; the heavy modules are imported only
once the inputs are known to be good.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import tempfile
from pathlib import Path

from workbench.config import CEL_METHODS, CELConfig
from workbench.errors import WorkbenchError
from workbench.names import SHIPPED_REAL
from workbench.options import STRATEGY_NAMES, AblationKind, ClusterMode, SweepSplit
from workbench.zoo import EMBEDDED_FAMILY

DEFAULT_OUT = "cel_results"
REPO_ROOT = Path(__file__).resolve().parent.parent
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C
# CELConfig's defaults, which are the flags' defaults
CONFIG_DEFAULTS = {f.name: f.default for f in dataclasses.fields(CELConfig)}
# CELConfig fields given by other means than a flag of the same name (`_resolve_inputs`, the
# sweep's cells)
_NOT_FLAGS = ("model", "task", "others")
THREADS_HELP = (
    "torch's CPU threads per operation (torch.set_num_threads), set before the model loads "
    "(default: torch's own, one per core); on a busy machine 1 thread is often faster"
)


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (a clear parser error otherwise)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1; got {text!r}")
    return value


def _use_threads(threads: int | None) -> None:
    """Set torch's intra-op CPU threads (None: leave torch's default)."""
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


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
        help=f"'embedded' (default; also {', '.join(EMBEDDED_FAMILY[1:])}), a shipped real "
        f"model ({', '.join(SHIPPED_REAL)}), a GGUF file (.gguf), a workbench checkpoint or "
        "Hugging Face folder, or a TransformerLens model name such as gpt2 (from the hub)",
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
    _add_run_options(p, several_kinds=False)
    p.set_defaults(func=run_cel_command)


def _add_run_options(p, several_kinds: bool) -> None:
    """The options of a CEL run, shared by `cel` and `sweep` (`sweep` takes several kinds).

    Each flag for a `CELConfig` field stores under the field's name (`run_options` collects
    them) with the field's default; `sweep`'s `--ablation` stores a list as `kinds`."""
    d = CONFIG_DEFAULTS
    p.add_argument(
        "--ablation",
        dest="kinds" if several_kinds else "kind",
        choices=AblationKind.values(),
        default=[d["kind"]] if several_kinds else d["kind"],
        nargs="+" if several_kinds else None,
        help="replace a removed head's z by 0, by its mean over each task's prompts, or by its "
        "z on the example's counterfactual prompt (tasks with 'counterfactual' fields) "
        f"(default {d['kind']})",
    )
    p.add_argument(
        "--per-position",
        action="store_true",
        default=d["per_position"],
        help="mean ablation with the mean at each position (prompts of equal length)",
    )
    p.add_argument(
        "--token-budget",
        type=int,
        default=None,
        metavar="N",
        help="the most tokens (rows x padded length) in one forward; bounds memory "
        "(default: picked per device)",
    )
    p.add_argument(
        "--method",
        choices=[m.value for m in CEL_METHODS],
        default=d["method"],
        help="single-head screening: exact (prefix reuse) or attribution (gradients) "
        "(default %(default)s)",
    )
    p.add_argument(
        "--no-attribution-check",
        dest="check_attribution",
        action="store_false",
        default=d["check_attribution"],
        help="with --method attribution, skip the exact screening that reports attribution's "
        "agreement with it (faster; the table then has attribution's estimates only)",
    )
    p.add_argument(
        "--max-size",
        type=int,
        default=d["max_size"],
        metavar="N",
        help="largest head set to search (default %(default)s)",
    )
    p.add_argument(
        "--strategy",
        dest="strategies",
        nargs="+",
        default=list(d["strategies"]),
        choices=STRATEGY_NAMES,
        metavar="NAME",
        help=f"search strategies ({', '.join(STRATEGY_NAMES)}), run in order on a shared "
        "cache (default "
        f"{' '.join(d['strategies'])}: knockouts over the heads that do not clearly hurt, then "
        "exact scoring of finalists)",
    )
    p.add_argument(
        "--cluster",
        choices=ClusterMode.values(),
        default=d["cluster"],
        help="held-out intervals and p-values resample the tasks' groups (group; auto: when a "
        "split has at least 8) or single examples (none) (default %(default)s)",
    )
    p.add_argument(
        "--top-m",
        type=int,
        default=d["top_m"],
        metavar="N",
        help="candidates for the exhaustive search (default %(default)s)",
    )
    p.add_argument(
        "--search-budget",
        type=int,
        default=d["search_budget"],
        metavar="N",
        help="masks the interaction search may score on the selection split "
        "(default: 2.5 x heads + 500)",
    )
    p.add_argument(
        "--objective",
        default=d["objective"],
        help="metric to improve: accuracy, logprob, logit_diff or prob_diff (default: the task's)",
    )
    p.add_argument(
        "--n-random",
        type=int,
        default=d["n_random"],
        metavar="N",
        help="random head sets per size in the held-out baseline (default %(default)s)",
    )
    p.add_argument(
        "--n-boot",
        type=int,
        default=d["n_boot"],
        metavar="N",
        help="paired bootstrap resamples of the held-out intervals (default %(default)s)",
    )
    p.add_argument(
        "--max-examples",
        type=int,
        default=d["max_examples"],
        metavar="N",
        help="use only N examples of each split of every task (main and side), drawn at random "
        "with --seed before fitting to the tokenizer: a quick look (default: all)",
    )
    p.add_argument(
        "--no-side-screening",
        dest="side_screening",
        action="store_false",
        default=d["side_screening"],
        help="screen heads on the main task only (no per-head side-task columns); the found "
        "sets' side effects are measured as always",
    )
    p.add_argument(
        "--side-examples",
        type=int,
        default=d["side_examples"],
        metavar="N",
        help="the same for the side tasks alone (default: --max-examples)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=d["seed"],
        metavar="N",
        help="the seed every random draw of the run derives from (default %(default)s)",
    )
    _add_load_options(p)
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _add_load_options(p) -> None:
    """Where, in what precision and on how many threads the model runs."""
    p.add_argument("--device", default="auto", help="auto (cuda, mps, cpu), cpu, cuda, cuda:1, mps")
    p.add_argument(
        "--dtype",
        default=None,
        help="float32, bfloat16 (bf16), float16 (fp16), float64, or auto: bfloat16 on CUDA GPUs "
        "that support it, float16 on older ones, float32 on CPU and MPS (default: float32, or "
        "the dtype a workbench checkpoint was saved in; bfloat16 halves GPU memory)",
    )
    p.add_argument("--threads", type=positive_int, default=None, metavar="N", help=THREADS_HELP)


def run_options(args) -> dict:
    """The `run_cel` settings given by `_add_run_options` flags: every `CELConfig` field with
    a flag (stored under its name), and the `Compute` fields `token_budget` and `threads`
    when given."""
    options = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(CELConfig)
        if f.name not in _NOT_FLAGS and hasattr(args, f.name)
    }
    for name in ("token_budget", "threads"):
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    return options


def _add_sweep_parser(subparsers) -> None:

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
    _add_run_options(p, several_kinds=True)
    p.set_defaults(func=run_sweep_command)


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
    p.add_argument("--out", required=True, metavar="DIR", help="a CEL results folder")
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
        help="the task file, when the recorded task name is not a task in tasks/ (its "
        "fingerprint must match the recorded one)",
    )
    p.add_argument(
        "--split",
        choices=["heldout", "select"],
        default="heldout",
        help="the split whose examples the explanation is computed on (default %(default)s)",
    )
    _add_load_options(p)
    p.set_defaults(func=explain_command)


def _add_notebooks_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "notebooks",
        help="how to open the curated notebooks",
        description="Print how to open the notebooks in notebooks/.",
    )
    p.set_defaults(func=notebooks_command)


THEORY_HELP = "train the multi-head attention theory model and measure head trade-offs"


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `workbench` parser. The `theory` subcommand's options need torch, so they are
    added only when `command` is `"theory"`; otherwise it is listed with its help line."""
    parser = argparse.ArgumentParser(
        prog="workbench",
        description="Capability Enhancement Localization on TransformerLens models. "
        "With no subcommand, runs `workbench cel` with its defaults.",
    )
    subparsers = parser.add_subparsers(
        dest="command", metavar="{cel,sweep,explain,theory,notebooks}"
    )
    _add_cel_parser(subparsers)
    _add_sweep_parser(subparsers)
    _add_explain_parser(subparsers)
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


def _embedded_defaults() -> tuple[str, list[str]] | None:
    """`(default task, side tasks)` when the embedded checkpoint is on disk, else None."""
    from workbench.names import is_checkpoint_folder
    from workbench.zoo import DEFAULT_TASK, EMBEDDED_PATH, SIDE_TASKS

    if not is_checkpoint_folder(EMBEDDED_PATH):
        return None
    return DEFAULT_TASK, list(SIDE_TASKS)


def _resolve_inputs(args) -> tuple[str, str, list[str], str | None]:
    """`(model, task, others, note)`: check the names (an unknown model first, then the
    tasks), fill the defaults; `note` says when the demo is used. Imports no torch."""
    from workbench.names import check_model_name, check_task_name

    model, task, others = _resolve_names(args)
    if model != "demo":
        check_model_name(model)
        for name in [task, *others]:
            check_task_name(name)
        return model, task, others, None
    from workbench.demo import write_demo

    folder = Path(tempfile.mkdtemp(prefix="workbench-demo-"))
    model_dir, main, side = write_demo(folder)
    note = (
        "the embedded model is not on disk, so this is the built-in demo: the hand-"
        "built micro model of workbench.demo (L0H3 hurts; L0H1 + L1H1 hurt jointly)"
    )
    return str(model_dir), str(main), [str(side)] if args.others is None else args.others, note


def _resolve_names(args) -> tuple[str, str | None, list[str]]:
    """`(model, task, others)` with the defaults filled in; model `"demo"` for the demo."""
    from workbench.names import check_model_name
    from workbench.zoo import DEFAULT_TASK, EMBEDDED_FAMILY, SIDE_TASKS

    others = args.others
    if args.model is None or args.model == "embedded":
        defaults = _embedded_defaults()
        if defaults is not None:
            task = args.task or defaults[0]
            return "embedded", task, defaults[1] if others is None else others
        if args.model == "embedded":
            raise WorkbenchError(
                "the embedded model is not on disk yet (workbench.zoo."
                "EMBEDDED_PATH); pass --model NAME|PATH"
            )
        if args.task is not None:
            raise WorkbenchError("--task needs --model (the embedded model is not on disk)")
        return "demo", None, others or []
    if args.model in EMBEDDED_FAMILY:  # the family members share the embedded tasks
        task = args.task or DEFAULT_TASK
        return args.model, task, list(SIDE_TASKS) if others is None else others
    check_model_name(args.model)  # a typo is the first thing to report
    if args.task is None:
        raise WorkbenchError(f"--task is required with --model {args.model!r}")
    return args.model, args.task, others or []


def run_cel_command(args) -> int:
    """Run `workbench cel`; returns the exit status."""
    model_name, task_name, other_names, note = _resolve_inputs(args)  # no torch yet
    out = Path(args.out)
    _check_out(out, args.overwrite)
    if note:
        print(f"note: {note}", flush=True)

    import pandas as pd

    from workbench import distributed
    from workbench.loading import load_model
    from workbench.pipeline import check_counterfactuals, prepare_run, run_prepared
    from workbench.store import CONFIG_FILE
    from workbench.tasks import load_task

    task = load_task(task_name)
    others = [load_task(o) for o in other_names]
    check_counterfactuals(args.kind, [task, *others])  # before the model loads
    _use_threads(args.threads)
    model = load_model(model_name, device=distributed.local_device(args.device), dtype=args.dtype)
    if note:  # the demo's files are loaded; the results folder records what matters
        shutil.rmtree(Path(model_name).parent, ignore_errors=True)
        model_name = "demo"
    cfg = model.cfg
    # validated, sampled (--max-examples) and encoded once: the counts printed are the
    # examples the run uses, as fitted to this tokenizer (`workbench.task_fit` may drop some)
    run = prepare_run(model, task, others=others, model_name=model_name,
                      progress=not args.quiet and distributed.is_main(), **run_options(args))
    sampled = run.main
    n_sel, n_held = len(run.select), len(run.heldout)
    n_file = len([e for e in sampled.examples if e.split == "select"])
    where = "sampled" if args.max_examples else "in the file"
    kept = ("" if (n_sel, n_held) == (n_file, len(sampled) - n_file) else
            f" (of {n_file} / {len(sampled) - n_file} {where}, fitted to this tokenizer)")
    print(
        f"model {model_name}: {cfg.n_layers} layers x {cfg.n_heads} heads on {cfg.device}; "
        f"task {task.name}: {n_sel} selection / {n_held} held-out examples{kept}; "
        f"side tasks: {', '.join(o.name for o in others) or 'none'}",
        flush=True,
    )
    if (out / CONFIG_FILE).is_file() and not args.overwrite:
        print(f"resuming from {out}", flush=True)
    with distributed.rank_out_dir(out) as run_out:  # only rank 0 writes to `out`
        result = run_prepared(run, out_dir=run_out, overwrite=args.overwrite)
    from workbench.report import split_order

    obj = result.config.objective
    clean = result.summary.get("clean", {})
    print()
    print(f"clean {obj}: " + ", ".join(f"{k} {clean[k][obj]:.3f}" for k in split_order(clean)
                                       if obj in clean[k]))
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
    print("\n" + _best_line(result))
    if "attribution_rank_correlation" in result.summary:
        rho = result.summary["attribution_rank_correlation"]
        print(
            "attribution vs exact rank correlation: "
            + ", ".join(f"{k} {v:.3f}" for k, v in rho.items())
        )
    if not args.no_explain and distributed.is_main() and result.complete:
        from workbench.explain.report import explain_folder

        # on the examples the run used (`--max-examples` samples them)
        ex = explain_folder(out, model, sampled, result)
        if ex is not None:
            print(f"explanation of {ex.heads}: {out}/report.md, {out}/explanation/")
    print(f"results: {out}/ (report.md, config.json, CSV tables, plots)")
    return 0


def _best_line(result) -> str:
    """The CLI's line on the best set: only a significant set is called best."""
    obj = result.config.objective
    baseline = (
        f"positive d_{obj} = removing the heads helps; percentile and random_share_ge against "
        f"up to {result.config.n_random} random sets of the same size, or all of them where "
        "there are fewer"
    )
    if result.best:
        return f"best set: {','.join(result.best)}  ({baseline})"
    top = result.top_candidate
    if not top:
        return "best set: (none): no head set was confirmed"
    return (
        f"best set: none: no significant enhancement (p_holm >= {result.alpha:.2g} at every "
        f"size); top candidate: {','.join(top)} ({baseline})"
    )


def _check_out(out: Path, overwrite: bool) -> None:
    """Refuse, before loading anything, an --out that is a file, and --overwrite on a folder
    another run holds (`run_cel` checks again under the lock)."""
    if out.exists() and not out.is_dir():
        raise WorkbenchError(f"--out {str(out)!r} is a file; expected a folder (new or a CEL "
                             "results folder)")
    if overwrite and out.is_dir():
        from workbench.store import check_unlocked

        check_unlocked(out)


def explain_command(args) -> int:
    """Run `workbench explain`; returns the exit status."""
    from workbench.names import check_model_name, check_task_name

    out = Path(args.out)
    if not (out / "config.json").is_file():  # the common mistake, answered before imports
        raise WorkbenchError(f"{str(out)!r} is not a CEL results folder (no config.json)")
    from workbench.store import read_run_file

    cfg = read_run_file(out)["config"]
    model_name = args.model or cfg["model"]
    task_name = args.task or cfg["task"]
    demo_folder = None
    if model_name == "demo" and args.model is None:  # the demo's files are rebuilt
        from workbench.demo import write_demo

        demo_folder = Path(tempfile.mkdtemp(prefix="workbench-demo-"))
        model_dir, main, _ = write_demo(demo_folder)
        model_name = str(model_dir)
        task_name = args.task or str(main)
    try:
        check_model_name(model_name)
        try:
            check_task_name(task_name)
        except WorkbenchError:
            if args.task is not None:
                raise
            raise WorkbenchError(
                f"{str(out)!r} records task {task_name!r}, which is not a task in tasks/; pass "
                "--task with the task file that run was made from"
            ) from None
        from workbench.explain.report import explain_folder
        from workbench.fingerprint import model_fingerprint, task_fingerprint
        from workbench.loading import load_model
        from workbench.results import CELResult
        from workbench.tasks import load_task

        result = CELResult.load(out)
        if result.confirmation.empty:
            raise WorkbenchError(f"{str(out)!r} has no confirmation yet; finish the run first "
                                 "(rerun the same `workbench cel` command)")
        cfg = result.config  # a run on a sample (`--max-examples`) recorded the sample's print
        task = load_task(task_name).sample_per_split(cfg.max_examples, cfg.seed)
        if task_fingerprint(task) != result.config.task_fingerprint:
            raise WorkbenchError(
                f"task {task_name!r} is not the task {str(out)!r} was made from (its fingerprint "
                "differs); pass --task with the task file of that run"
            )
        _use_threads(args.threads)
        model = load_model(model_name, device=args.device, dtype=args.dtype)
        if model_fingerprint(model) != result.config.model_fingerprint:
            raise WorkbenchError(
                f"model {model_name!r} is not the model {str(out)!r} was made from (its "
                "fingerprint differs); pass --model with that model (and the same --dtype)"
            )
        ex = explain_folder(out, model, task, result, split=args.split)
    finally:
        if demo_folder is not None:
            shutil.rmtree(demo_folder, ignore_errors=True)
    if ex is None:
        print(f"{out}: no head set to explain")
        return 0
    print(f"explained {ex.heads} on the {args.split} split of {task.name} "
          f"({ex.config['n_examples']} examples)")
    if not ex.config.get("significant", True):
        print(f"note: {ex.config['note']}")
    print(f"written: {out}/report.md, {out}/explanation.png, {out}/explanation/")
    return 0


def _sweep_inputs(args) -> tuple[list[str], list[str], list[str] | None]:
    """`(models, tasks, others)`; without --models the embedded family on its default task."""
    from workbench.names import check_model_name, check_task_name

    if args.models:
        for m in args.models:
            check_model_name(m)
        for t in [*(args.tasks or []), *(args.others or [])]:
            check_task_name(t)
        # without --tasks, each model runs its own tasks (workbench.names.own_tasks)
        return list(args.models), list(args.tasks) if args.tasks else None, args.others
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

    from workbench.sweep import TABLE_FILE, run_sweep, shown_table

    models, tasks, others = _sweep_inputs(args)
    n_tasks = f"{len(tasks)} tasks" if tasks is not None else "their own tasks"
    print(
        f"sweep: {len(models)} models x {n_tasks} x {len(args.kinds)} ablation kinds"
        f" -> {args.out}/",
        flush=True,
    )
    _use_threads(args.threads)
    table = run_sweep(
        models,
        tasks,
        kinds=args.kinds,
        out=args.out,
        others=others,
        device=args.device,
        dtype=args.dtype,
        progress=not args.quiet,
        plot=not args.no_plots,
        split=args.split,
        **run_options(args),
    )
    shown = shown_table(table)
    print()
    with pd.option_context(
        "display.width", 160, "display.max_columns", 20, "display.float_format", "{:.3f}".format
    ):
        print(shown.to_string(index=False))
    print(
        "\ngain: held-out gain of the best set (ablated - clean, objective units) with its "
        "bootstrap interval; significant False: no set is, and best is the top candidate; "
        "percentile among random sets of the same size; side_worst: its most negative effect "
        "on another task"
    )
    for r in table.itertuples():
        if r.status != "done" or r.note:
            print(f"{r.folder}: {r.status}" + (f": {r.note}" if r.note else ""))
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
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = ["cel", *argv]  # options without a subcommand are options of `cel`
    args = build_parser(argv[0]).parse_args(argv)
    try:
        if not _launched_by_torchrun():
            return int(args.func(args) or 0)
        from workbench import distributed

        distributed.init_from_env(getattr(args, "device", "auto"))
        with distributed.quiet_unless_main():
            status = int(args.func(args) or 0)
        distributed.shutdown()
        return status
    except WorkbenchError as e:
        print(f"workbench: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        out = getattr(args, "out", None)
        resume = f"; rerun the same command to resume from {out}" if args.command in (
            "cel", "sweep") else ""
        print(f"\ninterrupted{resume}", file=sys.stderr)
        return EXIT_INTERRUPTED


def _launched_by_torchrun() -> bool:
    """True when torchrun started several processes (`WORLD_SIZE > 1`); checked without
    importing torch (`workbench.distributed` validates the value)."""
    return os.environ.get("WORLD_SIZE", "1").strip() not in ("", "1")


if __name__ == "__main__":
    sys.exit(main())
