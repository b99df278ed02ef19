"""Explaining heads on generated text: attention and DLA where the generated answer is decided.

`explain_heads` on a generation task comes here (`explain_generation`). Per example of the
split, the clean model decodes greedily with the task's settings (`greedy_generate`); the
tokens that write the extracted answer are the *decisions* (`workbench.explain.decisions`),
each read at the position before it, on the prompt plus the text generated so far, as one row
of a next-token batch. Every angle of the package then runs on those rows unchanged: where
each head looks from there (`attention`, with the key roles `few-shot`, `question`,
`generated`), what it writes (`dla`: onto the generated token against a *comparison token*:
the token the model with the head set ablated writes at that position given the same prefix,
where it differs, else the clean model's runner-up, `comparison_source` `ablated` /
`runner_up`; so a decision's components sum to the clean logit of the generated token minus
that of the comparison token, `decisions.logit_diff`), the OV/QK circuits, and each head's
removal split into direct and indirect effects at the decision. The outcomes compare each
example's clean and ablated generations (`generation_outcomes`: extracted answers,
`exact_match`, the target's `logprob`, whether the answer changed), and `set_effect` is their
mean change with its interval, as the confirmation computes `d_exact_match` and `d_logprob`.

Per-decision tables keep the package's `EXAMPLE_INDEX` (`id` is the example's) followed by
`DECISION_INDEX` (`step, query_pos, decided`), then `outcome`. A per-head summary averages
over decisions, and its interval resamples examples (or the run's clusters), never the
decisions of one example apart (`n` counts decisions).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from workbench.ablation import Ablation, AblationKind, ablation_hooks
from workbench.explain.attention import attention_table
from workbench.explain.capture import EXAMPLE_INDEX, Capture, attach_outcome, capture
from workbench.explain.decisions import Decisions, Positions, decision_batch
from workbench.explain.dla import attribute, dla_table
from workbench.explain.examples import N_EXAMPLES, examples_table, pick_examples
from workbench.explain.per_head import TableSizes, per_head_tables
from workbench.explain.removal import removal_table
from workbench.generation.decode import greedy_generate
from workbench.heads import HeadSet
from workbench.hooked import HookedModel
from workbench.logits import answer_logits
from workbench.metrics.generation import target_logprob
from workbench.stats import Stats, effect_summary
from workbench.tasks.encoding import TaskBatch
from workbench.tasks.tokenizer import get_tokenizer

# the generation metrics whose change the outcomes record and `set_effect` averages
GENERATION_SET_METRICS = ("exact_match", "logprob")


def comparison_tokens(model: HookedModel, dec: Decisions, cap: Capture, hooks: list,
                      batch_size: int = 32) -> tuple[Tensor, list[str]]:
    """Each decision's comparison token: the ablated model's argmax on the same prefix where it
    differs from the generated token, else the clean model's runner-up."""
    with torch.no_grad():
        ablated = torch.cat([
            answer_logits(model, dec.batch.rows(slice(s, s + batch_size)), hooks).argmax(-1)
            for s in range(0, len(dec.batch), batch_size)])
    decided = dec.batch.answer_ids[:, 0]
    runner = cap.logits.scatter(1, decided[:, None], float("-inf")).argmax(-1)
    differs = ablated.to(decided.device) != decided
    ids = torch.where(differs, ablated.to(decided.device), runner)
    return ids, ["ablated" if bool(d) else "runner_up" for d in differs]


