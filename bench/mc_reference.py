"""Score multiple-choice task files with Hugging Face's own forward, as lm-eval scores them.

An independent reference for the shipped benchmark-format tasks (`tasks/benchmarks/`): the
task file is read with plain `json` (not the workbench's loader), the model is transformers'
own reading of the same GGUF file the workbench loads (`workbench.loading.gguf.read_gguf`,
float32, CPU), and every number follows lm-eval 0.4's definitions for a `multiple_choice` task:

- the request for choice i is (context, continuation) = (prompt, target_delimiter + choice);
  it is encoded as HFLM's `_encode_pair`: trailing spaces of the context move into the
  continuation, whole = tokens(context + continuation), the continuation's tokens are
  whole[len(tokens(context)):]. `tokens` is `tokenizer.encode(text)` with the tokenizer's own
  special tokens, as HFLM with `add_bos_token` unset: Gemma's tokenizer adds `<bos>`, SmolLM2's
  adds nothing;
- ll_i is the sum of log p(token | everything before it) over the continuation's tokens, from
  one forward over context + continuation (when every continuation of an example is a single
  token, the log-probabilities at the context's last position serve all choices: the same
  numbers from one forward);
- acc: argmax_i ll_i == gold (first index wins ties, as `np.argmax`); acc_norm: argmax_i
  ll_i / len(choices[i]) (characters, without the delimiter) == gold.

Printed per model, task and split: n, acc and acc_norm with Wilson 95% intervals, chance
(1 / number of choices), and the tokens fed for one example. Run from the repository root:

    python bench/mc_reference.py                       # both real models, both shipped tasks
    python bench/mc_reference.py --models smollm2-135m --limit 20
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference import each_task, interval, parser, read_task, timed, wilson  # noqa: E402,F401  (wilson: the tests read it here)

DEFAULT_TASKS = ("mc_facts_letters", "mc_facts_text")


def encode_pair(tokenizer, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """lm-eval's HFLM `_encode_pair` for a causal model, with the tokenizer's default special
    tokens (HFLM's `tok_encode` when `add_bos_token` is unset)."""
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = tokenizer.encode(context + continuation)
    context_ids = tokenizer.encode(context)
    return context_ids, whole[len(context_ids) :]


@torch.no_grad()
def naive_logliks(model, pairs: list[tuple[list[int], list[int]]]) -> list[float]:
    """ll_i from one full forward over context + continuation per choice (lm-eval's own
    layout): the slow, obvious reference for `choice_logliks`."""
    out = []
    for ctx, cont in pairs:
        logits = model(torch.tensor([ctx + cont])).logits[0, len(ctx) - 1 : -1]
        logp = logits.log_softmax(-1)  # (len(cont), vocab): the positions that predict cont
        out.append(float(logp[torch.arange(len(cont)), torch.tensor(cont)].sum()))
    return out


@torch.no_grad()
def choice_logliks(model, pairs: list[tuple[list[int], list[int]]]) -> list[float]:
    """ll_i for each encoded (context, continuation): the shared context runs once, its last
    position scores every continuation's first token, and a continuation of several tokens
    runs on from a copy of the context's key-value cache."""
    ctx = pairs[0][0]
    if any(c != ctx for c, _ in pairs):
        return naive_logliks(model, pairs)
    run = model(torch.tensor([ctx]), use_cache=True)
    first = run.logits[0, -1].log_softmax(-1)
    out = []
    for _, cont in pairs:
        ll = float(first[cont[0]])
        if len(cont) > 1:
            cache = copy.deepcopy(run.past_key_values)
            more = model(torch.tensor([cont[:-1]]), past_key_values=cache, use_cache=True)
            logp = more.logits[0].log_softmax(-1)  # (len(cont) - 1, vocab)
            ll += float(logp[torch.arange(len(cont) - 1), torch.tensor(cont[1:])].sum())
        out.append(ll)
    return out


def argmax(values: list[float]) -> int:
    """np.argmax: the first index of the maximum."""
    return max(range(len(values)), key=lambda i: (values[i], -i))


def score_task(model, tokenizer, path: Path, limit: int | None = None, check: int = 0) -> dict:
    """Per split: n, acc and acc_norm counts, chance; the tokens of the first example; and
    the largest |cached - naive| log-likelihood over the first `check` examples."""
    header, examples = read_task(path)
    delim = header.get("target_delimiter", " ")
    if limit:
        by_split = [[e for e in examples if e["split"] == s] for s in ("select", "heldout")]
        examples = [e for part in by_split for e in part[:limit]]
    rows: dict[str, dict] = {}
    gap = 0.0
    for i, e in enumerate(examples):
        pairs = [encode_pair(tokenizer, e["prompt"], delim + c) for c in e["choices"]]
        lls = choice_logliks(model, pairs)
        if i < check:
            naive = naive_logliks(model, pairs)
            gap = max(gap, *(abs(a - b) for a, b in zip(lls, naive, strict=True)))
        normed = [ll / len(c) for ll, c in zip(lls, e["choices"], strict=True)]
        row = rows.setdefault(e["split"], {"n": 0, "acc": 0, "acc_norm": 0, "chance": 0.0})
        row["n"] += 1
        row["acc"] += argmax(lls) == e["gold"]
        row["acc_norm"] += argmax(normed) == e["gold"]
        row["chance"] += 1 / len(e["choices"])
    for row in rows.values():
        row["chance"] /= row["n"]
    fed = tokens_fed(tokenizer, examples[0], delim)
    return {"header": header, "splits": rows, "fed": fed, "gap": gap}


def tokens_fed(tokenizer, example: dict, delim: str) -> str:
    """The first example's context (first and last tokens) and each choice's tokens."""
    lines = []
    for i, choice in enumerate(example["choices"]):
        ctx, cont = encode_pair(tokenizer, example["prompt"], delim + choice)
        if i == 0:
            head, tail = tokenizer.convert_ids_to_tokens(ctx[:3]), ctx[-6:]
            lines.append(
                f"    context: {len(ctx)} tokens, first {head} ... last "
                f"{tokenizer.convert_ids_to_tokens(tail)}"
            )
        mark = "*" if i == example["gold"] else " "
        lines.append(f"   {mark}choice {i} {choice!r}: {tokenizer.convert_ids_to_tokens(cont)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__, DEFAULT_TASKS)
    p.add_argument("--check", type=int, default=5,
                   help="compare with one full forward per choice on the first N examples")
    args = p.parse_args(argv)
    table = [
        "| model | task | metric | split | n | acc [95% CI] | acc_norm [95% CI] | chance |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, path, model, tokenizer in each_task(args):
        result, seconds = timed(
            lambda: score_task(model, tokenizer, path, args.limit, args.check))  # noqa: B023
        header = result["header"]
        print(f"\n{header['name']} (metric {header['metric']}), {seconds:.0f} s; max |cached - "
              f"naive| ll over {args.check} examples {result['gap']:.2e}; tokens fed for its "
              "first example:")
        print(result["fed"])
        for split, row in result["splits"].items():
            acc, norm = interval(row["acc"], row["n"]), interval(row["acc_norm"], row["n"])
            line = (f"| {name} | {header['name']} | {header['metric']} | {split} | "
                    f"{row['n']} | {acc} | {norm} | {row['chance']:.2f} |")
            print(line)
            table.append(line)
    print("\n" + "\n".join(table))


if __name__ == "__main__":
    main()
