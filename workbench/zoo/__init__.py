"""The project's own models: the embedded multi-task model family, its language and its tasks.

`EMBEDDED_PATH` is the shipped checkpoint folder (`load_model("embedded")` loads it);
`DEFAULT_TASK` is its primary conflicting task, on which `workbench cel` runs by default, and
`SIDE_TASKS` are the tasks reported as side effects. See `workbench.zoo.language` for the
design of the tasks and why removing heads can help one of them.

`EMBEDDED_FAMILY` names the embedded model and the members of other architecture families
trained by the same recipe on the same language and tasks (`workbench.zoo.train.ARCHITECTURES`
says what each is); `load_model(name)` loads each from `embedded_path(name)`, and they share
`DEFAULT_TASK` and `SIDE_TASKS`.

The names are defined below this package, where loading and the task names read them
(`workbench.tasks.names`: the family, its tasks; `workbench.loading.shipped`: the checkpoint
folders), so that neither imports the package that trains the models; they are re-exported
here.
"""

from workbench.loading.shipped import EMBEDDED_PATH, ZOO_DIR, embedded_path
from workbench.tasks.names import DEFAULT_TASK, EMBEDDED_FAMILY, SIDE_TASKS

__all__ = [
    "DEFAULT_TASK", "EMBEDDED_FAMILY", "EMBEDDED_PATH", "SIDE_TASKS", "ZOO_DIR", "embedded_path",
]
