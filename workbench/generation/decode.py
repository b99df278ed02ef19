"""Greedy decoding with a key-value cache, under whatever hooks the caller attached.

A generation task scores what the model writes, so every ablated head set is decoded anew.
`greedy_generate` does it as Hugging Face's `generate(do_sample=False)` does: the prompts run
once, filling a key-value cache, then each step runs only the newest token of each row on that
cache and appends the argmax (the first index wins a tie) of its logits. A row ends at the
model's EOS token, after `max_new_tokens`, or once its decoded text contains a stop sequence.

Rows are batched left-padded: pads sit before a row's first token, the attention mask hides
them and gives every token its position (absolute and rotary positions are read from the
mask's running count), and the distance between two tokens of a row is the same as without
pads, so a sliding window (Gemma-3's local layers, which count distance in cache slots) sees
what it sees when the row runs alone. A finished row leaves the batch: its cache rows are
dropped, and so are leading cache slots that are padding in every row still running, so the
remaining steps cost what the unfinished rows cost.

Hooks at `blocks.{l}.attn.hook_z` act in every forward, the prompt pass and each step, as in
one pass over the whole sequence. They must treat each row on its own (one head set for the
whole batch, as `ablation_hooks` or a one-mask `mask_hooks` gives): rows are sorted by length,
cut into groups and dropped as they finish, so a hook that reads a row's place in the batch
(several masks tiled mask-major) or a token's position in the tensor (per-position means,
resampling) would act on the wrong rows; such ablations are refused for generation tasks
before a run. A model that cannot run on the cache (a TransformerBridge, or a positional
embedding other than absolute and rotary) takes `naive_generate`.

`naive_generate` is the reference: per row, per step, one forward over the whole sequence so
far, no cache, no padding.

The text of a row is its generated tokens decoded as lm-eval's `HFLM.generate_until` decodes
them (`tokenizer.decode(ids, skip_special_tokens=True)`), then cut before the first stop
sequence (`text.split(s)[0]` for each `s`, lm-eval's `postprocess_generated_text`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Int
from torch import Tensor
from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

from workbench.errors import WorkbenchError
from workbench.hooked import HookedModel
from workbench.logits import forward_kwargs, is_bridge, unembed_at

# Rows decoded together when the caller does not say: bounds the cache (rows x length x
# layers x key-value heads x d_head, twice) and the padding of a group.
ROWS_PER_PASS = 64
_CACHEABLE = ("standard", "rotary")


@dataclass(frozen=True)
class Generation:
    """What `greedy_generate` and `naive_generate` return.

    Attributes:
        tokens: per row, the generated ids, through the token that ended the row (its EOS, or
            the one whose text completed a stop sequence).
        texts: per row, the generated ids before any EOS decoded (special tokens skipped) and
            cut before the first stop sequence.
        n_forwards: forward passes run (a cached step over all running rows counts one; the
            reference counts one per row per step).
    """

    tokens: list[list[int]]
    texts: list[str]
    n_forwards: int


def can_cache(model: HookedModel) -> bool:
    """Whether `model` decodes on a key-value cache: a HookedTransformer with absolute or
    rotary positions (else `greedy_generate` takes `naive_generate`)."""
    return (not is_bridge(model) and hasattr(model, "cfg")
            and getattr(model.cfg, "positional_embedding_type", None) in _CACHEABLE)


def greedy_generate(
    model: HookedModel,
    prompts: Sequence[Int[Tensor, " pos"]],
    max_new_tokens: int,
    until: Sequence[str] = (),
    rows_per_pass: int | None = None,
) -> Generation:
    """Greedy continuations of `prompts`, batched on a key-value cache (module docstring).

    Args:
        model: a HookedTransformer (or a TransformerBridge: the reference path) with a
            tokenizer; hooks already attached act at every step.
        prompts: one 1-D tensor of token ids per row, exactly as the model is fed (BOS
            included where the task prepends one).
        max_new_tokens: the most tokens generated per row (at least 1).
        until: stop sequences (non-empty strings; a single string is one sequence). A row
            also ends at the model's EOS token.
        rows_per_pass: rows decoded together (default `ROWS_PER_PASS`).

    Returns:
        A `Generation`, rows in the order of `prompts`.

    Example:
        >>> ids = [model.to_tokens("2 + 3 =")[0]]
        >>> with model.hooks(fwd_hooks=ablation_hooks(model, "L3H1")):
        ...     greedy_generate(model, ids, 16, until=["\\n"]).texts
    """
    rows, until = checked_rows(model, prompts, max_new_tokens, until, rows_per_pass)
    return decode_rows(model, rows, StopRule(model, max_new_tokens, until), rows_per_pass)


# Called before every forward with the indices (into the prompts) of the rows it runs, in
# batch order: what a hook that treats rows differently reads (`workbench.generation.masked`).
OnRows = Callable[[list[int]], None]


def decode_rows(model: HookedModel, rows: list[list[int]], stop: StopRule,
                rows_per_pass: int | None = None, on_rows: OnRows | None = None) -> Generation:
    """`greedy_generate` on checked id lists: cached where the model allows, else the
    reference; `on_rows` is told which rows every forward runs."""
    if not can_cache(model):
        return _naive_rows(model, rows, stop, on_rows)
    tokens: list[list[int]] = [[] for _ in rows]
    n_forwards = 0
    with torch.no_grad():
        for group in _groups([len(r) for r in rows], rows_per_pass):
            out, n = _cached_group(model, [rows[i] for i in group], stop, group, on_rows)
            n_forwards += n
            for i, ids in zip(group, out, strict=True):
                tokens[i] = ids
    return Generation(tokens, [stop.text(t) for t in tokens], n_forwards)


def naive_generate(
    model: HookedModel,
    prompts: Sequence[Int[Tensor, " pos"]],
    max_new_tokens: int,
    until: Sequence[str] = (),
    rows_per_pass: int | None = None,
) -> Generation:
    """The reference for `greedy_generate`: each row alone, each step one forward over the
    whole sequence so far (no cache, no padding); `rows_per_pass` is accepted and unused."""
    rows, until = checked_rows(model, prompts, max_new_tokens, until, rows_per_pass)
    return _naive_rows(model, rows, StopRule(model, max_new_tokens, until))


def _naive_rows(model, rows: list[list[int]], stop: StopRule,
                on_rows: OnRows | None = None) -> Generation:
    tokens, n_forwards = [], 0
    device = _device(model)
    with torch.no_grad():
        for r, prompt in enumerate(rows):
            seq, new = list(prompt), []
            while True:
                if on_rows is not None:
                    on_rows([r])
                x = torch.tensor([seq], dtype=torch.long, device=device)
                logits = model(x, **forward_kwargs(model))[0, -1]
                n_forwards += 1
                new.append(int(logits.argmax()))
                seq.append(new[-1])
                if stop.done(new):
                    break
            tokens.append(new)
    return Generation(tokens, [stop.text(t) for t in tokens], n_forwards)


def decode_forwards(
    lengths: Sequence[int], new_tokens: Sequence[int], rows_per_pass: int | None = None,
    cached: bool = True,
) -> int:
    """The forwards `greedy_generate` runs for prompts of `lengths` tokens that generate
    `new_tokens` tokens each (through the token that ended the row): per group of rows, as
    many as its longest generation (the prompt pass writes each row's first token, each cached
    step one more); `cached=False` (a model `can_cache` refuses): one per generated token."""
    if not cached:
        return int(sum(new_tokens))
    return sum(max(new_tokens[i] for i in group) for group in _groups(lengths, rows_per_pass))


def _groups(lengths: Sequence[int], rows_per_pass: int | None) -> list[list[int]]:
    """The rows decoded together: sorted by length, longest first (similar lengths share a
    group's padding), cut into groups of `rows_per_pass` (default `ROWS_PER_PASS`)."""
    per_pass = int(rows_per_pass or ROWS_PER_PASS)
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[start : start + per_pass] for start in range(0, len(order), per_pass)]