def generation_outcomes(model: HookedModel, batch: TaskBatch, clean: tuple[list[str], Tensor],
                        hooks: list) -> pd.DataFrame:
    """Per example, the clean and the ablated generation and what they score.

    Returns:
        One row per example: `id, split, group, correct_clean, correct_ablated, outcome`
        (`correct` is `exact_match`; `fixed`, `broken`, `unchanged`), `exact_match_clean,
        exact_match_ablated, d_exact_match, logprob_clean, logprob_ablated, d_logprob`
        (nats), `prediction_clean, prediction_ablated` (the extracted answers),
        `answer_changed` and `generation_clean, generation_ablated` (the texts).
    """
    settings = batch.task.generation
    with torch.no_grad(), model.hooks(fwd_hooks=hooks):
        texts = greedy_generate(model, batch.prompts(), settings.max_new_tokens,
                                settings.until).texts
        logp = target_logprob(model, batch).float().cpu().numpy()
    exs = batch.task.examples
    clean_texts, clean_logp = clean
    em = [np.array([settings.score(t, e.target) for t, e in zip(ts, exs, strict=True)])
          for ts in (clean_texts, texts)]
    pred = [[settings.extract(t) for t in ts] for ts in (clean_texts, texts)]
    before, after = em[0].astype(int), em[1].astype(int)
    outcome = np.where(after > before, "fixed", np.where(after < before, "broken", "unchanged"))
    clean_logp = clean_logp.float().cpu().numpy()
    return pd.DataFrame({
        "id": [e.id for e in exs], "split": [e.split for e in exs],
        "group": [e.group for e in exs], "correct_clean": before, "correct_ablated": after,
        "outcome": outcome, "exact_match_clean": em[0], "exact_match_ablated": em[1],
        "d_exact_match": em[1] - em[0], "logprob_clean": clean_logp, "logprob_ablated": logp,
        "d_logprob": logp - clean_logp, "prediction_clean": pred[0],
        "prediction_ablated": pred[1],
        "answer_changed": [a != b for a, b in zip(pred[0], pred[1], strict=True)],
        "generation_clean": clean_texts, "generation_ablated": texts,
    })


def generation_set_effect(outcomes: pd.DataFrame, heads: HeadSet, kind: AblationKind,
                          stats: Stats, groups) -> pd.DataFrame:
    """The set's mean change of each `GENERATION_SET_METRICS` with its interval, as the
    confirmation computes its `d_<metric>` columns (`workbench.stats.effect_summary`)."""
    row: dict = {"heads": str(heads), "kind": kind.value}
    for m in GENERATION_SET_METRICS:
        d = torch.tensor(outcomes[f"d_{m}"].to_numpy(dtype=np.float32))[None]  # (1, batch)
        summary = effect_summary(d, stats.n_boot, stats.seed, stats.ci, groups)
        for suffix, v in summary.items():
            row[f"d_{m}{suffix}"] = int(v[0]) if suffix == "_n" else float(v[0])
    return pd.DataFrame([row])


def _keyed(df: pd.DataFrame, dec: Decisions, outcomes: pd.DataFrame | None) -> pd.DataFrame:
    """A decision-row table keyed as the module docstring says: the example's `id`, then
    `DECISION_INDEX` after `EXAMPLE_INDEX`, then `outcome`."""
    if df.empty:
        return df
    where = {row_id: r for r, row_id in enumerate(dec.batch.task.ids)}
    rows = df["id"].map(where).to_numpy()
    df = df.copy()
    df["id"] = [dec.ids[r] for r in rows]
    if "wrong_source" in df and dec.source:
        df["wrong_source"] = [dec.source[r] for r in rows]
    df = attach_outcome(df, outcomes)
    n = len(EXAMPLE_INDEX)
    for k, (name, values) in enumerate((
            ("step", [dec.steps[r] for r in rows]),
            ("query_pos", [int(dec.batch.lengths[r]) - 1 for r in rows]),
            ("decided", [dec.decided[r] for r in rows]))):
        df.insert(n + k, name, values)
    return df


