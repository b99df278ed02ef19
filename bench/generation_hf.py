"""Greedy generation under a head set against Hugging Face's `generate`, on the real models.

The independent reference for `workbench.generation.greedy_generate`: transformers' own reading
of the same GGUF file (`workbench.loading.gguf.read_gguf`, float32, CPU) decodes each prompt
with `generate(do_sample=False)`, its own key-value cache and no hooks; a head is removed there
by zeroing its input columns of the layer's `o_proj` (`h * d_head : (h + 1) * d_head`), which
is what zeroing its `hook_z` does on the TransformerLens side. The workbench side decodes all
prompts as one batch (left-padded rows of different lengths) with the ablation hooks attached
by `model.hooks`.

Per model, prompt and head set the two token sequences are compared from the first generated
token on. Two float32 implementations of the same network (different kernels and summation
orders) may pick different tokens only where the top two logits are within float noise, so
every step's gap between Hugging Face's top two logits is recorded: a step with a gap below
`NEAR_TIE` (1e-4) is the only allowed cause of a difference, and such steps are counted.
Both decoders stop at the tokenizer's EOS and after `--tokens` tokens. The head sets are then
decoded again all together (`greedy_generate_masks`, as a search's masks are scored), and the
script says whether every row writes the tokens its set writes alone.

    python bench/generation_hf.py                       # both real models
    python bench/generation_hf.py --models smollm2-135m --tokens 16
"""

from __future__ import annotations

import argparse
import platform
import time
from contextlib import ExitStack, contextmanager

import torch

DEFAULT_MODELS = ("smollm2-135m", "gemma-3-270m")
NEAR_TIE = 1e-4
PROMPTS = (
    "Question: Tom has 3 apples and buys 4 more. How many apples does he have?\nAnswer:",
    "The capital of France is",
    "def add(a, b):\n",
    "Once upon a time, in a small village,",
)
# Head sets per model: one early head, one late head, and three heads across layers (for
# SmolLM2 from different key/value groups; Gemma-3 has one key/value head per layer).
HEAD_SETS = {
    "smollm2-135m": ([], [(0, 4)], [(29, 7)], [(3, 1), (14, 5), (22, 8)]),
    "gemma-3-270m": ([], [(0, 1)], [(17, 2)], [(2, 0), (9, 3), (14, 1)]),
}
O_PROJ = "model.layers.{l}.self_attn.o_proj"


@contextmanager
def heads_removed(hf, heads, d_head: int):
    """`hf` with each head's input columns of its layer's `o_proj` zeroed; restored on exit."""
    saved = []
    with torch.no_grad():
        for layer, head in heads:
            weight = hf.get_submodule(O_PROJ.format(l=layer)).weight
            saved.append((weight, weight.detach().clone()))
            weight[:, head * d_head : (head + 1) * d_head] = 0.0
    try:
        yield hf
    finally:
        with torch.no_grad():
            for weight, value in saved:
                weight.copy_(value)


@torch.no_grad()
def hf_generate(hf, ids: list[int], n: int, eos: int) -> tuple[list[int], list[float]]:
    """Hugging Face's greedy continuation of `ids` (through its EOS), and at each step the gap
    between its top two logits."""
    out = hf.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, eos_token_id=eos,
                      pad_token_id=eos, output_logits=True, return_dict_in_generate=True,
                      top_p=None, top_k=None, temperature=None)
    tokens = out.sequences[0, len(ids):].tolist()
    gaps = [float(t[0].topk(2).values.diff().abs()) for t in out.logits]
    end = tokens.index(eos) + 1 if eos in tokens else len(tokens)
    return tokens[:end], gaps[:end]


