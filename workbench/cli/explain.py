"""`workbench explain`: explain the best head set of a finished results folder.

`explain_command` reads the folder's `config.json`, finds the model and the task it was made
from (`recorded_task`: the task file it records, else the task's name; the demo's files are
rebuilt), checks their names before torch is imported and their fingerprints once they are
loaded, and calls `workbench.explain.report.explain_folder`, which writes `explanation/`,
`explanation.png` and the report's section. As in `workbench.cli.commands`, the heavy modules
are imported inside the function, once the inputs are known to be good, so that `--help` and
a typo answer in about a second.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from workbench.cli.checks import use_threads
from workbench.cli.commands import check_hub_models
from workbench.errors import WorkbenchError
from workbench.tasks.names import check_task_name


def explain_command(args) -> int:
    """Run `workbench explain`; returns the exit status."""
    from workbench.loading.sources import check_model_name

    out = explain_folder_arg(args)
    if not (out / "config.json").is_file():  # the common mistake, answered before imports
        raise WorkbenchError(f"{str(out)!r} is not a CEL results folder (no config.json)")
    from workbench.results.store import read_run_file

    run_file = read_run_file(out)
    cfg = run_file["config"]
    model_name = args.model or cfg["model"]
    task_name = args.task or recorded_task(out, run_file, demo=model_name == "demo")
    demo_folder = None
    if model_name == "demo" and args.model is None:  # the demo's files are rebuilt
        from workbench.cli.demo import write_demo

        demo_folder = Path(tempfile.mkdtemp(prefix="workbench-demo-"))
        model_dir, main, _ = write_demo(demo_folder)
        model_name = str(model_dir)
        task_name = args.task or str(main)
    try:
        check_model_name(model_name)
        check_hub_models([model_name])
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
        from workbench.loading.model import load_model
        from workbench.results.fingerprint import model_fingerprint, task_fingerprint
        from workbench.results.result import CELResult
        from workbench.tasks.task import load_task

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
        use_threads(args.threads)
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


def explain_folder_arg(args) -> Path:
    """The results folder of `workbench explain`: `DIR` or `--out DIR` (the same if both)."""
    folder, out = getattr(args, "folder", None), getattr(args, "out", None)
    if folder and out and Path(folder) != Path(out):
        raise WorkbenchError(f"give the results folder once: {folder!r} and --out {out!r} differ")
    if not (folder or out):
        raise WorkbenchError("workbench explain needs a results folder: workbench explain DIR")
    return Path(folder or out)


def recorded_task(out: Path, run_file: dict, demo: bool = False) -> str:
    """The task a results folder was made from: the task file its `config.json` records
    (`summary.task_file`), else (older folders, tasks built in memory, the demo) the task
    name. A recorded file that is gone is one clear error."""
    path = run_file.get("summary", {}).get("task_file")
    if not path or demo:
        return run_file["config"]["task"]
    if not Path(path).is_file():
        raise WorkbenchError(f"{str(out)!r} was made from task file {path!r}, which is gone; "
                             "restore it or pass --task with a copy of it")
    return path
