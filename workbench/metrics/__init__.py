"""Metrics: what each metric is (`records`: one `Metric` record per metric, no torch) and how it
is computed (`scores`: per-example scores from logits, `evaluate`, `summarize`; `choices`:
multiple-choice tasks as lm-eval scores them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.lazy import lazy_package

if TYPE_CHECKING:  # the package's public names; imported on first use (workbench.lazy)
    from workbench.metrics.choices import (
        CHOICE_SCORES,
        can_share,
        choice_logliks,
        choice_metric,
        choice_scores,
        evaluate_choices,
        naive_choice_metric,
    )
    from workbench.metrics.records import (
        GENERATION,
        METRIC_RECORDS,
        MULTIPLE_CHOICE,
        NEXT_TOKEN,
        Metric,
        base_metric,
        declare,
        help_text,
        metric_names,
        names_where,
        record,
        registered,
        scored_names,
        table_order,
        task_kind,
    )
    from workbench.metrics.scores import (
        METRICS,
        NEG_INF,
        accuracy,
        answer_logits,
        builtin_metric,
        evaluate,
        forward_kwargs,
        get_metric,
        is_bridge,
        logit_diff,
        logits_at,
        logprob,
        masked_gather,
        multi_token_metric,
        normalize_by_clean,
        one_forward,
        prob_diff,
        score_logits,
        sequence_scores,
        shortformer_kwargs,
        summarize,
        task_metric,
        unembed_at,
    )

__getattr__, __dir__, __all__ = lazy_package(globals())
