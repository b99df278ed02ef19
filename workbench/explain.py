"""What the removed heads do: attention by token role, direct logit attribution, OV/QK circuits.

Once CEL has found heads whose removal helps a task, this module explains each head from three
angles, all measured at the answer position (the last real token of each right-padded prompt):

- **where it looks** (`attention_by_role`): the head's attention pattern (`hook_pattern`) from
  the answer position, summed over the positions of each token role. Roles come from the task
  when it labels them (e.g. `marker`, `context`, `query`, with `bos` at position 0), else from
  position (`bos`, `previous`, `self`, `other`). Attention to a role is a fraction of the head's
  attention, so the roles of one example sum to 1;
- **what it writes** (`direct_logit_attribution`): the head's output `z_h @ W_O[h]` read
  through the final layer norm onto the correct answer, the wrong answer and their difference.
  The residual stream at the answer position is a sum of components, and the final layer norm
  is linear once its scale (`ln_final.hook_scale`, taken from the cache) is fixed, so each
  component gets an exact share of the logits (`dla_components`);
- **what it moves** (`ov_circuit`, `qk_circuit`): the OV circuit (TransformerLens's
  `FactoredMatrix` `W_V W_O`) of the tokens the head attends to, read out through the
  unembedding: which output tokens it promotes and suppresses; and the QK circuit's preferred
  source tokens for the task's query tokens;
- **did removal help through it** (`removal_vs_dla`): per example, the change in the
  correct-answer log-prob and logit difference when the head alone is ablated, next to its
  direct effect (the change in its own direct logit attribution); the rest went through later
  layers or the final layer norm's scale.

`explain_heads` runs all of it on one forward pass and returns a `HeadExplanation` holding the
tables. Per-head tables follow the schema of `workbench.tables` (`layer, head, head_name`
first); per-example tables start with `id, layer, head, head_name`. Logits and log-probs are in
nats; attention is a fraction in [0, 1]; entropy is in nats.

**The DLA decomposition.** The residual stream at the answer position is
`embed + pos_embed + sum_l (sum_h z_{l,h} W_O[l,h] + b_O[l] + mlp_out[l])` (no `pos_embed` for
rotary models, no `mlp_out` for attention-only ones), and the logit of token `t` is
`(x - mean(x)) / scale . (w_ln * W_U[:, t]) + b_ln . W_U[:, t] + b_U[t]`. Centring `x` is the
same as centring the direction `w_ln * W_U[:, t]` over `d_model`, which is what we do for `LN`
and `LNPre` models (RMS norms do not centre; models without a final norm have scale 1). When
TransformerLens folded the layer norm (`fold_ln`), `w_ln`/`b_ln` are already inside
`W_U`/`b_U`, and with `center_writing_weights` every writing weight is already centred; both
cases need no special handling. The components are `embed`, `pos_embed`, each head, each
layer's `b_O`, each MLP's output (with its bias), and `b_U` (which also holds `b_ln . W_U`);
they sum to the logit of the answer minus that of the wrong answer. A last component `other`
is whatever of the residual stream these do not account for, and is zero for the standard
architectures. With several acceptable (or wrong) answers, the direction is the mean of their
directions, so the attributions sum to the mean answer logit minus the mean wrong logit. When
an example has no wrong answer, its wrong answer is the clean model's highest-scoring
non-answer token (`wrong_source = "rival"`).

Interactive attention views (`circuitsvis`) are deliberately not used: its default display
loads JavaScript from the internet, and the workbench must run offline. The plotting helpers
use matplotlib only, build `matplotlib.figure.Figure` objects without `pyplot` (so nothing
global changes and a notebook shows each figure once), and return them.

Example:
    >>> ex = explain_heads(model, task, ["L1H2"], split="heldout")
    >>> ex.roles          # mean attention per role, entropy, top tokens, per head
    >>> ex.dla_summary    # mean direct logit attribution, removed vs comparison heads
    >>> plot_removal_vs_dla(ex.removal)
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from workbench.ablation import AblationKind, HeadMeans, ablation_hooks, compute_head_means
from workbench.errors import WorkbenchError
from workbench.heads import HeadSet, HeadSpec
from workbench.metrics import answer_logits, evaluate, logprob
from workbench.tables import INDEX_COLUMNS, head_name, save_table
from workbench.tasks import Task, TaskBatch, encode_task, load_task
from workbench.tokenizer import get_tokenizer

RoleScheme = Literal["auto", "task", "positional"]
OUTCOMES = ("fixed", "broken", "unchanged")
EXAMPLE_INDEX = ("id", "layer", "head", "head_name")
_LN_CENTRED = ("LN", "LNPre")


# --------------------------------------------------------------------------- inputs


def _as_batch(model, task: Task | TaskBatch | str, split: str | None) -> TaskBatch:
    """Encode a task (a `Task`, a task name/path, or an encoded batch) and pick one split."""
    if isinstance(task, str):
        task = load_task(task)
    if isinstance(task, TaskBatch):
        if split is None:
            return task
        idx = [i for i, e in enumerate(task.task.examples) if e.split == split]
        if not idx:
            raise WorkbenchError(f"task {task.task.name!r} has no examples in split {split!r}")
        return task.rows(idx)
    if isinstance(task, Task):
        return encode_task(model, task, split)
    raise WorkbenchError(
        f"task must be a Task, a TaskBatch or a task name; got {type(task).__name__}"
    )


def _forward_kwargs(model) -> dict:
    # Right padding: TransformerLens builds a padding mask only for left-padded tokenizers;
    # with causal attention the padding after the answer position cannot change it.
    return {"padding_side": "right"} if getattr(model, "tokenizer", None) is not None else {}


@dataclass
class _Capture:
    """What one clean forward pass leaves at the answer position of every prompt."""

    batch: TaskBatch
    logits: Float[Tensor, "batch d_vocab"]
    attn: Float[Tensor, "batch layer head_index key_pos"]  # the answer position's row
    z: Float[Tensor, "batch layer head_index d_head"]
    scale: Float[Tensor, " batch"]  # ln_final scale (1 without a final norm)
    embed: Float[Tensor, "batch d_model"]
    pos_embed: Float[Tensor, "batch d_model"] | None
    mlp_out: Float[Tensor, "batch layer d_model"] | None
    resid: Float[Tensor, "batch d_model"]  # the final residual stream


def _capture(model, batch: TaskBatch, batch_size: int = 32) -> _Capture:
    n_layers = model.cfg.n_layers
    has_mlp = not model.cfg.attn_only
    names = {
        "hook_embed",
        "hook_pos_embed",
        "ln_final.hook_scale",
        f"blocks.{n_layers - 1}.hook_resid_post",
    }
    for l in range(n_layers):
        names |= {f"blocks.{l}.attn.hook_pattern", f"blocks.{l}.attn.hook_z"}
        if has_mlp:
            names.add(f"blocks.{l}.hook_mlp_out")
    parts: dict[str, list[Tensor]] = {}
    with torch.no_grad():
        for start in range(0, len(batch), batch_size):
            sub = batch.rows(slice(start, start + batch_size))
            rows = torch.arange(len(sub), device=sub.tokens.device)
            pos = sub.answer_pos
            logits, cache = model.run_with_cache(
                sub.tokens, names_filter=lambda n: n in names, **_forward_kwargs(model)
            )
            got = {
                "logits": logits[rows, pos],
                "attn": torch.stack(
                    [cache[f"blocks.{l}.attn.hook_pattern"][rows, :, pos] for l in range(n_layers)],
                    dim=1,
                ),  # (B, L, H, T)
                "z": torch.stack(
                    [cache[f"blocks.{l}.attn.hook_z"][rows, pos] for l in range(n_layers)], dim=1
                ),  # (B, L, H, D)
                "embed": cache["hook_embed"][rows, pos],
                "resid": cache[f"blocks.{n_layers - 1}.hook_resid_post"][rows, pos],
            }
            got["scale"] = (
                cache["ln_final.hook_scale"][rows, pos, 0]
                if "ln_final.hook_scale" in cache.cache_dict
                else torch.ones(len(sub), device=logits.device)
            )
            if "hook_pos_embed" in cache.cache_dict:
                got["pos_embed"] = cache["hook_pos_embed"][rows, pos]
            if has_mlp:
                got["mlp_out"] = torch.stack(
                    [cache[f"blocks.{l}.hook_mlp_out"][rows, pos] for l in range(n_layers)], dim=1
                )  # (B, L, d)
            for key, value in got.items():
                parts.setdefault(key, []).append(value.float())
    cat = {key: torch.cat(v) for key, v in parts.items()}
    return _Capture(
        batch=batch,
        logits=cat["logits"],
        attn=cat["attn"],
        z=cat["z"],
        scale=cat["scale"],
        embed=cat["embed"],
        pos_embed=cat.get("pos_embed"),
        mlp_out=cat.get("mlp_out"),
        resid=cat["resid"],
    )


# --------------------------------------------------------------------------- roles


def _task_roles(batch: TaskBatch, i: int) -> list[str]:
    if batch.roles is None:
        raise WorkbenchError(
            f"task {batch.task.name!r} labels no token roles; use roles='positional' or 'auto'"
        )
    return list(batch.roles[i])


def _positional_roles(batch: TaskBatch, i: int) -> list[str]:
    """`bos` (position 0 when the task prepends BOS), `self` (the answer position),
    `previous` (the position before it), `other` (everything else)."""
    n = int(batch.lengths[i])
    roles = ["other"] * n
    if n >= 2:
        roles[n - 2] = "previous"
    roles[n - 1] = "self"
    if batch.task.prepend_bos and n >= 2:
        roles[0] = "bos"
    return roles


ROLE_SCHEMES: dict[str, Callable[[TaskBatch, int], list[str]]] = {
    "task": _task_roles,
    "positional": _positional_roles,
}


def _roles_for(batch: TaskBatch, scheme: RoleScheme) -> list[list[str]]:
    if scheme == "auto":
        scheme = "task" if batch.roles is not None else "positional"
    if scheme not in ROLE_SCHEMES:
        raise WorkbenchError(
            f"role scheme {scheme!r} is unknown; expected 'auto' or one of {sorted(ROLE_SCHEMES)}"
        )
    return [ROLE_SCHEMES[scheme](batch, i) for i in range(len(batch))]


def _role_order(roles: list[list[str]]) -> list[str]:
    """Every role, in order of first appearance (so `bos` comes first)."""
    seen: dict[str, None] = {}
    for row in roles:
        for r in row:
            seen.setdefault(r, None)
    return list(seen)


# --------------------------------------------------------------------------- outcomes


def _default_means(
    model, batch: TaskBatch, kind: AblationKind, means: HeadMeans | None
) -> HeadMeans | None:
    """Means for mean ablation when none are given: over the task's `select` split (where CEL
    chose the heads), or over the whole batch if it has no such split."""
    if kind is not AblationKind.MEAN or means is not None:
        return means
    task = batch.task
    if any(e.split == "select" for e in task.examples):
        task = task.subset("select")
    return compute_head_means(model, task)


def ablation_outcomes(
    model,
    task: Task | TaskBatch | str,
    heads: Iterable[HeadSpec] | HeadSet,
    split: str | None = "heldout",
    kind: AblationKind | str = "zero",
    means: HeadMeans | None = None,
) -> pd.DataFrame:
    """Which examples ablating the whole head set fixes, breaks or leaves alone.

    Returns:
        One row per example: `id, split, group, correct_clean, correct_ablated, outcome,
        logprob_clean, logprob_ablated, delta_logprob` (`outcome` is `"fixed"` for wrong ->
        right, `"broken"` for right -> wrong, else `"unchanged"`; log-probs in nats).
    """
    batch = _as_batch(model, task, split)
    kind = AblationKind.parse(kind)
    means = _default_means(model, batch, kind, means)
    clean = evaluate(model, batch)
    abl = evaluate(model, batch, heads=HeadSet.of(model, heads), kind=kind, means=means)
    before, after = clean["correct"].to_numpy(), abl["correct"].to_numpy()
    outcome = np.where(after > before, "fixed", np.where(after < before, "broken", "unchanged"))
    return pd.DataFrame(
        {
            "id": clean["id"],
            "split": clean["split"],
            "group": clean["group"],
            "correct_clean": before,
            "correct_ablated": after,
            "outcome": outcome,
            "logprob_clean": clean["logprob"],
            "logprob_ablated": abl["logprob"],
            "delta_logprob": abl["logprob"] - clean["logprob"],
        }
    )


# --------------------------------------------------------------------------- attention


def _attach_outcome(df: pd.DataFrame, outcomes: pd.DataFrame | None) -> pd.DataFrame:
    """Insert an `outcome` column after the head columns, matched on example id."""
    if outcomes is not None:
        df.insert(4, "outcome", df["id"].map(outcomes.set_index("id")["outcome"]))
    return df


def _entropy(p: Float[Tensor, "... key_pos"]) -> Float[Tensor, "..."]:
    return -(p * torch.log(p.clamp_min(1e-30))).sum(-1)


def _attention_table(
    cap: _Capture, heads: HeadSet, roles: list[list[str]], outcomes: pd.DataFrame | None
) -> pd.DataFrame:
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
    return _attach_outcome(df, outcomes)


def attention_by_role(
    model,
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
            `previous`, `self`, `other`), or `"auto"` (the task's labels when it has them).
        outcomes: a table with `id, outcome` (from `ablation_outcomes`) to attach.

    Returns:
        One row per (example, head): `id, layer, head, head_name, [outcome,] answer_token,
        entropy` (nats), `top_pos, top_token, top_role, top_attention` (the most attended
        position), and `attn_<role>` for every role: the fraction of attention on that role's
        positions (0 where the example has none); the `attn_*` of a row sum to 1.
    """
    batch = _as_batch(model, task, split)
    head_set = HeadSet.of(model, heads)
    cap = _capture(model, batch, batch_size)
    return _attention_table(cap, head_set, _roles_for(batch, roles), outcomes)


