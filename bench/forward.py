"""Benchmark: the forward of the model `load_model` returns against Hugging Face's, same batch.

Loads one Hugging Face folder twice, as `workbench.load_model` gives it (a HookedTransformer)
and as `transformers.AutoModelForCausalLM` gives it, runs the same token batch through each
in interleaved rounds (ours, theirs, ours, ...) and prints the median time of each and their
ratio (the target is <= 1.3), with the largest log-probability difference as a check that
both compute the same thing. Times are wall-clock and process CPU time; on a shared machine
the CPU time is the steadier of the two (the load is printed). Nothing is downloaded: give a
local folder, a GGUF file, or the shipped `smollm2-135m`.

    .venv/bin/python bench/forward.py smollm2-135m --batch 64 --tokens 24 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch


def _timed(fn) -> tuple[float, float, object]:
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w, time.process_time() - c, out


def _hf_source(name: str) -> tuple[str, dict]:
    """`from_pretrained`'s folder and keyword arguments for the same weights: a folder as it
    is; a GGUF file or a shipped real model (`smollm2-135m`) as its folder plus `gguf_file`
    (transformers dequantises it to float32, as `load_model` does)."""
    from pathlib import Path

    from workbench.loading.shipped import REAL_MODELS

    path = REAL_MODELS[name].path() if name in REAL_MODELS else Path(name)
    if path.suffix == ".gguf":
        return str(path.parent), {"gguf_file": path.name}
    return name, {}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("folder", help="a local Hugging Face model folder, a .gguf file, or "
                   "smollm2-135m")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--tokens", type=int, default=24)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM

    from workbench.loading import load_model, resolve_device

    device = resolve_device(args.device)
    ours = load_model(args.folder, device=str(device))
    folder, kw = _hf_source(args.folder)
    theirs = AutoModelForCausalLM.from_pretrained(folder, dtype=ours.cfg.dtype, **kw).to(device)
    theirs.eval()
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, ours.cfg.d_vocab, (args.batch, args.tokens), generator=g).to(device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def run_ours():
        out = ours(tokens)
        sync()
        return out

    def run_theirs():
        out = theirs(tokens).logits
        sync()
        return out

    times: dict[str, list[tuple[float, float]]] = {"ours": [], "hf": []}
    with torch.no_grad():
        run_ours(), run_theirs()  # warm-up
        for _ in range(args.rounds):
            for name, fn in (("ours", run_ours), ("hf", run_theirs)):
                w, c, out = _timed(fn)
                times[name].append((w, c))
        # TransformerLens centres the unembedding (logits shift by a constant per position),
        # so the two are compared as log-probabilities
        diff = float((run_ours().float().log_softmax(-1)
                      - run_theirs().float().log_softmax(-1)).abs().max())
    med = {k: (statistics.median(t[0] for t in v), statistics.median(t[1] for t in v))
           for k, v in times.items()}
    print(f"device {device}, batch {args.batch} x {args.tokens} tokens, {args.rounds} rounds, "
          f"{args.threads} threads, load {os.getloadavg()}")
    print(f"ours: wall {med['ours'][0]:.3f} s, CPU {med['ours'][1]:.3f} s (median)")
    print(f"HF:   wall {med['hf'][0]:.3f} s, CPU {med['hf'][1]:.3f} s (median)")
    print(f"ratio ours / HF: wall {med['ours'][0] / med['hf'][0]:.2f}, "
          f"CPU {med['ours'][1] / max(med['hf'][1], 1e-9):.2f} (target <= 1.3)")
    print(f"max |log-probs ours - HF| = {diff:.2e}")


if __name__ == "__main__":
    main()
