"""Benchmark: peak memory of exact screening grows with the budgets, not with the split.

A GPT-2-small-shaped model (12 layers x 12 heads, d_model 768, vocab 50257, random weights,
built locally), random prompts, exact screening (`screen_heads`) of the heads of the last
`--layers` layers plus a few multi-head masks scored through the same `MaskScorer` (as the
search stage does), once with N examples and once with 2N. Each run is a fresh child process
so peaks do not leak between runs. Peak memory is

- on CUDA: `torch.cuda.max_memory_allocated()` after a reset (weights included);
- on a CPU: the process's resident set size, sampled every 2 ms by a thread from just before
  the screening starts to its end; "peak" is the whole process (weights, torch itself) and
  "peak - base" is what screening added on top of the loaded model.

Two settings: `bounded` (forwards of at most `--token-budget` tokens, a residual cache
capped by `--cache-mib`) and `unbounded` (everything in one forward of up to 1024 rows and
the whole split's residuals cached: the behaviour before the token budget). Memory in the
bounded setting is weights + O(token budget) + min(split's residuals, cache cap), so the
claim is about splits larger than the budgets: the defaults are scaled down (512 tokens;
64 MiB, which holds three 512-token chunks of 12-layer residuals; the library defaults are
16384 tokens and 1 GiB) so that N = 128 prompts already exceed them and a CPU run takes
minutes. The table shows each setting's peak at N and 2N and the ratio; the target is
bounded 2N / N <= 1.10.

    .venv/bin/python bench/memory.py                 # N = 128 x 16 tokens, last layer
    .venv/bin/python bench/memory.py --device cuda --examples 4096 --token-budget 16384 \
        --cache-mib 1024                             # the library defaults on a GPU
    .venv/bin/python bench/memory.py --small         # a 4-layer model
    .venv/bin/python bench/memory.py --pipeline      # the whole of run_cel (every head)
    .venv/bin/python bench/memory.py --pipeline --examples 64 --token-budget 256 \
        --cache-mib 16 --search-budget 96           # run_cel at GPT-2-small shape, ~20 min

`--pipeline` measures `run_cel` itself (screening of every head, the default search, held-out
confirmation with random sets) on a word task of random prompts split half select, half
held out, with the budgets passed through `run_cel`'s compute settings.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # bench/screen.py, and this checkout's workbench
from screen import gpt2_small_shape, random_batch  # noqa: E402

from workbench.compute import Compute  # noqa: E402
from workbench.pipeline import run_cel  # noqa: E402
from workbench.scoring.scorer import MaskScorer, masks_of  # noqa: E402
from workbench.screening.screen import screen_heads  # noqa: E402
from workbench.stats import Stats  # noqa: E402
from workbench.tasks.task import Example, Task  # noqa: E402
from workbench.tasks.tokenizer import WordTokenizer  # noqa: E402

SETTINGS = {
    "bounded": {},
    "unbounded": {"token_budget": 10**12, "cache_bytes": 2**62},
}


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _RssPeak:
    """The largest RSS seen by a sampling thread while the context is open."""

    def __enter__(self):
        self.peak, self._stop = _rss(), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss())
            time.sleep(0.002)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())


def _word_task(model, n: int, n_tokens: int) -> Task:
    """Random prompts over a word vocabulary of the model's size, half select, half held out."""
    vocab = ["<bos>", "<pad>", *(f"t{i}" for i in range(model.cfg.d_vocab - 2))]
    model.word_tokenizer = WordTokenizer(vocab)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, len(vocab), (n, n_tokens + 2), generator=g).tolist()
    examples = [
        Example(id=str(i), prompt=" ".join(vocab[j] for j in row[:n_tokens]),
                answers=(vocab[row[-2]],), wrong=(vocab[row[-1]],) if row[-1] != row[-2] else (),
                split="select" if i % 2 else "heldout")
        for i, row in enumerate(ids)
    ]
    return Task(name="bench", examples=examples, metric="logprob")


def child_pipeline(args, kw: dict) -> dict:
    model = gpt2_small_shape(args.small, args.device)
    task = _word_task(model, args.examples, args.tokens)
    base = _rss()
    start = time.time()
    with _RssPeak() as rss:
        run_cel(model, task, max_size=args.max_size, n_random=20, n_boot=100,
                search_budget=args.search_budget, progress=False, **kw)
    return {"base": base, "peak": rss.peak, "cached": 0, "seconds": time.time() - start}


