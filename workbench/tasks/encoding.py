"""A task encoded for one model: `TaskBatch` (padded token and answer-id tensors) and
`encode_task`, which fits the task to the model's tokenizer (`workbench.tasks.fit`) and
tokenizes every example (`workbench.tasks.ids`).

Prompts are right-padded: with causal attention the trailing pads change no earlier
position, so the answer is read at `lengths - 1` of each row.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
from jaxtyping import Int
from torch import Tensor

from workbench.errors import WorkbenchError
from workbench.hooked import HookedModel
from workbench.tasks.fit import fit_task
from workbench.tasks.ids import encode_example
from workbench.tasks.task import Task
from workbench.tasks.tokenizer import get_tokenizer


@dataclass
class TaskBatch:
    """A task encoded for one model: right-padded tokens and answer ids, on the model's device.

    Attributes:
        tokens: `[batch, pos]` prompt tokens, right-padded with the pad id.
        lengths: the real length of each prompt; the answer is predicted at `lengths - 1`.
        answer_ids: `[batch, max_answers]` acceptable answer ids (the first token of each
            answer, in context), padded with -1.
        wrong_ids: `[batch, max_wrong]` wrong answer ids, padded with -1 (width 0 if none).
        candidate_ids: `[batch, max_candidates]` ids the argmax is taken over (padded with
            -1), or None for the whole vocabulary.
        str_tokens: the prompt tokens as strings (BOS included), for tables and plots.
        roles: per example, the role of every position (a leading special token is
            `"bos"`), or None.
        answer_seqs: with `answer_tokens="multi"`, per example the full token list of every
            acceptable answer (in context; a generation task's one answer is
            `target_delimiter + target`, whose teacher-forced log-prob is its `logprob`); None
            for single-token tasks.
        counterfactual_tokens: `[batch, pos]` counterfactual prompts (same lengths as
            `tokens`), when every example has one; else None.
        prepend_bos: whether every prompt starts with a special token (a BOS), the choice in
            effect for this model's tokenizer and the task's `prepend_bos`.
        dropped: the examples left out when fitting the task to this tokenizer (id ->
            reason; see `workbench.tasks.fit`).
        choice_seqs: for a multiple-choice task, per example the tokens of each choice
            (`target_delimiter + choice`, in context, in choice order); else None.
    """

    task: Task
    tokens: Int[Tensor, "batch pos"]
    lengths: Int[Tensor, " batch"]
    answer_ids: Int[Tensor, "batch n_answers"]
    wrong_ids: Int[Tensor, "batch n_wrong"]
    candidate_ids: Int[Tensor, "batch n_candidates"] | None
    str_tokens: list[list[str]]
    roles: list[list[str]] | None
    answer_seqs: list[list[list[int]]] | None = None
    counterfactual_tokens: Int[Tensor, "batch pos"] | None = None
    prepend_bos: bool = False
    dropped: dict[str, str] = field(default_factory=dict)
    choice_seqs: list[list[list[int]]] | None = None

    def __len__(self) -> int:
        return self.tokens.shape[0]

    @property
    def answer_pos(self) -> Int[Tensor, " batch"]:
        return self.lengths - 1

    def prompts(self) -> list[Int[Tensor, " pos"]]:
        """Each row's prompt ids without the padding (BOS included where the task has one):
        what a generation task decodes from."""
        return [self.tokens[i, :n] for i, n in enumerate(self.lengths.tolist())]

    def rows(self, index: Tensor | slice) -> "TaskBatch":
        """The sub-batch of some rows (same padding width)."""
        if isinstance(index, slice):
            idx = list(range(len(self)))[index]
        else:
            idx = [int(i) for i in index]
        sel = torch.tensor(idx, device=self.tokens.device, dtype=torch.long)
        return TaskBatch(
            task=replace(self.task, examples=[self.task.examples[i] for i in idx]),
            tokens=self.tokens[sel],
            lengths=self.lengths[sel],
            answer_ids=self.answer_ids[sel],
            wrong_ids=self.wrong_ids[sel],
            candidate_ids=None if self.candidate_ids is None else self.candidate_ids[sel],
            str_tokens=[self.str_tokens[i] for i in idx],
            roles=None if self.roles is None else [self.roles[i] for i in idx],
            answer_seqs=None if self.answer_seqs is None else [self.answer_seqs[i] for i in idx],
            counterfactual_tokens=None
            if self.counterfactual_tokens is None
            else self.counterfactual_tokens[sel],
            prepend_bos=self.prepend_bos,
            dropped=self.dropped,
            choice_seqs=None if self.choice_seqs is None else [self.choice_seqs[i] for i in idx],
        )

    def counterfactual(self) -> "TaskBatch":
        """The batch with each prompt replaced by its counterfactual (same answers)."""
        if self.counterfactual_tokens is None:
            raise WorkbenchError(
                f"task {self.task.name!r} has no counterfactual prompts (a 'counterfactual' "
                "field on every example)"
            )
        return replace(self, tokens=self.counterfactual_tokens)


def _pad(rows: list[list[int]], value: int, device) -> Tensor:
    width = max((len(r) for r in rows), default=0)
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return out.to(device)


def encode_task(model: HookedModel, task: Task, split: str | None = None) -> TaskBatch:
    """Tokenize a task for `model`: prompts as its own tokenizer writes them (BOS only where
    it adds one, unless the task forces it), answers in context, the task fitted to the
    tokenizer where its header asks (`per_tokenizer`), structural checks, prompts that fit.

    Raises:
        WorkbenchError: naming the example, for an answer that is not a clean continuation of
            its prompt, a multi-token answer in a single-token task, a failed check, an
            over-long prompt, or a counterfactual of another length.
    """
    task = task.subset(split)
    tok = get_tokenizer(model)
    device = model.cfg.device
    n_ctx = model.cfg.n_ctx
    task, dropped = fit_task(task, tok, n_ctx)
    alone: dict[str, list[int]] = {}
    rows = [encode_example(tok, task, ex, n_ctx, alone) for ex in task.examples]
    leads = {r.n_lead for r in rows}
    if len(leads) > 1:
        raise WorkbenchError(
            f"task {task.name!r}: the tokenizer puts {sorted(leads)} special tokens before "
            "different prompts; set the task's prepend_bos to true or false"
        )
    prompts = [r.ids for r in rows]
    cfs = [r.counterfactual for r in rows if r.counterfactual is not None]
    roles = [r.roles for r in rows if r.roles is not None]
    wrongs = [r.wrong for r in rows]
    pad_id = tok.pad_id
    return TaskBatch(
        task=task,
        tokens=_pad(prompts, pad_id, device),
        lengths=torch.tensor([len(p) for p in prompts], dtype=torch.long, device=device),
        answer_ids=_pad([r.answers for r in rows], -1, device),
        wrong_ids=_pad(wrongs, -1, device)
        if any(wrongs)
        else torch.empty(len(prompts), 0, dtype=torch.long, device=device),
        candidate_ids=_pad([r.candidates for r in rows], -1, device)
        if task.answer_scope == "candidates"
        else None,
        str_tokens=[tok.str_tokens(p) for p in prompts],
        roles=roles if len(roles) == len(prompts) else None,
        answer_seqs=[r.seqs for r in rows] if task.answer_tokens == "multi" else None,
        counterfactual_tokens=_pad(cfs, pad_id, device) if len(cfs) == len(prompts) else None,
        prepend_bos=leads.pop() > 0,
        dropped=dropped,
        choice_seqs=[r.choices for r in rows] if task.is_multiple_choice else None,
    )
