"""Benchmark: does the ranking companion `logprob` rank heads as `exact_match` does?

A generation task's heads are ranked by the target's teacher-forced `logprob` (one
differentiable pass; screening and attribution rank by it), while the search and the
confirmation score real generations (`exact_match`). This script removes every head alone
(zero ablation) and scores the examples with `generation_metric` under that head's ablation,
through `MaskScorer(model, batch, metric=generation_metric)` (the path the workbench scores
generation tasks on: one greedy decoding and one teacher-forced pass per head). Per head:

- `d_logprob`: the mean change of the target's log-prob (nats) from the clean model;
- `d_exact_match`: the mean change of exact match, from the generations under the ablation;
- `flips`: examples whose exact match the head's removal changes (either way).

It prints, per model: the Spearman rank correlation of `d_logprob` and `d_exact_match` over all
heads (ties take their average rank) and over the heads that change exact match; the overlap
of the top-k heads (k = 5, 10, 20; top = most improving) of the two rankings, with the
exact-match ranking's ties broken by head order and, tie-aware, against every head whose
`d_exact_match` reaches the k-th largest; how many heads change exact match at all; the heads
with the largest `d_exact_match` with their `d_logprob` and its rank; wall time and forwards.

    python bench/gen_ranking.py --model embedded    # seconds: a small task, the embedded model
    python bench/gen_ranking.py --model smollm2-135m --threads 2
    python bench/gen_ranking.py --model gemma-3-270m --threads 2 --examples 21

`--examples N` keeps N evenly spaced examples of the select split (gen_facts lists its seven
subjects in blocks of 12, so every subject keeps its share).
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch

KS = (5, 10, 20)
TASK = "gen_facts"


class HeadRanking(NamedTuple):
    """The per-head table (`layer, head, d_logprob, d_exact_match, flips`), the clean means
    and what the scoring cost."""

    table: pd.DataFrame
    clean_exact_match: float
    clean_logprob: float
    n_examples: int
    seconds: float
    forwards: int


def embedded_task(n: int = 48):
    """A small generation task for the embedded model: the select prompts of `embedded_map`
    (half of them unmarked, where the trained model copies instead of mapping, so removing a
    copy head can raise exact match), the map rule's word as target, one new token."""
    from workbench.tasks import load_task
    from workbench.tasks.task import Task

    src = [e for e in load_task("embedded_map").examples if e.split == "select"][:n]
    rows = [{"id": e.id, "prompt": e.prompt, "target": e.answers[0], "split": "select",
             "group": e.group} for e in src]
    return Task.from_records(rows, name="embedded_map_gen",
                             generation={"max_new_tokens": 1, "extractor": "first_line"})