def _role_columns(df: pd.DataFrame) -> list[str]:
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
    role_cols = _role_columns(attention)
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


# --------------------------------------------------------------------------- DLA


def _id_mask(ids: Int[Tensor, "batch k"], d_vocab: int) -> Tensor:
    """`[batch, d_vocab]` booleans, True at each row's ids (padding -1 ignored)."""
    hits = torch.zeros(ids.shape[0], d_vocab, device=ids.device)
    hits.scatter_add_(1, ids.clamp(min=0), (ids >= 0).float())
    return hits > 0


def _wrong_ids(model, cap: _Capture) -> tuple[Tensor, list[str]]:
    """Each example's wrong answers (padded with -1); the clean model's best non-answer token
    (over the candidates when the task has them) where the example has none."""
    batch = cap.batch
    n, d_vocab = cap.logits.shape
    given = batch.wrong_ids
    has_wrong = (
        (given >= 0).any(-1)
        if given.shape[1]
        else torch.zeros(n, dtype=torch.bool, device=cap.logits.device)
    )
    if bool(has_wrong.all()):
        return given, ["task"] * n
    logits = cap.logits.masked_fill(_id_mask(batch.answer_ids, d_vocab), float("-inf"))
    if batch.candidate_ids is not None:
        logits = logits.masked_fill(~_id_mask(batch.candidate_ids, d_vocab), float("-inf"))
    rival = logits.argmax(-1)
    ids = torch.full((n, max(1, given.shape[1])), -1, dtype=torch.long, device=rival.device)
    ids[:, : given.shape[1]] = given
    ids[~has_wrong, 0] = rival[~has_wrong]
    return ids, ["task" if bool(h) else "rival" for h in has_wrong]