class StopRule:
    """When a row ends, and its text: the model's EOS, `max_new_tokens`, a stop sequence."""

    def __init__(self, model, max_new_tokens: int, until: list[str]) -> None:
        self.decode, self.eos = _decoder(model)
        self.max_new_tokens = max_new_tokens
        self.until = until

    def done(self, ids: list[int]) -> bool:
        if len(ids) >= self.max_new_tokens or ids[-1] == self.eos:
            return True
        if not self.until:
            return False
        text = self.decode(ids)
        return any(s in text for s in self.until)

    def text(self, ids: list[int]) -> str:
        # the EOS never reaches the text (lm-eval: skipped as a special token, and its string
        # is one of `until`)
        text = self.decode(ids[:-1] if ids and ids[-1] == self.eos else ids)
        for s in self.until:  # lm-eval's postprocess_generated_text
            text = text.split(s)[0]
        return text


def text_decoder(model: HookedModel) -> Callable[[list[int]], str]:
    """How `Generation.texts` decodes a row's ids (special tokens skipped), before the cut at
    a stop sequence: a character of a row's text is at the same offset in this decoding, so
    an answer's characters can be traced to the tokens that wrote them
    (`workbench.explain.generated`)."""
    return _decoder(model)[0]


def _decoder(model) -> tuple[Callable[[list[int]], str], int | None]:
    """`(decode, eos_id)`: the model's Hugging Face tokenizer decoding with special tokens
    skipped (as lm-eval's HFLM), and its EOS; a bare word tokenizer has no EOS."""
    hf = getattr(model, "tokenizer", None)
    if hf is not None:
        return (lambda ids: hf.decode(ids, skip_special_tokens=True)), hf.eos_token_id
    word = getattr(model, "word_tokenizer", None)
    if word is None:
        raise WorkbenchError(
            "generation needs the model's tokenizer to decode text: load the model with "
            "load_model (which attaches one) or set model.tokenizer"
        )
    special = {word.bos_id, word.pad_id}
    return (lambda ids: word.decode([i for i in ids if i not in special])), None