def evenly_spaced(n_all: int, n: int | None) -> list[int]:
    """`n` indices spread evenly over `range(n_all)` (all of them for None or n >= n_all)."""
    if n is None or n >= n_all:
        return list(range(n_all))
    return [i * n_all // n for i in range(n)]


def examples_for_budget(model, batch, budget_s: float, probe: int) -> int:
    """The most examples, a multiple of `probe`, whose scoring under every single head (and
    the clean run) should fit `budget_s`: one clean `generation_metric` call on `probe` evenly
    spaced examples is timed and the cost taken as proportional to the examples."""
    from workbench.metrics.generation import generation_metric

    rows = batch.rows(evenly_spaced(len(batch), probe))
    start = time.perf_counter()
    with torch.no_grad():
        generation_metric(model, rows)
    seconds = time.perf_counter() - start
    calls = model.cfg.n_layers * model.cfg.n_heads + 1
    blocks = max(1, int(budget_s / (calls * seconds)))
    n = min(len(batch), probe * blocks)
    print(f"# probe: {probe} examples in {seconds:.2f} s per call; {calls} calls in "
          f"{budget_s:.0f} s: {n} examples", flush=True)
    return n


def _count(x, hook, counter: dict) -> None:
    counter["forwards"] += 1


def rank_heads(model, batch, progress: bool = False) -> HeadRanking:
    """Every single head's `d_logprob`, `d_exact_match` and `flips` on `batch` (zero ablation,
    scored by `MaskScorer` with `generation_metric`)."""
    from workbench.metrics.generation import generation_metric
    from workbench.scoring.scorer import MaskScorer, masks_of

    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    heads = [(layer, head) for layer in range(n_layers) for head in range(n_heads)]
    counter = {"forwards": 0}
    start = time.perf_counter()
    # every forward (prompt pass, decoding step, teacher-forced pass) runs `hook_embed` once
    with torch.no_grad(), model.hooks(fwd_hooks=[("hook_embed", lambda x, hook: _count(
            x, hook, counter))]):
        scorer = MaskScorer(model, batch, metric=generation_metric)
        clean = {k: v.detach().float().cpu() for k, v in scorer.clean().items()}
        scores = scorer.score(masks_of(model, [[h] for h in heads]), progress, "heads")
    seconds = time.perf_counter() - start
    em = scores["exact_match"].detach().float().cpu()  # (n_heads_total, batch)
    lp = scores["logprob"].detach().float().cpu()
    table = pd.DataFrame({
        "layer": [h[0] for h in heads], "head": [h[1] for h in heads],
        "d_logprob": (lp.mean(1) - clean["logprob"].mean()).numpy(),
        "d_exact_match": (em.mean(1) - clean["exact_match"].mean()).numpy(),
        "flips": (em != clean["exact_match"]).sum(1).numpy(),
    })
    return HeadRanking(table, float(clean["exact_match"].mean()),
                       float(clean["logprob"].mean()), len(batch), seconds,
                       counter["forwards"])


def average_ranks(x) -> np.ndarray:
    """Ranks 1..n of `x`, ties given the mean of the ranks they span."""
    x = np.asarray(x, dtype=float)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    sorted_x = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sorted_x[j + 1] == sorted_x[i]:
            j += 1
        ranks[order[i: j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a, b) -> float:
    """Spearman's rank correlation (the Pearson correlation of the average ranks); NaN when
    either side is constant or has fewer than 2 values."""
    if len(a) < 2:
        return float("nan")
    ra, rb = average_ranks(a), average_ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def _top(table: pd.DataFrame, column: str, k: int) -> set[tuple[int, int]]:
    """The k heads with the largest `column`, ties broken by (layer, head)."""
    ranked = table.sort_values([column, "layer", "head"], ascending=[False, True, True],
                               kind="stable")
    return set(zip(ranked["layer"].head(k), ranked["head"].head(k), strict=True))


def summarize(ranking: HeadRanking, ks=KS) -> dict:
    """The agreement figures of one model's table (module docstring)."""
    t = ranking.table
    moved = t[t["d_exact_match"] != 0]
    out = {
        "heads": len(t),
        "spearman": spearman(t["d_logprob"], t["d_exact_match"]),
        "spearman_moved": spearman(moved["d_logprob"], moved["d_exact_match"]),
        "n_moved": len(moved), "n_flip": int((t["flips"] > 0).sum()),
        "n_em_up": int((t["d_exact_match"] > 0).sum()),
        "n_lp_up": int((t["d_logprob"] > 0).sum()),
    }
    for k in ks:
        k = min(k, len(t))
        top_lp = _top(t, "d_logprob", k)
        out[f"top{k}"] = len(top_lp & _top(t, "d_exact_match", k))
        kth = t["d_exact_match"].nlargest(k).iloc[-1]
        at_least = set(zip(t.loc[t["d_exact_match"] >= kth, "layer"],
                           t.loc[t["d_exact_match"] >= kth, "head"], strict=True))
        out[f"top{k}_ties"] = (len(top_lp & at_least), len(at_least))
    return out


def markdown(name: str, ranking: HeadRanking, n_best: int = 5) -> str:
    """The summary row and the largest-`d_exact_match` heads, as markdown."""
    s = summarize(ranking)
    ks = [k for k in KS if f"top{k}" in s] or [min(KS[0], s["heads"])]
    t = ranking.table.copy()
    t["lp_rank"] = t["d_logprob"].rank(ascending=False, method="min").astype(int)
    lines = [
        "| model | heads | examples | clean EM | heads changing EM (mean / any example) | "
        "EM up / logprob up | Spearman (all / EM-changing) | "
        + " | ".join(f"top-{k} overlap (tie-aware)" for k in ks) + " | s | forwards |",
        "|---|" + "---|" * (9 + len(ks)),
        f"| {name} | {s['heads']} | {ranking.n_examples} | {ranking.clean_exact_match:.3f} | "
        f"{s['n_moved']} / {s['n_flip']} | {s['n_em_up']} / {s['n_lp_up']} | "
        f"{s['spearman']:.2f} / {s['spearman_moved']:.2f} | "
        + " | ".join(f"{s[f'top{k}']}/{k} ({s[f'top{k}_ties'][0]} of {s[f'top{k}_ties'][1]})"
                     for k in ks)
        + f" | {ranking.seconds:.0f} | {ranking.forwards} |",
        "",
        "| head | d_exact_match | flips | d_logprob (nats) | rank by d_logprob |",
        "|---|---|---|---|---|",
    ]
    best = t.sort_values(["d_exact_match", "d_logprob"], ascending=False, kind="stable")
    for r in best.head(n_best).itertuples():
        lines.append(f"| L{r.layer}H{r.head} | {r.d_exact_match:+.3f} | {r.flips} | "
                     f"{r.d_logprob:+.3f} | {r.lp_rank} / {len(t)} |")
    best_lp = t.sort_values("d_logprob", ascending=False, kind="stable").head(n_best)
    lines += ["", "| head (top by d_logprob) | d_logprob (nats) | d_exact_match | flips |",
              "|---|---|---|---|"]
    for r in best_lp.itertuples():
        lines.append(f"| L{r.layer}H{r.head} | {r.d_logprob:+.3f} | {r.d_exact_match:+.3f} | "
                     f"{r.flips} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    from workbench import load_model
    from workbench.tasks import load_task
    from workbench.tasks.encoding import encode_task

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m",
                        help="a model name; 'embedded' runs a small task on the embedded model")
    parser.add_argument("--examples", type=int, default=None,
                        help="evenly spaced examples of the select split (default: all)")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="instead of --examples: as many examples (a multiple of --probe) "
                        "as fit this many seconds of scoring, timed on --probe examples")
    parser.add_argument("--probe", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--csv", default=None, help="write the per-head table here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    model = load_model(args.model, device=args.device)
    load_s = time.perf_counter() - start
    task = embedded_task() if args.model.startswith("embedded") else load_task(TASK)
    batch = encode_task(model, task, "select")
    n = args.examples
    if args.budget_s is not None:
        n = examples_for_budget(model, batch, args.budget_s, args.probe)
    batch = batch.rows(evenly_spaced(len(batch), n))
    ranking = rank_heads(model, batch, progress=True)  # a line per step on stderr
    print(f"# {args.model} on {args.device}, machine {platform.processor() or platform.machine()}"
          f", {torch.get_num_threads()} threads, torch {torch.__version__}; task {task.name} "
          f"select, {ranking.n_examples} examples; model read in {load_s:.0f} s; clean "
          f"logprob {ranking.clean_logprob:.3f}; load {load_before:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after")
    print(markdown(args.model, ranking))
    if args.csv:
        ranking.table.to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