def _final_norm_param(model, name: str) -> Tensor | None:
    """The final norm's weight `w` or bias `b`; None when folded away or there is no norm."""
    return getattr(getattr(model, "ln_final", None), name, None)


def _directions(
    model, ids: Int[Tensor, "batch k"]
) -> tuple[Float[Tensor, "batch d_model"], Float[Tensor, " batch"]]:
    """The mean effective unembedding direction of each row's ids, and the constant term.

    `logit_t = x / scale . dir_t + const_t` for the final residual `x`, where `dir_t` is
    `w_ln * W_U[:, t]`, centred over `d_model` for LN models, and `const_t = b_ln . W_U[:, t]
    + b_U[t]`.
    """
    valid = (ids >= 0).float()  # (B, K)
    if bool((valid.sum(-1) == 0).any()):
        raise WorkbenchError("every example needs at least one answer and one wrong token")
    cols = model.W_U[:, ids.clamp(min=0)].permute(1, 2, 0).float()  # (B, K, d)
    const = model.b_U[ids.clamp(min=0)].float()  # (B, K)
    b = _final_norm_param(model, "b")
    if b is not None:
        const = const + cols @ b.float()
    w = _final_norm_param(model, "w")
    if w is not None:
        cols = cols * w.float()
    if model.cfg.normalization_type in _LN_CENTRED:
        cols = cols - cols.mean(-1, keepdim=True)
    weights = valid / valid.sum(-1, keepdim=True)
    return (cols * weights[..., None]).sum(1), (const * weights).sum(1)


def _logit_parts(model, cap: _Capture, direction: Tensor, const: Tensor) -> dict[str, Tensor]:
    """Each component's share of `direction`'s logit: name -> `[batch]` or `[batch, layer(,
    head)]`."""
    d = direction / cap.scale[:, None]  # (B, d)
    W_O = model.W_O.float()  # (L, H, D, d)
    heads_out = torch.einsum("blhe,lhed->blhd", cap.z, W_O)  # (B, L, H, d)
    b_O = model.b_O.float()  # (L, d)
    parts = {
        "embed": (cap.embed * d).sum(-1),
        "head": torch.einsum("blhd,bd->blh", heads_out, d),
        "b_O": torch.einsum("ld,bd->bl", b_O, d),
        "b_U": const,
    }
    total = cap.embed + heads_out.sum((1, 2)) + b_O.sum(0)
    if cap.pos_embed is not None:
        parts["pos_embed"] = (cap.pos_embed * d).sum(-1)
        total = total + cap.pos_embed
    if cap.mlp_out is not None:
        parts["mlp"] = torch.einsum("bld,bd->bl", cap.mlp_out, d)
        total = total + cap.mlp_out.sum(1)
    parts["other"] = ((cap.resid - total) * d).sum(-1)
    return parts


