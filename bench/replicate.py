"""Replicate a finished CEL cell's head sets on examples that cell never saw.

    python bench/replicate.py CELL_FOLDER [CELL_FOLDER ...] [--n-random N] [--out table.csv]

A run with `max_examples` uses a sample of each split; the task's other examples were used
neither to choose the heads nor to confirm them. Picking the closest of many cells after
looking at their held-out results is a choice made on the held-out split, so a second look at
that cell needs new examples. This takes the best set of each size from the cell's
`confirmation.csv`, fixed in advance, and scores it on every example of the task that is in
neither of the cell's recorded splits (`summary.splits`), with the cell's own model, ablation
kind, objective, mean-ablation means (over the cell's selection split), random-set count and
racing, against random sets of the same size from all heads and from the cell's search pool
(`confirm_sets`, the same code as stage 3). It prints one row per cell and size; `p_holm` is
Holm over the sizes of one cell, and `p_holm_all` Holm over every row printed; a guarded cell's
rows add its main-task guards' held-out test (`guarded_p_holm`) and the accuracy and log-prob
changes.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workbench.ablation import Ablation, AblationKind, compute_head_means  # noqa: E402
from workbench.compute import Compute  # noqa: E402
from workbench.confirmation.confirm import (  # noqa: E402
    ConfirmPlan,
    check_groups,
    cluster_labels,
    confirm_size,
    finish_confirmation,
)
from workbench.errors import WorkbenchError  # noqa: E402
from workbench.guards import parse_guards  # noqa: E402
from workbench.heads import HeadSet  # noqa: E402
from workbench.loading import load_model  # noqa: E402
from workbench.metrics.scores import task_metric  # noqa: E402
from workbench.results.fingerprint import model_fingerprint, task_fingerprint  # noqa: E402
from workbench.scoring.scorer import MaskScorer  # noqa: E402
from workbench.search.candidates import search_pool  # noqa: E402
from workbench.stats import Stats, holm  # noqa: E402
from workbench.tasks.encoding import encode_task  # noqa: E402
from workbench.tasks.task import load_task  # noqa: E402

COLUMNS = ["cell", "size", "heads", "n", "clean", "gain", "lo", "hi", "p_value", "p_holm",
           "percentile", "pool_percentile", "secondary", "secondary_gain"]
# a guarded cell's rows also hold the main task's accuracy and log-prob changes, and the
# guards' held-out test (`workbench.guards`), Holm over the cell's sizes
GUARD_COLUMNS = ["accuracy", "logprob", "guarded_p_holm"]


def fresh_examples(task, splits: dict[str, list[str]]):
    """The task's examples in neither recorded split, all marked held out."""
    used = {i for ids in splits.values() for i in ids}
    unknown = used - set(task.ids)
    if unknown:
        raise WorkbenchError(f"the cell's splits name examples that task {task.name!r} lacks "
                             f"({sorted(unknown)[:3]}); was the task file changed?")
    fresh = [replace(e, split="heldout") for e in task.examples if e.id not in used]
    if not fresh:
        raise WorkbenchError(f"task {task.name!r}: the cell used every example; nothing is left "
                             "to replicate on")
    return replace(task, examples=fresh)


def cell_config(folder: Path) -> tuple[dict, dict]:
    """A finished cell's `(config, summary)`."""
    run = json.loads((Path(folder) / "config.json").read_text())
    return run["config"], run["summary"]