def _device(model):
    return model.cfg.device if hasattr(model, "cfg") else next(model.parameters()).device


def _cached_group(model, prompts: list[list[int]], stop: StopRule, ids: list[int],
                  on_rows: OnRows | None) -> tuple[list[list[int]], int]:
    """One group of rows (`ids`: their indices for `on_rows`) decoded on one cache:
    left-padded prompt pass, then one token per running row per step, finished rows dropped
    (module docstring)."""
    device = _device(model)
    width = max(len(p) for p in prompts)
    tokens = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for j, p in enumerate(prompts):
        tokens[j, width - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[j, width - len(p):] = 1
    x, m = tokens.to(device), mask.to(device)
    cache = TransformerLensKeyValueCache.init_cache(model.cfg, model.cfg.device, len(prompts))
    running = list(range(len(prompts)))  # batch row -> group row
    out: list[list[int]] = [[] for _ in prompts]
    n_forwards = 0
    while True:
        if on_rows is not None:
            on_rows([ids[j] for j in running])
        final = model(x, stop_at_layer=model.cfg.n_layers, attention_mask=m, past_kv_cache=cache)
        n_forwards += 1
        last = torch.full((len(running),), final.shape[1] - 1, dtype=torch.long)
        picks = unembed_at(model, final, last).argmax(-1).tolist()  # (B,)
        keep = []
        for k, (j, t) in enumerate(zip(running, picks, strict=True)):
            out[j].append(int(t))
            if not stop.done(out[j]):
                keep.append(k)
        if not keep:
            return out, n_forwards
        if len(keep) < len(running):
            _compact(cache, keep)
            running = [running[k] for k in keep]
        x = torch.tensor([[out[j][-1]] for j in running], dtype=torch.long, device=device)
        m = torch.ones_like(x)


def _compact(cache: TransformerLensKeyValueCache, keep: list[int]) -> None:
    """Keep the cache rows `keep`, and drop the leading slots that are padding in all of them
    (a row's distances and mask-read positions are unchanged: module docstring)."""
    mask = cache.previous_attention_mask
    idx = torch.tensor(keep, device=mask.device)
    mask = mask[idx]
    first = int(mask.any(0).nonzero()[0])  # the first slot some kept row attends to
    cache.previous_attention_mask = mask[:, first:]
    for entry in cache.entries:
        rows = idx.to(entry.past_keys.device)
        entry.past_keys = entry.past_keys[rows, first:]
        entry.past_values = entry.past_values[rows, first:]


def checked_rows(
    model, prompts, max_new_tokens, until, rows_per_pass
) -> tuple[list[list[int]], list[str]]:
    """The prompts as id lists and the stop sequences as a list, or one `WorkbenchError`."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) \
            or max_new_tokens < 1:
        raise WorkbenchError(f"max_new_tokens must be an integer >= 1; got {max_new_tokens!r}")
    if rows_per_pass is not None and (isinstance(rows_per_pass, bool)
                                      or not isinstance(rows_per_pass, int) or rows_per_pass < 1):
        raise WorkbenchError(f"rows_per_pass must be None or an integer >= 1; got "
                             f"{rows_per_pass!r}")
    until = [until] if isinstance(until, str) else list(until)
    bad = [s for s in until if not isinstance(s, str) or not s]
    if bad:
        raise WorkbenchError(f"stop sequences must be non-empty strings; got {bad[0]!r} in "
                             f"until={until!r}")
    if isinstance(prompts, Tensor) or not len(prompts):
        raise WorkbenchError("prompts must be a non-empty list of 1-D token-id tensors, one per "
                             "row")
    rows = []
    n_ctx = getattr(getattr(model, "cfg", None), "n_ctx", None)
    d_vocab = getattr(getattr(model, "cfg", None), "d_vocab", None)
    for i, p in enumerate(prompts):
        p = torch.as_tensor(p)
        if p.ndim != 1 or not len(p) or p.is_floating_point():
            raise WorkbenchError(f"prompt {i} must be a non-empty 1-D tensor of token ids; got "
                                 f"shape {tuple(p.shape)}, dtype {p.dtype}")
        ids = [int(t) for t in p.tolist()]
        if d_vocab is not None and not all(0 <= t < d_vocab for t in ids):
            raise WorkbenchError(f"prompt {i} has a token id outside [0, {d_vocab}): "
                                 f"{[t for t in ids if not 0 <= t < d_vocab][:3]}")
        if n_ctx is not None and len(ids) + max_new_tokens - 1 > n_ctx:  # the last is not fed
            raise WorkbenchError(
                f"prompt {i} has {len(ids)} tokens; with max_new_tokens={max_new_tokens} it "
                f"runs past the model's context of n_ctx={n_ctx} tokens: shorten the prompt or "
                "lower max_new_tokens")
        rows.append(ids)
    return rows, until