@dataclass
class _Attribution:
    answer: dict[str, Tensor]
    wrong: dict[str, Tensor]
    wrong_ids: Tensor
    wrong_source: list[str]

    def diff(self, key: str) -> Tensor:
        return self.answer[key] - self.wrong[key]


def _attribute(model, cap: _Capture) -> _Attribution:
    wrong_ids, source = _wrong_ids(model, cap)
    with torch.no_grad():
        answer = _logit_parts(model, cap, *_directions(model, cap.batch.answer_ids))
        wrong = _logit_parts(model, cap, *_directions(model, wrong_ids))
    return _Attribution(answer, wrong, wrong_ids, source)


def _components_table(model, cap: _Capture, att: _Attribution) -> pd.DataFrame:
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    ids = cap.batch.task.ids
    frames = []

    def add(component: str, name: str, layer: int, head: int, a: Tensor, w: Tensor) -> None:
        frames.append(
            pd.DataFrame(
                {
                    "id": ids,
                    "component": component,
                    "name": name,
                    "layer": layer,
                    "head": head,
                    "dla_correct": a.cpu().numpy(),
                    "dla_wrong": w.cpu().numpy(),
                }
            )
        )

    for key in ("embed", "pos_embed"):
        if key in att.answer:
            add(key, key, -1, -1, att.answer[key], att.wrong[key])
    for l in range(n_layers):
        for h in range(n_heads):
            add(
                "head",
                head_name(l, h),
                l,
                h,
                att.answer["head"][:, l, h],
                att.wrong["head"][:, l, h],
            )
        add("b_O", f"L{l}.b_O", l, -1, att.answer["b_O"][:, l], att.wrong["b_O"][:, l])
        if "mlp" in att.answer:
            add("mlp", f"L{l}.mlp", l, -1, att.answer["mlp"][:, l], att.wrong["mlp"][:, l])
    for key in ("b_U", "other"):
        add(key, key, -1, -1, att.answer[key], att.wrong[key])
    df = pd.concat(frames, ignore_index=True)
    df["dla_diff"] = df["dla_correct"] - df["dla_wrong"]
    return df


def dla_components(
    model, task: Task | TaskBatch | str, split: str | None = "heldout", batch_size: int = 32
) -> pd.DataFrame:
    """Direct logit attribution of every component of the final residual stream.

    Returns:
        One row per (example, component): `id, component` (`embed`, `pos_embed`, `head`,
        `b_O`, `mlp`, `b_U`, `other`), `name` (e.g. `L1H2`, `L0.mlp`), `layer, head` (-1 where
        they do not apply), `dla_correct, dla_wrong, dla_diff` (nats). Summed over the
        components of one example, `dla_correct` is the answer's logit and `dla_diff` is the
        answer-minus-wrong logit difference (see the module docstring).
    """
    batch = _as_batch(model, task, split)
    cap = _capture(model, batch, batch_size)
    return _components_table(model, cap, _attribute(model, cap))


def comparison_heads(model, heads: Iterable[HeadSpec] | HeadSet, seed: int = 0) -> HeadSet:
    """One random comparison head per head of the set: another head of the same layer that is
    not in the set (any other head if the layer has none), drawn with `seed`."""
    head_set = HeadSet.of(model, heads)
    chosen = set(head_set.heads)
    rng = np.random.default_rng(seed)
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    picks = []
    for layer, _ in head_set:
        pool = [(layer, h) for h in range(n_heads) if (layer, h) not in chosen]
        if not pool:
            pool = [(l, h) for l in range(n_layers) for h in range(n_heads) if (l, h) not in chosen]
        if not pool:
            break
        pick = pool[int(rng.integers(len(pool)))]
        chosen.add(pick)
        picks.append(pick)
    return HeadSet.of(model, picks)


def _dla_table(
    model, cap: _Capture, att: _Attribution, heads: HeadSet, comparison: HeadSet
) -> pd.DataFrame:
    tok = get_tokenizer(model)
    batch = cap.batch
    answer = tok.str_tokens(batch.answer_ids[:, 0].tolist())
    wrong = tok.str_tokens(att.wrong_ids[:, 0].tolist())
    frames = []
    for group, head_set in (("removed", heads), ("comparison", comparison)):
        for layer, head in head_set:
            a, w = att.answer["head"][:, layer, head], att.wrong["head"][:, layer, head]
            frames.append(
                pd.DataFrame(
                    {
                        "id": batch.task.ids,
                        "layer": layer,
                        "head": head,
                        "head_name": head_name(layer, head),
                        "head_group": group,
                        "answer": answer,
                        "wrong": wrong,
                        "wrong_source": att.wrong_source,
                        "dla_correct": a.cpu().numpy(),
                        "dla_wrong": w.cpu().numpy(),
                        "dla_diff": (a - w).cpu().numpy(),
                    }
                )
            )
    return pd.concat(frames, ignore_index=True)


def direct_logit_attribution(
    model,
    task: Task | TaskBatch | str,
    heads: Iterable[HeadSpec] | HeadSet,
    split: str | None = "heldout",
    comparison: Iterable[HeadSpec] | HeadSet | None | Literal["random"] = "random",
    seed: int = 0,
    batch_size: int = 32,
) -> pd.DataFrame:
    """Direct logit attribution of each head onto the correct and the wrong answer, per example.

    Args:
        heads: the heads to attribute (`head_group = "removed"`).
        comparison: heads to report alongside (`head_group = "comparison"`): `"random"` draws
            one per head with `comparison_heads(model, heads, seed)`; None for none.

    Returns:
        One row per (example, head): `id, layer, head, head_name, head_group, answer, wrong,
        wrong_source` (`task` or `rival`), `dla_correct, dla_wrong, dla_diff` (nats).
    """
    batch = _as_batch(model, task, split)
    head_set = HeadSet.of(model, heads)
    comp = _resolve_comparison(model, head_set, comparison, seed)
    cap = _capture(model, batch, batch_size)
    return _dla_table(model, cap, _attribute(model, cap), head_set, comp)


