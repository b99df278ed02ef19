"""Task files: a task file found by name or path, and its JSONL lines read into a checked
header and example records, each with where it comes from (`file line N`) for errors.

A file's first line may be its header (`{"task": {...}}`, checked by
`workbench.tasks.format.check_header`); every other non-blank line is one example record,
checked when the task is built (`workbench.tasks.task.load_task`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.tasks.format import check_header
from workbench.tasks.names import BENCHMARKS_DIR, TASKS_DIR, task_file, task_names


def resolve_task_path(name_or_path: str | os.PathLike) -> Path:
    """A task file path from a path or a shipped task's name (`tasks/` or `tasks/benchmarks/`,
    `workbench.tasks.names.task_file`)."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    found = task_file(str(name_or_path))
    if found is not None:
        return found
    raise WorkbenchError(
        f"task {str(name_or_path)!r} is neither a file nor a task in {TASKS_DIR} or "
        f"{BENCHMARKS_DIR}; known tasks: {task_names()}"
    )


def read_task_file(path: Path) -> tuple[dict, list[tuple[str, object]]]:
    """`(header, examples)` of the task file at `path`: the checked header (`{}` when the file
    has none) and each example line's JSON value with where it is (`"<file> line N"`)."""
    try:
        # utf-8-sig: a byte-order mark (Windows editors write one) is not part of line 1.
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise WorkbenchError(
            f"task file {str(path)!r} is not UTF-8 text (byte {e.start}: {e.reason}); save it "
            "as UTF-8 JSON lines"
        ) from None
    lines = [(i + 1, line) for i, line in enumerate(text.splitlines()) if line.strip()]
    if not lines:
        raise WorkbenchError(f"task file {str(path)!r} is empty; expected JSONL examples")
    header: dict = {}
    examples: list[tuple[str, object]] = []
    for lineno, line in lines:
        where = f"{path.name} line {lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise WorkbenchError(f"{where} is not valid JSON: {e.msg}") from None
        if isinstance(obj, dict) and "task" in obj and "prompt" not in obj:
            if examples or header:
                raise WorkbenchError(f"{where}: the task header must be the first line")
            if set(obj) != {"task"}:
                raise WorkbenchError(
                    f"{where}: the header line holds only 'task'; got keys {sorted(obj)}"
                )
            header = check_header(obj["task"], where)
            continue
        examples.append((where, obj))
    if not examples:
        raise WorkbenchError(f"task file {str(path)!r} has a header but no examples")
    return header, examples
