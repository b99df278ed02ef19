"""A workbench multiple-choice or generation task as an lm-eval task over local files, so that
lm-eval's own `simple_evaluate` can judge a head set found on it (`workbench.lm_eval.rescore`).

`write_lm_eval_task(task, folder, split)` writes `<name>.jsonl`, one document per example, and
`<name>.yaml`, with no few-shot examples (a workbench prompt holds its own). The data path in
the YAML is absolute, so lm-eval reads it from any working directory.

- A multiple-choice task: documents `id`, `prompt`, `choices`, `gold`; `output_type:
  multiple_choice`, `doc_to_text: "{{prompt}}"`, `doc_to_choice: "{{choices}}"`,
  `doc_to_target: gold`, the task's `target_delimiter`, lm-eval's `acc` and `acc_norm`.
- A generation task: documents `id`, `prompt`, `target`; `output_type: generate_until`,
  `doc_to_text: prompt`, `doc_to_target: target`, `generation_kwargs` with the task's `until`,
  `max_gen_toks` (its `max_new_tokens`) and `do_sample: false`; one `filter_list` pipeline
  named for the extractor, reproducing it with lm-eval's `regex` filter (`first_line` as the
  regex `FIRST_LINE`, which gives the same answer up to surrounding whitespace) then
  `take_first` (`none`: `take_first` alone); and `exact_match` with the task's
  `ignore_case` and `ignore_punctuation`, its `regexes_to_ignore` between two `STRIP`
  patterns (and, with `ignore_punctuation`, `string.punctuation` removed before the last),
  so lm-eval strips surrounding whitespace where the workbench does
  (`workbench.generation.extract.normalize`).

lm-eval then scores exactly the continuations (or generations) the workbench scores
(`docs/lm_eval.md`).
"""

from __future__ import annotations

import json
import re
import string
from pathlib import Path

from workbench.errors import WorkbenchError

METRICS = ("acc", "acc_norm")
# `first_line` (leading whitespace stripped, the text before the first newline) as lm-eval's
# RegexFilter reads it: the one match's group, stripped by the filter
FIRST_LINE = r"\A\s*([^\n]*)"
# removes a text's leading and trailing whitespace (`str.strip`) under `re.sub`
STRIP = r"\A\s+|\s+\Z"


def write_lm_eval_task(task, folder, split: str | None = "heldout",
                       name: str | None = None) -> Path:
    """Write a multiple-choice or generation `Task` as an lm-eval task YAML and its documents
    in `folder`; return the YAML's path.

    Args:
        task: a multiple-choice or generation `Task` (`load_task("mc_facts_text")`,
            `load_task("gen_facts")`).
        folder: where `<name>.yaml` and `<name>.jsonl` go (created).
        split: the examples written (`"select"`, `"heldout"`), or None for all.
        name: the lm-eval task's name (default: the task's, with the split).
    """
    generation = getattr(task, "is_generation", False)
    if not (generation or getattr(task, "is_multiple_choice", False)):
        raise WorkbenchError(f"task {getattr(task, 'name', task)!r} is neither a multiple-choice "
                             "nor a generation task (its examples have no 'choices' or "
                             "'target'); only those can be written as lm-eval tasks")
    examples = task.subset(split).examples if split is not None else task.examples
    if not examples:
        raise WorkbenchError(f"task {task.name!r} has no {split!r} examples")
    name = name or (task.name if split is None else f"{task.name}_{split}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    data = (folder / f"{name}.jsonl").resolve()
    docs = ({"id": e.id, "prompt": e.prompt, "target": e.target} if generation else
            {"id": e.id, "prompt": e.prompt, "choices": list(e.choices), "gold": int(e.gold)}
            for e in examples)
    data.write_text("".join(json.dumps(d) + "\n" for d in docs))
    path = folder / f"{name}.yaml"
    path.write_text(
        f"# {task.name} ({split or 'all'} split) written by workbench.lm_eval.export\n"
        f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {json.dumps(str(data))}\ntest_split: test\nnum_fewshot: 0\n"
        + (_generation_yaml(task.generation) if generation else _choice_yaml(task))
        + "metadata:\n  version: 1.0\n")
    return path


def _choice_yaml(task) -> str:
    delimiter = " " if task.target_delimiter is None else task.target_delimiter
    metrics = "".join(f"  - metric: {m}\n    aggregation: mean\n    higher_is_better: true\n"
                      for m in METRICS)
    return ("output_type: multiple_choice\n"
            'doc_to_text: "{{prompt}}"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: gold\n'
            f"target_delimiter: {json.dumps(delimiter)}\nmetric_list:\n{metrics}")


def lm_eval_filter(extractor) -> tuple[str, list[dict]]:
    """The filter pipeline reproducing a generation task's extractor: `(name, steps)`."""
    if extractor == "none":
        return "none", [{"function": "take_first"}]
    if extractor == "first_line":
        regex = {"function": "regex", "regex_pattern": FIRST_LINE, "group_select": 0}
        return "first_line", [regex, {"function": "take_first"}]
    from workbench.generation.extract import get_extractor

    rule = get_extractor(extractor)
    regex = {"function": "regex", "regex_pattern": rule.regex,
             "group_select": rule.group_select, "fallback": rule.fallback}
    return (extractor if isinstance(extractor, str) else "regex"), [
        regex, {"function": "take_first"}]


def lm_eval_regexes(settings) -> list[str]:
    """lm-eval's `regexes_to_ignore` giving the workbench's `exact_match` (module docstring):
    strip, the task's own, punctuation where ignored, strip."""
    punctuation = ["[" + re.escape(string.punctuation) + "]"] if settings.ignore_punctuation \
        else []
    return [STRIP, *settings.regexes_to_ignore, *punctuation, STRIP]


def _generation_yaml(settings) -> str:
    name, steps = lm_eval_filter(settings.extractor)
    metric = {"metric": "exact_match", "aggregation": "mean", "higher_is_better": True,
              "ignore_case": settings.ignore_case,
              "ignore_punctuation": settings.ignore_punctuation,
              "regexes_to_ignore": lm_eval_regexes(settings)}
    kwargs = {"until": list(settings.until), "max_gen_toks": settings.max_new_tokens,
              "do_sample": False}
    # JSON is YAML: every string is written escaped and quoted
    return ("output_type: generate_until\ndoc_to_text: prompt\ndoc_to_target: target\n"
            f"generation_kwargs: {json.dumps(kwargs)}\n"
            f"filter_list: {json.dumps([{'name': name, 'filter': steps}])}\n"
            f"metric_list: {json.dumps([metric])}\n")
