"""The project's own models: the embedded multi-task model family, its language and its tasks.

`EMBEDDED_PATH` is the shipped checkpoint folder (`load_model("embedded")` loads it);
`DEFAULT_TASK` is its primary conflicting task, on which `workbench cel` runs by default, and
`SIDE_TASKS` are the tasks reported as side effects. See `workbench.zoo.language` for the
design of the tasks and why removing heads can help one of them.

`EMBEDDED_FAMILY` names the embedded model and the members of other architecture families
trained by the same recipe on the same language and tasks (`workbench.zoo.train.ARCHITECTURES`
says what each is); `load_model(name)` loads each from `embedded_path(name)`, and they share
`DEFAULT_TASK` and `SIDE_TASKS`.
"""

from pathlib import Path

from workbench.errors import WorkbenchError

ZOO_DIR: Path = Path(__file__).resolve().parent
EMBEDDED_PATH: Path = ZOO_DIR / "embedded"
EMBEDDED_FAMILY: tuple[str, ...] = ("embedded", "embedded_llama", "embedded_neox")
DEFAULT_TASK: str = "embedded_map"
SIDE_TASKS: list[str] = ["embedded_copy", "embedded_add", "embedded_sort"]


def embedded_path(name: str) -> Path:
    """The checkpoint folder of the family member `name` (a name in `EMBEDDED_FAMILY`)."""
    if name not in EMBEDDED_FAMILY:
        raise WorkbenchError(
            f"unknown embedded model {name!r}; expected one of {list(EMBEDDED_FAMILY)}"
        )
    return EMBEDDED_PATH if name == "embedded" else ZOO_DIR / name


__all__ = [
    "DEFAULT_TASK", "EMBEDDED_FAMILY", "EMBEDDED_PATH", "SIDE_TASKS", "embedded_path",
]