def compare(model, hf, prompts: list[list[int]], heads, n: int) -> list[dict]:
    """Per prompt: the workbench's and Hugging Face's tokens under `heads`, where they first
    differ (None: nowhere), Hugging Face's top-two gap there, and the near-tie steps."""
    from workbench.ablation import ablation_hooks
    from workbench.generation import greedy_generate

    eos = model.tokenizer.eos_token_id
    with model.hooks(fwd_hooks=ablation_hooks(model, heads)):
        ours = greedy_generate(model, [torch.tensor(p) for p in prompts], n).tokens
    rows = []
    with ExitStack() as stack:
        stack.enter_context(heads_removed(hf, heads, model.cfg.d_head))
        for p, got in zip(prompts, ours, strict=True):
            want, gaps = hf_generate(hf, p, n, eos)
            pairs = enumerate(zip(got, want, strict=False))
            first = next((k for k, (a, b) in pairs if a != b), None)
            if first is None and len(got) != len(want):
                first = min(len(got), len(want))
            compared = len(got) if first is None else first + 1
            rows.append({
                "ours": got, "hf": want, "first_difference": first,
                "gap_there": None if first is None or first >= len(gaps) else gaps[first],
                "near_ties": sum(g < NEAR_TIE for g in gaps[:compared]),
                "steps": compared, "min_gap": min(gaps[:compared]),
            })
    return rows


def joint_tokens(model, prompts: list[list[int]], head_sets, n: int) -> list[list[list[int]]]:
    """Per head set, per prompt: the tokens `greedy_generate_masks` writes with every head
    set's rows decoded together (what the scorer runs during a search)."""
    from workbench.generation.masked import greedy_generate_masks
    from workbench.scoring.interface import masks_of

    gen = greedy_generate_masks(model, [torch.tensor(p) for p in prompts],
                                masks_of(model, head_sets), n)
    k = len(prompts)
    return [gen.tokens[m * k:(m + 1) * k] for m in range(len(head_sets))]


def allowed(row: dict) -> bool:
    """Equal token for token, or first different at a near-tie step of Hugging Face's."""
    return row["first_difference"] is None or (
        row["gap_there"] is not None and row["gap_there"] < NEAR_TIE)


def run_model(name: str, n: int, n_prompts: int) -> list[dict]:
    from workbench import load_model
    from workbench.loading.gguf import read_gguf
    from workbench.loading.shipped import REAL_MODELS
    from workbench.tasks.tokenizer import get_tokenizer

    start = time.perf_counter()
    model = load_model(name, device="cpu")
    hf, _ = read_gguf(REAL_MODELS[name].path())
    print(f"\n## {name}: loaded in {time.perf_counter() - start:.0f} s")
    tok = get_tokenizer(model)
    prompts = [tok.encode_prompt(p)[0] for p in PROMPTS[:n_prompts]]
    out = []
    for heads in HEAD_SETS[name]:
        start = time.perf_counter()
        rows = compare(model, hf, prompts, heads, n)
        label = ",".join(f"L{l}H{h}" for l, h in heads) or "none"
        for i, r in enumerate(rows):
            r.update(model=name, heads=label, prompt=i)
            print(f"{label:>20} prompt {i}: {r['steps']:>2} steps, first difference "
                  f"{r['first_difference']}, near ties {r['near_ties']}, min top-2 gap "
                  f"{r['min_gap']:.2e}, text {model.tokenizer.decode(r['ours'])[:50]!r}")
        print(f"{label:>20}: {time.perf_counter() - start:.1f} s")
        out += rows
    joint = joint_tokens(model, prompts, HEAD_SETS[name], n)
    alone = [[r["ours"] for r in out if r["heads"] == label]
             for label in dict.fromkeys(r["heads"] for r in out)]
    print(f"{name}: the {len(joint)} head sets decoded together write the tokens each writes "
          f"alone: {joint == alone}")
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    parser.add_argument("--tokens", type=int, default=24, help="max new tokens per prompt")
    parser.add_argument("--prompts", type=int, default=len(PROMPTS))
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"# machine: {platform.processor() or platform.machine()}, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}")
    table = ["| model | head set | prompts | steps compared | identical | near-tie steps | "
             "min top-2 gap |", "|---|---|---|---|---|---|---|"]
    for name in args.models:
        rows = run_model(name, args.tokens, args.prompts)
        for label in dict.fromkeys(r["heads"] for r in rows):
            rs = [r for r in rows if r["heads"] == label]
            table.append(
                f"| {name} | {label} | {len(rs)} | {sum(r['steps'] for r in rs)} | "
                f"{sum(r['first_difference'] is None for r in rs)}/{len(rs)} | "
                f"{sum(r['near_ties'] for r in rs)} | {min(r['min_gap'] for r in rs):.1e} |")
        bad = [r for r in rows if not allowed(r)]
        print(f"{name}: {len(bad)} rows differ at a step that is not a near tie")
    print("\n" + "\n".join(table))


if __name__ == "__main__":
    main()
