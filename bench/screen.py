"""Benchmark: exact and attribution screening against the naive TransformerLens loop.

A GPT-2-small-shaped model (12 layers x 12 heads, d_model 768, vocab 50257, random weights),
64 prompts x 20 tokens, zero ablation. Prints, in one run:

- exact screening time / naive loop time (target <= 0.45),
- attribution screening time / naive loop time (target <= 0.03),
- max |exact - naive| over the per-head mean effects (must be <= 1e-4),

where the naive loop is a clean forward plus one `run_with_hooks` over the whole model per
head with full logits. Naive and exact are timed head by head, alternating; on a CPU the times
are this process's CPU time (one torch thread), so other load on a shared machine does not
skew the ratios. On a slow machine `--heads-per-layer K` times exact and naive on the
same K heads of every layer and scales both to all heads (each head's cost depends only on
its layer, so this estimates the full times; the fixed clean pass is counted once). `--small`
shrinks the model for a smoke run.

    .venv/bin/python bench/screen.py                       # the full benchmark
    .venv/bin/python bench/screen.py --heads-per-layer 2   # same figures, ~6x less time
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

from workbench.compute import Compute
from workbench.scoring.scorer import MaskScorer, masks_of
from workbench.screening.attribution import attribution_effects
from workbench.tasks.encoding import TaskBatch
from workbench.tasks.task import Example, Task


def gpt2_small_shape(small: bool, device: str) -> HookedTransformer:
    shape = dict(n_layers=12, d_model=768, n_heads=12, d_head=64, d_mlp=3072, d_vocab=50257)
    if small:
        shape = dict(n_layers=4, d_model=256, n_heads=8, d_head=32, d_mlp=1024, d_vocab=8000)
    cfg = HookedTransformerConfig(
        **shape, n_ctx=64, act_fn="gelu_new", normalization_type="LN", device=device, seed=0
    )
    model = HookedTransformer(cfg)
    model.eval()
    return model


def random_batch(model, n_prompts: int, n_tokens: int, seed: int = 0) -> TaskBatch:
    """Random prompts with a random answer and wrong answer each; no tokenizer needed."""
    g = torch.Generator().manual_seed(seed)
    vocab, device = model.cfg.d_vocab, model.cfg.device
    tokens = torch.randint(0, vocab, (n_prompts, n_tokens), generator=g)
    ids = torch.randint(0, vocab, (n_prompts, 2), generator=g)
    examples = [
        Example(id=str(i), prompt="-", answers=("-",), split="select") for i in range(n_prompts)
    ]
    return TaskBatch(
        task=Task(name="bench", examples=examples),
        tokens=tokens.to(device),
        lengths=torch.full((n_prompts,), n_tokens, device=device),
        answer_ids=ids[:, :1].to(device),
        wrong_ids=ids[:, 1:].to(device),
        candidate_ids=None,
        str_tokens=[[] for _ in range(n_prompts)],
        roles=None,
    )


def _clock(device: str):
    """CPU time of this process on a CPU (the fair measure on a shared machine; the runs use
    one thread), wall time after a synchronize on a GPU."""
    if torch.device(device).type == "cuda":

        def clock():
            torch.cuda.synchronize()
            return time.perf_counter()

        return clock
    return time.process_time


def time_heads(naive: MaskScorer, exact: MaskScorer, masks, clock) -> dict:
    """Time both scorers head by head, alternating, so load changes hit both alike."""
    out = {}
    for name, scorer in (("naive", naive), ("exact", exact)):
        t0 = clock()
        scorer.clean()
        out[f"{name}_clean"] = clock() - t0
        out[f"{name}_heads"] = 0.0
        out[name] = []
    for i in range(masks.shape[0]):
        for name, scorer in (("naive", naive), ("exact", exact)):
            t0 = clock()
            scores = scorer.score(masks[i : i + 1])
            out[f"{name}_heads"] += clock() - t0
            out[name].append({m: v[0] for m, v in scores.items()})
    for name, scorer in (("naive", naive), ("exact", exact)):
        clean = scorer.clean()
        out[name] = {m: torch.stack([(r[m] - clean[m]).mean() for r in out[name]]) for m in clean}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--heads-per-layer",
        type=int,
        default=None,
        help="time exact and naive on this many heads per layer, scale to all",
    )
    p.add_argument("--small", action="store_true", help="a 4-layer model for a smoke run")
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--tokens", type=int, default=20)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument(
        "--masks-per-pass",
        type=int,
        default=None,
        help="masks per tiled forward in exact screening (default: per device)",
    )
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model = gpt2_small_shape(args.small, args.device)
    batch = random_batch(model, args.prompts, args.tokens)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    k = min(H, args.heads_per_layer or H)
    heads = [(layer, head) for layer in range(L) for head in range(k)]
    masks = masks_of(model, [[h] for h in heads])
    scale = H / k
    with torch.no_grad():  # warm-up: allocator, kernels
        model(batch.tokens[:2], stop_at_layer=1)

    clock = _clock(args.device)
    t = time_heads(
        MaskScorer(model, batch, reuse_prefix=False),
        MaskScorer(model, batch, compute=Compute(masks_per_pass=args.masks_per_pass)),
        masks,
        clock,
    )
    naive_clean, naive_heads, naive = t["naive_clean"], t["naive_heads"], t["naive"]
    exact_clean, exact_heads, exact = t["exact_clean"], t["exact_heads"], t["exact"]
    t0 = clock()
    attribution_effects(model, batch)
    attribution = clock() - t0

    naive_total = naive_clean + naive_heads * scale
    exact_total = exact_clean + exact_heads * scale
    max_diff = max(float((exact[m] - naive[m]).abs().max()) for m in ("logprob", "logit_diff"))
    max_acc = float((exact["accuracy"] - naive["accuracy"]).abs().max())
    cfg = model.cfg
    print(
        f"model: {L} layers x {H} heads, d_model {cfg.d_model}, d_vocab {cfg.d_vocab}, random "
        f"weights; {args.prompts} prompts x {args.tokens} tokens; zero ablation"
    )
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    what = "wall time" if torch.device(args.device).type == "cuda" else "CPU time of this process"
    print(
        f"machine: {cpu}, {os.cpu_count()} CPUs, device {args.device}, torch "
        f"threads {torch.get_num_threads()}, torch {torch.__version__}; times are {what}"
    )
    if k < H:
        print(f"timed on {k} of {H} heads per layer ({len(heads)} heads), scaled to all {L * H}")
    print(
        f"naive loop (clean + one run_with_hooks per head): {naive_total:8.1f} s "
        f"(clean {naive_clean:.1f} s, {naive_heads / len(heads):.2f} s per head)"
    )
    print(
        f"exact screening (prefix reuse):                   {exact_total:8.1f} s "
        f"(clean + cache {exact_clean:.1f} s, {exact_heads / len(heads):.2f} s per head)"
    )
    print(f"attribution screening (1 forward, 3 backward):    {attribution:8.1f} s")
    print(f"exact / naive       = {exact_total / naive_total:.3f}   (target <= 0.45)")
    print(f"attribution / naive = {attribution / naive_total:.4f}  (target <= 0.03)")
    print(
        f"max |exact - naive| effect (logprob, logit_diff) = {max_diff:.2e}  (must be <= 1e-4); "
        f"accuracy {max_acc:.2e}"
    )


if __name__ == "__main__":
    main()
