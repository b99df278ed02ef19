"""Every angle on one head set at once: `explain_heads` and its `HeadExplanation`.

`explain_heads` explains a head set (e.g. the best set of a CEL search) on one split of a
task by running each angle of `workbench.explain` on one shared clean forward pass
(`workbench.explain.capture`): where the heads look (`attention`; on a few single examples,
token by token, `examples`), what they write to the logits (`attribution`), what they move
(`circuits`) and whether removing them helped through their own output (`removal`), with the
whole set's effect on every metric as the confirmation measures it (`set_effect`). Only the
outcomes need an extra ablated pass, and the removal table one pass per head. The
`HeadExplanation` it returns holds every table and the arguments that made them, and saves
them as CSV files plus a `config.json`. On a generation task every angle is read at the
generated tokens that decide the extracted answer (`workbench.explain.generated`), and the
result is a `GeneratedExplanation`.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pandas as pd

from workbench.ablation import Ablation, AblationKind
from workbench.confirmation.confirm import cluster_labels
from workbench.deprecation import renamed_keywords
from workbench.errors import WorkbenchError
from workbench.explain.attention import RoleScheme, attention_table, roles_for
from workbench.explain.capture import as_batch, capture
from workbench.explain.dla import attribute, dla_table, resolve_comparison
from workbench.explain.examples import N_EXAMPLES, examples_table, pick_examples
from workbench.explain.generated import generation_tables
from workbench.explain.per_head import TableSizes, per_head_tables
from workbench.explain.removal import (
    ablation_outcomes,
    default_means,
    removal_table,
    set_effect,
)
from workbench.heads import HeadSet, HeadSpec
from workbench.hooked import HookedModel
from workbench.options import ClusterMode
from workbench.results.result import CELResult
from workbench.stats import Stats
from workbench.tables import save_table
from workbench.tasks.encoding import TaskBatch
from workbench.tasks.task import Task


@dataclass
class HeadExplanation:
    """Every table `explain_heads` makes, for one model, task split and head set.

    Attributes:
        heads, comparison: the explained heads and their random comparison heads.
        outcomes: per example, whether ablating the whole set fixed, broke or left it
            (`ablation_outcomes`).
        attention: per (example, head), attention by role (`attention_by_role`).
        roles: per head, the mean of `attention` (`summarize_attention`).
        roles_by_outcome: per head and outcome, the same.
        comparison_roles: per comparison head, the same as `roles` (what heads that were not
            removed attend to).
        dla: per (example, head), direct logit attribution, removed and comparison heads.
        dla_summary: per head, its mean with its interval (`summarize_dla`).
        ov: per (head, source token), the OV circuit's promoted/suppressed tokens.
        qk: per (head, rank), the QK circuit's preferred source tokens.
        removal: per (example, head), ablation effect next to direct effect.
        set_effect: the whole set's effect on each metric with its interval (`set_effect`:
            the confirmation's `d_<metric>` on these examples).
        attention_examples: per (example, head, position), the attention from the answer
            position on a few single examples (`attention_examples`), removed and comparison
            heads.
        config: the arguments that made the tables.
    """

    heads: HeadSet
    comparison: HeadSet
    outcomes: pd.DataFrame
    attention: pd.DataFrame
    roles: pd.DataFrame
    roles_by_outcome: pd.DataFrame
    comparison_roles: pd.DataFrame
    dla: pd.DataFrame
    dla_summary: pd.DataFrame
    ov: pd.DataFrame
    qk: pd.DataFrame
    removal: pd.DataFrame
    attention_examples: pd.DataFrame
    config: dict
    set_effect: pd.DataFrame = field(default_factory=pd.DataFrame)

    TABLES = (
        "outcomes",
        "attention",
        "roles",
        "roles_by_outcome",
        "comparison_roles",
        "dla",
        "dla_summary",
        "ov",
        "qk",
        "removal",
        "attention_examples",
        "set_effect",
    )

    def save(self, folder: str | Path) -> Path:
        """Write every table as `<name>.csv` and the config as `config.json` into `folder`."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for name in self.TABLES:
            save_table(getattr(self, name), folder / f"{name}.csv")
        (folder / "config.json").write_text(json.dumps(self.config, indent=2))
        return folder


