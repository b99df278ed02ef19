"""The one exception type of the package.

Every check on user input (a model name, a head spec, a task file, a strategy name) raises
`WorkbenchError` with a message saying what was received and what was expected, so a user
never has to read a traceback from inside torch to learn what they typed wrong.
"""


class WorkbenchError(ValueError):
    """Bad input to the workbench: the message says what was received and what was expected."""
