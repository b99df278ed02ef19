"""The one exception type of the package, and its one warning.

Every check on user input (a model name, a head spec, a task file, a strategy name) raises
`WorkbenchError` with a message saying what was received and what was expected, so a user
never has to read a traceback from inside torch to learn what they typed wrong.
"""


class WorkbenchError(ValueError):
    """Bad input to the workbench: the message says what was received and what was expected."""


class FewExamplesWarning(UserWarning):
    """A run on a task (or a split, or a side task) with fewer examples than its intervals
    need (`workbench.tasks.format.MIN_SPLIT_EXAMPLES`): it runs, and says so."""