@dataclass
class GeneratedExplanation(HeadExplanation):
    """A `HeadExplanation` of a generation task, read at its decisions (the generated tokens
    that write the extracted answer: `workbench.explain.generated`). Every per-example table
    has one row per decision, keyed `EXAMPLE_INDEX` + `DECISION_INDEX` (`id` is the
    example's); `outcomes` compares the clean and the ablated generations
    (`generation_outcomes`), `set_effect` has `d_exact_match` and `d_logprob`.

    Attributes:
        decisions: one row per decision: `id, step, query_pos, decided, decided_id,
            comparison, comparison_id, comparison_source` (`ablated` / `runner_up`),
            `in_answer`, `logit_decided, logit_comparison, logit_diff` (the clean logits at
            `query_pos`, nats: `logit_diff` is what the row's `dla_diff` sum to).
    """

    decisions: pd.DataFrame = field(default_factory=pd.DataFrame)

    TABLES = (*HeadExplanation.TABLES, "decisions")


@dataclass(frozen=True)
class _ResultAblation(Ablation):
    """No ablation given: a CEL result's own kind (zero for any other head set)."""


def _given_ablation(value) -> Ablation:
    """`explain_heads`' `ablation` as given (None: the result's own, `_ResultAblation`)."""
    return _ResultAblation() if value is None else Ablation.of(value)


@renamed_keywords(holders={"ablation": _given_ablation, "sizes": lambda s: s or TableSizes()},
                  kind="ablation.kind", means="ablation.means",
                  per_position="ablation.per_position", n_sources="sizes.n_sources",
                  top_k="sizes.top_k")
