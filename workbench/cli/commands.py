"""The bodies of the `workbench` subcommands: check the inputs, load the model, run, print.

`run_cel_command`, `run_sweep_command`, `view_command` and `notebooks_command` each take the
parsed arguments of `workbench.cli.parser`'s parser and return the exit status (`compare`'s
body is in `workbench.cli.compare`, `explain`'s in `workbench.cli.explain`); `run_options`
collects a run's settings from them. Names and paths are checked before torch is imported
(`workbench.loading.sources`), so a typo answers in about a second; the heavy modules are
imported inside the functions, once the inputs are known to be good (this module imports at
its top only what `workbench --help` loads anyway).

`workbench cel` without `--model` runs on the embedded default model (`workbench.zoo`), its
default task and side tasks; so does `--model embedded_llama` or another name of
`workbench.zoo.EMBEDDED_FAMILY`, on that model. When the embedded checkpoint is not on disk it
says so and runs the built-in demo instead: the hand-built micro model of `workbench.cli.demo`
(2 layers x 4 heads, one harmful head and a harmful redundant pair), whose files are written to
a temporary folder.

`workbench sweep` without `--models` runs the embedded model family (`workbench.zoo`) on its
default task and prints the cross-family table (`workbench.sweep`); with `--models` and no
`--tasks` each model runs its own tasks (`workbench sweep --models smollm2-135m embedded`:
SmolLM2 on the hub tasks, the embedded model on its language's task).
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

from workbench import zoo
from workbench.cli.checks import (
    bars_off,
    check_options,
    check_out,
    check_task_objective,
    resumed_choices,
    use_threads,
)
from workbench.config import CELConfig
from workbench.environment import environment, environment_line, thread_choice
from workbench.errors import FewExamplesWarning, TaskWarning, WorkbenchError
from workbench.guards import MAIN, check_guards, parse_guards, task_metrics
from workbench.options import Racing
from workbench.tasks.names import check_task_name

DEFAULT_OUT = "cel_results"
REPO_ROOT = Path(__file__).resolve().parent.parent.parent
# CELConfig fields given by other means than a flag of the same name (`resolve_inputs`, the
# sweep's cells)
_NOT_FLAGS = ("model", "task", "others")


def run_options(args) -> dict:
    """The `run_cel` settings given by `workbench.cli.options.add_run_options` flags: every
    `CELConfig` field with a flag (stored under its name), and the `Compute` fields `token_budget`,
    `threads` and `share_prefix` when given."""
    options = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(CELConfig)
        if f.name not in _NOT_FLAGS and hasattr(args, f.name)
    }
    for name in ("token_budget", "threads"):
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    # the strategies' own settings (`--gates-steps`: `strategy__gates__steps`)
    own: dict[str, dict] = {}
    for dest, value in sorted(vars(args).items()):
        if dest.startswith("strategy__") and value is not None:
            _, strategy, setting = dest.split("__", 2)
            own.setdefault(strategy, {})[setting] = value
    if own:
        options["strategy_settings"] = own
    if getattr(args, "no_guard", False):
        if getattr(args, "guards", None):
            raise WorkbenchError("--guard and --no-guard contradict each other; give one")
        options["guards"] = ()
    racing = Racing.parse(getattr(args, "racing", Racing.AUTO))
    if racing is not Racing.AUTO:  # auto: the config's default, or measured (`decide_racing`)
        options["adaptive"] = racing is Racing.ON
    share = getattr(args, "share_prefix", "auto")
    if share != "auto":
        options["share_prefix"] = share == "on"
    return options


def embedded_defaults() -> tuple[str, list[str]] | None:
    """`(default task, side tasks)` when the embedded checkpoint is on disk, else None."""
    from workbench.loading.sources import is_checkpoint_folder

    if not is_checkpoint_folder(zoo.EMBEDDED_PATH):
        return None
    return zoo.DEFAULT_TASK, list(zoo.SIDE_TASKS)


def resolve_inputs(args) -> tuple[str, str, list[str], str | None]:
    """`(model, task, others, note)`: check the names (an unknown model first, then the
    tasks), fill the defaults; `note` says when the demo is used. Imports no torch."""
    from workbench.loading.sources import check_model_name

    model, task, others = _resolve_names(args)
    if model != "demo":
        check_model_name(model)
        for name in [task, *others]:
            check_task_name(name)
        return model, task, others, None
    from workbench.cli.demo import write_demo

    folder = Path(tempfile.mkdtemp(prefix="workbench-demo-"))
    model_dir, main, side = write_demo(folder)
    note = (
        "the embedded model is not on disk, so this is the built-in demo: the hand-"
        "built micro model of workbench.cli.demo (L0H3 hurts; L0H1 + L1H1 hurt jointly)"
    )
    return str(model_dir), str(main), [str(side)] if args.others is None else args.others, note


def _resolve_names(args) -> tuple[str, str | None, list[str]]:
    """`(model, task, others)` with the defaults filled in; model `"demo"` for the demo."""
    from workbench.loading.sources import check_model_name

    others = args.others
    if args.model is None or args.model == "embedded":
        defaults = embedded_defaults()
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
    if args.model in zoo.EMBEDDED_FAMILY:  # the family members share the embedded tasks
        task = args.task or zoo.DEFAULT_TASK
        return args.model, task, list(zoo.SIDE_TASKS) if others is None else others
    check_model_name(args.model)  # a typo is the first thing to report
    if args.task is None:
        raise WorkbenchError(f"--task is required with --model {args.model!r}")
    return args.model, args.task, others or []


def run_cel_command(args) -> int:
    """Run `workbench cel`; returns the exit status."""
    started = time.perf_counter()  # the run's wall time, torch's import and the load included
    model_name, task_name, other_names, note = resolve_inputs(args)  # no torch yet
    out = Path(args.out)
    try:  # every option, then the folder, before the model loads (`workbench.cli.checks`)
        config = check_options(args, run_options(args), "demo" if note else model_name,
                               task_name)
        from workbench.tasks.task import load_task

        task = load_task(task_name)
        others = [load_task(o) for o in other_names]
        check_task_objective(args.objective, task)
        _check_guards(config, task, others)
        check_out(out, args.overwrite, config, resumed_choices(args))
        check_hub_models([model_name])
    except BaseException:
        if note:  # the demo's files
            shutil.rmtree(Path(model_name).parent, ignore_errors=True)
        raise
    if note:
        print(f"note: {note}", flush=True)


    from workbench import distributed, progress
    from workbench.ablation import Ablation
    from workbench.cli.auto import decide_racing, resolves_search_dtype
    from workbench.estimate import LONG_RUN_S, estimate_run
    from workbench.loading.model import load_model
    from workbench.metrics.run_checks import check_choice_ablation
    from workbench.pipeline import check_counterfactuals, prepare_run, run_prepared, stages_done
    from workbench.precision import SlowSearchWarning, auto_search_dtype, lowers, slow_search_note
    from workbench.results.store import CONFIG_FILE

    check_counterfactuals(args.kind, [task, *others])  # before the model loads
    check_choice_ablation(Ablation(args.kind, per_position=args.per_position), [task, *others])
    use_threads(args.threads)
    with bars_off(args.quiet):  # also the GGUF conversion's and transformers' bars
        model = load_model(model_name, device=distributed.local_device(args.device),
                           dtype=args.dtype)
    if note:  # the demo's files are loaded; the results folder records what matters
        shutil.rmtree(Path(model_name).parent, ignore_errors=True)
        model_name = "demo"
    cfg = model.cfg
    # validated, sampled (--max-examples) and encoded once: the counts printed are the
    # examples the run uses, as fitted to this tokenizer (`workbench.tasks.fit` may drop some)
    options = run_options(args)
    resuming = (out / CONFIG_FILE).is_file() and not args.overwrite
    searched = resolves_search_dtype(options, out if resuming else None)
    with warnings.catch_warnings(record=True) as caught:  # said in one line below
        warnings.simplefilter("always", FewExamplesWarning)
        warnings.simplefilter("always", TaskWarning)
        run = prepare_run(model, task, others=others, model_name=model_name,
                          progress=not args.quiet and distributed.is_main(), **options)
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
    for w in caught:
        if issubclass(w.category, (FewExamplesWarning, TaskWarning)):
            print(f"warning: {w.message}", flush=True)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    # the threads and why, the device and the machine: what the timings were measured on
    env = environment(model, thread_choice(args.threads))
    print(f"environment: {environment_line(env)}", flush=True)
    slow = slow_search_note(cfg.device, args.search_dtype) if lowers(
        model, args.search_dtype) else None
    if slow:  # said once here; the run's own warning of it is not repeated
        print(f"note: {slow}", flush=True)
    if searched and run.config.search_dtype == "bfloat16":  # what auto chose, if it matters
        print(f"search: {auto_search_dtype(model, distributed.is_distributed())[1]}", flush=True)
    if resuming:
        print(f"resuming from {out}", flush=True)
    if Racing.parse(args.racing) is Racing.AUTO:
        why = decide_racing(run, out if resuming else None)
        if why:
            print(why, flush=True)
    with warnings.catch_warnings():  # a bfloat16 search times its copy (said once above)
        warnings.simplefilter("ignore", SlowSearchWarning)
        estimate = estimate_run(run, stages_done(out, args.overwrite))
    announced = estimate.seconds[1] >= LONG_RUN_S
    if announced:  # a long run says what it costs before it starts
        print(estimate.line(), flush=True)
    # in a log (stderr not a terminal), progress is plain lines with the run's ETA
    seconds = {stage: (c[0] * estimate.seconds_per_forward, c[1] * estimate.seconds_per_forward)
               for stage, c in estimate.costs.items() if c is not None}
    shown = not args.quiet and distributed.is_main()
    # the run's setup stage is timed from `prepare_run` on (the estimate included); the
    # cost's `load` stage is the time before it, torch's import and the load included
    run.launched, run.estimate = started, estimate
    with distributed.rank_out_dir(out) as run_out, progress.tracking(
            seconds if shown else {}, likely=estimate.likely,
            announced=announced or not shown), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", SlowSearchWarning)  # said once above
        warnings.showwarning = _one_line  # a task's warnings (TaskWarning), in one line each
        result = run_prepared(run, out_dir=run_out, overwrite=args.overwrite,
                              explain=not args.no_explain)
    from workbench.results.cost import cost_line
    from workbench.results.headline import explained_line, result_lines, results_line

    print("\n".join(result_lines(result)))
    if run.explanation is not None:
        print(explained_line(str(run.explanation.heads), out))
    if result.cost:  # what the run cost, in forward-times (`workbench.results.cost`)
        print(cost_line(result.cost))
    print(results_line(out))
    return 0


def _one_line(message, category, filename, lineno, file=None, line=None) -> None:
    """`warnings.showwarning` for a run: a `TaskWarning` as one `warning:` line, any other
    warning as Python shows it."""
    if issubclass(category, TaskWarning):
        print(f"warning: {message}", flush=True)
    else:
        (file or sys.stderr).write(
            warnings.formatwarning(message, category, filename, lineno, line))


def _check_guards(config, task, others) -> None:
    """`--guard` specs checked against the tasks before the model loads: a known task (main
    or a side task) and a metric that task can compute (`workbench.guards`)."""
    guards = parse_guards(config.guards)
    if guards:
        check_guards(guards, {MAIN: task_metrics(task),
                              **{o.name: task_metrics(o) for o in others}})


def check_hub_models(models) -> None:
    """For every hub name among `models`, one clear line at once when the Hugging Face hub
    cannot provide it (`workbench.loading.names.check_hub`), before torch is imported."""
    from workbench.loading.names import check_hub, hub_repo

    for name in dict.fromkeys(models):
        repo = hub_repo(name)
        if repo is not None:
            check_hub(repo)


def view_command(args) -> int:
    """Run `workbench view`; returns the exit status."""
    from workbench.results.view import write_view

    path = write_view(args.folder, interactive=False if getattr(args, "static", False)
                      else None)
    print(f"written: {path} (one file: open it in a browser, it loads nothing from the "
          "network)")
    return 0


def sweep_inputs(args) -> tuple[list[str], list[str], list[str] | None]:
    """`(models, tasks, others)`; without --models the embedded family on its default task."""
    from workbench.loading.sources import check_model_name

    if args.models:
        for m in args.models:
            check_model_name(m)
        for t in [*(args.tasks or []), *(args.others or [])]:
            check_task_name(t)
        check_hub_models(args.models)
        # without --tasks, each model runs its own tasks (workbench.tasks.names.own_tasks)
        return list(args.models), list(args.tasks) if args.tasks else None, args.others
    family = list(getattr(zoo, "EMBEDDED_FAMILY", ("embedded",)))
    if embedded_defaults() is None:
        raise WorkbenchError(
            "the embedded model family is not on disk (workbench.zoo); pass --models and --tasks"
        )
    tasks = list(args.tasks) if args.tasks else [zoo.DEFAULT_TASK]
    others = args.others if args.others is not None else list(zoo.SIDE_TASKS)
    return family, tasks, others


def run_sweep_command(args) -> int:
    """Run `workbench sweep`; returns the exit status."""
    models, tasks, others = sweep_inputs(args)
    options = run_options(args)
    for kind in args.kinds:  # every option before a model loads (`workbench.cli.checks`)
        check_options(args, {**options, "kind": kind})
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise WorkbenchError(f"--out {args.out!r} is a file; expected a sweep folder")
    from workbench.results.lock import check_writable

    check_writable(Path(args.out))
    n_tasks = f"{len(tasks)} tasks" if tasks is not None else "their own tasks"
    print(
        f"sweep: {len(models)} models x {n_tasks} x {len(args.kinds)} ablation kinds"
        f" -> {args.out}/",
        flush=True,
    )
    use_threads(args.threads)
    import pandas as pd

    from workbench.sweep import TABLE_FILE, run_sweep, shown_table

    # each cell's config.json records its own, with its device and dtype
    print(f"environment: {environment_line(environment(choice=thread_choice(args.threads)))}",
          flush=True)
    with bars_off(args.quiet):  # also the GGUF conversion's and transformers' bars
        table = run_sweep(models, tasks, kinds=args.kinds, out=args.out, others=others,
                          device=args.device, dtype=args.dtype, progress=not args.quiet,
                          plot=not args.no_plots, split=args.split, **options)
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
