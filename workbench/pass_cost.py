"""What one masked pass on a task costs, as a share of a plain forward over its rows: the unit
the pre-run estimate (`workbench.estimate`) prices each stage's passes in.

A next-token pass restarts at its mask's first ablated layer `l` from cached residuals and runs
`(L - l) / L` of the blocks (`single_share`, `random_share`). A multiple-choice pass
(`workbench.metrics.choices`) runs every block over the prompts and, where some choice is
longer than one token, a second pass over the choice rows on the prompts' key-value cache
(`choice_share`). A generation pass (`workbench.metrics.generation`) runs every block too: it
decodes greedily (one prompt pass, then one cached step per new token of the group's longest
row) and scores the target teacher-forced (a one-choice multiple-choice pass); how many steps
it takes depends on what the masked model writes, so its share is a range (`generation_share`):
every row ending at its first token (the least), every row writing `max_new_tokens` with
each step priced as a whole forward (the most). The forward counts (`choice_forwards`,
`generation_forwards`) are the model forwards the scorer runs, checked against a count of the
calls in `tests/test_estimate.py`. What a generation pass costs in time is also measured on
the clean model before a run (`measure_decode`): what the estimate's likely time prices.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

Span = tuple[float, float]
SE_MARGIN = 2.0  # standard errors below the mean share of random sets, at the low end
MEASURE_DECODE_ROWS = 16  # a generation task's selection examples decoded clean and timed


def plain_share(n_layers: int) -> Span:
    """A pass from the first layer: all of a forward, its last block less at the low end."""
    return (n_layers - 1) / n_layers, 1.0


def single_share(n_layers: int) -> Span:
    """One mask per head of every layer, on average: a head of layer `l` restarts there,
    `(L - l) / L` of a forward (`(L - 1 - l) / L` at the low end)."""
    return (n_layers - 1) / (2 * n_layers), (n_layers + 1) / (2 * n_layers)


def random_share(n_layers: int, n_heads: int, size: int, n_sets: int) -> Span:
    """What `n_sets` random sets of `size` distinct heads (of `n_layers x n_heads`) cost per
    set, as a share of a forward: each restarts at its first ablated layer. The low end is
    the mean of `(L - 1 - first) / L` less `SE_MARGIN` standard errors over `n_sets` (at
    least 0); the high end the mean of `(L - first) / L` plus as many (at most 1)."""
    L, total = n_layers, n_layers * n_heads
    size = min(size, total)
    first = [0.0] * L  # P(the first ablated layer is l)
    for l in range(L):
        above = math.comb((L - l) * n_heads, size) - math.comb((L - l - 1) * n_heads, size)
        first[l] = above / math.comb(total, size)
    mean = sum(p * (L - l) / L for l, p in enumerate(first))
    var = sum(p * ((L - l) / L - mean) ** 2 for l, p in enumerate(first))
    margin = SE_MARGIN * math.sqrt(var / max(1, n_sets))
    return max(0.0, mean - 1 / L - margin), min(1.0, mean + margin)


def choice_tokens(batch) -> tuple[int, int]:
    """`(prompt tokens, choice-pass tokens)` one scoring of a multiple-choice batch runs
    (`workbench.metrics.choices`, shared path): every prompt's real tokens, and every choice
    of more than one token but its last (`(0, 0)` for a batch without choices)."""
    seqs = getattr(batch, "choice_seqs", None)
    if seqs is None:
        return 0, 0
    tail = sum(len(c) - 1 for choices in seqs for c in choices if len(c) > 1)
    return int(batch.lengths.sum()), tail


def choice_forwards(batch) -> int:
    """The model forwards one scoring of a multiple-choice batch runs (shared path): per group
    of examples whose choices fill at most `ROWS_PER_PASS` rows, one over the prompts, and one
    over the choice rows where some choice of the group is longer than one token."""
    from workbench.metrics.choices import row_groups

    return sum(1 + any(len(c) > 1 for i in group for c in batch.choice_seqs[i])
               for group in row_groups(batch))


def choice_share(run) -> float | None:
    """A multiple-choice main task's choice-pass tokens over its prompt tokens, on the
    selection split (0 with one-token choices); None for another task."""
    prompt, tail = choice_tokens(run.select)
    return None if getattr(run.select, "choice_seqs", None) is None else tail / max(1, prompt)


def _target_share(batch) -> float:
    """A generation batch's target tokens past the first over its prompt tokens: the
    teacher-forced pass's second pass, as a share of its first."""
    from workbench.metrics.generation import target_batch

    prompt, tail = choice_tokens(target_batch(batch))
    return tail / max(1, prompt)


