"""Benchmark: multiple-choice scoring with each prompt run once (shared) against one pass over
prompt + choice per choice (naive), on a real model.

Two task shapes, built here from a few lines of text (nothing downloaded):

- `letters`: MMLU-style, a question with four lettered options, choices " A".." D" (one token
  each: the shared path needs no second pass);
- `text`: ARC/HellaSwag-style, the same question alone, the options' full text as choices
  (several tokens each).

Each is scored clean with `choice_logliks(..., shared=True)` and `shared=False`, interleaved
(shared, naive, shared, naive, ...) and repeated, so that load from other users of a shared
machine hits both alike; the script prints each path's median seconds, the median of the
per-repeat ratios naive / shared, and the machine's 1-minute load average before and after
(the machine is shared: a high load widens the spread, not the ratio's centre). It checks
the numbers too: the largest |shared - naive| log-likelihood, and that every argmax agrees.

    .venv/bin/python bench/mc_cost.py                      # smollm2-135m, 5 repeats, 1 thread
    .venv/bin/python bench/mc_cost.py --model gemma-3-270m --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from workbench.loading.model import load_model
from workbench.metrics.choices import choice_logliks
from workbench.tasks.encoding import encode_task
from workbench.tasks.task import Task

FACTS = [("France", "Paris"), ("Italy", "Rome"), ("Peru", "Lima"), ("Norway", "Oslo"),
         ("Spain", "Madrid"), ("Japan", "Tokyo"), ("Egypt", "Cairo"), ("Kenya", "Nairobi"),
         ("Chile", "Santiago"), ("Canada", "Ottawa"), ("Poland", "Warsaw"), ("Greece", "Athens")]


def tasks(n: int) -> dict[str, Task]:
    """`letters` and `text` tasks of `n` questions each (module docstring)."""
    letters, text = [], []
    for i in range(n):
        country, capital = FACTS[i % len(FACTS)]
        wrong = [c for _, c in FACTS if c != capital][i % 7: i % 7 + 3]
        options = [capital, *wrong]
        options = options[i % 4:] + options[: i % 4]
        gold = options.index(capital)
        question = (f"The following is a question about geography, answered by one of the "
                    f"options below.\nQuestion: What is the capital city of {country}?")
        listed = "".join(f"\n{'ABCD'[k]}. The city of {o}" for k, o in enumerate(options))
        letters.append({"id": f"l{i}", "prompt": f"{question}{listed}\nAnswer:",
                        "choices": list("ABCD"), "gold": gold})
        text.append({"id": f"t{i}", "prompt": f"{question}\nAnswer:",
                     "choices": [f"The city of {o}, which is known for its history" for o in
                                 options], "gold": gold})
    return {"letters": Task.from_records(letters, name="letters"),
            "text": Task.from_records(text, name="text")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--examples", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: two threads on a shared 2-core machine "
                             "wait on each other)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = load_model(args.model)
    print(f"model {args.model}, {args.examples} questions x 4 choices, torch threads "
          f"{torch.get_num_threads()}, load average before {os.getloadavg()[0]:.2f}")
    for name, task in tasks(args.examples).items():
        batch = encode_task(model, task)
        times: dict[bool, list[float]] = {True: [], False: []}
        with torch.no_grad():
            out = {s: choice_logliks(model, batch, shared=s) for s in (True, False)}  # warm-up
            for _ in range(args.repeats):
                for shared in (True, False):
                    t = time.perf_counter()
                    choice_logliks(model, batch, shared=shared)
                    times[shared].append(time.perf_counter() - t)
        gap = float((out[True] - out[False]).abs().nan_to_num().max())
        agree = bool((out[True].argmax(-1) == out[False].argmax(-1)).all())
        ratios = [n / s for s, n in zip(times[True], times[False], strict=True)]
        tokens = [len(c) for seqs in batch.choice_seqs for c in seqs]
        print(f"{name}: prompt {int(batch.lengths.float().mean())} tokens (mean), choices "
              f"{min(tokens)}-{max(tokens)} tokens; shared {statistics.median(times[True]):.3f}"
              f" s, naive {statistics.median(times[False]):.3f} s (medians of {args.repeats}); "
              f"naive / shared {statistics.median(ratios):.2f}x (per-repeat "
              f"{min(ratios):.2f}-{max(ratios):.2f}); max |shared - naive| {gap:.2e}, argmax "
              f"{'identical' if agree else 'DIFFERS'}")
    print(f"load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
