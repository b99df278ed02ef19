"""What a model writes at the answer position, clean and with a cell's best set removed.

    python bench/top_tokens.py CELL_FOLDER [--size K] [--split heldout] [--top 8]

A gain in accuracy can come from a capability or from a format prior: a base model that
writes `<start_of_image>` or " the" where the task wants a word is wrong for a reason that has
nothing to do with the task. This loads a finished CEL cell's model, task, split and ablation,
takes its set of size K from `confirmation.csv` (default: the set marked best), and prints
the most frequent argmax tokens over the whole vocabulary at each example's answer position,
clean and ablated, with how often each is an acceptable answer's first token (`is_answer`) and
how often it is a wrong token copied from the prompt itself (`copy`).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/replicate.py

from replicate import cell_config  # noqa: E402

from workbench.ablation import AblationKind, ablated  # noqa: E402
from workbench.explain.capture import as_batch  # noqa: E402
from workbench.explain.removal import default_means  # noqa: E402
from workbench.heads import HeadSet  # noqa: E402
from workbench.loading import load_model  # noqa: E402
from workbench.logits import answer_logits  # noqa: E402
from workbench.tasks.encoding import encode_task  # noqa: E402
from workbench.tasks.task import load_task  # noqa: E402
from workbench.tasks.tokenizer import get_tokenizer  # noqa: E402


@torch.no_grad()
def answer_argmax(model, batch, rows: int = 16) -> torch.Tensor:
    """The argmax over the vocabulary at each example's answer position, `[batch]` (the
    unembedding runs at that position only: `answer_logits`)."""
    return torch.cat([answer_logits(model, batch.rows(slice(s, s + rows))).argmax(-1)
                      for s in range(0, len(batch), rows)])


def top_tokens(model, batch, heads: HeadSet, kind: AblationKind, means=None,
               top: int = 8) -> pd.DataFrame:
    """One row per (condition, token) among each condition's `top` most frequent argmaxes."""
    clean = answer_argmax(model, batch)
    with ablated(model, heads, kind, means):
        removed = answer_argmax(model, batch)
    tok_of, rows = get_tokenizer(model), []
    for name, ids in (("clean", clean), ("ablated", removed)):
        hit = (batch.answer_ids == ids[:, None]).any(-1)
        real = torch.arange(batch.tokens.shape[1], device=ids.device) < batch.lengths[:, None]
        seen = ((batch.tokens == ids[:, None]) & real).any(-1)  # padding is not the prompt
        for tok, n in Counter(ids.tolist()).most_common(top):
            pick = ids == tok
            rows.append({"condition": name, "token": tok_of.decode([tok]), "n": n,
                         "share": n / len(ids), "is_answer": int(hit[pick].sum()),
                         "copy": int((seen & ~hit)[pick].sum())})
    return pd.DataFrame(rows)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cell", type=Path, help="a finished CEL results folder")
    parser.add_argument("--size", type=int, help="the set size (default: the best set's)")
    parser.add_argument("--split", default="heldout", choices=("heldout", "select"))
    parser.add_argument("--top", type=int, default=8)
    args = parser.parse_args(argv)
    cfg, _ = cell_config(args.cell)
    conf = pd.read_csv(args.cell / "confirmation.csv")
    size = int(conf.loc[conf["best"], "size"].iloc[0]) if args.size is None else args.size
    model = load_model(cfg["model"])
    task = load_task(cfg["task"]).sample_per_split(cfg["max_examples"], cfg["seed"])
    heads = HeadSet.of(model, conf.loc[conf["size"] == size, "heads"].iloc[0])
    kind = AblationKind(cfg["kind"])
    both = encode_task(model, task)
    means = default_means(model, both, kind, None)  # over the cell's selection split
    batch = as_batch(model, both, args.split)
    print(f"{cfg['model']} x {cfg['task']}, {args.split} ({len(batch)} examples), "
          f"{kind.value} ablation of {heads}")
    print(top_tokens(model, batch, heads, kind, means, args.top).to_string(index=False))


if __name__ == "__main__":
    main()