def _resolve_comparison(model, heads: HeadSet, comparison, seed: int) -> HeadSet:
    if isinstance(comparison, str) and comparison == "random":
        return comparison_heads(model, heads, seed)
    comp = HeadSet.of(model, comparison)
    overlap = set(comp.heads) & set(heads.heads)
    if overlap:
        raise WorkbenchError(f"comparison heads {sorted(overlap)} are also in the head set")
    return comp


def summarize_dla(dla: pd.DataFrame) -> pd.DataFrame:
    """Mean direct logit attribution per head of a `direct_logit_attribution` table.

    Returns:
        One row per head: `layer, head, head_name, head_group, n, dla_correct, dla_wrong,
        dla_diff, dla_diff_se` (nats; `_se` is the standard error over examples).
    """
    g = dla.groupby(list(INDEX_COLUMNS), sort=True)
    out = g.agg(
        head_group=("head_group", "first"),
        n=("id", "size"),
        dla_correct=("dla_correct", "mean"),
        dla_wrong=("dla_wrong", "mean"),
        dla_diff=("dla_diff", "mean"),
        dla_diff_se=("dla_diff", "sem"),
    )
    return out.reset_index()


# --------------------------------------------------------------------------- OV / QK


def _embed_through_ln1(model, layer: int, ids: Tensor) -> Float[Tensor, "n d_model"]:
    """Token embeddings as layer `layer`'s attention reads them (through its `ln1`)."""
    x = model.W_E[ids].float()[None]  # (1, n, d)
    ln1 = getattr(model.blocks[layer], "ln1", None)
    return x[0] if ln1 is None else ln1(x)[0]


def _to_logits(model, vecs: Float[Tensor, "n d_model"]) -> Float[Tensor, "n d_vocab"]:
    """Read residual-stream vectors out through the final norm's weights and `W_U`.

    The final scale is left out: it is positive, so it changes no ranking or sign.
    """
    if model.cfg.normalization_type in _LN_CENTRED:
        vecs = vecs - vecs.mean(-1, keepdim=True)
    w = _final_norm_param(model, "w")
    if w is not None:
        vecs = vecs * w.float()
    return vecs @ model.W_U.float()


def _top_sources(cap: _Capture, layer: int, head: int, n: int) -> list[tuple[int, float]]:
    """The token ids receiving the most attention from the answer position, summed over
    examples, with their mean attention per example."""
    mass: dict[int, float] = {}
    for i in range(len(cap.batch)):
        k = int(cap.batch.lengths[i])
        ids, attn = cap.batch.tokens[i, :k].tolist(), cap.attn[i, layer, head, :k].tolist()
        for tid, a in zip(ids, attn, strict=True):
            mass[tid] = mass.get(tid, 0.0) + a
    best = sorted(mass.items(), key=lambda kv: -kv[1])[:n]
    return [(tid, m / len(cap.batch)) for tid, m in best]


def _format_tokens(tok, ids: Sequence[int], values: Sequence[float]) -> str:
    return ", ".join(f"{t!r} ({v:+.2f})" for t, v in zip(tok.str_tokens(ids), values, strict=True))


def _ov_table(model, cap: _Capture, heads: HeadSet, n_sources: int, top_k: int) -> pd.DataFrame:
    tok = get_tokenizer(model)
    records = []
    with torch.no_grad():
        for layer, head in heads:
            sources = _top_sources(cap, layer, head, n_sources)
            ids = torch.tensor([s for s, _ in sources], device=model.W_E.device)
            x = _embed_through_ln1(model, layer, ids)
            ov = model.OV[layer, head]  # FactoredMatrix W_V W_O, (d_model, d_model)
            bias = model.b_V[layer, head].float() @ model.W_O[layer, head].float()
            out = _to_logits(model, (x @ ov).AB + bias)  # (n_sources, d_vocab)
            k = min(top_k, out.shape[-1])
            for j, (tid, mass) in enumerate(sources):
                row = out[j]
                up, down = row.topk(k), (-row).topk(k)
                self_rank = int((row > row[tid]).sum())
                records.append(
                    {
                        "layer": layer,
                        "head": head,
                        "head_name": head_name(layer, head),
                        "source_token": tok.str_tokens([tid])[0],
                        "source_attention": mass,
                        "promoted": _format_tokens(tok, up.indices.tolist(), up.values.tolist()),
                        "suppressed": _format_tokens(
                            tok, down.indices.tolist(), (-down.values).tolist()
                        ),
                        "self_logit": float(row[tid]),
                        "self_rank": self_rank,
                    }
                )
    return pd.DataFrame(records)


def ov_circuit(
    model,
    task: Task | TaskBatch | str,
    heads: Iterable[HeadSpec] | HeadSet,
    split: str | None = "heldout",
    n_sources: int = 3,
    top_k: int = 5,
    batch_size: int = 32,
) -> pd.DataFrame:
    """What each head writes about the tokens it attends to, read out as output tokens.

    For each of the `n_sources` tokens the head attends to most (from the answer position,
    summed over the task's examples), the token's embedding goes through the layer's `ln1`, the
    OV circuit (`model.OV[layer, head]`, a `FactoredMatrix`, plus `b_V W_O`) and the
    unembedding (with the final norm's weights and centring; see the module docstring). This
    is the direct path only: earlier layers and positional embeddings are left out.

    Returns:
        One row per (head, source token): `layer, head, head_name, source_token,
        source_attention` (mean attention per example), `promoted` / `suppressed` (the `top_k`
        output tokens with the largest / smallest logit, as text with values), `self_logit`,
        `self_rank` (0 when the head promotes the source token itself most: a copying head).
    """
    batch = _as_batch(model, task, split)
    cap = _capture(model, batch, batch_size)
    return _ov_table(model, cap, HeadSet.of(model, heads), n_sources, top_k)


