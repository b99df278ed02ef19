"""Attention on single examples: each removed head's row from the answer position, token by token.

The role tables (`attention`) average a head's attention over many prompts and sum it over the
positions of each role; a researcher also wants to see the raw thing on a few prompts, with the
tokens written out, next to heads that were kept. `attention_examples` takes a few examples of
a split (one the removal fixed, one it broke, one it left alone, in turn, as far as there are
such examples; the first ones otherwise) and keeps, for each removed head and each comparison
head, its attention pattern (`hook_pattern`) from the answer position (the last real token:
the position whose logits are read) over every position of the prompt. A row is a
distribution over the prompt's positions, so it sums to 1. `figures.plot_attention_examples`
draws the table, one panel per example.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import pandas as pd

from workbench.explain.capture import Capture, as_batch, capture
from workbench.explain.dla import resolve_comparison
from workbench.explain.removal import OUTCOMES
from workbench.heads import HeadSet, HeadSpec
from workbench.hooked import HookedModel
from workbench.tables import head_name
from workbench.tasks.encoding import TaskBatch
from workbench.tasks.task import Task

N_EXAMPLES = 3  # the examples `explain_heads` keeps; small, so the figure stays readable


def pick_examples(ids: list[str], outcomes: pd.DataFrame | None, n: int) -> list[int]:
    """Indices of `n` examples: when `outcomes` (`id, outcome`) is given, the first example of
    each outcome in turn (fixed, broken, unchanged, then again), so the figure shows what the
    removal changed and what it did not; else the first `n`."""
    if outcomes is None or outcomes.empty:
        return list(range(min(n, len(ids))))
    by_id = outcomes.set_index("id")["outcome"]
    queues = {o: [i for i, x in enumerate(ids) if by_id.get(x) == o] for o in OUTCOMES}
    picked: list[int] = []
    while len(picked) < min(n, len(ids)) and any(queues.values()):
        for o in OUTCOMES:
            if queues[o] and len(picked) < n:
                picked.append(queues[o].pop(0))
    return picked


def examples_table(cap: Capture, heads: HeadSet, comparison: HeadSet,
                   outcomes: pd.DataFrame | None, indices: Iterable[int]) -> pd.DataFrame:
    """`attention_examples`'s table from a capture (the answer position's attention rows) for
    the examples at `indices` of its batch (`pick_examples`), in that order."""
    batch = cap.batch
    ids = batch.task.ids
    records = []
    by_id = None if outcomes is None else outcomes.set_index("id")["outcome"]
    for i in indices:
        n = int(batch.lengths[i])
        toks = batch.str_tokens[i]
        for group, head_set in (("removed", heads), ("comparison", comparison)):
            for layer, head in head_set:
                row = cap.attn[i, layer, head, :n].cpu()  # (T,) over the prompt's positions
                for pos in range(n):
                    records.append({
                        "id": ids[i],
                        "layer": layer,
                        "head": head,
                        "head_name": head_name(layer, head),
                        **({} if by_id is None else {"outcome": by_id.get(ids[i])}),
                        "head_group": group,
                        "pos": pos,
                        "token": toks[pos],
                        "attention": float(row[pos]),
                    })
    return pd.DataFrame(records)


def attention_examples(
    model: HookedModel,
    task: Task | TaskBatch | str,
    heads: Iterable[HeadSpec] | HeadSet,
    comparison: Iterable[HeadSpec] | HeadSet | None | Literal["random"] = "random",
    split: str | None = "heldout",
    n_examples: int = N_EXAMPLES,
    outcomes: pd.DataFrame | None = None,
    seed: int = 0,
) -> pd.DataFrame:
    """The attention of each head from the answer position on a few single examples.

    Args:
        model: a HookedTransformer.
        task: a `Task`, a task name, or an encoded `TaskBatch`.
        heads: the removed heads.
        comparison: heads to show beside them: `"random"` (random heads of the same layers
            that are not in `heads`, as `explain_heads` picks them with `seed`), a head list,
            or None.
        split: `"select"`, `"heldout"` or None for every example.
        n_examples: how many examples.
        outcomes: `id, outcome` (from `ablation_outcomes`): pick a fixed, a broken and an
            unchanged example in turn, and say which each is.

    Returns:
        One row per (example, head, key position): `id, layer, head, head_name, [outcome,]
        head_group` (`removed` / `comparison`), `pos, token` (the prompt's token there, as the
        model's tokenizer splits it) and `attention` (the fraction of the head's attention
        from the answer position on that position: each (example, head) sums to 1).

    Example:
        >>> table = attention_examples(model, "embedded_map", ["L1H0", "L1H4"])
        >>> plot_attention_examples(table)
    """
    batch = as_batch(model, task, split)
    head_set = HeadSet.of(model, heads)
    comp = resolve_comparison(model, head_set, comparison, seed)
    picked = pick_examples(batch.task.ids, outcomes, n_examples)
    sub = batch.rows(picked)
    return examples_table(capture(model, sub), head_set, comp, outcomes, range(len(picked)))