def generation_tables(model: HookedModel, batch: TaskBatch, heads: HeadSet, comparison: HeadSet,
                      ablation: Ablation, groups: list | None, config: dict,
                      sizes: TableSizes, positions: Positions = "answer",
                      batch_size: int = 32) -> dict:
    """`explain_heads` on a generation task: every angle at the decisions (module docstring),
    as the fields of a `GeneratedExplanation` (`workbench.explain.explanation`).

    Args:
        batch: the generation task's examples of the explained split.
        heads, comparison: the explained set and its comparison heads.
        ablation: the ablation (its kind and means) of the outcomes, the comparison tokens
            and `removal`.
        groups: per example, its cluster label for the intervals (None: examples).
        config: `explain_heads`' record of its arguments (its `n_boot`, `ci` and
            `stats_seed` make the intervals); returned with `generation`, `positions` and
            `n_decisions` added.
        sizes: how much the OV and QK tables list.
        positions: `"answer"` (every token of the extracted answer) or `"first"` (its first).

    Returns:
        `{field: value}` of a `GeneratedExplanation` but `heads` and `comparison`.
    """
    stats = Stats(config["n_boot"], config["ci"], config["stats_seed"])
    settings = batch.task.generation
    hooks = ablation_hooks(model, heads, ablation.kind, ablation.means)
    with torch.no_grad():
        gen = greedy_generate(model, batch.prompts(), settings.max_new_tokens, settings.until)
        clean_logp = target_logprob(model, batch)
    outcomes = generation_outcomes(model, batch, (gen.texts, clean_logp), hooks)
    dec = decision_batch(model, batch, gen.tokens, gen.texts, positions)
    cap = capture(model, dec.batch, batch_size)
    wrong, dec.source = comparison_tokens(model, dec, cap, hooks, batch_size)
    dec.batch = replace(dec.batch, wrong_ids=wrong[:, None])
    cap = replace(cap, batch=dec.batch)
    att = attribute(model, cap)

    def keyed(df: pd.DataFrame) -> pd.DataFrame:
        return _keyed(df, dec, outcomes)

    attention = keyed(attention_table(cap, heads, dec.roles, None))
    comp_attention = keyed(attention_table(cap, comparison, dec.roles, None)) \
        if len(comparison) else None
    dla = keyed(dla_table(model, cap, att, heads, comparison))
    labels = groups or batch.task.ids  # a decision's rows are resampled with its example
    by_id = dict(zip(batch.task.ids, labels, strict=True))
    picked = pick_examples(batch.task.ids, outcomes, N_EXAMPLES)
    first_rows = [dec.example.index(i) for i in picked]
    return dict(
        outcomes=outcomes,
        attention=attention,
        dla=dla,
        **per_head_tables(model, cap, heads, dec.roles, sizes, attention,
                          comp_attention, dla, stats, by_id),
        removal=keyed(removal_table(model, cap, att, heads, ablation, None, batch_size)),
        attention_examples=keyed(examples_table(cap, heads, comparison, None, first_rows)),
        set_effect=generation_set_effect(outcomes, heads, ablation.kind, stats, groups),
        decisions=_decisions_table(model, dec, cap),
        config={**config, "roles": "generation", "generation": True, "positions": positions,
                "n_decisions": len(dec.batch)},
    )


def _decisions_table(model, dec: Decisions, cap: Capture) -> pd.DataFrame:
    """`GeneratedExplanation.decisions` (its docstring)."""
    decided, wrong = dec.batch.answer_ids[:, 0], dec.batch.wrong_ids[:, 0]
    rows = torch.arange(len(decided), device=cap.logits.device)
    logit_d, logit_c = cap.logits[rows, decided], cap.logits[rows, wrong]
    return pd.DataFrame({
        "id": dec.ids, "step": dec.steps,
        "query_pos": (dec.batch.lengths - 1).tolist(), "decided": dec.decided,
        "decided_id": decided.tolist(),
        "comparison": get_tokenizer(model).str_tokens(wrong.tolist()),
        "comparison_id": wrong.tolist(), "comparison_source": dec.source,
        "in_answer": dec.in_answer, "logit_decided": logit_d.cpu().numpy(),
        "logit_comparison": logit_c.cpu().numpy(),
        "logit_diff": (logit_d - logit_c).cpu().numpy(),
    })
