"""The removed heads' attention on single examples, beside the comparison heads, as CircuitsVis.

`attention_examples` (and `attention_examples.png`) keep one row of each head's attention:
from the answer position. A researcher used to TransformerLens's demos also wants the whole
pattern, every query position over every key, for the removed heads next to heads that were
kept, to click through as in CircuitsVis. `attention_patterns` computes those patterns on a
few chosen examples (one the removal fixed, one it broke, one it left alone, as far as there
are such: `workbench.explain.examples.pick_examples`; or the examples a `HeadExplanation`
showed), and `attention_view` draws them with CircuitsVis's `AttentionHeads`, one view per
example, the heads named `L1H0 (removed)` and `L0H5 (comparison)`.

CircuitsVis is in the optional extra `interactive`. By default it loads its JavaScript from
unpkg, after probing whether the internet answers; here its bundle is read from the installed
package and written into the page once (`workbench.results.interactive.OfflineHTML`), so
nothing is fetched. Without the extra, `attention_view` raises a `WorkbenchError` naming it;
`workbench.results.interactive.attention_rows_html` draws the answer position's rows with no
extra at all.
"""

from __future__ import annotations

import html
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import torch

from workbench.errors import WorkbenchError
from workbench.explain.capture import as_batch
from workbench.explain.dla import resolve_comparison
from workbench.explain.examples import N_EXAMPLES, pick_examples
from workbench.explain.explanation import HeadExplanation
from workbench.heads import HeadSet, HeadSpec
from workbench.hooked import HookedModel
from workbench.logits import forward_kwargs
from workbench.results.interactive import OfflineHTML, require
from workbench.tasks.encoding import TaskBatch
from workbench.tasks.task import Task


@dataclass
class ExamplePatterns:
    """The attention patterns of some heads on one example.

    Attributes:
        id, outcome: the example's id, and whether removing the set fixed, broke or left it
            (None when not known).
        tokens: the prompt's tokens as the model's tokenizer splits it (BOS included).
        heads: the head names, removed heads first; `groups` says which is which.
        groups: `"removed"` or `"comparison"` per head.
        pattern: `(head, query, key)` attention, each query row summing to 1 over the keys
            at or before it.
    """

    id: str
    outcome: str | None
    tokens: list[str]
    heads: list[str]
    groups: list[str]
    pattern: np.ndarray


def attention_patterns(
    model: HookedModel,
    task: Task | TaskBatch | str,
    heads: Iterable[HeadSpec] | HeadSet | HeadExplanation,
    comparison: Iterable[HeadSpec] | HeadSet | None | Literal["random"] = "random",
    split: str | None = "heldout",
    examples: int | Iterable[str] = N_EXAMPLES,
    outcomes: pd.DataFrame | None = None,
    seed: int = 0,
) -> list[ExamplePatterns]:
    """The full attention patterns of the removed and the comparison heads on a few examples.

    Args:
        model: a HookedTransformer.
        task: a `Task`, a task name, or an encoded `TaskBatch`.
        heads: the removed heads, or a `HeadExplanation`: its heads, comparison heads,
            outcomes and the examples of its `attention_examples` (the examples of
            `attention_examples.png`).
        comparison: `"random"` (random heads of the same layers, as `explain_heads` draws them
            with `seed`), a head list, or None.
        split: `"select"`, `"heldout"` or None for every example.
        examples: how many examples (picked by outcome when `outcomes` is given: fixed,
            broken, unchanged in turn), or their ids.
        outcomes: `id, outcome` (`ablation_outcomes`).

    Returns:
        One `ExamplePatterns` per example, in order.
    """
    batch = as_batch(model, task, split)
    if isinstance(heads, HeadExplanation):
        ex = heads
        heads, comparison, outcomes = ex.heads, ex.comparison, ex.outcomes
        if isinstance(examples, int) and not ex.attention_examples.empty:
            examples = list(dict.fromkeys(ex.attention_examples["id"]))[:examples]
    head_set = HeadSet.of(model, heads)
    comp = HeadSet.of(model, []) if comparison is None else resolve_comparison(
        model, head_set, comparison, seed)
    ids = list(batch.task.ids)
    if isinstance(examples, int):
        picked = pick_examples(ids, outcomes, examples)
    else:
        missing = [e for e in examples if e not in ids]
        if missing:
            raise WorkbenchError(f"example ids {missing} are not in split {split!r} of task "
                                 f"{batch.task.name!r}")
        picked = [ids.index(e) for e in examples]
    sub = batch.rows(picked)
    layers = sorted({layer for layer, _ in [*head_set, *comp]})
    names = {f"blocks.{layer}.attn.hook_pattern" for layer in layers}
    with torch.no_grad():
        _, cache = model.run_with_cache(sub.tokens, names_filter=lambda n: n in names,
                                        **forward_kwargs(model))
    by_id = {} if outcomes is None else outcomes.set_index("id")["outcome"].to_dict()
    out = []
    for row, i in enumerate(picked):
        n = int(sub.lengths[row])
        pairs = [(h, "removed") for h in head_set] + [(h, "comparison") for h in comp]
        pattern = np.stack([
            cache[f"blocks.{layer}.attn.hook_pattern"][row, head, :n, :n].float().cpu().numpy()
            for (layer, head), _ in pairs
        ]) if pairs else np.zeros((0, n, n))
        out.append(ExamplePatterns(
            id=ids[i], outcome=by_id.get(ids[i]), tokens=list(sub.str_tokens[row][:n]),
            heads=[f"L{layer}H{head}" for (layer, head), _ in pairs],
            groups=[g for _, g in pairs], pattern=pattern))
    return out


