"""cel-workbench: find attention heads whose removal improves a task (CEL), on TransformerLens.

The public names are imported on first use (PEP 562 module `__getattr__`), so `import
workbench` and the `workbench` command's `--help` and input errors do not pay the seconds it
takes to import torch and TransformerLens; `from workbench import run_cel` works as usual.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.environment import check_transformer_lens as _check_transformer_lens
from workbench.errors import WorkbenchError
from workbench.lazy import lazy_package

# before any module imports TransformerLens: under a release the workbench does not run on,
# one line naming the fix instead of an ImportError from inside TransformerLens; the
# `workbench` command (whose import of this package comes first) prints it as its other
# input errors, and exits 2
try:
    _check_transformer_lens()
except WorkbenchError as _refused:
    import sys as _sys

    if _sys.argv[:1] == ["-m"] or _sys.argv[0].endswith(("/workbench", "\\workbench.exe")):
        print(f"workbench: error: {_refused}", file=_sys.stderr)
        raise SystemExit(2) from None
    raise

# the release (pyproject.toml's `version`, which a test keeps equal): see CHANGELOG.md
__version__ = "0.2.0"

if TYPE_CHECKING:  # the public API; each name imported on first use (workbench.lazy)
    from workbench.ablation import Ablation, AblationKind, ablated
    from workbench.explain import HeadExplanation, explain_heads
    from workbench.heads import HeadSet
    from workbench.loading.model import load_model
    from workbench.metrics.scores import evaluate, one_forward, summarize
    from workbench.pipeline import run_cel
    from workbench.replacements import HeadMeans, compute_head_means
    from workbench.results.compare import compare
    from workbench.results.export import tidy
    from workbench.results.result import CELResult
    from workbench.screening.screen import screen_heads
    from workbench.tables import head_table
    from workbench.tasks.encoding import encode_task
    from workbench.tasks.task import Task, load_task

__getattr__, __dir__, _lazy = lazy_package(globals())
__all__ = sorted([*_lazy, "WorkbenchError"])
