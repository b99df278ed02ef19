"""cel-workbench: find attention heads whose removal improves a task (CEL), on TransformerLens."""

from workbench.ablation import AblationKind, HeadMeans, ablated, compute_head_means
from workbench.errors import WorkbenchError
from workbench.explain import HeadExplanation, explain_heads
from workbench.heads import HeadSet
from workbench.loading import load_model
from workbench.metrics import evaluate, summarize
from workbench.pipeline import run_cel
from workbench.results import CELResult
from workbench.screening import screen_heads
from workbench.tables import head_table
from workbench.tasks import Task, encode_task, load_task

__all__ = [
    "AblationKind",
    "CELResult",
    "HeadExplanation",
    "HeadMeans",
    "HeadSet",
    "Task",
    "WorkbenchError",
    "ablated",
    "compute_head_means",
    "encode_task",
    "evaluate",
    "explain_heads",
    "head_table",
    "load_model",
    "load_task",
    "run_cel",
    "screen_heads",
    "summarize",
]
