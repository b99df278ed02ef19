"""The task names the workbench knows: the task files in `tasks/` (the probe tasks) and in
`tasks/benchmarks/` (the benchmark-format multiple-choice tasks), checked without torch.

A name is a file's stem in either folder (no stem is in both: `tests/tasks/test_names.py`).
A typo in `--task` should cost a second and name the task that was probably meant.
"""

from __future__ import annotations

from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.options import did_you_mean

TASKS_DIR = Path(__file__).resolve().parent.parent.parent / "tasks"
BENCHMARKS_DIR = TASKS_DIR / "benchmarks"
TASK_DIRS: tuple[Path, ...] = (TASKS_DIR, BENCHMARKS_DIR)  # searched in this order

# The embedded model family (`workbench.zoo`, which re-exports these): the models trained on
# the project's own language, its primary conflicting task (on which `workbench cel` runs by
# default) and the tasks reported as side effects. Defined here, below the zoo, so that tasks
# and loading name them without importing the package that trains the models.
EMBEDDED_FAMILY: tuple[str, ...] = ("embedded", "embedded_llama", "embedded_neox")
DEFAULT_TASK: str = "embedded_map"
SIDE_TASKS: list[str] = ["embedded_copy", "embedded_add", "embedded_sort"]


def _stems(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.jsonl")) if folder.is_dir() else []


def task_names() -> list[str]:
    """The names of the task files in `tasks/` and `tasks/benchmarks/`."""
    return sorted({name for folder in TASK_DIRS for name in _stems(folder)})


def benchmark_task_names() -> list[str]:
    """The names of the benchmark-format task files in `tasks/benchmarks/`."""
    return _stems(BENCHMARKS_DIR)


def task_file(name: str) -> Path | None:
    """The task file a shipped task's name stands for (`tasks/<name>.jsonl`, else
    `tasks/benchmarks/<name>.jsonl`), or None when neither exists."""
    if not name or "/" in name or "\\" in name:
        return None
    for folder in TASK_DIRS:
        if (folder / f"{name}.jsonl").is_file():
            return folder / f"{name}.jsonl"
    return None


def own_tasks(model: str) -> tuple[list[str], list[str] | None]:
    """The tasks a model is swept on when none are named, and their side tasks.

    The embedded model family has its own language: its default task (`workbench.zoo`) with the
    zoo's side tasks. Every other model (hub names, the shipped real models, local folders) gets
    the hub tasks, each with the others as side tasks (None: the sweep's other tasks).
    """
    if model in EMBEDDED_FAMILY:
        return [DEFAULT_TASK], list(SIDE_TASKS)
    return hub_task_names(), None


def hub_task_names() -> list[str]:
    """The probe task files of `tasks/` written for pretrained language models (not the
    embedded model's language, nor the benchmark-format tasks: a sweep names those itself)."""
    embedded = {DEFAULT_TASK, *SIDE_TASKS}
    return [t for t in _stems(TASKS_DIR) if t not in embedded]


def check_task_name(name: str) -> None:
    """Raise `WorkbenchError` unless `name` is a task file or a task in `tasks/` or
    `tasks/benchmarks/`, or an lm-eval multiple-choice task (`lm_eval:<name>`, a task YAML)
    lm-eval knows."""
    from workbench.lm_eval.source import check_lm_eval_name, is_lm_eval_spec

    if is_lm_eval_spec(name):
        check_lm_eval_name(name)
        return
    if Path(name).expanduser().is_file() or task_file(name) is not None:
        return
    known = task_names()
    hint = did_you_mean(name, known)
    raise WorkbenchError(
        f"task {name!r} is neither a file nor a task in {TASKS_DIR} or {BENCHMARKS_DIR}"
        f"{hint} (known tasks: "
        f"{', '.join(known)})"
    )
