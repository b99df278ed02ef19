"""A workbench multiple-choice task as an lm-eval task over local files, so that lm-eval's own
`simple_evaluate` can judge a head set found on it (`workbench.lm_eval.rescore`).

`write_lm_eval_task(task, folder, split)` writes `<name>.jsonl`, one document per example
(`id`, `prompt`, `choices`, `gold`), and `<name>.yaml`: `output_type: multiple_choice`,
`doc_to_text: "{{prompt}}"`, `doc_to_choice: "{{choices}}"`, `doc_to_target: gold`, the task's
`target_delimiter`, no few-shot examples (a workbench prompt holds its own), and lm-eval's
`acc` and `acc_norm`. lm-eval then scores exactly the continuations the workbench scores
(`docs/lm_eval.md`). The data path in the YAML is absolute, so lm-eval reads it from any
working directory.
"""

from __future__ import annotations

import json
from pathlib import Path

from workbench.errors import WorkbenchError

METRICS = ("acc", "acc_norm")


def write_lm_eval_task(task, folder, split: str | None = "heldout",
                       name: str | None = None) -> Path:
    """Write a multiple-choice `Task` as an lm-eval task YAML and its documents in `folder`;
    return the YAML's path.

    Args:
        task: a multiple-choice `Task` (`load_task("mc_facts_text")`).
        folder: where `<name>.yaml` and `<name>.jsonl` go (created).
        split: the examples written (`"select"`, `"heldout"`), or None for all.
        name: the lm-eval task's name (default: the task's, with the split).
    """
    if not getattr(task, "is_multiple_choice", False):
        raise WorkbenchError(f"task {getattr(task, 'name', task)!r} is not a multiple-choice "
                             "task (its examples have no 'choices'); only those can be written "
                             "as lm-eval tasks")
    examples = task.subset(split).examples if split is not None else task.examples
    if not examples:
        raise WorkbenchError(f"task {task.name!r} has no {split!r} examples")
    name = name or (task.name if split is None else f"{task.name}_{split}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    data = (folder / f"{name}.jsonl").resolve()
    data.write_text("".join(json.dumps({"id": e.id, "prompt": e.prompt,
                                        "choices": list(e.choices), "gold": int(e.gold)})
                            + "\n" for e in examples))
    delimiter = " " if task.target_delimiter is None else task.target_delimiter
    metrics = "".join(f"  - metric: {m}\n    aggregation: mean\n    higher_is_better: true\n"
                      for m in METRICS)
    path = folder / f"{name}.yaml"
    path.write_text(
        f"# {task.name} ({split or 'all'} split) written by workbench.lm_eval.export\n"
        f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {json.dumps(str(data))}\ntest_split: test\n"
        "output_type: multiple_choice\nnum_fewshot: 0\n"
        'doc_to_text: "{{prompt}}"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: gold\n'
        f"target_delimiter: {json.dumps(delimiter)}\nmetric_list:\n{metrics}"
        "metadata:\n  version: 1.0\n")
    return path