def generation_forwards(batch, new_tokens: Sequence[Sequence[int]]) -> int:
    """The model forwards one scoring of a generation batch under `len(new_tokens)` masks
    runs (`generation_masks_metric`; a single mask: `generation_metric`), on a key-value
    cache, when mask `m`'s rows generate `new_tokens[m]` tokens each: the decode of every
    mask's rows together (`decode_forwards` over the rows, mask-major: per group of rows, its
    longest generation) and one teacher-forced pass of the target per mask
    (`choice_forwards` of `target_batch`)."""
    from workbench.generation.decode import decode_forwards
    from workbench.metrics.generation import target_batch

    lengths = batch.lengths.tolist() * len(new_tokens)
    flat = [int(t) for per_mask in new_tokens for t in per_mask]
    return (decode_forwards(lengths, flat)
            + len(new_tokens) * choice_forwards(target_batch(batch)))


def generation_share(run) -> Span | None:
    """What one masked pass on a generation main task costs, as a share of a plain forward
    over its rows (None for another task): from every row ending at its first token (the
    prompt pass, and the teacher-forced pass with its target tokens: `2 + t`, less the last
    block) to every row writing `max_new_tokens`, each cached step priced as a whole forward
    (`max_new_tokens + 1 + t`; a step runs one token per row, so it costs less)."""
    if not getattr(run.select.task, "is_generation", False):
        return None
    low, _ = plain_share(run.model.cfg.n_layers)
    t = _target_share(run.select)
    return low * (2 + t), run.select.task.generation.max_new_tokens + 1 + t


def teacher_forced_share(run) -> Span | None:
    """A generation main task's teacher-forced pass alone (what attribution differentiates:
    `1 + t`, the last block less at the low end); None for another task."""
    if not getattr(run.select.task, "is_generation", False):
        return None
    low, high = plain_share(run.model.cfg.n_layers)
    t = _target_share(run.select)
    return low * (1 + t), high * (1 + t)


def main_share(run) -> Span | None:
    """What every masked pass on the main task costs whatever layer its mask starts at (a
    multiple-choice pass: every block and its choice pass; a generation pass:
    `generation_share`), or None where a pass restarts at its layer (a next-token task)."""
    gen = generation_share(run)
    if gen is not None:
        return gen
    extra = choice_share(run)
    if extra is None:
        return None
    low, high = plain_share(run.model.cfg.n_layers)
    return low * (1 + extra), high * (1 + extra)


@dataclass(frozen=True)
class DecodeCost:
    """A generation main task's clean scoring (`measure_decode`): `share`, one mask's seconds
    over those of a plain forward over the same rows; `span`, a masked pass's range
    (`generation_share`); the examples timed, decoded as the rows of `copies` masks together,
    the forwards run (the joint decode's and one teacher-forced pass) and the new tokens per
    example."""

    share: float
    span: Span
    rows: int
    forwards: int
    new_tokens: float
    max_new_tokens: int
    copies: int = 1


def measure_decode(run, seconds: float) -> DecodeCost | None:
    """Time the clean model scoring up to `MEASURE_DECODE_ROWS` selection examples of a
    generation main task as the scorer does, under the run's threads, as a share of
    `seconds` (`workbench.estimate.measure_forward(run)`, the selection split's plain
    forward) scaled to those rows' tokens; None for another task.

    The scorer decodes several masks' rows together in groups of `ROWS_PER_PASS`
    (`workbench.scoring.custom`), and a step over a full group costs each row less than a
    step over a few rows, so the examples are decoded as the rows of as many empty masks as
    fill one group (`greedy_generate_masks`), and one mask's share is that decode's time over
    the copies plus one teacher-forced pass (`target_logprob`)."""
    span = generation_share(run)
    if span is None:
        return None
    rows = run.select.rows(slice(0, MEASURE_DECODE_ROWS))
    settings = rows.task.generation
    from workbench.generation.decode import ROWS_PER_PASS
    from workbench.generation.masked import greedy_generate_masks
    from workbench.metrics.generation import target_batch, target_logprob

    copies = max(1, ROWS_PER_PASS // len(rows))
    cfg = run.model.cfg
    empty = torch.zeros(copies, cfg.n_layers, cfg.n_heads, device=cfg.device)
    sync = torch.cuda.synchronize if str(cfg.device).startswith("cuda") else (lambda: None)
    with run.compute.threads_set(), torch.no_grad():
        t0 = time.perf_counter()
        gen = greedy_generate_masks(run.model, rows.prompts(), empty,
                                    settings.max_new_tokens, settings.until)
        sync()
        t1 = time.perf_counter()
        target_logprob(run.model, rows)
        sync()
        took = (t1 - t0) / copies + time.perf_counter() - t1
    plain = seconds * float(rows.lengths.sum()) / float(run.select.lengths.sum())
    new = [len(t) for t in gen.tokens]
    forwards = gen.n_forwards + choice_forwards(target_batch(rows))
    return DecodeCost(took / plain, span, len(rows), forwards,
                      sum(new) / len(new), settings.max_new_tokens, copies)