def _qk_table(
    model, batch: TaskBatch, heads: HeadSet, roles: list[list[str]], top_k: int
) -> pd.DataFrame:
    tok = get_tokenizer(model)
    role_of: dict[int, Counter] = {}
    dest: Counter = Counter()
    for i in range(len(batch)):
        n = int(batch.lengths[i])
        for tid, role in zip(batch.tokens[i, :n].tolist(), roles[i], strict=True):
            role_of.setdefault(tid, Counter())[role] += 1
        dest[int(batch.tokens[i, n - 1])] += 1
    src_ids = torch.tensor(sorted(role_of), device=model.W_E.device)
    dest_ids = torch.tensor(list(dest), device=model.W_E.device)
    weights = torch.tensor(list(dest.values()), dtype=torch.float, device=model.W_E.device)
    weights = weights / weights.sum()
    records = []
    with torch.no_grad():
        for layer, head in heads:
            attn = model.blocks[layer].attn
            q = (
                _embed_through_ln1(model, layer, dest_ids) @ attn.W_Q[head].float()
                + attn.b_Q[head].float()
            )
            k = (
                _embed_through_ln1(model, layer, src_ids) @ attn.W_K[head].float()
                + attn.b_K[head].float()
            )
            scores = weights @ (q @ k.T) / attn.attn_scale  # (n_src,), query-frequency weighted
            top = scores.topk(min(top_k, len(src_ids)))
            pairs = zip(top.indices.tolist(), top.values.tolist(), strict=True)
            for rank, (j, s) in enumerate(pairs):
                tid = int(src_ids[j])
                records.append(
                    {
                        "layer": layer,
                        "head": head,
                        "head_name": head_name(layer, head),
                        "rank": rank,
                        "source_token": tok.str_tokens([tid])[0],
                        "score": s,
                        "source_role": role_of[tid].most_common(1)[0][0],
                    }
                )
    return pd.DataFrame(records)


def qk_circuit(
    model,
    task: Task | TaskBatch | str,
    heads: Iterable[HeadSpec] | HeadSet,
    split: str | None = "heldout",
    roles: RoleScheme = "auto",
    top_k: int = 5,
) -> pd.DataFrame:
    """The source tokens each head's QK circuit prefers, for the task's query tokens.

    The query is the token at the answer position, the keys are every token that occurs in the
    task's prompts, both as embeddings through the layer's `ln1` (with `b_Q`, `b_K`); scores
    are averaged over the queries, weighted by how often each occurs. Position (learned or
    rotary) and earlier layers are left out, so a head that finds its target by position
    (e.g. the token after an earlier copy) shows this only in `attention_by_role`.

    Returns:
        One row per (head, rank): `layer, head, head_name, rank` (0 = most preferred),
        `source_token, score` (attention score, before softmax), `source_role` (the role the
        token most often has in the prompts).
    """
    batch = _as_batch(model, task, split)
    return _qk_table(model, batch, HeadSet.of(model, heads), _roles_for(batch, roles), top_k)


# --------------------------------------------------------------------------- removal vs DLA


def _fill_output(
    model,
    kind: AblationKind,
    means: HeadMeans | None,
    layer: int,
    head: int,
    pos: Tensor,
    per_position: bool,
) -> Float[Tensor, "batch d_model"]:
    """What the ablated head writes at each answer position instead of its own output."""
    W_O = model.W_O[layer, head].float()
    if kind is AblationKind.ZERO:
        return torch.zeros(len(pos), W_O.shape[-1], device=W_O.device)
    if per_position:
        return means.per_position[pos, layer, head].float() @ W_O
    return (means.averaged[layer, head].float() @ W_O).expand(len(pos), -1)


def _mean_logit(logits: Tensor, ids: Tensor) -> Tensor:
    valid = (ids >= 0).float()
    return (logits.gather(1, ids.clamp(min=0)) * valid).sum(-1) / valid.sum(-1)


def _removal_table(
    model,
    cap: _Capture,
    att: _Attribution,
    heads: HeadSet,
    kind: AblationKind,
    means: HeadMeans | None,
    per_position: bool,
    outcomes: pd.DataFrame | None,
    batch_size: int,
) -> pd.DataFrame:
    batch = cap.batch
    answer_ids, wrong_ids = batch.answer_ids, att.wrong_ids
    clean_diff = _mean_logit(cap.logits, answer_ids) - _mean_logit(cap.logits, wrong_ids)
    clean_lp = logprob(cap.logits, batch)
    d_answer, _ = _directions(model, answer_ids)
    d_wrong, _ = _directions(model, wrong_ids)
    frames = []
    for layer, head in heads:
        hooks = ablation_hooks(model, [(layer, head)], kind, means, per_position)
        with torch.no_grad():
            logits = torch.cat(
                [
                    answer_logits(model, batch.rows(slice(s, s + batch_size)), hooks).float()
                    for s in range(0, len(batch), batch_size)
                ]
            )
            own = torch.einsum("be,ed->bd", cap.z[:, layer, head], model.W_O[layer, head].float())
            delta_out = (
                _fill_output(model, kind, means, layer, head, batch.answer_pos, per_position) - own
            )
            direct = (delta_out * (d_answer - d_wrong)).sum(-1) / cap.scale
        delta_diff = _mean_logit(logits, answer_ids) - _mean_logit(logits, wrong_ids) - clean_diff
        frames.append(
            pd.DataFrame(
                {
                    "id": batch.task.ids,
                    "layer": layer,
                    "head": head,
                    "head_name": head_name(layer, head),
                    "dla_correct": att.answer["head"][:, layer, head].cpu().numpy(),
                    "dla_diff": att.diff("head")[:, layer, head].cpu().numpy(),
                    "direct_effect": direct.cpu().numpy(),
                    "delta_logit_diff": delta_diff.cpu().numpy(),
                    "indirect_effect": (delta_diff - direct).cpu().numpy(),
                    "delta_logprob": (logprob(logits, batch) - clean_lp).cpu().numpy(),
                }
            )
        )
    df = pd.concat(frames, ignore_index=True)
    return _attach_outcome(df, outcomes)


