"""Multi-token answers scored whole: the teacher-forced log-probability of each acceptable
answer and whether greedy decoding reproduces it.

Every acceptable answer is appended to its prompt and run once (rows padded after their end,
so causal attention ignores the pads); an answer's log-probability is the sum of its tokens'
log-probabilities given the prompt and the answer's earlier tokens, and it is reproduced when
every answer token is the argmax given the tokens before it. The logits at the prompt's last
position predict each answer's first token, so the first-token metrics are read from the same
forwards (`workbench.metrics.scores.multi_token_metric`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from jaxtyping import Float
from torch import Tensor

from workbench.errors import WorkbenchError
from workbench.hooked import HookedModel
from workbench.logits import forward_kwargs, is_bridge, unembed_at
from workbench.tasks.encoding import TaskBatch
from workbench.tasks.tokenizer import get_tokenizer


def sequence_pass(
    model: HookedModel, batch: TaskBatch, batch_size: int = 64
) -> tuple[dict[str, Float[Tensor, " batch"]], Float[Tensor, "batch d_vocab"]]:
    """Teacher-forced scores of whole answers, and the logits predicting each example's first
    answer token (taken from the same forwards: causal attention makes them the prompt's own)."""
    if batch.answer_seqs is None:
        raise WorkbenchError(
            f"task {batch.task.name!r} is not a multi-token task (answer_tokens='multi')"
        )
    device = batch.tokens.device
    rows, owner, starts, targets = [], [], [], []
    for i, answers in enumerate(batch.answer_seqs):
        n = int(batch.lengths[i])
        prompt = batch.tokens[i, :n].tolist()
        for seq in answers:
            rows.append(prompt + list(seq))
            owner.append(i)
            starts.append(n - 1)  # position predicting the answer's first token
            targets.append(list(seq))
    logp_rows, ok_rows = [], []
    first: list[Tensor | None] = [None] * len(batch)
    pad = get_tokenizer(model).pad_id  # after each row's end, so causal attention ignores it
    for s in range(0, len(rows), batch_size):
        chunk = rows[s : s + batch_size]
        width = max(len(r) for r in chunk)
        tokens = torch.full((len(chunk), width), pad, dtype=torch.long)
        for j, r in enumerate(chunk):
            tokens[j, : len(r)] = torch.tensor(r)
        spans = [torch.arange(len(targets[s + j]), device=device) + starts[s + j]
                 for j in range(len(chunk))]  # the positions predicting each answer token
        if is_bridge(model):  # its forward returns every position's logits
            logits = model(tokens.to(device), **forward_kwargs(model)).float()
            at_rows = [logits[j, p] for j, p in enumerate(spans)]  # (answer_len, d_vocab)
        else:  # final norm and unembedding only where an answer token is read, in one call a
            # chunk (row by row, Gemma-3's 262k x 640 unembedding was read once per row)
            final = model(tokens.to(device), stop_at_layer=model.cfg.n_layers,
                          **forward_kwargs(model))
            picked = torch.cat([final[j, p] for j, p in enumerate(spans)])[:, None]
            zero = torch.zeros(len(picked), dtype=torch.long, device=device)
            at_rows = unembed_at(model, picked, zero).float().split([len(p) for p in spans])
        for j, at in enumerate(at_rows):
            k = s + j
            tgt = torch.tensor(targets[k], device=device)
            if first[owner[k]] is None:
                first[owner[k]] = at[0]
            logp_rows.append(at.log_softmax(-1).gather(1, tgt[:, None]).sum())
            ok_rows.append((at.argmax(-1) == tgt).all().float())
    logp, ok = torch.stack(logp_rows), torch.stack(ok_rows)
    owner_t = torch.tensor(owner, device=device)
    n_ex = len(batch)
    seq_logprob = torch.stack([logp[owner_t == i].logsumexp(0) for i in range(n_ex)])
    seq_correct = torch.stack([ok[owner_t == i].amax() for i in range(n_ex)])
    return {"seq_logprob": seq_logprob, "seq_correct": seq_correct}, torch.stack(first)


def sequence_scores(
    model: HookedModel, batch: TaskBatch, fwd_hooks: Sequence = (), batch_size: int = 64
) -> dict[str, Float[Tensor, " batch"]]:
    """Teacher-forced scores of whole answers, for multi-token tasks.

    Every acceptable answer is appended to its prompt and run once; the answer's log-probability
    is the sum of its tokens' log-probabilities given the prompt and the answer's earlier tokens.

    Returns:
        `seq_logprob`: `logsumexp` over acceptable answers of their log-probability (nats);
        `seq_correct`: 1.0 when greedy decoding from the prompt reproduces an acceptable answer
        (every answer token is the argmax given the tokens before it), else 0.0.
    """
    with model.hooks(fwd_hooks=list(fwd_hooks)):
        return sequence_pass(model, batch, batch_size)[0]
