"""What a trained embedded model's checkpoint records about itself, measured on the model as
loaded from the written file (`python -m workbench.zoo.train` calls both):

- `heldout_baselines`: each task's held-out accuracy (and correct count), mean log-prob and,
  where a task has groups, accuracy per group (the meta's `heldout`);
- `confirm_cel`: CEL on the default task with the package's own `run_cel` (exhaustive, up to
  3 heads, zero ablation): each size's best set with its held-out gain, bootstrap interval,
  random-set percentiles and side effects, and every task's held-out numbers with the top
  candidate removed (the meta's `cel`).
"""

from __future__ import annotations

from transformer_lens import HookedTransformer

from workbench.ablation import ablated
from workbench.metrics.scores import evaluate, summarize
from workbench.pipeline import run_cel
from workbench.tasks.task import load_task
from workbench.zoo import DEFAULT_TASK, SIDE_TASKS


def heldout_baselines(model: HookedTransformer, tasks: list[str]) -> dict[str, dict]:
    """Per-task held-out accuracy (and correct count) and mean log-prob, overall and per group."""
    out = {}
    for name in tasks:
        scores = evaluate(model, load_task(name), split="heldout")
        row = {"n": len(scores), "correct": int(scores["correct"].sum()),
               "accuracy": float(scores["correct"].mean()),
               "logprob": float(scores["logprob"].mean())}
        if scores["group"].nunique() > 1:
            for _, g in summarize(scores).iterrows():
                if g["subset"] != "all":
                    row[f"accuracy_{g['subset']}"] = float(g["accuracy"])
        out[name] = row
    return out


def confirm_cel(model: HookedTransformer, seed: int = 0) -> dict:
    """Run CEL on the default task (exhaustive, up to 3 heads, zero ablation) and summarise.

    Returns the best set, its held-out gain with the bootstrap interval and random-set
    percentiles, the per-task held-out numbers with that set removed, and the side effects.
    """
    result = run_cel(model, DEFAULT_TASK, others=SIDE_TASKS, max_size=3, seed=seed,
                     progress=False, plots=False)
    conf = result.confirmation
    # the set the search ranks first (significant or not; its p-value is recorded with it)
    best = conf[conf["top_candidate"].astype(bool)].iloc[0]
    sets = []
    for _, row in conf.iterrows():
        side = result.side_effects[result.side_effects["size"] == row["size"]]
        sets.append({
            "heads": str(row["heads"]).split(","),
            "select_gain": float(row["select_d_accuracy"]),
            "heldout_gain": float(row["d_accuracy"]),
            "heldout_gain_ci95": [float(row["d_accuracy_lo"]), float(row["d_accuracy_hi"])],
            "random_mean": float(row["random_mean"]),
            "random_q95": float(row["random_q95"]),
            "percentile": float(row["percentile"]),
            "percentile_logprob": float(row["percentile_logprob"]),
            # the shipped checkpoints record it as a share in [0, 1]
            "random_share_ge": float(row["random_pct_ge"]) / 100,
            "n_random": int(row["n_random"]),
            "side_effects": {
                str(r["task"]): {"d_accuracy": float(r["d_accuracy"]),
                                 "ci95": [float(r["d_accuracy_lo"]), float(r["d_accuracy_hi"])]}
                for _, r in side.iterrows()
            },
        })
    return {
        "command": f"run_cel(model, {DEFAULT_TASK!r}, others={SIDE_TASKS}, max_size=3, "
                   f"seed={seed})",
        "best": str(best["heads"]).split(","),
        "sets": sets,
        "heldout_ablated": _ablated_baselines(model, str(best["heads"]).split(",")),
    }


def _ablated_baselines(model: HookedTransformer, heads: list[str]) -> dict[str, dict]:
    with ablated(model, heads):
        return heldout_baselines(model, [DEFAULT_TASK, *SIDE_TASKS])
