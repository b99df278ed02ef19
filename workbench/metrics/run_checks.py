"""What a run checks about its tasks' kinds and metrics before it searches, each in one line.

- A multiple-choice task runs each choice after its prompt on a cache, with hooks on every
  position (`workbench.metrics.choices`), and a generation task decodes new positions
  (`workbench.metrics.generation`): ablations that depend on the position (resample,
  per-position means) are refused before the model's first forward.
- A custom metric whose score has no gradient (declared `differentiable=False`, or a
  registered 0/1 metric such as `acc`) needs its differentiable `companion` among the scores
  for a screening method that uses gradients; without it the run is refused before the
  results folder is made, instead of ranking every head by NaN.
- A next-token task whose answers are several tokens (`answer_tokens: multi`) scores
  `accuracy` as greedy exact match, which its wrong answers do not enter: the run says so in
  one line (`multi_token_note`) and points at multiple choice.
- A 0/1 objective whose clean mean on a split is 0 (its floor) or, on a multiple-choice task,
  not above chance (the mean of 1 / number of choices) gives the search little to find; the
  run says so in one line per split (`floor_note`).
"""

from __future__ import annotations

import math

from workbench.ablation import Ablation, AblationKind
from workbench.errors import WorkbenchError
from workbench.metric_records import record


def check_choice_ablation(ablation: Ablation, tasks) -> None:
    """Refuse resample or per-position mean ablation on a run with a multiple-choice or a
    generation task."""
    resample = ablation.kind is AblationKind.RESAMPLE
    if not (resample or ablation.per_position):
        return
    what = "resample ablation" if resample else "per-position mean ablation"
    mc = [t.name for t in tasks if t.is_multiple_choice]
    if mc:
        raise WorkbenchError(
            f"{what} replaces each position's z, and multiple-choice task(s) {mc} run their "
            "choices after the prompt at other positions; use zero or mean ablation")
    gen = [t.name for t in tasks if getattr(t, "is_generation", False)]
    if gen:
        raise WorkbenchError(
            f"{what} replaces each position's z, and generation task(s) {gen} decode new "
            "tokens after the prompt at positions it has no z for; use zero or mean ablation")


def check_companions(names, metric, gradients: bool) -> None:
    """Refuse, once a custom `metric`'s score `names` are known and before the results folder
    is made, a score without a gradient whose companion is not among them when the screening
    method uses `gradients` (module docstring)."""
    if metric is None or not gradients:
        return
    for name in names:
        r = record(name, metric)
        if not r.differentiable and (r.companion is None or r.companion not in names):
            raise WorkbenchError(
                f"score {name!r} of the custom metric has no gradient and no differentiable "
                f"companion among its scores {list(names)}, so attribution cannot rank heads "
                "by it; declare Metric(" + repr(name) + ", differentiable=False, coarse=True, "
                "companion='<a margin the metric also returns>'), or use method 'exact'")


def multi_token_note(batch) -> str:
    """One line for a next-token task whose answers are several tokens and that has wrong
    answers: which metric its accuracy is, and what its wrong answers do ("" otherwise)."""
    task = batch.task
    if batch.answer_seqs is None or task.is_multiple_choice:
        return ""
    if not any(e.wrong for e in task.examples):
        return ""
    return (f"task {task.name!r}: its answers are several tokens, so 'accuracy' is greedy "
            "exact match of the whole answer and 'logprob' its teacher-forced log-probability;"
            " the wrong answers are not compared with it (they enter only the first-token "
            "logit_diff and prob_diff); for lm-eval's multiple choice give 'choices' and "
            "'gold' (tasks/README.md)")


def floor_note(task, split: str, clean: dict, objective: str) -> str:
    """One line when a 0/1 `objective`'s clean mean on `split` is at its floor (0) or, on a
    multiple-choice task, not above chance; "" otherwise. `task`: the split's examples (as
    encoded); `clean`: their per-example scores."""
    if objective not in clean or not record(objective).coarse:
        return ""
    values = [float(v) for v in clean[objective].tolist() if not math.isnan(float(v))]
    if not values:
        return ""
    mean = sum(values) / len(values)
    chance = 0.0
    if task.is_multiple_choice:
        chance = sum(1 / len(e.choices) for e in task.examples) / len(task.examples)
    if mean > chance + 1e-12 and mean > 0:
        return ""
    where = "at its floor (0)" if mean == 0 else f"at or below chance ({chance:.3f})"
    return (f"task {task.name!r}: the clean {objective} on the {split} split is {mean:.3f}, "
            f"{where}: a head set can only find noise above it; check the task's format "
            "or pick a model that does the task")


def before_search(run, builtin: bool, gradients: bool) -> list[str]:
    """What a prepared CEL run (`workbench.pipeline.CELRun`, its metrics resolved) checks
    once its selection split's clean scores are known: a custom metric (not `builtin`) is
    refused by `check_companions` when the screening method uses `gradients`; returns the
    `floor_note` of the selection split and of the held-out split (one clean pass, only for
    a 0/1 objective)."""
    check_companions(list(run.clean_select), None if builtin else run.metric, gradients)
    objective = run.config.objective
    if not record(objective).coarse:
        return []
    held = run.scorer(run.heldout, run.means)
    clean = {"select": run.clean_select, "heldout": held.clean()}
    held.release()
    notes = [floor_note(data.task, split, clean[split], objective)
             for split, data in (("select", run.select), ("heldout", run.heldout))]
    return [n for n in notes if n]
