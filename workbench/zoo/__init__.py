"""The project's own models: the embedded multi-task model, its language and its tasks.

`EMBEDDED_PATH` is the shipped checkpoint folder (`load_model("embedded")` loads it);
`DEFAULT_TASK` is its primary conflicting task, on which `workbench cel` runs by default, and
`SIDE_TASKS` are the tasks reported as side effects. See `workbench.zoo.language` for the
design of the tasks and why removing heads can help one of them.
"""

from pathlib import Path

EMBEDDED_PATH: Path = Path(__file__).resolve().parent / "embedded"
DEFAULT_TASK: str = "embedded_map"
SIDE_TASKS: list[str] = ["embedded_copy", "embedded_add", "embedded_sort"]

__all__ = ["DEFAULT_TASK", "EMBEDDED_PATH", "SIDE_TASKS"]