def explain_heads(
    model: HookedModel,
    task: Task | TaskBatch | str,
    heads: Iterable[HeadSpec] | HeadSet | CELResult,
    split: str | None = "heldout",
    ablation: Ablation | AblationKind | str | None = None,
    roles: RoleScheme = "auto",
    comparison: Iterable[HeadSpec] | HeadSet | None | Literal["random"] = "random",
    seed: int = 0,
    sizes: TableSizes | None = None,
    batch_size: int = 32,
) -> HeadExplanation:
    """Explain a head set (e.g. the best set of a CEL search) on one split of a task.

    One clean forward pass with a cache feeds the attention, DLA and OV tables; the outcomes
    need one ablated pass and `removal_vs_dla` one pass per head. Arguments are those of the
    functions it calls (`ablation_outcomes`, `attention_by_role`, `direct_logit_attribution`,
    `ov_circuit`, `qk_circuit`, `removal_vs_dla`).

    Args:
        heads: the heads, or a `CELResult`: its best set, or, when no set is significant, its
            top candidate, with a warning and `config["significant"] = False` and a
            `config["note"]` saying so. The result's ablation kind is then the default
            (zero ablation for resample runs: the explanation has no counterfactual pass), and
            its `n_boot`, `ci`, `seed` and `cluster` make the intervals (`set_effect`,
            `dla_summary`) as the confirmation made its own; else `Stats()` and `cluster`
            `auto` (`CELConfig`'s defaults).
        ablation: the ablation of the outcomes and the removal table (`Ablation`, or its kind
            alone; default zero, or the result's); mean ablation without means uses the
            means over the task's `select` split (`default_means`).
        sizes: how much the OV and QK tables list (`TableSizes()`: 3 sources, top 5 tokens).

    Returns:
        A `HeadExplanation`; on a generation task a `GeneratedExplanation`, read at the
        generated tokens that decide the extracted answer (`workbench.explain.generated`,
        whose key roles replace `roles`).

    Example:
        >>> ex = explain_heads(model, "embedded_map", result, split="heldout")
        >>> ex.roles_by_outcome
    """
    batch = as_batch(model, task, split)
    sizes = sizes or TableSizes()
    ablation = _given_ablation(ablation)
    significant, note = None, ""
    stats, cluster = Stats(), ClusterMode.AUTO
    if isinstance(heads, CELResult):
        cfg = heads.config
        stats, cluster = Stats(cfg.n_boot, cfg.ci, cfg.seed), cfg.cluster
        heads, ablation, significant, note = _from_result(heads, ablation)
        if not significant:
            warnings.warn(note, stacklevel=2)
    kind, per_position = ablation.kind, ablation.per_position
    head_set = HeadSet.of(model, heads)
    if not len(head_set):
        raise WorkbenchError("explain_heads needs at least one head")
    comp = resolve_comparison(model, head_set, comparison, seed)
    means = default_means(model, task, kind, ablation.means)
    ablation = Ablation(kind, means, per_position)
    groups = cluster_labels(batch, cluster)  # as the confirmation resamples this split
    config = {
        "model": getattr(model.cfg, "model_name", None),
        "task": batch.task.name,
        "split": split,
        "heads": str(head_set),
        "comparison": str(comp),
        "kind": kind.value,
        "per_position": per_position,
        "roles": roles,
        "seed": seed,
        "n_examples": len(batch),
        # the intervals' settings (`set_effect`, `dla_summary`)
        "n_boot": stats.n_boot,
        "ci": stats.ci,
        "stats_seed": stats.seed,
        "clustered": groups is not None,
        **({} if significant is None else {"significant": significant, "note": note}),
    }
    # the outcomes (and the set's effect) under the averaged means
    averaged = Ablation(kind, means)
    if batch.task.is_generation:  # read at the generated tokens that decide the answer
        return GeneratedExplanation(heads=head_set, comparison=comp, **generation_tables(
            model, batch, head_set, comp, averaged, groups, config, sizes,
            batch_size=batch_size))
    role_lists = roles_for(batch, roles)
    outcomes = ablation_outcomes(model, batch, head_set, None, averaged)
    cap = capture(model, batch, batch_size)
    att = attribute(model, cap)
    attention = attention_table(cap, head_set, role_lists, outcomes)
    comparison_attention = attention_table(cap, comp, role_lists, None) if len(comp) else None
    dla = dla_table(model, cap, att, head_set, comp)
    by_id = None if groups is None else dict(zip(batch.task.ids, groups, strict=True))
    return HeadExplanation(
        heads=head_set,
        comparison=comp,
        outcomes=outcomes,
        attention=attention,
        dla=dla,
        **per_head_tables(model, cap, head_set, role_lists, sizes, attention,
                          comparison_attention, dla, stats, by_id),
        removal=removal_table(model, cap, att, head_set, ablation, outcomes, batch_size),
        attention_examples=examples_table(
            cap, head_set, comp, outcomes, pick_examples(batch.task.ids, outcomes, N_EXAMPLES)
        ),
        set_effect=set_effect(outcomes, head_set, kind, stats, groups),
        config=config,
    )


def _from_result(result: CELResult, ablation: Ablation):
    """`(heads, ablation, significant, note)` for explaining a CEL result; an ablation not
    given (`_ResultAblation`) becomes the result's own."""
    cfg = result.config
    if isinstance(ablation, _ResultAblation):
        kind = AblationKind.ZERO if cfg.kind is AblationKind.RESAMPLE else cfg.kind
        ablation = Ablation(kind, ablation.means, ablation.per_position or (
            cfg.per_position and kind is AblationKind.MEAN))
    if result.best:
        return result.best, ablation, True, ""
    top = result.top_candidate
    infeasible = result.summary.get("infeasible") or {}
    if not top and infeasible:  # no set passed the guards: the closest one, said so
        closest = max(infeasible.values(), key=lambda c: c[f"d_{cfg.objective}"])
        note = (f"no set passed the guards ({', '.join(result.summary.get('guards', []))}), so "
                f"this explains the closest candidate {closest['heads']}, which fails "
                f"{', '.join(closest['failed'])}: not an enhancement")
        return closest["heads"].split(","), ablation, False, note
    if not top:
        raise WorkbenchError("this CEL result has no confirmed head set to explain (its "
                             "confirmation table is empty; finish the run first)")
    note = (f"no significant enhancement: no confirmed set has p_holm < {result.alpha:.2g}, so "
            f"this explains the top candidate {','.join(top)}, whose held-out gain is not "
            "established")
    return top, ablation, False, note