def replicate(folder: Path, model, task, n_random: int | None = None) -> pd.DataFrame:
    """The rows of one cell: `model` and `task` are the cell's (`cell_config`)."""
    folder = Path(folder)
    cfg, summary = cell_config(folder)
    conf = pd.read_csv(folder / "confirmation.csv")
    heads = pd.read_csv(folder / "heads.csv")
    if model_fingerprint(model) != cfg["model_fingerprint"]:
        raise WorkbenchError(f"{str(folder)!r} was run on another model than the one given "
                             f"(its config records {cfg['model']!r}, fingerprint "
                             f"{cfg['model_fingerprint']})")
    sampled = task.sample_per_split(cfg["max_examples"], cfg["seed"])
    if task_fingerprint(sampled) != cfg["task_fingerprint"]:
        raise WorkbenchError(f"{str(folder)!r} was run on another version of task "
                             f"{cfg['task']!r}: its file changed since, so the unused examples "
                             "are not known")
    fresh = encode_task(model, fresh_examples(task, summary["splits"]))
    kind = AblationKind(cfg["kind"])
    means = None
    if kind is AblationKind.MEAN:
        select = encode_task(model, sampled, "select")  # the cell's selection split
        means = compute_head_means(model, select.tokens, select.lengths)
    scorer = MaskScorer(model, fresh, Ablation(kind, means), task_metric(None, fresh),
                        compute=Compute())  # progress bars
    objective, secondary = cfg["objective"], cfg["secondary"]
    sets = {int(r.size): HeadSet.of(model, r.heads) for r in conf.itertuples()}
    n_random = cfg["n_random"] if n_random is None else n_random
    groups = cluster_labels(fresh, cfg["cluster"])  # as the cell clustered
    stats = Stats(n_boot=cfg["n_boot"], ci=cfg["ci"], seed=cfg["seed"])
    # the cell's main-task guards (a side task's would need its unused examples too)
    guards = [g for g in parse_guards(cfg.get("guards")) or () if g.on_main]
    # as `confirm_sets` confirms, with the guards' safety test (`ConfirmPlan.guards`)
    plan = ConfirmPlan(objective, secondary, n_random=n_random, stats=stats,
                       pool=search_pool(heads, objective, second=secondary), groups=groups,
                       adaptive=cfg["adaptive"], guards=tuple(guards))
    check_groups(plan)
    rows = [confirm_size(scorer, size, head_set, {}, plan)[0]
            for size, head_set in sorted(sets.items())]
    table, _ = finish_confirmation(rows, [])
    scorer.release()
    if table.empty:
        return pd.DataFrame(columns=COLUMNS)
    extra = {}
    if guards:
        extra = {"accuracy": table.get("d_accuracy"), "logprob": table.get("d_logprob"),
                 "guarded_p_holm": holm(table["guarded_p"].to_numpy())}
    return pd.DataFrame({
        "cell": folder.name, "size": table["size"], "heads": table["heads"],
        "n": table[f"d_{objective}_n"], "clean": table[f"clean_{objective}"],
        "gain": table[f"d_{objective}"], "lo": table[f"d_{objective}_lo"],
        "hi": table[f"d_{objective}_hi"], "p_value": table["p_value"],
        "p_holm": holm(table["p_value"].to_numpy()), "percentile": table["percentile"],
        "pool_percentile": table.get("pool_percentile"), "secondary": secondary,
        "secondary_gain": table[f"d_{secondary}"] if secondary else float("nan"),
        **extra,
    })


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cells", nargs="+", type=Path, help="finished CEL results folders")
    parser.add_argument("--n-random", type=int, default=None,
                        help="random sets per size for the percentiles (default: the cell's)")
    parser.add_argument("--out", type=Path, help="also write the table to this CSV file")
    args = parser.parse_args(argv)
    models, rows = {}, []
    for folder in args.cells:
        cfg, _ = cell_config(folder)
        if cfg["model"] not in models:
            models[cfg["model"]] = load_model(cfg["model"])
        rows.append(replicate(folder, models[cfg["model"]], load_task(cfg["task"]),
                              args.n_random))
    table = pd.concat(rows, ignore_index=True)
    table = table[COLUMNS + [c for c in GUARD_COLUMNS if c in table]]
    table["p_holm_all"] = holm(table["p_value"].to_numpy())
    if args.out:
        table.to_csv(args.out, index=False)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))


if __name__ == "__main__":
    main()
