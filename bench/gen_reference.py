"""Score generation task files with Hugging Face's own `generate`, as lm-eval scores them.

An independent reference for the shipped generation task (`tasks/benchmarks/gen_*.jsonl`): the
task file is read with plain `json` (not the workbench's loader), the model is transformers'
own reading of the same GGUF file the workbench loads (`workbench.loading.gguf.read_gguf`,
float32, CPU), and every step follows lm-eval 0.4's `generate_until` with its HF model `HFLM`:

- the prompt is encoded as `tokenizer(prompt)` with the tokenizer's own special tokens (HFLM's
  `tok_batch_encode` with `add_bos_token` unset: Gemma's tokenizer adds `<bos>`, SmolLM2's
  nothing), one prompt at a time (no padding);
- `model.generate(do_sample=False, max_new_tokens=...)`: greedy, stopping at the model's EOS;
  decoding also stops once the decoded continuation contains a stop string (lm-eval's
  stopping criterion; this only saves work, the cut below decides the text);
- the text is `tokenizer.decode(new tokens, skip_special_tokens=True)`, then split at each
  `until` string in turn, keeping what comes before (`postprocess_generated_text`);
- the extractor of the task's header, written out here from the generation contract: `none`,
  `first_line`, `strict-match` and `flexible-extract` (lm-eval gsm8k's `regex` filters, then
  `take_first`) or a `{"regex", "group_select", "fallback"}` object (lm-eval's `RegexFilter`);
- exact_match: prediction and target stripped of surrounding whitespace, then lm-eval's
  `exact_match` options in its order (`regexes_to_ignore` removed, `ignore_case`,
  `ignore_punctuation`), stripped again, then compared for equality.

Printed per model, task and split: n and exact_match with a 95% Wilson interval, and the tokens
fed and generated for one example. `--workbench` also scores the same examples with the
workbench's own decoding and scoring (`load_model`, `evaluate_generation`) and prints how many
per-example exact matches agree with Hugging Face's. Run from the repository root:

    python bench/gen_reference.py                       # both real models, the shipped tasks
    python bench/gen_reference.py --models smollm2-135m --tasks gen_arith --limit 20 --workbench
"""

from __future__ import annotations

import re
import string
import sys
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference import each_task, interval, parser, read_task, timed  # noqa: E402

DEFAULT_TASKS = ("gen_facts", "gen_arith")
# lm-eval gsm8k's two filters (`gsm8k.yaml`, `filter_list`), as RegexFilter arguments.
NAMED = {
    "strict-match": {"regex": r"#### (\-?[0-9\.\,]+)", "group_select": 0},
    "flexible-extract": {"regex": r"(-?[$0-9.,]{2,})|(-?[0-9]+)", "group_select": -1},
}
DEFAULTS = {"max_new_tokens": 32, "until": ["\n\n"], "extractor": "first_line"}


def cut_at_stops(text: str, until: list[str]) -> str:
    """lm-eval's `postprocess_generated_text`: split at each stop string in turn."""
    for term in until:
        if term:
            text = text.split(term)[0]
    return text


def regex_extract(text: str, pattern: str, group_select: int = 0,
                  fallback: str = "[invalid]") -> str:
    """lm-eval's `RegexFilter` on one response: the `group_select`-th of all matches; for a
    pattern with groups, the first non-empty group of that match; stripped; else `fallback`."""
    found = re.findall(pattern, text)
    if not found:
        return fallback
    match = found[group_select]
    if isinstance(match, tuple):
        groups = [m for m in match if m]
        match = groups[0] if groups else fallback
    return match.strip()


def extract(text: str, extractor) -> str:
    """The answer the task's extractor takes from a generated text."""
    if extractor == "none":
        return text
    if extractor == "first_line":
        return text.lstrip().split("\n")[0]
    spec = NAMED[extractor] if isinstance(extractor, str) else extractor
    return regex_extract(text, spec["regex"], spec.get("group_select", 0),
                         spec.get("fallback", "[invalid]"))


def normalise(text: str, generation: dict) -> str:
    """Whitespace stripped, lm-eval's exact_match options in its order, stripped again."""
    text = text.strip()
    for pattern in generation.get("regexes_to_ignore", []):
        text = re.sub(pattern, "", text)
    if generation.get("ignore_case", False):
        text = text.lower()
    if generation.get("ignore_punctuation", False):
        text = text.translate(str.maketrans("", "", string.punctuation))
    return text.strip()


def exact_match(prediction: str, target: str, generation: dict) -> bool:
    return normalise(prediction, generation) == normalise(target, generation)


class _StopOnText:
    """Stop once the decoded continuation holds a stop string (one row)."""

    def __init__(self, tokenizer, n_prompt: int, until: list[str]) -> None:
        self.tokenizer, self.n_prompt, self.until = tokenizer, n_prompt, until

    def __call__(self, input_ids, scores, **kwargs) -> torch.Tensor:
        text = self.tokenizer.decode(input_ids[0, self.n_prompt:], skip_special_tokens=True)
        done = any(term and term in text for term in self.until)
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool)