def child(args) -> dict:
    torch.set_num_threads(args.threads)
    if args.pipeline:
        kw = dict(SETTINGS[args.setting])
        if args.setting == "bounded":
            kw.update(token_budget=args.token_budget, cache_bytes=args.cache_mib << 20)
        return child_pipeline(args, kw)
    model = gpt2_small_shape(args.small, args.device)
    batch = random_batch(model, args.examples, args.tokens)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    heads = [(l, h) for l in range(L - args.layers, L) for h in range(H)]
    kw = dict(SETTINGS[args.setting])
    if args.setting == "bounded":
        kw.update(token_budget=args.token_budget, cache_bytes=args.cache_mib << 20)
    pairs = masks_of(model, [[heads[i], heads[(i + 1) % len(heads)]] for i in range(4)])
    cuda = torch.device(args.device).type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = _rss()
    with _RssPeak() as rss:
        compute = Compute(**kw)
        screen_heads(model, batch, heads=heads, split=None, stats=Stats(n_boot=200),
                     compute=compute)
        scorer = MaskScorer(model, batch, compute=compute)
        scorer.score(pairs)
        cached = scorer.cached_bytes
        scorer.release()
    peak = torch.cuda.max_memory_allocated() if cuda else rss.peak
    return {"base": base, "peak": peak, "cached": cached}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--examples", type=int, default=128, help="N; the second run uses 2N")
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--layers", type=int, default=1, help="screen the heads of the last K layers")
    p.add_argument("--token-budget", type=int, default=512, help="tokens per forward, 'bounded'")
    p.add_argument("--cache-mib", type=int, default=64, help="residual cache of 'bounded'")
    p.add_argument("--small", action="store_true", help="a 4-layer model for a smoke run")
    p.add_argument("--pipeline", action="store_true", help="measure run_cel (every head)")
    p.add_argument("--max-size", type=int, default=2, help="largest head set, --pipeline")
    p.add_argument("--search-budget", type=int, default=None,
                   help="run_cel's search_budget, --pipeline (default: 5 x heads + 1000)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--settings", nargs="*", default=list(SETTINGS), choices=list(SETTINGS))
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--setting", default="bounded", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    base_cmd = [
        sys.executable,
        __file__,
        "--tokens",
        str(args.tokens),
        "--layers",
        str(args.layers),
        "--token-budget",
        str(args.token_budget),
        "--cache-mib",
        str(args.cache_mib),
        "--device",
        args.device,
        "--threads",
        str(args.threads),
        "--max-size",
        str(args.max_size),
    ] + (["--search-budget", str(args.search_budget)] if args.search_budget else []) + (
        ["--small"] if args.small else []) + (["--pipeline"] if args.pipeline else [])
    rows = []
    for setting in args.settings:
        peaks = {}
        for n in (args.examples, 2 * args.examples):
            cmd = base_cmd + ["--examples", str(n), "--setting", setting, "--child", "1"]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            peaks[n] = json.loads(out.strip().splitlines()[-1])
        a, b = peaks[args.examples], peaks[2 * args.examples]
        rows.append((setting, a, b))
    mib = 1 << 20
    unit = "CUDA allocated" if torch.device(args.device).type == "cuda" else "process RSS"
    print(
        f"model: {'4-layer small' if args.small else 'GPT-2-small shape (12 x 12, d_model 768)'}"
        f", random weights; {args.tokens} tokens per prompt; "
        + ("run_cel (every head, default search, held-out confirmation)" if args.pipeline else
           f"heads of the last {args.layers} layer(s) screened + 4 pair masks")
        + (f" (max size {args.max_size}, search budget "
           f"{args.search_budget or 'default'})" if args.pipeline else "")
        + f"; budgets {args.token_budget} tokens, {args.cache_mib} MiB cache"
        + f"; peak {unit}; N = {args.examples}"
    )
    print(
        "| setting | peak N (MiB) | peak 2N (MiB) | 2N / N | added N (MiB) | added 2N (MiB) "
        "| cache 2N (MiB) |" + (" wall N, 2N |" if args.pipeline else "")
    )
    print("|---|---|---|---|---|---|---|" + ("---|" if args.pipeline else ""))
    for setting, a, b in rows:
        print(
            f"| {setting} | {a['peak'] / mib:.0f} | {b['peak'] / mib:.0f} | "
            f"{b['peak'] / a['peak']:.3f} | {(a['peak'] - a['base']) / mib:.0f} | "
            f"{(b['peak'] - b['base']) / mib:.0f} | {b['cached'] / mib:.0f} |"
            + (f" {a['seconds']:.0f} s, {b['seconds']:.0f} s |" if "seconds" in a else "")
        )
    bounded = [r for r in rows if r[0] == "bounded"]
    if bounded:
        ratio = bounded[0][2]["peak"] / bounded[0][1]["peak"]
        print(
            f"bounded: doubling the examples raises peak memory by {100 * (ratio - 1):.1f} % "
            f"(target <= 10 %)"
        )


if __name__ == "__main__":
    main()
