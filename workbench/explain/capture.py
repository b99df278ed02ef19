"""One clean forward pass, kept only at the answer position of every prompt.

Every angle of `workbench.explain` reads the same few activations at the answer position (the
last real token of each right-padded prompt): each head's attention row (`hook_pattern`) and
its output before `W_O` (`hook_z`), the embeddings, each MLP's output, the final residual
stream and the final layer norm's scale (`ln_final.hook_scale`), and, in models that normalise
the attention output before adding it to the residual stream (Gemma-2 and Gemma-3's `ln1_post`,
`use_normalization_before_and_after`), that norm's scale too. `capture` runs the model
once per mini-batch with `run_with_cache`, filtered to exactly these hooks, and keeps only the
answer position of each prompt (for attention, that position's row over the keys). With causal
attention, the right padding after the answer position cannot change anything at it.

Per-example tables of the package start with `EXAMPLE_INDEX` (`id, layer, head, head_name`);
`attach_outcome` adds the `outcome` column of `ablation_outcomes` after them.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from workbench.errors import WorkbenchError
from workbench.hooked import HookedModel
from workbench.logits import forward_kwargs, is_bridge, unembed_at
from workbench.tasks.encoding import TaskBatch, encode_task
from workbench.tasks.task import Task, load_task

EXAMPLE_INDEX = ("id", "layer", "head", "head_name")


def as_batch(model: HookedModel, task: Task | TaskBatch | str, split: str | None) -> TaskBatch:
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


@dataclass
class Capture:
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
    post_scale: Float[Tensor, "batch layer"] | None = None  # ln1_post's scale, where there is one


def capture(model: HookedModel, batch: TaskBatch, batch_size: int = 32) -> Capture:
    """Run `batch` through `model` once (in mini-batches) and keep its answer positions."""
    n_layers = model.cfg.n_layers
    has_mlp = not model.cfg.attn_only
    post = has_post_attention_norm(model)
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
        if post:
            names.add(f"blocks.{l}.ln1_post.hook_scale")
    parts: dict[str, list[Tensor]] = {}
    with torch.no_grad():
        for start in range(0, len(batch), batch_size):
            sub = batch.rows(slice(start, start + batch_size))
            rows = torch.arange(len(sub), device=sub.tokens.device)
            pos = sub.answer_pos
            logits, cache, scale = _answer_pass(model, sub.tokens, pos, names)
            got = {
                "logits": logits,
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
                scale[:, 0, 0] if scale is not None else torch.ones(len(sub), device=logits.device)
            )
            if "hook_pos_embed" in cache.cache_dict:
                got["pos_embed"] = cache["hook_pos_embed"][rows, pos]
            if has_mlp:
                got["mlp_out"] = torch.stack(
                    [cache[f"blocks.{l}.hook_mlp_out"][rows, pos] for l in range(n_layers)], dim=1
                )  # (B, L, d)
            if post:
                scales = [cache[f"blocks.{l}.ln1_post.hook_scale"] for l in range(n_layers)]
                got["post_scale"] = torch.stack([s[rows, pos, 0] for s in scales], dim=1)  # (B, L)
            for key, value in got.items():
                parts.setdefault(key, []).append(value.float())
    cat = {key: torch.cat(v) for key, v in parts.items()}
    return Capture(
        batch=batch,
        logits=cat["logits"],
        attn=cat["attn"],
        z=cat["z"],
        scale=cat["scale"],
        embed=cat["embed"],
        pos_embed=cat.get("pos_embed"),
        mlp_out=cat.get("mlp_out"),
        resid=cat["resid"],
        post_scale=cat.get("post_scale"),
    )


def has_post_attention_norm(model: HookedModel) -> bool:
    """Whether each block normalises its attention output before the residual stream adds it
    (`ln1_post`: Gemma-2, Gemma-3). Only an RMS norm there is decomposed (TransformerLens builds
    no other kind); a model whose norm the capture cannot read is refused, not misread."""
    if not getattr(model.cfg, "use_normalization_before_and_after", False):
        return False
    names = [f"blocks.{l}.ln1_post.hook_scale" for l in range(model.cfg.n_layers)]
    if is_bridge(model) or not all(n in model.hook_dict for n in names):
        raise WorkbenchError(
            f"{model.cfg.model_name}: its attention output is normalised before the residual "
            "stream adds it, and the explanation needs that norm's scale at "
            "blocks.{l}.ln1_post.hook_scale, which this model does not expose; load it as a "
            "HookedTransformer (workbench.load_model)"
        )
    return True


def _answer_pass(
    model, tokens: Tensor, pos: Tensor, names: set[str]
) -> tuple[Tensor, object, Tensor | None]:
    """The logits and final-norm scale at `pos`, and the cache of `names`. A HookedTransformer
    stops after its last block and runs the final norm and unembedding at `pos` alone (at
    Gemma-3's 262k vocabulary, every position's logits would dwarf the cache); a bridge, whose
    forward stops nowhere, runs whole and is read at `pos`."""
    rows = torch.arange(tokens.shape[0], device=tokens.device)
    if is_bridge(model):
        logits, cache = model.run_with_cache(
            tokens, names_filter=lambda n: n in names, **forward_kwargs(model)
        )
        scale = cache["ln_final.hook_scale"] if "ln_final.hook_scale" in cache.cache_dict else None
        return logits[rows, pos], cache, None if scale is None else scale[rows, pos][:, None]
    final, cache = model.run_with_cache(
        tokens,
        names_filter=lambda n: n in names,
        stop_at_layer=model.cfg.n_layers,
        **forward_kwargs(model),
    )
    kept: dict[str, Tensor] = {}

    def keep(scale: Tensor, hook) -> Tensor:
        kept["scale"] = scale
        return scale

    hooks = [("ln_final.hook_scale", keep)] if "ln_final.hook_scale" in model.hook_dict else []
    with model.hooks(fwd_hooks=hooks):
        logits = unembed_at(model, final, pos)
    return logits, cache, kept.get("scale")


def attach_outcome(df: pd.DataFrame, outcomes: pd.DataFrame | None) -> pd.DataFrame:
    """Insert an `outcome` column after the head columns, matched on example id."""
    if outcomes is not None:
        df.insert(4, "outcome", df["id"].map(outcomes.set_index("id")["outcome"]))
    return df