@torch.no_grad()
def generate(model, tokenizer, prompt: str, max_new_tokens: int,
             until: list[str]) -> tuple[list[int], list[int], str]:
    """(prompt ids, generated ids, text cut at the stops) for one prompt, greedy."""
    from transformers import StoppingCriteriaList

    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), do_sample=False,
        max_new_tokens=max_new_tokens, use_cache=True,
        stopping_criteria=StoppingCriteriaList([_StopOnText(tokenizer, ids.shape[1], until)]),
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None
        else tokenizer.eos_token_id,
    )
    new = out[0, ids.shape[1]:].tolist()
    text = tokenizer.decode(new, skip_special_tokens=True)
    return ids[0].tolist(), new, cut_at_stops(text, until)


def score_task(model, tokenizer, path: Path, limit: int | None = None) -> dict:
    """Per split: n and exact_match count; per example: the extracted answer; the tokens of
    the first example."""
    header, examples = read_task(path)
    generation = {**DEFAULTS, **header.get("generation", {})}
    if limit:
        by_split = [[e for e in examples if e["split"] == s] for s in ("select", "heldout")]
        examples = [e for part in by_split for e in part[:limit]]
    rows: dict[str, Counter] = {}
    answers, fed = [], ""
    for i, e in enumerate(examples):
        prompt_ids, new, text = generate(model, tokenizer, e["prompt"],
                                         generation["max_new_tokens"], generation["until"])
        answer = extract(text, generation["extractor"])
        hit = exact_match(answer, e["target"], generation)
        row = rows.setdefault(e["split"], Counter())
        row["n"] += 1
        row["exact_match"] += hit
        stratum = _stratum(e)
        row[f"exact_match:{stratum}"] += hit
        row[f"n:{stratum}"] += 1
        answers.append({"id": e["id"], "target": e["target"], "answer": answer, "hit": hit})
        if i == 0:
            fed = tokens_fed(tokenizer, prompt_ids, new, e)
    return {"header": header, "splits": rows, "answers": answers, "fed": fed}


def _stratum(example: dict) -> str:
    """What per-stratum counts group an example by: its subject (gen_facts) or template."""
    meta = example.get("meta", {})
    return str(meta.get("subject", meta.get("template", "")))


def workbench_agreement(name: str, path: Path, answers: list[dict]) -> str:
    """One line: on how many of HF's scored examples (`answers`) the workbench's own exact
    match (`evaluate_generation` on `load_model(name)`, CPU, float32) is the same, the two
    exact matches, and the first examples where they differ."""
    from dataclasses import replace

    from workbench import load_model
    from workbench.metrics.generation import evaluate_generation
    from workbench.tasks import encode_task, load_task

    task = load_task(path)
    ids = {a["id"] for a in answers}
    task = replace(task, examples=[e for e in task.examples if e.id in ids])
    model = load_model(name, device="cpu", dtype="float32")
    ours = evaluate_generation(model, encode_task(model, task)).set_index("id")
    hf = {a["id"]: a for a in answers}
    differ = [i for i in ours.index if bool(ours.at[i, "exact_match"]) != hf[i]["hit"]]
    line = (f"    workbench: exact match {int(ours['exact_match'].sum())}/{len(ours)}, HF "
            f"{sum(a['hit'] for a in answers)}/{len(answers)}; the same on "
            f"{len(ours) - len(differ)} of {len(ours)} examples")
    return line + "".join(
        f"\n      {i}: workbench {ours.at[i, 'prediction']!r}, HF {hf[i]['answer']!r}"
        for i in differ[:5])


def tokens_fed(tokenizer, prompt_ids: list[int], new: list[int], example: dict) -> str:
    names = tokenizer.convert_ids_to_tokens
    return (
        f"    prompt: {len(prompt_ids)} tokens, first {names(prompt_ids[:3])} ... last "
        f"{names(prompt_ids[-6:])}\n    generated: {names(new)}; target {example['target']!r}"
    )


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__, DEFAULT_TASKS)
    p.add_argument("--subjects", action="store_true",
                   help="also print counts per subject (or template)")
    p.add_argument("--workbench", action="store_true",
                   help="also score with the workbench's own decoding and compare")
    args = p.parse_args(argv)
    table = [
        "| model | task | split | n | exact_match [95% CI] |",
        "|---|---|---|---|---|",
    ]
    for name, path, model, tokenizer in each_task(args):
        result, seconds = timed(lambda: score_task(model, tokenizer, path, args.limit))  # noqa: B023
        header = result["header"]
        print(f"\n{header['name']} ({len(result['answers'])} examples, {seconds:.0f} s); "
              "tokens fed for its first example:")
        print(result["fed"])
        misses = [a for a in result["answers"] if not a["hit"]][:5]
        print("    first misses: " + "; ".join(
            f"{a['id']}: {a['answer']!r} (target {a['target']!r})" for a in misses))
        if args.workbench:
            print(workbench_agreement(name, path, result["answers"]))
        for split, row in result["splits"].items():
            line = (f"| {name} | {header['name']} | {split} | {row['n']} | "
                    f"{interval(row['exact_match'], row['n'])} |")
            print(line)
            table.append(line)
            if args.subjects:
                for key in sorted(k for k in row if k.startswith("n:")):
                    subject = key[2:]
                    print(f"    {split} {subject}: {row['exact_match:' + subject]}/{row[key]}")
    print("\n" + "\n".join(table))


if __name__ == "__main__":
    main()
