"""Multiple-choice scoring, as lm-eval 0.4 scores a `multiple_choice` task.

Each choice's log-likelihood is the sum, over the tokens of `target_delimiter + choice`
(tokenized in context: `workbench.tasks.ids`), of log p(token | prompt, earlier tokens). From
the log-likelihoods `ll` of an example's choices (lm-eval's `process_results`):

- `acc`: 1 when `argmax(ll) == gold` (the first index wins a tie, as `np.argmax`);
- `acc_norm`: the same with `ll[i] / len(choices[i])`, the length in characters of the choice
  without the delimiter;
- `logprob`: `ll[gold]`, the gold choice's teacher-forced log-probability (the definition of
  a multi-token answer's `logprob`);
- `ll_margin`: `ll[gold] - max(ll[i], i != gold)`, positive exactly where `acc` is 1 (up to
  ties): `acc`'s differentiable companion, and a difference that `acc` guards;
- `acc_norm_margin`: the same margin on the length-normalised log-likelihoods, `acc_norm`'s
  companion.

The context is run once per example, not once per choice (`shared`): a HookedTransformer runs
the prompts with a key-value cache, whose entries are then repeated for each choice, and the
choices run on it. The logits at a prompt's last position predict every choice's first token,
so a choice's last token is never run and a one-token choice (MMLU's letters) needs no second
pass. Rows are right-padded; the prompt pass's attention mask hides the pads from the choices
and gives them their positions (rotary, absolute, and Gemma-3's local windows all read the
position from the mask). Hooks at `blocks.{l}.attn.hook_z` act in both passes, on every
position, as in one pass over prompt + choice: an ablation that depends on the position
(per-position means, resampling) is refused for multiple-choice tasks before a run. A model
that cannot run on a cache (a TransformerBridge, another positional embedding) takes the
reference path, one pass over prompt + choice per choice (`shared=False`).
"""

from __future__ import annotations

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

from workbench.errors import WorkbenchError
from workbench.hooked import HookedModel
from workbench.logits import forward_kwargs, is_bridge, unembed_at
from workbench.tasks.encoding import TaskBatch
from workbench.tasks.tokenizer import get_tokenizer

# A multiple-choice task's scores, in table order (`workbench.metric_records`).
CHOICE_SCORES = ("acc", "acc_norm", "logprob", "ll_margin", "acc_norm_margin")
# Choice rows per forward: bounds the repeated cache and the padded rows.
ROWS_PER_PASS = 64
_SHAREABLE = ("standard", "rotary")


def can_share(model: HookedModel) -> bool:
    """Whether `model` runs choices on its prompts' key-value cache (a HookedTransformer with
    absolute or rotary positions); else the one-pass-per-choice reference is used."""
    return (not is_bridge(model) and hasattr(model, "cfg")
            and getattr(model.cfg, "positional_embedding_type", None) in _SHAREABLE)


def choice_logliks(
    model: HookedModel, batch: TaskBatch, shared: bool | None = None
) -> Float[Tensor, "batch n_choices"]:
    """Each choice's summed log-likelihood, `-inf` beyond an example's last choice.

    Args:
        model: a HookedTransformer or a TransformerBridge; hooks already attached stay active.
        batch: a multiple-choice task encoded for `model` (`TaskBatch.choice_seqs`).
        shared: run each prompt once (True), once per choice (False, the reference), or
            None: shared where `can_share(model)`.
    """
    if batch.choice_seqs is None:
        raise WorkbenchError(f"task {batch.task.name!r} is not a multiple-choice task (its "
                             "examples have no 'choices')")
    shared = can_share(model) if shared is None else shared
    if shared and not can_share(model):
        raise WorkbenchError("this model cannot run choices on a key-value cache (a "
                             "TransformerBridge, or another positional embedding); pass "
                             "shared=False or None")
    width = max(len(c) for c in batch.choice_seqs)
    out = torch.full((len(batch), width), float("-inf"), device=batch.tokens.device)
    run = _shared_rows if shared else _naive_rows
    for examples in row_groups(batch):
        for i, lls in zip(examples, run(model, batch, examples), strict=True):
            out[i, : len(lls)] = lls
    return out


