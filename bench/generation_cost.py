"""Benchmark: what one ablated example of a generation task costs, on a real model.

A generation task is scored by decoding every example under each head set, so the search's
unit of work is one example decoded greedily under a mask's hooks. Measured per example, on
short arithmetic questions of different lengths (nothing downloaded):

- `forward`: one forward over the prompts (right-padded, one batch) under the hooks: the unit
  a teacher-forced task pays per example and mask, the forward-equivalent here;
- `greedy`: `greedy_generate` under the mask's hooks (key-value cache, rows batched,
  finished rows dropped), `--tokens` new tokens at most, stopping at EOS;
- `tl_generate`: TransformerLens's `model.generate` with no hooks, one prompt at a time
  (its key-value cache, greedy, `stop_at_eos`), what a user without the workbench runs;
- `naive`: `naive_generate` under the hooks (one full forward per row per step, no cache), on
  the first `--naive-examples` prompts (it is slow);
- `each_mask`: `--masks` single-head masks (the default set's heads and more, spread over the
  layers), each decoded by its own `greedy_generate` call under its hooks: a search's masks
  one at a time;
- `joint_masks`: the same masks' rows decoded together (`greedy_generate_masks`), as the
  scorer decodes a search's masks; per example-and-mask, like `each_mask`.

The methods run interleaved, in a rotating order, `--repeats` times, so that load from other
users of a shared machine hits all alike; the script prints each one's median seconds per
example, in forward-equivalents (`forward`'s median per example = 1), the median of the
per-repeat ratios to `greedy`, the tokens generated per example and the machine's 1-minute
load average before and after. It checks that `greedy` and `naive` generate the same tokens
and that `greedy` without hooks generates `tl_generate`'s, and that `joint_masks` generates
`each_mask`'s tokens.

    python bench/generation_cost.py                          # smollm2-135m
    python bench/generation_cost.py --model gemma-3-270m --repeats 3
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch

QUESTIONS = [(12, 7), (3, 45), (108, 26), (9, 9), (250, 175), (31, 4), (66, 18), (5, 820),
             (14, 14), (47, 53), (2, 3), (715, 120), (88, 12), (19, 61), (400, 401), (7, 70)]
DEFAULT_HEADS = {"smollm2-135m": [(3, 1), (14, 5), (22, 8)],
                 "gemma-3-270m": [(2, 0), (9, 3), (14, 1)]}


def prompts_for(tokenizer, n: int) -> list[torch.Tensor]:
    """`n` questions, of 1 to 3 sentences, so the prompts differ in length."""
    out = []
    for i in range(n):
        a, b = QUESTIONS[i % len(QUESTIONS)]
        lead = "Answer with a number. " * (i % 3)
        text = f"{lead}Question: what is {a} plus {b}?\nAnswer:"
        out.append(torch.tensor(tokenizer.encode_prompt(text)[0]))
    return out


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def main(argv=None) -> None:
    from workbench import load_model
    from workbench.ablation import ablation_hooks, mask_hooks
    from workbench.generation import greedy_generate, naive_generate
    from workbench.generation.masked import greedy_generate_masks
    from workbench.logits import forward_kwargs
    from workbench.scoring.interface import masks_of
    from workbench.tasks.tokenizer import get_tokenizer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--examples", type=int, default=16)
    parser.add_argument("--naive-examples", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=32, help="max new tokens per example")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--masks", type=int, default=4, help="masks decoded together")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = load_model(args.model, device=args.device)
    heads = DEFAULT_HEADS.get(args.model, [(0, 0), (model.cfg.n_layers - 1, 1)])
    hooks = ablation_hooks(model, heads)
    prompts = prompts_for(get_tokenizer(model), args.examples)
    few = prompts[: args.naive_examples]
    n, k = len(prompts), len(few)
    width = max(len(p) for p in prompts)
    padded = torch.full((n, width), get_tokenizer(model).pad_id, dtype=torch.long)
    for i, p in enumerate(prompts):
        padded[i, : len(p)] = p
    padded = padded.to(model.cfg.device)
    sync = torch.cuda.synchronize if model.cfg.device.startswith("cuda") else (lambda: None)

    def forward():
        with torch.no_grad(), model.hooks(fwd_hooks=hooks):
            model(padded, **forward_kwargs(model))
        sync()

    def greedy():
        with model.hooks(fwd_hooks=hooks):
            out = greedy_generate(model, prompts, args.tokens)
        sync()
        return out

    def tl_generate():
        out = []
        with torch.no_grad():
            for p in prompts:
                seq = model.generate(p[None].to(model.cfg.device), max_new_tokens=args.tokens,
                                     do_sample=False, stop_at_eos=True, verbose=False,
                                     return_type="tokens")
                out.append(seq[0, len(p):].tolist())
        sync()
        return out

    def naive():
        with model.hooks(fwd_hooks=hooks):
            out = naive_generate(model, few, args.tokens)
        sync()
        return out

    L, H = model.cfg.n_layers, model.cfg.n_heads
    spread = [(round(i * (L - 1) / max(1, args.masks - 1)), (3 * i + 1) % H)
              for i in range(args.masks)]
    masks = masks_of(model, [[h] for h in spread])

    def each_mask():
        out = []
        for m in range(len(masks)):
            with model.hooks(fwd_hooks=mask_hooks(model, masks[m : m + 1])):
                out += greedy_generate(model, prompts, args.tokens).tokens
        sync()
        return out

    def joint_masks():
        out = greedy_generate_masks(model, prompts, masks, args.tokens).tokens
        sync()
        return out

    methods = {"forward": (forward, n), "greedy": (greedy, n), "tl_generate": (tl_generate, n),
               "naive": (naive, k), "each_mask": (each_mask, n * len(masks)),
               "joint_masks": (joint_masks, n * len(masks))}
    print(f"# {args.model} on {args.device}, machine {platform.processor() or platform.machine()}"
          f", {torch.get_num_threads()} threads, torch {torch.__version__}; heads {heads}; "
          f"{n} examples ({min(len(p) for p in prompts)}-{width} prompt tokens), "
          f"{args.tokens} new tokens at most; load {os.getloadavg()[0]:.1f}")
    forward(), greedy()  # warm-up
    per_example: dict[str, list[float]] = {m: [] for m in methods}
    values: dict[str, object] = {}
    names = list(methods)
    for r in range(args.repeats):
        for name in names[r % len(names):] + names[: r % len(names)]:
            fn, count = methods[name]
            seconds, values[name] = timed(fn)
            per_example[name].append(seconds / count)
    load_after = os.getloadavg()[0]
    unit = statistics.median(per_example["forward"])
    ratios = {m: statistics.median(a / g for a, g in zip(per_example[m], per_example["greedy"],
                                                        strict=True)) for m in methods}
    got = values["greedy"]
    with torch.no_grad():
        clean = greedy_generate(model, prompts, args.tokens).tokens
    same_naive = got.tokens[:k] == values["naive"].tokens
    same_tl = clean == values["tl_generate"]
    same_joint = values["joint_masks"] == values["each_mask"]
    tokens = {"greedy": statistics.mean(len(t) for t in got.tokens),
              "each_mask": statistics.mean(len(t) for t in values["each_mask"]),
              "joint_masks": statistics.mean(len(t) for t in values["joint_masks"]),
              "naive": statistics.mean(len(t) for t in values["naive"].tokens),
              "tl_generate": statistics.mean(len(t) for t in values["tl_generate"])}
    print("| method | s / example (median) | forward-equivalents / example | vs greedy "
          "(median ratio) | new tokens / example |")
    print("|---|---|---|---|---|")
    for m in methods:
        med = statistics.median(per_example[m])
        print(f"| {m} | {med:.4f} | {med / unit:.1f} | {ratios[m]:.2f}x | "
              f"{tokens.get(m, 0):.1f} |")
    print(f"greedy forwards {got.n_forwards} for {n} examples; greedy == naive on the first {k}: "
          f"{same_naive}; greedy without hooks == tl_generate: {same_tl}; masks {spread}: "
          f"joint_masks == each_mask: {same_joint}, per example and mask each_mask / "
          f"joint_masks {ratios['each_mask'] / ratios['joint_masks']:.2f}x; load after "
          f"{load_after:.1f}")


if __name__ == "__main__":
    main()
