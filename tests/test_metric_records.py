"""One `Metric` record per metric: every list of metric names derives from the records, the
functions agree with them, and a custom metric declares the same fields."""

from __future__ import annotations

import pytest
import torch

from workbench import WorkbenchError
from workbench.cli.parser import build_parser
from workbench.metric_records import (
    METRIC_RECORDS,
    Metric,
    base_metric,
    declare,
    metric_names,
    names_where,
    record,
    registered,
    scored_names,
    table_order,
)
from workbench.metrics.choices import CHOICE_SCORES
from workbench.metrics.scores import METRICS, get_metric
from workbench.results.tradeoff import DIFFERENCE_METRICS, GUARD_METRICS
from workbench.results.tradeoff import metric_names as table_metrics
from workbench.tasks.task import METRIC_NAMES, NEEDS_WRONG


def test_the_lists_are_the_records():
    assert metric_names("next-token") == (
        "accuracy", "logprob", "logit_diff", "prob_diff", "normalized_logit_diff")
    assert METRIC_NAMES == metric_names() == (*metric_names("next-token"), "acc", "acc_norm",
                                              "ll_margin", "acc_norm_margin", "exact_match")
    assert scored_names("generation") == ("logprob", "exact_match")
    assert set(METRICS) == set(scored_names()) == {"accuracy", "logprob", "logit_diff",
                                                   "prob_diff"}
    assert scored_names("multiple-choice") == CHOICE_SCORES[2:3] + CHOICE_SCORES[:2] + (
        CHOICE_SCORES[3:])
    assert NEEDS_WRONG == ("logit_diff", "prob_diff", "normalized_logit_diff", "ll_margin",
                           "acc_norm_margin")
    assert GUARD_METRICS == ("accuracy", "logprob", "acc", "acc_norm", "exact_match")
    assert DIFFERENCE_METRICS == ("logit_diff", "prob_diff", "normalized_logit_diff",
                                  "ll_margin", "acc_norm_margin")
    assert names_where("coarse") == ("accuracy", "acc", "acc_norm", "exact_match")
    assert names_where("differentiable", scored_names()) == ("logprob", "logit_diff",
                                                             "prob_diff")
    for m in METRIC_RECORDS:  # a 0/1 score's companion is a differentiable margin beside it
        if m.companion is not None:
            companion = registered(m.companion)
            assert companion.differentiable and companion.difference and m.coarse
            assert companion.kinds == m.kinds
    for m in METRIC_RECORDS:  # a derived metric computes as its base
        if "next-token" not in m.kinds:
            continue
        assert get_metric(m.name) is METRICS[base_metric(m.name)]
        assert (m.base is None) == (m.name in METRICS)


def test_table_order_puts_registered_metrics_first():
    assert table_order(["zeta", "prob_diff", "accuracy", "alpha"]) == [
        "accuracy", "prob_diff", "alpha", "zeta"]
    import pandas as pd

    cols = [f"d_{m}_n" for m in ("margin", "logprob", "accuracy")]
    assert table_metrics(pd.DataFrame(columns=cols)) == ["accuracy", "logprob", "margin"]


def test_the_cli_help_lists_every_metric():
    parser = build_parser("cel")
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    text = sub.choices["cel"].format_help()
    for name in metric_names():
        assert name in text, name


def test_a_custom_metric_declares_its_records():
    @declare(Metric("margin", "answer minus runner-up", difference=True),
             Metric("hit", coarse=True, differentiable=False, guards=True))
    def custom(model, batch):
        return {"margin": torch.zeros(1), "hit": torch.zeros(1)}

    assert record("margin", custom).difference and not record("margin").difference
    assert names_where("guards", ["hit", "margin", "logprob"], custom) == ("hit", "logprob")
    assert record("logprob", custom) is record("logprob")  # undeclared: the registered record
    plain = record("anything")
    assert plain.name == "anything" and not (plain.difference or plain.guards or plain.coarse)


def test_records_are_checked():
    with pytest.raises(WorkbenchError, match="higher_is_better=True"):
        Metric("loss", higher_is_better=False)
    with pytest.raises(WorkbenchError, match="identifier"):
        Metric("two words")
    with pytest.raises(WorkbenchError, match="registered with other properties"):
        declare(Metric("accuracy"))  # accuracy is coarse and not differentiable
