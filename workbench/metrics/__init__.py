"""Metrics: how each metric is computed (`scores`: per-example scores from logits, `evaluate`,
`summarize`; `sequences`: multi-token answers scored whole; `choices`: multiple-choice tasks
as lm-eval scores them; `generation`: generation tasks). What each metric is (one `Metric`
record per metric, no torch) is `workbench.metric_records`, below the tasks that name them;
its names and the forward's (`workbench.logits`) are readable from here too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.lazy import lazy_package

if TYPE_CHECKING:  # the package's public names; imported on first use (workbench.lazy)
    from workbench.logits import (
        answer_logits,
        forward_kwargs,
        is_bridge,
        logits_at,
        shortformer_kwargs,
        unembed_at,
    )
    from workbench.metric_records import (
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
    from workbench.metrics.choices import (
        CHOICE_SCORES,
        can_share,
        choice_logliks,
        choice_metric,
        choice_scores,
        evaluate_choices,
        naive_choice_metric,
    )
    from workbench.metrics.scores import (
        METRICS,
        NEG_INF,
        accuracy,
        builtin_metric,
        evaluate,
        get_metric,
        logit_diff,
        logprob,
        masked_gather,
        multi_token_metric,
        normalize_by_clean,
        one_forward,
        prob_diff,
        score_logits,
        summarize,
        task_metric,
    )
    from workbench.metrics.sequences import sequence_scores

__getattr__, __dir__, __all__ = lazy_package(globals())
