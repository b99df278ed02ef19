"""The task names the workbench knows: the task files in `tasks/`, checked without torch.

A typo in `--task` should cost a second and name the task that was probably meant.
"""

from __future__ import annotations

from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.options import did_you_mean

TASKS_DIR = Path(__file__).resolve().parent.parent.parent / "tasks"

# The embedded model family (`workbench.zoo`, which re-exports these): the models trained on
# the project's own language, its primary conflicting task (on which `workbench cel` runs by
# default) and the tasks reported as side effects. Defined here, below the zoo, so that tasks
# and loading name them without importing the package that trains the models.
EMBEDDED_FAMILY: tuple[str, ...] = ("embedded", "embedded_llama", "embedded_neox")
DEFAULT_TASK: str = "embedded_map"
SIDE_TASKS: list[str] = ["embedded_copy", "embedded_add", "embedded_sort"]


def task_names() -> list[str]:
    """The names of the task files in `tasks/`."""
    return sorted(p.stem for p in TASKS_DIR.glob("*.jsonl")) if TASKS_DIR.is_dir() else []


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
    """The task files of `tasks/` written for pretrained language models (not the embedded
    model's language)."""
    embedded = {DEFAULT_TASK, *SIDE_TASKS}
    return [t for t in task_names() if t not in embedded]


def check_task_name(name: str) -> None:
    """Raise `WorkbenchError` unless `name` is a task file or a task in `tasks/`, or an lm-eval
    multiple-choice task (`lm_eval:<name>`, a task YAML) lm-eval knows."""
    from workbench.lm_eval.source import check_lm_eval_name, is_lm_eval_spec

    if is_lm_eval_spec(name):
        check_lm_eval_name(name)
        return
    if Path(name).expanduser().is_file() or (TASKS_DIR / f"{name}.jsonl").is_file():
        return
    known = task_names()
    hint = did_you_mean(name, known)
    raise WorkbenchError(
        f"task {name!r} is neither a file nor a task in {TASKS_DIR}{hint} (known tasks: "
        f"{', '.join(known)})"
    )