def removal_vs_dla(
    model,
    task: Task | TaskBatch | str,
    heads: Iterable[HeadSpec] | HeadSet,
    split: str | None = "heldout",
    kind: AblationKind | str = "zero",
    means: HeadMeans | None = None,
    per_position: bool = False,
    outcomes: pd.DataFrame | None = None,
    batch_size: int = 32,
) -> pd.DataFrame:
    """Did removing each head help directly, or through later layers?

    Each head is ablated alone (`kind`; mean ablation uses `means`, by default the means over
    the task's `select` split). Its *direct effect* is the change in its own direct logit
    attribution to the answer-minus-wrong difference (its output replaced by the ablated one,
    at the clean final-norm scale): `-dla_diff` for zero ablation. The rest of the change,
    `indirect_effect`, went through later layers or the final norm's scale.

    Returns:
        One row per (example, head): `id, layer, head, head_name, [outcome,] dla_correct,
        dla_diff, direct_effect, delta_logit_diff, indirect_effect, delta_logprob` (nats;
        `delta_* = ablated - clean`; `delta_logit_diff = direct_effect + indirect_effect`).
    """
    batch = _as_batch(model, task, split)
    kind = AblationKind.parse(kind)
    means = _default_means(model, batch, kind, means)
    cap = _capture(model, batch, batch_size)
    return _removal_table(
        model,
        cap,
        _attribute(model, cap),
        HeadSet.of(model, heads),
        kind,
        means,
        per_position,
        outcomes,
        batch_size,
    )


# --------------------------------------------------------------------------- all together


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
        dla: per (example, head), direct logit attribution, removed and comparison heads.
        dla_summary: per head, its mean (`summarize_dla`).
        ov: per (head, source token), the OV circuit's promoted/suppressed tokens.
        qk: per (head, rank), the QK circuit's preferred source tokens.
        removal: per (example, head), ablation effect next to direct effect.
        config: the arguments that made the tables.
    """

    heads: HeadSet
    comparison: HeadSet
    outcomes: pd.DataFrame
    attention: pd.DataFrame
    roles: pd.DataFrame
    roles_by_outcome: pd.DataFrame
    dla: pd.DataFrame
    dla_summary: pd.DataFrame
    ov: pd.DataFrame
    qk: pd.DataFrame
    removal: pd.DataFrame
    config: dict

    TABLES = (
        "outcomes",
        "attention",
        "roles",
        "roles_by_outcome",
        "dla",
        "dla_summary",
        "ov",
        "qk",
        "removal",
    )

    def save(self, folder: str | Path) -> Path:
        """Write every table as `<name>.csv` and the config as `config.json` into `folder`."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for name in self.TABLES:
            save_table(getattr(self, name), folder / f"{name}.csv")
        (folder / "config.json").write_text(json.dumps(self.config, indent=2))
        return folder


def explain_heads(
    model,
    task: Task | TaskBatch | str,
    heads: Iterable[HeadSpec] | HeadSet,
    split: str | None = "heldout",
    kind: AblationKind | str = "zero",
    means: HeadMeans | None = None,
    per_position: bool = False,
    roles: RoleScheme = "auto",
    comparison: Iterable[HeadSpec] | HeadSet | None | Literal["random"] = "random",
    seed: int = 0,
    n_sources: int = 3,
    top_k: int = 5,
    batch_size: int = 32,
) -> HeadExplanation:
    """Explain a head set (e.g. the best set of a CEL search) on one split of a task.

    One clean forward pass with a cache feeds the attention, DLA and OV tables; the outcomes
    need one ablated pass and `removal_vs_dla` one pass per head. Arguments are those of the
    functions it calls (`ablation_outcomes`, `attention_by_role`, `direct_logit_attribution`,
    `ov_circuit`, `qk_circuit`, `removal_vs_dla`).

    Returns:
        A `HeadExplanation`.

    Example:
        >>> ex = explain_heads(model, "embedded_map", result.best, split="heldout")
        >>> ex.roles_by_outcome
    """
    batch = _as_batch(model, task, split)
    kind = AblationKind.parse(kind)
    head_set = HeadSet.of(model, heads)
    if not len(head_set):
        raise WorkbenchError("explain_heads needs at least one head")
    comp = _resolve_comparison(model, head_set, comparison, seed)
    means = _default_means(model, batch, kind, means)
    role_lists = _roles_for(batch, roles)
    outcomes = ablation_outcomes(model, batch, head_set, None, kind, means)
    cap = _capture(model, batch, batch_size)
    att = _attribute(model, cap)
    attention = _attention_table(cap, head_set, role_lists, outcomes)
    dla = _dla_table(model, cap, att, head_set, comp)
    return HeadExplanation(
        heads=head_set,
        comparison=comp,
        outcomes=outcomes,
        attention=attention,
        roles=summarize_attention(attention),
        roles_by_outcome=summarize_attention(attention, by="outcome"),
        dla=dla,
        dla_summary=summarize_dla(dla),
        ov=_ov_table(model, cap, head_set, n_sources, top_k),
        qk=_qk_table(model, batch, head_set, role_lists, top_k),
        removal=_removal_table(
            model, cap, att, head_set, kind, means, per_position, outcomes, batch_size
        ),
        config={
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
        },
    )


# --------------------------------------------------------------------------- plots


def _figure(n_rows: int, n_cols: int, width: float, height: float):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * n_cols, height * n_rows), layout="constrained")
    axes = fig.subplots(n_rows, n_cols, squeeze=False)
    return fig, axes


def plot_attention(
    model,
    task: Task | TaskBatch | str,
    heads: Iterable[HeadSpec] | HeadSet,
    example: int | str = 0,
    split: str | None = "heldout",
):
    """Full attention patterns of some heads on one example, with token labels.

    Args:
        example: the example's index in the split, or its id.

    Returns:
        A matplotlib `Figure`, one heatmap (query rows x key columns) per head.
    """
    batch = _as_batch(model, task, split)
    if isinstance(example, str):
        if example not in batch.task.ids:
            raise WorkbenchError(f"example id {example!r} is not in this split")
        example = batch.task.ids.index(example)
    one = batch.rows([example])
    head_set = HeadSet.of(model, heads)
    n = int(one.lengths[0])
    names = {f"blocks.{l}.attn.hook_pattern" for l, _ in head_set}
    with torch.no_grad():
        _, cache = model.run_with_cache(
            one.tokens, names_filter=lambda x: x in names, **_forward_kwargs(model)
        )
    toks = one.str_tokens[0]
    fig, axes = _figure(1, len(head_set), max(3.0, 0.35 * n + 1.5), max(3.0, 0.35 * n + 1.0))
    for ax, (layer, head) in zip(axes[0], head_set, strict=True):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"][0, head, :n, :n].cpu().numpy()
        im = ax.imshow(pattern, cmap="Blues", vmin=0.0, vmax=1.0)
        ax.set_xticks(range(n), toks, rotation=90, fontsize=8)
        ax.set_yticks(range(n), toks, fontsize=8)
        ax.set_xlabel("key (attended) token")
        ax.set_title(head_name(layer, head))
    axes[0][0].set_ylabel("query token")
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="attention")
    fig.suptitle(f"{batch.task.name}: example {batch.task.ids[example]}")
    return fig