def row_groups(batch: TaskBatch) -> list[list[int]]:
    """Examples grouped so that a group's choices fill at most `ROWS_PER_PASS` rows."""
    groups, rows = [[]], 0
    for i, choices in enumerate(batch.choice_seqs):
        if groups[-1] and rows + len(choices) > ROWS_PER_PASS:
            groups.append([])
            rows = 0
        groups[-1].append(i)
        rows += len(choices)
    return groups


def _pad(rows: list[list[int]], pad: int, device) -> Tensor:
    out = torch.full((len(rows), max(len(r) for r in rows)), pad, dtype=torch.long)
    for j, r in enumerate(rows):
        out[j, : len(r)] = torch.tensor(r, dtype=torch.long)
    return out.to(device)


def _logprobs(model, final: Tensor) -> Float[Tensor, "n d_vocab"]:
    """Log-softmax of the logits at some final-residual rows `[n, d_model]`."""
    zero = torch.zeros(final.shape[0], dtype=torch.long, device=final.device)
    return unembed_at(model, final[:, None], zero).float().log_softmax(-1)


def _sum_targets(logp: list[Tensor], targets: list[list[int]]) -> list[Tensor]:
    """Per row, the sum of `logp[row][k, targets[row][k]]`."""
    return [lp.gather(1, torch.tensor(t, device=lp.device)[:, None]).sum()
            for lp, t in zip(logp, targets, strict=True)]


def _naive_rows(model, batch: TaskBatch, examples: list[int]) -> list[Tensor]:
    """The reference: one row prompt + choice per choice, every position recomputed."""
    rows, spans, targets, owner = [], [], [], []
    for i in examples:
        n = int(batch.lengths[i])
        prompt = batch.tokens[i, :n].tolist()
        for seq in batch.choice_seqs[i]:
            rows.append(prompt + list(seq))
            spans.append(torch.arange(len(seq)) + n - 1)  # positions predicting the choice
            targets.append(list(seq))
            owner.append(i)
    tokens = _pad(rows, get_tokenizer(model).pad_id, batch.tokens.device)
    if is_bridge(model):  # Hugging Face's forward returns every position's logits
        logits = model(tokens, **forward_kwargs(model)).float()
        logp = [logits[j, s].log_softmax(-1) for j, s in enumerate(spans)]
    else:
        final = model(tokens, stop_at_layer=model.cfg.n_layers, **forward_kwargs(model))
        picked = torch.cat([final[j, s.to(final.device)] for j, s in enumerate(spans)])
        logp = _logprobs(model, picked).split([len(s) for s in spans])
    lls = _sum_targets(list(logp), targets)
    return [torch.stack([ll for ll, o in zip(lls, owner, strict=True) if o == i])
            for i in examples]


def _shared_rows(model, batch: TaskBatch, examples: list[int]) -> list[Tensor]:
    """Each prompt once with a key-value cache, then every choice but its last token on the
    cache repeated per choice (module docstring)."""
    device = batch.tokens.device
    idx = torch.tensor(examples, device=device)
    lengths = batch.lengths[idx]
    width = int(lengths.max())
    tokens = batch.tokens[idx, :width]
    mask = (torch.arange(width, device=device)[None] < lengths[:, None]).long()  # (B, P)
    cache = TransformerLensKeyValueCache.init_cache(model.cfg, model.cfg.device, len(examples))
    final = model(tokens, stop_at_layer=model.cfg.n_layers, attention_mask=mask,
                  past_kv_cache=cache)
    last = _logprobs(model, final[torch.arange(len(examples), device=final.device),
                                  (lengths - 1).to(final.device)])  # (B, d_vocab)
    owner = [j for j, i in enumerate(examples) for _ in batch.choice_seqs[i]]
    seqs = [list(s) for i in examples for s in batch.choice_seqs[i]]
    first = torch.stack([last[o, s[0]] for o, s in zip(owner, seqs, strict=True)])
    rest = [torch.zeros((), device=first.device) for _ in seqs]
    tails = [j for j, s in enumerate(seqs) if len(s) > 1]
    if tails:
        pick = torch.tensor([owner[j] for j in tails], device=device)
        cache.entries = [type(e)(e.past_keys[pick.to(e.past_keys.device)],
                                 e.past_values[pick.to(e.past_values.device)])
                         for e in cache.entries]
        cache.previous_attention_mask = cache.previous_attention_mask[
            pick.to(cache.previous_attention_mask.device)]
        cache.freeze()
        inputs = [seqs[j][:-1] for j in tails]  # a choice's last token predicts nothing
        cont = _pad(inputs, 0, device)
        cont_mask = _pad([[1] * len(r) for r in inputs], 0, device)
        out = model(cont, stop_at_layer=model.cfg.n_layers, attention_mask=cont_mask,
                    past_kv_cache=cache)
        picked = torch.cat([out[k, : len(r)] for k, r in enumerate(inputs)])
        logp = _logprobs(model, picked).split([len(r) for r in inputs])
        for j, ll in zip(tails, _sum_targets(list(logp), [seqs[j][1:] for j in tails]),
                         strict=True):
            rest[j] = ll
    lls = first + torch.stack(rest)
    return [lls[[k for k, o in enumerate(owner) if o == j]] for j in range(len(examples))]


