"""cel-workbench: find attention heads whose removal improves a task (CEL), on TransformerLens.

The public names are imported on first use (PEP 562 module `__getattr__`), so `import
workbench` and the `workbench` command's `--help` and input errors do not pay the seconds it
takes to import torch and TransformerLens; `from workbench import run_cel` works as usual.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from workbench.environment import check_transformer_lens as _check_transformer_lens
from workbench.errors import WorkbenchError

# before any module imports TransformerLens: under a release the workbench does not run on,
# one line naming the fix instead of an ImportError from inside TransformerLens
_check_transformer_lens()

# the release (pyproject.toml's `version`, which a test keeps equal): see CHANGELOG.md
__version__ = "0.2.0"

# public name -> the module that defines it
_EXPORTS = {
    "AblationKind": "workbench.ablation",
    "CELResult": "workbench.results.result",
    "HeadExplanation": "workbench.explain",
    "HeadMeans": "workbench.ablation",
    "HeadSet": "workbench.heads",
    "Task": "workbench.tasks.task",
    "ablated": "workbench.ablation",
    "compare": "workbench.results.compare",
    "compute_head_means": "workbench.ablation",
    "encode_task": "workbench.tasks.encoding",
    "evaluate": "workbench.metrics.scores",
    "explain_heads": "workbench.explain",
    "head_table": "workbench.tables",
    "load_model": "workbench.loading.model",
    "load_task": "workbench.tasks.task",
    "one_forward": "workbench.metrics.scores",
    "run_cel": "workbench.pipeline",
    "screen_heads": "workbench.screening.screen",
    "summarize": "workbench.metrics.scores",
    "tidy": "workbench.results.export",
}

__all__ = [
    "AblationKind",
    "CELResult",
    "HeadExplanation",
    "HeadMeans",
    "HeadSet",
    "Task",
    "WorkbenchError",
    "ablated",
    "compare",
    "compute_head_means",
    "encode_task",
    "evaluate",
    "explain_heads",
    "head_table",
    "load_model",
    "load_task",
    "one_forward",
    "run_cel",
    "screen_heads",
    "summarize",
    "tidy",
]

if TYPE_CHECKING:  # static checkers and IDEs see the real imports
    from workbench.ablation import AblationKind, HeadMeans, ablated, compute_head_means
    from workbench.explain import HeadExplanation, explain_heads
    from workbench.heads import HeadSet
    from workbench.loading.model import load_model
    from workbench.metrics.scores import evaluate, one_forward, summarize
    from workbench.pipeline import run_cel
    from workbench.results.compare import compare
    from workbench.results.export import tidy
    from workbench.results.result import CELResult
    from workbench.screening.screen import screen_heads
    from workbench.tables import head_table
    from workbench.tasks.encoding import encode_task
    from workbench.tasks.task import Task, load_task


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'workbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