def plot_answer_attention(
    model,
    task: Task | TaskBatch | str,
    head: HeadSpec,
    split: str | None = "heldout",
    n_examples: int = 8,
):
    """One head's attention from the answer position on several examples, tokens in the cells.

    Returns:
        A matplotlib `Figure`: rows are examples, columns positions, colour is attention.
    """
    batch = _as_batch(model, task, split)
    batch = batch.rows(slice(0, n_examples))
    ((layer, h),) = HeadSet.of(model, [head]).heads
    cap = _capture(model, batch)
    width = int(batch.lengths.max())
    attn = cap.attn[:, layer, h, :width].cpu().numpy()
    fig, axes = _figure(1, 1, 0.7 * width + 1.5, 0.45 * len(batch) + 1.2)
    ax = axes[0][0]
    im = ax.imshow(attn, cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
    for i, toks in enumerate(batch.str_tokens):
        for j, t in enumerate(toks):
            ax.text(
                j,
                i,
                t,
                ha="center",
                va="center",
                fontsize=7,
                color="white" if attn[i, j] > 0.6 else "black",
            )
    ax.set_yticks(range(len(batch)), batch.task.ids, fontsize=7)
    ax.set_xlabel("position")
    ax.set_title(f"{head_name(layer, h)}: attention from the answer position")
    fig.colorbar(im, ax=ax, label="attention")
    return fig


def plot_role_bars(roles: pd.DataFrame, by: str | None = None):
    """Mean attention per role for each head, as bars (one panel per head).

    Args:
        roles: `summarize_attention` output (`HeadExplanation.roles` or `.roles_by_outcome`).
        by: a column to draw as side-by-side bars (e.g. `"outcome"`); found automatically
            when the table has an `outcome` column.

    Returns:
        A matplotlib `Figure`.
    """
    if by is None and "outcome" in roles:
        by = "outcome"
    role_cols = _role_columns(roles)
    names = list(dict.fromkeys(roles["head_name"]))
    fig, axes = _figure(1, len(names), max(3.0, 0.5 * len(role_cols) + 1.5), 3.2)
    x = np.arange(len(role_cols))
    for ax, name in zip(axes[0], names, strict=True):
        df = roles[roles["head_name"] == name]
        groups = [(None, df)] if by is None else list(df.groupby(by, sort=True))
        width = 0.8 / len(groups)
        for k, (value, g) in enumerate(groups):
            label = None if value is None else f"{value} (n={int(g['n'].sum())})"
            ax.bar(
                x + (k - (len(groups) - 1) / 2) * width,
                g[role_cols].to_numpy()[0],
                width,
                label=label,
            )
        ax.set_xticks(x, [c[len("attn_") :] for c in role_cols], rotation=45, ha="right")
        ax.set_ylim(0, 1)
        ax.set_title(name)
        if by is not None:
            ax.legend(fontsize=7)
    axes[0][0].set_ylabel("mean attention from answer position")
    return fig


def plot_dla(dla_summary: pd.DataFrame):
    """Mean direct logit attribution of each head onto the answer, the wrong answer and their
    difference, removed heads next to comparison heads.

    Returns:
        A matplotlib `Figure`.
    """
    df = dla_summary.sort_values(["head_group", "layer", "head"], ascending=[False, True, True])
    fig, axes = _figure(1, 1, max(4.0, 0.9 * len(df) + 2.0), 3.5)
    ax = axes[0][0]
    x = np.arange(len(df))
    for k, col in enumerate(("dla_correct", "dla_wrong", "dla_diff")):
        ax.bar(
            x + (k - 1) * 0.27,
            df[col],
            0.27,
            label=col,
            yerr=df["dla_diff_se"] if col == "dla_diff" else None,
        )
    labels = [f"{n}\n({g})" for n, g in zip(df["head_name"], df["head_group"], strict=True)]
    ax.set_xticks(x, labels)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_ylabel("direct logit attribution (nats)")
    ax.legend(fontsize=8)
    return fig


def plot_removal_vs_dla(removal: pd.DataFrame):
    """Per example: a head's direct logit attribution (x) against the change in logit
    difference when it is ablated (y). Points on the dashed line `y = -x` are fully explained
    by the head's direct effect (for zero ablation); the vertical distance is the effect
    through later layers.

    Returns:
        A matplotlib `Figure`, one panel per head.
    """
    names = list(dict.fromkeys(removal["head_name"]))
    fig, axes = _figure(1, len(names), 3.6, 3.4)
    for ax, name in zip(axes[0], names, strict=True):
        df = removal[removal["head_name"] == name]
        groups = list(df.groupby("outcome", sort=True)) if "outcome" in df else [(None, df)]
        for value, g in groups:
            ax.scatter(g["dla_diff"], g["delta_logit_diff"], s=12, alpha=0.7, label=value)
        lo = float(min(df["dla_diff"].min(), -df["delta_logit_diff"].max(), 0.0))
        hi = float(max(df["dla_diff"].max(), -df["delta_logit_diff"].min(), 0.0))
        ax.plot([lo, hi], [-lo, -hi], ls="--", color="gray", lw=1)
        ax.axhline(0, color="black", lw=0.5)
        ax.axvline(0, color="black", lw=0.5)
        ax.set_xlabel("DLA (answer - wrong), nats")
        ax.set_title(name)
        if groups[0][0] is not None:
            ax.legend(fontsize=7)
    axes[0][0].set_ylabel("change in logit diff when ablated")
    return fig