def circuitsvis_bundle() -> str:
    """CircuitsVis's browser bundle (the global `CircuitsVis`), read from the installed
    package, never from its CDN."""
    cv = require("circuitsvis", "the CircuitsVis attention view")
    path = Path(cv.__file__).parent / "dist" / "cdn" / "iife.js"
    if not path.is_file():
        raise WorkbenchError(f"the installed circuitsvis has no browser bundle at {path}; "
                             "reinstall the extra [interactive]")
    # a literal "</script>" would end the inline script early (CircuitsVis removes it too)
    return path.read_text(encoding="utf-8").replace("</script>", "<\\/script>")


def attention_view(
    model: HookedModel,
    task: Task | TaskBatch | str,
    heads: Iterable[HeadSpec] | HeadSet | HeadExplanation,
    comparison: Iterable[HeadSpec] | HeadSet | None | Literal["random"] = "random",
    split: str | None = "heldout",
    examples: int | Iterable[str] = N_EXAMPLES,
    outcomes: pd.DataFrame | None = None,
    seed: int = 0,
) -> OfflineHTML:
    """The removed heads' attention patterns on a few examples, beside the comparison heads,
    as CircuitsVis's `AttentionHeads` views that work offline.

    Arguments as `attention_patterns`. Needs the `interactive` extra (circuitsvis).

    Returns:
        An `OfflineHTML` (Jupyter shows it; `.save(path)` writes a page): CircuitsVis's
        bundle once, then per example its id, outcome and one `AttentionHeads` view, whose
        heads are named `L1H0 (removed)`, `L0H5 (comparison)`.

    Example:
        >>> ex = explain_heads(model, task, result)
        >>> attention_view(model, task, ex)          # the examples of attention_examples.png
    """
    bundle = circuitsvis_bundle()  # first: without the extra, no forward pass is wasted
    return patterns_view(attention_patterns(model, task, heads, comparison, split, examples,
                                            outcomes, seed), bundle)


def patterns_view(patterns: list[ExamplePatterns], bundle: str | None = None) -> OfflineHTML:
    """`attention_view`'s HTML for patterns already computed (`attention_patterns`)."""
    bundle = circuitsvis_bundle() if bundle is None else bundle
    parts = [f"<script>{bundle}</script>"]
    prefix = uuid.uuid4().hex[:8]  # several views in one notebook need distinct ids
    for k, ex in enumerate(patterns):
        div = f"cel-attention-{prefix}-{k}"
        props = {"attention": np.round(ex.pattern, 4).tolist(), "tokens": ex.tokens,
                 "attentionHeadNames": [f"{h} ({g})" for h, g in zip(ex.heads, ex.groups,
                                                                       strict=True)],
                 "maskUpperTri": True}
        label = f"example {ex.id}" + (f" ({ex.outcome} by the removal)" if ex.outcome else "")
        parts.append(f"<h4>{html.escape(label)}</h4><div id='{div}' class='cel-attention'>"
                     "</div>")
        data = json.dumps(props).replace("</", "<\\/")
        parts.append(f"<script>CircuitsVis.render({json.dumps(div)}, "
                     f"CircuitsVis.AttentionHeads, {data});</script>")
    return OfflineHTML("\n".join(parts), "attention of the removed and comparison heads")
