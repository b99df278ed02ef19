"""Re-scoring a head set with lm-eval: the model with and without the heads, judged by
lm-eval's own `simple_evaluate` on an lm-eval task (multiple choice, or `generate_until`:
`HookedLM.generate_until` decodes under the heads' hooks).

A CEL run on an lm-eval task finds its heads with the workbench's scorer; this asks lm-eval
itself, through `HookedLM`, what removing them does, with the task's own prompts, few-shot
examples, metrics and aggregation. The task is built once (`build_lm_eval_task`: a refusal
offline or for a task the workbench cannot take is one line) and scored twice, clean and
ablated. Mean ablation takes each head's mean `z` over the documents' own texts.

    python -m workbench.lm_eval.rescore --model smollm2-135m \\
        --task tests/lm_eval/data/arc_style.yaml --heads L3H1,L7H0
"""

from __future__ import annotations

import argparse
import sys

from workbench.errors import WorkbenchError
from workbench.hooked import HookedModel
from workbench.lm_eval.source import FEWSHOT_SEED, build_lm_eval_task, require_lm_eval
from workbench.options import AblationKind


def rescore(
    model: HookedModel, task, heads=None, kind: AblationKind | str = AblationKind.ZERO,
    num_fewshot: int | None = None, limit: int | None = None, batch_size: int = 8,
) -> dict[str, dict[str, float]]:
    """lm-eval's scores of `model` on `task`, clean and with `heads` removed.

    Args:
        model: a hooked model with a Hugging Face tokenizer (`load_model`).
        task: `lm_eval:<registered name>`, the path of an lm-eval task YAML, or the task
            object `build_lm_eval_task` made of one.
        heads: the head set (`"L3H1,L7H0"`, `[(3, 1)]`, a `HeadSet`).
        kind: `"zero"` or `"mean"` (the heads' mean `z` over the task's prompts).
        num_fewshot: as `simple_evaluate`'s (None: the task's own).
        limit: score only the first `limit` documents.
        batch_size: `HookedLM`'s sequences per forward.

    Returns:
        `{"clean": {metric: value}, "ablated": {metric: value}}`, lm-eval's aggregated
        metrics (`acc`, `acc_norm`, `exact_match`, and their standard errors `acc_stderr`,
        ...; `exact_match,strict-match` where the task has several filter pipelines).
    """
    require_lm_eval()
    import lm_eval

    from workbench.lm_eval.model import HookedLM
    from workbench.lm_eval.source import task_manager

    built = build_lm_eval_task(task) if isinstance(task, str) else task
    kind = AblationKind.parse(kind)
    means = _task_means(model, built, limit) if kind is AblationKind.MEAN else None
    out = {}
    for label, lm in (("clean", HookedLM(model, batch_size=batch_size)),
                      ("ablated", HookedLM(model, heads, kind, means, batch_size=batch_size))):
        result = lm_eval.simple_evaluate(
            model=lm, tasks=[built], task_manager=task_manager(False), num_fewshot=num_fewshot,
            limit=limit, fewshot_random_seed=FEWSHOT_SEED,
        )
        out[label] = _metrics(result["results"][built.task_name])
    return out


def _metrics(scores: dict) -> dict[str, float]:
    """lm-eval's `metric,filter` results as `{metric: value}`; with several filter pipelines
    (gsm8k's `strict-match` and `flexible-extract`) each keeps its `,filter`."""
    keys = [k for k, v in scores.items() if isinstance(v, (int, float)) and "," in k]
    several = len({k.split(",", 1)[1] for k in keys}) > 1
    return {k if several else k.split(",")[0]: float(scores[k]) for k in keys}


def _task_means(model, built, limit: int | None):
    """Every head's mean `z` over the documents' texts (`doc_to_text`, without few-shot
    examples), tokenized as `HookedLM` tokenizes them."""
    import torch

    from workbench.ablation import compute_head_means
    from workbench.lm_eval.model import HookedLM

    lm = HookedLM(model)
    docs = [doc for _, doc in built.doc_iterator(limit=limit)]
    ids = [lm.tok_encode(built.doc_to_text(doc))[-lm.max_length:] for doc in docs]
    width = max(len(i) for i in ids)
    tokens = torch.tensor([i + [0] * (width - len(i)) for i in ids], device=lm.device)
    lengths = torch.tensor([len(i) for i in ids], device=lm.device)
    return compute_head_means(model, tokens, lengths)


def main(argv: list[str] | None = None) -> int:
    """`python -m workbench.lm_eval.rescore`: print lm-eval's metrics clean and ablated."""
    parser = argparse.ArgumentParser(
        prog="python -m workbench.lm_eval.rescore",
        description="lm-eval's own scores of a model with and without a head set")
    parser.add_argument("--model", required=True, help="a name or folder load_model takes")
    parser.add_argument("--task", required=True, help="lm_eval:<name> or an lm-eval task YAML")
    parser.add_argument("--heads", required=True, help="the head set, e.g. L3H1,L7H0")
    parser.add_argument("--kind", default="zero", choices=["zero", "mean"])
    parser.add_argument("--num-fewshot", type=int, default=None)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args(argv)
    try:
        built = build_lm_eval_task(args.task)  # refused before the model loads
        from workbench.heads import HeadSet
        from workbench.loading.model import load_model

        model = load_model(args.model, device=args.device)
        heads = HeadSet.of(model, args.heads)
        scores = rescore(model, built, heads, args.kind, args.num_fewshot, args.limit)
    except WorkbenchError as e:
        print(f"rescore: error: {e}", file=sys.stderr)
        return 2
    print(f"{'metric':<18} {'clean':>10} {'ablated':>10} {'change':>10}")
    for metric, clean in scores["clean"].items():
        ablated = scores["ablated"][metric]
        print(f"{metric:<18} {clean:>10.4f} {ablated:>10.4f} {ablated - clean:>+10.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
