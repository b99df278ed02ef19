"""lm-eval tasks as workbench multiple-choice and generation tasks.

A task of lm-eval (lm-evaluation-harness) is named two ways: a registered name after the
prefix `lm_eval:` (`lm_eval:arc_easy`) or the path of a task YAML (`my_task.yaml`). lm-eval's
own `TaskManager` builds it, so its `doc_to_text`, `doc_to_choice`, `doc_to_target`,
`target_delimiter`, description and few-shot settings are the ones lm-eval would use, and
`lm_eval_records` turns each of its evaluation documents into one multiple-choice record:
`prompt` is lm-eval's context for the document (few-shot examples included, drawn by lm-eval's
sampler under the seed `simple_evaluate` uses, 1234), `choices` its `doc_to_choice`, `gold` its
`doc_to_target` as an index. The header carries the `target_delimiter` (with any whitespace the
context ends in, which lm-eval moves into every continuation anyway) and the metric: `acc_norm`
when the task's `metric_list` names it, else `acc`. The records and header are what
`Task.from_records` takes; the workbench then splits the documents into select and held-out.

A `multiple_choice` task needs one context per document and one gold choice. A
`generate_until` task becomes a generation task (`workbench.lm_eval.generate_until`: the
context and `doc_to_target` per document, its `generation_kwargs`, one filter pipeline and the
`exact_match` options in the header). Other output types are refused. A task whose
data is on the Hugging Face hub needs the network the first time; offline, it is refused in
one line that names the fix, a YAML that reads local files (`dataset_path: json`).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import socket
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.options import did_you_mean

PREFIX = "lm_eval:"
LM_EVAL_PIN = "0.4.13"
# lm-eval's `simple_evaluate(fewshot_random_seed=...)` default: the same few-shot examples
FEWSHOT_SEED = 1234
# `datasets` builders that read local files named in `data_files`
LOCAL_BUILDERS = ("json", "csv", "parquet", "text", "arrow")
LOCAL_FIX = (
    "write a task YAML that reads local files (dataset_path: json, dataset_kwargs: "
    "{data_files: {test: PATH.jsonl}}, test_split: test) and pass its path"
)


def is_lm_eval_spec(name) -> bool:
    """Whether a task name is lm-eval's: `lm_eval:<name>` or a `.yaml`/`.yml` path."""
    text = str(name)
    return text.startswith(PREFIX) or Path(text).suffix.lower() in (".yaml", ".yml")


def require_lm_eval() -> None:
    """Refuse in one line when lm-eval is not installed."""
    if importlib.util.find_spec("lm_eval") is None:
        raise WorkbenchError(
            f"lm-eval tasks need lm-eval {LM_EVAL_PIN}, which is not installed: pip install "
            f"\"cel-workbench[lm_eval]\" (or pip install lm-eval=={LM_EVAL_PIN})"
        )


@functools.cache
def task_manager(registered: bool):
    """lm-eval's `TaskManager`: with its index of registered tasks (`registered`; ~25 s on 2
    busy cores for lm-eval 0.4.13's 13k tasks, so built once per process), or without (a
    YAML path needs none)."""
    from lm_eval.tasks import TaskManager

    return TaskManager(include_defaults=registered)


def _manager_for(spec: str):
    return task_manager(spec.startswith(PREFIX))


def _entry(spec: str, manager):
    """lm-eval's index entry for `spec`, or a one-line refusal (unknown name, did-you-mean;
    missing YAML; a group of tasks)."""
    from lm_eval.tasks._index import Kind, TaskIndex

    if spec.startswith(PREFIX):
        name = spec[len(PREFIX):]
        entry = manager.task_index.get(name)
        if entry is None:
            hint = did_you_mean(name, manager.all_subtasks)
            raise WorkbenchError(
                f"lm-eval has no task {name!r}{hint} (lm-eval {LM_EVAL_PIN} knows "
                f"{len(manager.all_subtasks)} tasks; `lm-eval ls tasks` lists them)"
            )
    else:
        path = Path(spec).expanduser()
        if not path.is_file():
            raise WorkbenchError(f"lm-eval task file {spec!r} does not exist")
        try:
            entry = TaskIndex.entry_from_path(path.resolve())
        except Exception as e:  # yaml's own errors, several lines: the first names the place
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise WorkbenchError(f"lm-eval task file {spec!r} is not valid YAML: {first}") \
                from None
        if entry is None:
            raise WorkbenchError(
                f"{spec!r} is not an lm-eval task YAML (it has no 'task' key); expected a "
                "YAML with task, dataset_path, output_type, doc_to_text, doc_to_choice, "
                "doc_to_target"
            )
    if entry.kind in (Kind.GROUP, Kind.TAG):
        raise WorkbenchError(
            f"lm-eval's {entry.name!r} is a group of tasks; name one of them (e.g. "
            f"lm_eval:{entry.name}_<subtask>): a workbench task is one lm-eval task"
        )
    return entry