def gold_and_lengths(batch: TaskBatch) -> tuple[Tensor, Tensor]:
    """Each example's gold index `[batch]`, and each choice's length in characters
    `[batch, n_choices]` (1 beyond an example's last choice)."""
    exs = batch.task.examples
    width = max(len(e.choices) for e in exs)
    gold = torch.tensor([e.gold for e in exs], dtype=torch.long)
    chars = torch.ones(len(exs), width)
    for i, e in enumerate(exs):
        chars[i, : len(e.choices)] = torch.tensor([float(len(c)) for c in e.choices])
    return gold, chars


def choice_scores(
    ll: Float[Tensor, "batch n_choices"], gold: Tensor, chars: Float[Tensor, "batch n_choices"]
) -> dict[str, Float[Tensor, " batch"]]:
    """`acc`, `acc_norm`, `logprob`, `ll_margin` and `acc_norm_margin` per example from the
    choices' log-likelihoods (module docstring)."""
    gold, chars = gold.to(ll.device), chars.to(ll.device)
    rows = torch.arange(ll.shape[0], device=ll.device)
    norm = ll / chars
    is_gold = torch.zeros_like(ll, dtype=torch.bool)
    is_gold[rows, gold] = True

    def margin(x: Tensor) -> Tensor:
        return x[rows, gold] - x.masked_fill(is_gold, float("-inf")).amax(-1)

    return {
        "acc": (ll.argmax(-1) == gold).float(),
        "acc_norm": (norm.argmax(-1) == gold).float(),
        "logprob": ll[rows, gold],
        "ll_margin": margin(ll),
        "acc_norm_margin": margin(norm),
    }


def choice_metric(model: HookedModel, batch: TaskBatch) -> dict[str, Float[Tensor, " batch"]]:
    """A multiple-choice task's scores (`choice_scores`), as a custom metric for
    `MaskScorer` and `run_cel`: each prompt is run once (`choice_logliks`). Each example's
    scores depend on its own row only, so a scorer may score a slice of rows."""
    return choice_scores(choice_logliks(model, batch), *gold_and_lengths(batch))


def naive_choice_metric(model: HookedModel, batch: TaskBatch) -> dict[str, Float[Tensor, " batch"]]:
    """`choice_metric` by the reference path: one pass over prompt + choice per choice."""
    return choice_scores(choice_logliks(model, batch, shared=False), *gold_and_lengths(batch))


def evaluate_choices(model: HookedModel, batch: TaskBatch, fwd_hooks=()) -> pd.DataFrame:
    """Score every example of a multiple-choice batch under `fwd_hooks` (`evaluate` calls it
    with a head set's ablation hooks).

    Returns:
        One row per example: `id, split, group`, the `CHOICE_SCORES` (`acc`, `acc_norm` as
        0/1 integers), and `prediction`, `prediction_norm`: the index of the choice `acc`,
        `acc_norm` pick.
    """
    gold, chars = gold_and_lengths(batch)
    with torch.no_grad(), model.hooks(fwd_hooks=list(fwd_hooks)):
        ll = choice_logliks(model, batch).cpu()
    scores = {k: v.numpy() for k, v in choice_scores(ll, gold, chars).items()}
    exs = batch.task.examples
    return pd.DataFrame({
        "id": [e.id for e in exs], "split": [e.split for e in exs],
        "group": [e.group for e in exs],
        **{k: scores[k].astype(int) if k in ("acc", "acc_norm") else scores[k]
           for k in CHOICE_SCORES},
        "prediction": ll.argmax(-1).numpy(), "prediction_norm": (ll / chars).argmax(-1).numpy(),
    })
