"""The one exception type of the package, and its warnings.

Every check on user input (a model name, a head spec, a task file, a strategy name) raises
`WorkbenchError` with a message saying what was received and what was expected, so a user
never has to read a traceback from inside torch to learn what they typed wrong.
"""


class WorkbenchError(ValueError):
    """Bad input to the workbench: the message says what was received and what was expected."""


class FewExamplesWarning(UserWarning):
    """A run on a task (or a split, or a side task) with fewer examples than its intervals
    need (`workbench.tasks.format.MIN_SPLIT_EXAMPLES`): it runs, and says so."""


class TaskWarning(UserWarning):
    """A run on a task whose scores say little as given: a multi-token next-token task with
    wrong answers that its accuracy never compares, or a 0/1 objective at its floor or at
    chance on a split (`workbench.metrics.run_checks`). It runs, and says so in one line."""
