"""Where a head looks: its attention from the answer position, summed by token role.

A head's attention pattern (`hook_pattern`) from the answer position is a distribution over
the prompt's positions. Summing it over the positions of each token role turns prompts of
different lengths and wordings into comparable numbers: the roles come from the task when it
labels them (e.g. `marker`, `context`, `query`, with `bos` at position 0), else from position
(`bos`, `previous`, `self`, `other`) and from the answers (`answer` / `wrong`: an earlier token
equal to a correct / wrong answer, such as IOI's indirect object and subject), chosen through
the `ROLE_SCHEMES` registry. Attention to a role is a fraction of the head's attention, so
the roles of one example sum to 1; the entropy (nats) says how spread the attention is.
`summarize_attention` averages the per-example table per head, optionally split by whether
ablation fixed or broke the example. `roles_for` (every prompt's roles) and `attention_table`
(the table from a `capture`) are shared with `circuits` and `explain_heads`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Literal

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from workbench.errors import WorkbenchError
from workbench.explain.capture import Capture, as_batch, attach_outcome, capture
from workbench.heads import HeadSet, HeadSpec
from workbench.hooked import HookedModel
from workbench.options import choose
from workbench.tables import INDEX_COLUMNS, head_name
from workbench.tasks.encoding import TaskBatch
from workbench.tasks.task import Task

RoleScheme = Literal["auto", "task", "answers", "positional"]


def _task_roles(batch: TaskBatch, i: int) -> list[str]:
    if batch.roles is None:
        raise WorkbenchError(
            f"task {batch.task.name!r} labels no token roles; use roles='positional' or 'auto'"
        )
    return list(batch.roles[i])


def _positional_roles(batch: TaskBatch, i: int) -> list[str]:
    """`bos` (position 0 when the prompts start with a BOS), `self` (the answer position),
    `previous` (the position before it), `other` (everything else)."""
    n = int(batch.lengths[i])
    roles = ["other"] * n
    if n >= 2:
        roles[n - 2] = "previous"
    roles[n - 1] = "self"
    if batch.prepend_bos and n >= 2:
        roles[0] = "bos"
    return roles


def _answer_roles(batch: TaskBatch, i: int) -> list[str]:
    """The positional roles, and `answer` / `wrong` for earlier prompt tokens equal to the
    first token of a correct / wrong answer: where an IOI head finds the indirect object (the
    answer) or the subject (the wrong name), an induction head the token to copy."""
    roles = _positional_roles(batch, i)
    n = int(batch.lengths[i])
    answers = {int(t) for t in batch.answer_ids[i].tolist() if t >= 0}
    wrong = {int(t) for t in batch.wrong_ids[i].tolist() if t >= 0} - answers
    for p, tok in enumerate(batch.tokens[i, : n - 1].tolist()):
        if roles[p] == "bos":
            continue
        if tok in answers:
            roles[p] = "answer"
        elif tok in wrong:
            roles[p] = "wrong"
    return roles


ROLE_SCHEMES: dict[str, Callable[[TaskBatch, int], list[str]]] = {
    "task": _task_roles,
    "answers": _answer_roles,
    "positional": _positional_roles,
}


def roles_for(batch: TaskBatch, scheme: RoleScheme) -> list[list[str]]:
    """The role of every position of every prompt under `scheme` (see `attention_by_role`)."""
    if scheme == "auto":
        # without answer tokens in the prompts, the answer roles are the positional ones
        scheme = "task" if batch.roles is not None else "answers"
    choose(scheme, sorted(ROLE_SCHEMES), "role scheme")
    return [ROLE_SCHEMES[scheme](batch, i) for i in range(len(batch))]


def _role_order(roles: list[list[str]]) -> list[str]:
    """Every role, in order of first appearance (so `bos` comes first)."""
    seen: dict[str, None] = {}
    for row in roles:
        for r in row:
            seen.setdefault(r, None)
    return list(seen)


def _entropy(p: Float[Tensor, "... key_pos"]) -> Float[Tensor, "..."]:
    return -(p * torch.log(p.clamp_min(1e-30))).sum(-1)


def attention_table(
    cap: Capture, heads: HeadSet, roles: list[list[str]], outcomes: pd.DataFrame | None
) -> pd.DataFrame:
    """`attention_by_role`'s table from a capture and the prompts' roles (`roles_for`)."""
    batch = cap.batch
    order = _role_order(roles)
    records = []
    for i, ex in enumerate(batch.task.examples):
        n = int(batch.lengths[i])
        toks, ex_roles = batch.str_tokens[i], roles[i]
        role_idx = torch.tensor([order.index(r) for r in ex_roles])
        for layer, head in heads:
            p = cap.attn[i, layer, head, :n].cpu()
            by_role = torch.zeros(len(order)).index_add_(0, role_idx, p)
            top = int(p.argmax())
            records.append(
                {
                    "id": ex.id,
                    "layer": layer,
                    "head": head,
                    "head_name": head_name(layer, head),
                    "answer_token": toks[n - 1],
                    "entropy": float(_entropy(p)),
                    "top_pos": top,
                    "top_token": toks[top],
                    "top_role": ex_roles[top],
                    "top_attention": float(p[top]),
                    **{f"attn_{r}": float(v) for r, v in zip(order, by_role, strict=True)},
                }
            )
    df = pd.DataFrame(records)
    return attach_outcome(df, outcomes)


def attention_by_role(
    model: HookedModel,
    task: Task | TaskBatch | str,
    heads: Iterable[HeadSpec] | HeadSet,
    split: str | None = "heldout",
    roles: RoleScheme = "auto",
    outcomes: pd.DataFrame | None = None,
    batch_size: int = 32,
) -> pd.DataFrame:
    """Where each head looks from the answer position, per example.

    Args:
        model: a HookedTransformer.
        task: a `Task`, a task name, or an encoded `TaskBatch`.
        heads: the heads to describe.
        split: `"select"`, `"heldout"` or None for every example.
        roles: `"task"` (the task's labels, `bos` at position 0), `"positional"` (`bos`,
            `previous`, `self`, `other`), `"answers"` (the positional roles, plus `answer` /
            `wrong` for prompt tokens equal to a correct / wrong answer's first token), or
            `"auto"` (the task's labels when it has them, else `"answers"`, which are the
            positional roles where no prompt holds an answer token).
        outcomes: a table with `id, outcome` (from `ablation_outcomes`) to attach.

    Returns:
        One row per (example, head): `id, layer, head, head_name, [outcome,] answer_token,
        entropy` (nats), `top_pos, top_token, top_role, top_attention` (the most attended
        position), and `attn_<role>` for every role: the fraction of attention on that role's
        positions (0 where the example has none); the `attn_*` of a row sum to 1.
    """
    batch = as_batch(model, task, split)
    head_set = HeadSet.of(model, heads)
    cap = capture(model, batch, batch_size)
    return attention_table(cap, head_set, roles_for(batch, roles), outcomes)


def role_columns(df: pd.DataFrame) -> list[str]:
    """The `attn_<role>` columns of an attention table or its summary, in table order."""
    return [c for c in df.columns if c.startswith("attn_")]


def summarize_attention(
    attention: pd.DataFrame, by: str | None = None, n_tokens: int = 3
) -> pd.DataFrame:
    """Average a per-example attention table (`attention_by_role`) per head.

    Args:
        attention: the per-example table.
        by: also split by this column (e.g. `"outcome"` to compare the examples the ablation
            fixes, breaks and leaves alone); None for one row per head.
        n_tokens: how many of the most often top-attended tokens to list.

    Returns:
        One row per head (per head and value of `by`): `layer, head, head_name, [by,] n,
        entropy, top_role` (the role with the most mean attention), the mean `attn_<role>`
        columns, and `top_tokens` (the tokens most often attended most, with their counts).
    """
    keys = list(INDEX_COLUMNS) + ([by] if by else [])
    if by and by not in attention:
        raise WorkbenchError(
            f"attention table has no column {by!r}; columns: {list(attention.columns)}"
        )
    role_cols = role_columns(attention)
    rows = []
    for key, df in attention.groupby(keys, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        means = df[role_cols].mean()
        counts = Counter(df["top_token"]).most_common(n_tokens)
        rows.append(
            {
                **dict(zip(keys, key, strict=True)),
                "n": len(df),
                "entropy": float(df["entropy"].mean()),
                "top_role": means.idxmax()[len("attn_") :],
                **means.to_dict(),
                "top_tokens": ", ".join(f"{t!r}x{c}" for t, c in counts),
            }
        )
    return pd.DataFrame(rows).sort_values(keys, kind="stable").reset_index(drop=True)