def _config(entry) -> dict:
    """The task's YAML, includes resolved, functions not imported (nothing is downloaded)."""
    from lm_eval.tasks._yaml_loader import load_yaml

    if entry.yaml_path is None:
        return dict(entry.cfg or {})
    return load_yaml(entry.yaml_path, resolve_func=False)


def check_lm_eval_name(spec: str) -> None:
    """Refuse, in one line and without downloading, an lm-eval task name lm-eval does not know
    (with the names it probably meant), a YAML that does not exist, a group, a task that is
    neither `multiple_choice` nor `generate_until`, or a `generate_until` task whose decoding,
    first filter or metric the workbench cannot reproduce."""
    require_lm_eval()
    spec = str(spec)
    entry = _entry(spec, _manager_for(spec))
    config = _config(entry)
    _check_output_type(entry.name, config.get("output_type"))
    if config.get("output_type") == "generate_until":
        from workbench.lm_eval.generate_until import generation_settings

        generation_settings(entry.name, config)


OUTPUT_TYPES = ("multiple_choice", "generate_until")


def _check_output_type(name: str, output_type) -> None:
    if output_type not in OUTPUT_TYPES:
        raise WorkbenchError(
            f"lm-eval task {name!r} has output_type {output_type!r}; the workbench scores "
            f"{' and '.join(OUTPUT_TYPES)} tasks"
        )


def _needs_download(config: dict) -> bool:
    path = config.get("dataset_path")
    return bool(path) and path not in LOCAL_BUILDERS and not Path(str(path)).is_dir()


def offline() -> bool:
    """Whether the hub cannot be reached: `HF_DATASETS_OFFLINE` or `HF_HUB_OFFLINE` set, or
    no connection to huggingface.co within 3 s."""
    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on"):
            return True
    try:
        socket.create_connection(("huggingface.co", 443), timeout=3).close()
    except OSError:
        return True
    return False


def build_lm_eval_task(spec: str):
    """lm-eval's own task object for `spec` (`lm_eval:<name>` or a YAML path), built by its
    `TaskManager`; a task whose data must be downloaded is built offline only from the cache,
    and refused in one line (naming the fix) when it is not there."""
    require_lm_eval()
    spec = str(spec)
    manager = _manager_for(spec)
    entry = _entry(spec, manager)
    config = _config(entry)
    _check_output_type(entry.name, config.get("output_type"))
    target = (spec[len(PREFIX):] if spec.startswith(PREFIX)
              else str(Path(spec).expanduser().resolve()))
    if _needs_download(config) and offline():
        import datasets

        saved = datasets.config.HF_HUB_OFFLINE
        datasets.config.HF_HUB_OFFLINE = True  # the cache, or an error now (never a hang)
        try:
            return _build(manager, target)
        except Exception:
            raise WorkbenchError(
                f"lm-eval task {entry.name!r} reads dataset {config.get('dataset_path')!r} from "
                f"the Hugging Face hub, which this machine cannot reach (offline); {LOCAL_FIX}"
            ) from None
        finally:
            datasets.config.HF_HUB_OFFLINE = saved
    try:
        return _build(manager, target)
    except _DataUnavailable as e:
        fix = LOCAL_FIX if _needs_download(config) else (
            "check its data_files (datasets reads relative paths from the working directory)")
        raise WorkbenchError(
            f"lm-eval task {entry.name!r} could not read dataset {config.get('dataset_path')!r} "
            f"({e}); {fix}"
        ) from None


class _DataUnavailable(Exception):
    """The task's data could not be read (no network, no such dataset, a missing file)."""


def _build(manager, target: str):
    """lm-eval's task object; what lm-eval raises while it reads the data and tries the first
    document (a bad template, a target out of range) becomes one line."""
    from datasets.exceptions import DatasetNotFoundError

    try:
        tasks = manager.load([target])["tasks"]
    except (ConnectionError, DatasetNotFoundError, OSError) as e:
        text = str(e).strip().splitlines()
        raise _DataUnavailable(  # the caller names the fix
            type(e).__name__ + (f": {text[0][:200]}" if text else "")) from None
    except Exception as e:
        text = str(e).strip().splitlines()
        raise WorkbenchError(
            f"lm-eval could not build task {target!r}: {type(e).__name__}"
            + (f": {text[0]}" if text else "")
        ) from None
    return next(iter(tasks.values()))


