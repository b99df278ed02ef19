"""Metrics: what each metric is (`records`: one `Metric` record per metric, no torch) and how it
is computed (`scores`: per-example scores from logits, `evaluate`, `summarize`).
"""

from __future__ import annotations

from workbench.lazy import lazy_exports

# public name -> the module that defines it
_EXPORTS = {
    "METRICS": "workbench.metrics.scores",
    "METRIC_RECORDS": "workbench.metrics.records",
    "Metric": "workbench.metrics.records",
    "NEG_INF": "workbench.metrics.scores",
    "accuracy": "workbench.metrics.scores",
    "answer_logits": "workbench.metrics.scores",
    "base_metric": "workbench.metrics.records",
    "declare": "workbench.metrics.records",
    "evaluate": "workbench.metrics.scores",
    "forward_kwargs": "workbench.metrics.scores",
    "get_metric": "workbench.metrics.scores",
    "help_text": "workbench.metrics.records",
    "is_bridge": "workbench.metrics.scores",
    "logit_diff": "workbench.metrics.scores",
    "logits_at": "workbench.metrics.scores",
    "logprob": "workbench.metrics.scores",
    "masked_gather": "workbench.metrics.scores",
    "metric_names": "workbench.metrics.records",
    "multi_token_metric": "workbench.metrics.scores",
    "names_where": "workbench.metrics.records",
    "normalize_by_clean": "workbench.metrics.scores",
    "one_forward": "workbench.metrics.scores",
    "prob_diff": "workbench.metrics.scores",
    "record": "workbench.metrics.records",
    "registered": "workbench.metrics.records",
    "score_logits": "workbench.metrics.scores",
    "scored_names": "workbench.metrics.records",
    "sequence_scores": "workbench.metrics.scores",
    "shortformer_kwargs": "workbench.metrics.scores",
    "summarize": "workbench.metrics.scores",
    "table_order": "workbench.metrics.records",
    "task_metric": "workbench.metrics.scores",
    "unembed_at": "workbench.metrics.scores",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
