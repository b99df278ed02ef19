"""Theory: conflicting features concentrate in heads under gradient descent from small
initialisation (Nguyen, Bair, Kolter, arXiv 2610.21294, second half).

A one-layer multi-head softmax-attention model is trained on two tasks whose *conflicting*
feature predicts the label with opposite signs, while a noisy cue in the query says which task
a sample is from. From small initialisation, SGD reaches a near-global optimum of the joint
loss in which one head carries the conflicting feature with task A's sign and another with
task B's. Because the cue is ambiguous, each of those heads also fires, with the wrong sign,
on some samples of the other task, so ablating it improves one task and harms the other: the
capability-enhancement pattern, produced by training alone.

Pipeline: `data` (samples) -> `model` (attention heads, head mask) -> `train` (SGD, history)
-> `bayes` (closed-form optimum) -> `analysis` (feature use, ablations, per-seed summary) ->
`sweep` (conditions, summaries, results folder) -> `plots` -> `cli` (`workbench theory`).
"""

from workbench.theory.analysis import (
    ablation_table,
    evaluate,
    feature_coefficients,
    feature_use_table,
    seed_summary,
)
from workbench.theory.bayes import bayes_log_odds, bayes_loss, logistic_loss
from workbench.theory.config import TheoryConfig
from workbench.theory.data import CUES, Basis, Batch, make_batch
from workbench.theory.model import PARAMETRISATIONS, MultiHeadAttentionModel, apply_head_mask
from workbench.theory.sweep import (
    SWEEPS,
    SweepResult,
    quick_config,
    run_condition,
    run_sweep,
    summarise,
)
from workbench.theory.train import TrainResult, train

__all__ = [
    "CUES",
    "PARAMETRISATIONS",
    "SWEEPS",
    "Basis",
    "Batch",
    "MultiHeadAttentionModel",
    "SweepResult",
    "TheoryConfig",
    "TrainResult",
    "ablation_table",
    "apply_head_mask",
    "bayes_log_odds",
    "bayes_loss",
    "evaluate",
    "feature_coefficients",
    "feature_use_table",
    "logistic_loss",
    "make_batch",
    "quick_config",
    "run_condition",
    "run_sweep",
    "seed_summary",
    "summarise",
    "train",
]