def lm_eval_records(
    spec: str, num_fewshot: int | None = None, metric: str | None = None,
    fewshot_seed: int = FEWSHOT_SEED, filter: str | None = None,
) -> tuple[dict, list[dict]]:
    """An lm-eval multiple-choice or generate_until task as a workbench task's
    `(header, records)`.

    Args:
        spec: `lm_eval:<registered name>` or the path of a task YAML.
        num_fewshot: few-shot examples per prompt; None: the task's own (0 when it sets none).
            As in lm-eval, a task whose YAML sets 0 keeps 0.
        metric: multiple choice: `"acc"` or `"acc_norm"`; None: `acc_norm` when the task lists
            it, else `acc`. generate_until: `"exact_match"` (None) or `"logprob"`.
        fewshot_seed: seeds lm-eval's few-shot sampler (its `simple_evaluate` default).
        filter: generate_until only: the name of the filter pipeline whose extractor the task
            uses (gsm8k: `"strict-match"` or `"flexible-extract"`); None: the first listed.

    Returns:
        `(header, records)`: `Task.from_records(records, name=header.pop("name"), **header)`
        makes the workbench task (multiple choice: `id`, `prompt`, `choices`, `gold`, `meta`;
        generation: `id`, `prompt`, `target`, `meta`, and the header's `generation`).
    """
    task = build_lm_eval_task(spec)
    return task_records(task, str(spec), num_fewshot, metric, fewshot_seed, filter)


def task_records(
    task, source: str, num_fewshot: int | None = None, metric: str | None = None,
    fewshot_seed: int = FEWSHOT_SEED, filter: str | None = None,
) -> tuple[dict, list[dict]]:
    """`lm_eval_records` for an lm-eval task object already built."""
    name = task.task_name
    _check_output_type(name, task.OUTPUT_TYPE)
    if task.OUTPUT_TYPE == "generate_until":
        from workbench.lm_eval.generate_until import generation_records

        return generation_records(task, source, _fewshot(task, num_fewshot), fewshot_seed,
                                  metric, filter)
    if filter is not None:
        raise WorkbenchError(f"filter= applies to generate_until tasks; lm-eval task {name!r} "
                             "is multiple_choice")
    if task.multiple_input:
        raise WorkbenchError(
            f"lm-eval task {name!r} puts its choices in the context (one context per choice, "
            "as winogrande); the workbench scores one context with several continuations"
        )
    if task.multiple_target:
        raise WorkbenchError(f"lm-eval task {name!r} has several gold choices per document; "
                             "the workbench needs one")
    shots = _fewshot(task, num_fewshot)
    metric = _metric(task, metric)
    task.set_fewshot_seed(seed=fewshot_seed)
    delimiter = task.config.target_delimiter
    records, tails = [], set()
    for doc_id, doc in task.doc_iterator():
        context = task.fewshot_context(doc, num_fewshot=shots, gen_prefix=task.doc_to_prefix(doc))
        prompt = context.rstrip()
        if not prompt:
            raise WorkbenchError(f"lm-eval task {name!r} document {doc_id}: the context is empty")
        tails.add(context[len(prompt):])
        choices = [str(c) for c in task.doc_to_choice(doc)]
        records.append({
            "id": f"{name}-{doc_id:04d}", "prompt": prompt, "choices": choices,
            "gold": _gold(name, doc_id, task.doc_to_target(doc), choices),
            "meta": {"doc_id": doc_id},
        })
    if len(tails) > 1:
        raise WorkbenchError(
            f"lm-eval task {name!r}: its contexts end in different whitespace "
            f"({sorted(map(repr, tails))}); the workbench needs one target delimiter per task"
        )
    header = {
        "name": name, "metric": metric, "target_delimiter": tails.pop() + delimiter,
        "description": f"lm-eval task {name}, {shots}-shot, scored by {metric}",
        "source": source,
        "meta": {"lm_eval": {
            "task": name, "spec": source, "lm_eval_version": _version(),
            "num_fewshot": shots,
            "fewshot_seed": fewshot_seed, "metrics": sorted(task._metric_fn_list),
            "task_version": task.VERSION,
        }},
    }
    return header, records


def _fewshot(task, num_fewshot: int | None) -> int:
    """`simple_evaluate`'s rule: an explicit count overrides the task's, unless the task's is
    0; no count: the task's, else 0."""
    own = task.get_config("num_fewshot")
    if num_fewshot is not None and own != 0:
        return int(num_fewshot)
    return int(own or 0)


def _metric(task, metric: str | None) -> str:
    listed = list(task._metric_fn_list)
    if metric is None:
        for candidate in ("acc_norm", "acc"):
            if candidate in listed:
                return candidate
        raise WorkbenchError(
            f"lm-eval task {task.task_name!r} lists metrics {listed}; the workbench scores "
            "multiple choice by acc or acc_norm (pass metric='acc' to use it anyway)"
        )
    if metric not in ("acc", "acc_norm"):
        raise WorkbenchError(f"metric for an lm-eval task must be 'acc' or 'acc_norm'; got "
                             f"{metric!r}")
    return metric


def _gold(name: str, doc_id: int, target, choices: list[str]) -> int:
    """lm-eval's `doc_to_target` as an index into the choices (it may be one, or the text)."""
    if isinstance(target, int) and not isinstance(target, bool):
        if 0 <= target < len(choices):
            return target
    elif isinstance(target, str) and target in choices:
        return choices.index(target)
    raise WorkbenchError(
        f"lm-eval task {name!r} document {doc_id}: target {target!r} is not a choice among "
        f"{len(choices)} ({choices[:4]}...)"
    )


def _version() -> str:
    from importlib.metadata import version

    return version("lm_eval")
