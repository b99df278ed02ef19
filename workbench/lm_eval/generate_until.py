"""lm-eval `generate_until` tasks as workbench generation tasks.

lm-eval scores a `generate_until` task (gsm8k, triviaqa) by sending each document's context
with the task's `generation_kwargs` to the model, passing the generated text through one of
the task's filter pipelines (`filter_list`: gsm8k's `strict-match` and `flexible-extract`, a
`regex` filter then `take_first`) and comparing the result with `doc_to_target` by
`exact_match` under the metric's options. `generation_records` turns such a task into the
records and header of a workbench generation task (tasks/README.md):

- each record: `prompt` lm-eval's context for the document (description and few-shot examples
  included, drawn by lm-eval's sampler under the seed `simple_evaluate` uses), `target` its
  `doc_to_target` as text;
- the header's `generation`: `until` (lm-eval's, empty strings dropped: lm-eval skips them),
  `max_new_tokens` (`max_gen_toks` or an alias lm-eval accepts, else lm-eval's default 256),
  the extractor of one filter pipeline, and the `exact_match` metric's `ignore_case`,
  `ignore_punctuation` and `regexes_to_ignore`.

The filter pipeline: `filter=` names one of the task's; by default the first it lists (gsm8k:
`strict-match`). A pipeline the workbench reproduces is a `regex` step (becoming the
extractor: gsm8k's two patterns by their names, any other as `{"regex", "group_select",
"fallback"}`) or none (the whole text, `none`), with `take_first` steps anywhere and
`remove_whitespace` steps after the regex (both change nothing the workbench compares). A
task with no `filter_list` is lm-eval's `none` pipeline. Sampling (`do_sample: true` or a
temperature above 0), any other generation option, any other filter, and a task without
`exact_match` are refused in one line each, before any model loads.
"""

from __future__ import annotations

import re

from workbench.errors import WorkbenchError

# lm-eval's `DEFAULT_MAX_GEN_TOKS` (its `default_gen_kwargs` and HFLM's `max_gen_toks`)
DEFAULT_MAX_GEN_TOKS = 256
# lm-eval's aliases of the generation budget, in its order of priority (`normalize_gen_kwargs`)
BUDGET_KEYS = ("max_gen_toks", "max_new_tokens", "max_tokens", "max_completion_tokens")
# options that do nothing under greedy decoding
GREEDY_NOOPS = ("do_sample", "temperature", "top_p", "top_k")
# lm-eval gsm8k's two regex filters, under the names the workbench gives them
NAMED_REGEX = {
    "strict-match": (r"#### (\-?[0-9\.\,]+)", 0),
    "flexible-extract": (r"(-?[$0-9.,]{2,})|(-?[0-9]+)", -1),
}
REGEX_DEFAULTS = {"regex_pattern": r"#### (\-?[0-9\.\,]+)", "group_select": 0,
                  "fallback": "[invalid]"}  # lm-eval's RegexFilter defaults
EXACT_MATCH_OPTIONS = ("ignore_case", "ignore_punctuation", "regexes_to_ignore")
REPRODUCED = ("regex", "take_first", "remove_whitespace")


def generation_settings(name: str, config: dict, filter_name: str | None = None) -> dict:
    """The header's `generation` for an lm-eval generate_until task's config (its YAML, or
    the built task's `config` as a dict): `until`, `max_new_tokens`, `extractor` and the
    exact_match options; a setting the workbench cannot reproduce is one error line.

    Args:
        name: the task's name, for messages.
        config: `generation_kwargs`, `filter_list`, `metric_list`, `fewshot_delimiter`.
        filter_name: the filter pipeline to reproduce; None: the first listed.
    """
    kwargs = config.get("generation_kwargs")
    if kwargs is None:  # lm-eval's default: greedy, until the few-shot delimiter
        kwargs = {"until": [config.get("fewshot_delimiter", "\n\n")]}
    settings = _decoding(name, dict(kwargs), config.get("fewshot_delimiter", "\n\n"))
    settings["extractor"] = _extractor(name, config.get("filter_list"), filter_name)
    settings.update(_exact_match_options(name, config.get("metric_list")))
    return settings


def _decoding(name: str, kwargs: dict, fewshot_delimiter: str) -> dict:
    if kwargs.get("do_sample") or float(kwargs.get("temperature") or 0.0) > 0.0:
        raise WorkbenchError(
            f"lm-eval task {name!r} samples (generation_kwargs do_sample "
            f"{kwargs.get('do_sample')!r}, temperature {kwargs.get('temperature')!r}); the "
            "workbench decodes greedily: set do_sample: false and temperature: 0"
        )
    other = sorted(set(kwargs) - {"until", *BUDGET_KEYS, *GREEDY_NOOPS})
    if other:
        raise WorkbenchError(
            f"lm-eval task {name!r} sets generation_kwargs {other}, which the workbench's "
            f"greedy decoding cannot reproduce; it takes until, {', '.join(BUDGET_KEYS)}, "
            f"and {', '.join(GREEDY_NOOPS)} (greedy)"
        )
    until = kwargs.get("until", [fewshot_delimiter])
    until = [until] if isinstance(until, str) else list(until)
    if not all(isinstance(u, str) for u in until):
        raise WorkbenchError(f"lm-eval task {name!r}: generation_kwargs until must be strings; "
                             f"got {until!r}")
    budget = next((kwargs[k] for k in BUDGET_KEYS if kwargs.get(k) is not None),
                  DEFAULT_MAX_GEN_TOKS)
    if type(budget) is not int or budget < 1:
        raise WorkbenchError(f"lm-eval task {name!r}: max_gen_toks must be an integer >= 1; "
                             f"got {budget!r}")
    return {"max_new_tokens": budget, "until": [u for u in until if u]}


def _extractor(name: str, filter_list, filter_name: str | None):
    """The extractor of the chosen filter pipeline (module docstring)."""
    if not filter_list:
        if filter_name not in (None, "none"):
            raise WorkbenchError(f"lm-eval task {name!r} has no filter {filter_name!r}; it has "
                                 "only lm-eval's default pipeline 'none'")
        return "none"
    names = [f.get("name") for f in filter_list]
    if filter_name is None:
        chosen = filter_list[0]
    elif filter_name in names:
        chosen = filter_list[names.index(filter_name)]
    else:
        raise WorkbenchError(f"lm-eval task {name!r} has no filter {filter_name!r}; its "
                             f"filters: {names}")
    extractor, steps = "none", chosen.get("filter") or []
    for i, step in enumerate(steps):
        function = step.get("function")
        if function not in REPRODUCED:
            raise WorkbenchError(
                f"lm-eval task {name!r} filter {chosen.get('name')!r} uses lm-eval's "
                f"{function!r} filter, which the workbench cannot reproduce; it reproduces "
                f"{list(REPRODUCED)} (choose another of {names} with filter=)"
            )
        if function == "regex":
            if extractor != "none":
                raise WorkbenchError(f"lm-eval task {name!r} filter {chosen.get('name')!r} "
                                     "has two regex steps; the workbench reproduces one")
            extractor = _regex_extractor(name, step)
        elif function == "remove_whitespace" and any(
                later.get("function") == "regex" for later in steps[i + 1:]):
            raise WorkbenchError(
                f"lm-eval task {name!r} filter {chosen.get('name')!r} strips whitespace before "
                "its regex; the workbench reproduces remove_whitespace only after it"
            )
    return extractor


def _regex_extractor(name: str, step: dict):
    args = {**REGEX_DEFAULTS, **{k: v for k, v in step.items() if k != "function"}}
    unknown = sorted(set(args) - set(REGEX_DEFAULTS))
    if unknown:
        raise WorkbenchError(f"lm-eval task {name!r}: regex filter options {unknown} are not "
                             f"lm-eval's RegexFilter's ({list(REGEX_DEFAULTS)})")
    pattern, group, fallback = args["regex_pattern"], args["group_select"], args["fallback"]
    try:
        re.compile(pattern)
    except (re.error, TypeError) as e:
        raise WorkbenchError(f"lm-eval task {name!r}: regex filter pattern {pattern!r} does "
                             f"not compile ({e})") from None
    for named, (named_pattern, named_group) in NAMED_REGEX.items():
        if (pattern, group, fallback) == (named_pattern, named_group, "[invalid]"):
            return named
    return {"regex": pattern, "group_select": group, "fallback": fallback}


def _exact_match_options(name: str, metric_list) -> dict:
    """The `exact_match` metric's options as the header's; refused without exact_match."""
    entries = [m for m in (metric_list or []) if m.get("metric") == "exact_match"]
    if not entries:
        listed = [m.get("metric") for m in (metric_list or [])]
        raise WorkbenchError(f"lm-eval task {name!r} lists metrics {listed}; the workbench "
                             "scores a generate_until task by exact_match")
    entry = entries[0]
    if entry.get("ignore_numbers"):
        raise WorkbenchError(f"lm-eval task {name!r}: exact_match ignore_numbers is not among "
                             f"the options the workbench reproduces {list(EXACT_MATCH_OPTIONS)}")
    options = {}
    for key in EXACT_MATCH_OPTIONS:
        if key in entry and entry[key] is not None:
            value = entry[key]
            options[key] = list(value) if key == "regexes_to_ignore" else bool(value)
    return options


def generation_records(
    task, source: str, shots: int, fewshot_seed: int, metric: str | None = None,
    filter_name: str | None = None,
) -> tuple[dict, list[dict]]:
    """A built lm-eval generate_until task as a workbench generation task's
    `(header, records)` (module docstring); `shots` is the few-shot count to use."""
    from importlib.metadata import version

    name = task.task_name
    if metric not in (None, "exact_match", "logprob"):
        raise WorkbenchError(f"metric for an lm-eval generate_until task must be 'exact_match' "
                             f"or 'logprob'; got {metric!r}")
    config = {
        "generation_kwargs": task.config.generation_kwargs,
        "filter_list": task.config.filter_list,
        "metric_list": task.config.metric_list,
        "fewshot_delimiter": task.config.fewshot_delimiter,
    }
    generation = generation_settings(name, config, filter_name)
    task.set_fewshot_seed(seed=fewshot_seed)
    records = []
    for doc_id, doc in task.doc_iterator():
        context = task.fewshot_context(doc, num_fewshot=shots, gen_prefix=task.doc_to_prefix(doc))
        if not context.strip():
            raise WorkbenchError(f"lm-eval task {name!r} document {doc_id}: the context is empty")
        if context != context.rstrip():
            raise WorkbenchError(
                f"lm-eval task {name!r} document {doc_id}: its context ends in whitespace "
                f"({context[len(context.rstrip()):]!r}); the workbench generates from a prompt "
                "that does not (end doc_to_text without a space, as gsm8k's 'Answer:')"
            )
        records.append({"id": f"{name}-{doc_id:04d}", "prompt": context,
                        "target": _target(name, doc_id, task.doc_to_target(doc)),
                        "meta": {"doc_id": doc_id}})
    filters = [f.get("name") for f in task.config.filter_list or []] or ["none"]
    chosen = filter_name or filters[0]
    header = {
        "name": name, "metric": metric or "exact_match",
        "target_delimiter": task.config.target_delimiter, "generation": generation,
        "description": f"lm-eval task {name}, {shots}-shot, generated greedily and scored by "
                       f"exact_match after its filter {chosen!r}",
        "source": source,
        "meta": {"lm_eval": {
            "task": name, "spec": source, "lm_eval_version": version("lm_eval"),
            "num_fewshot": shots, "fewshot_seed": fewshot_seed, "filter": chosen,
            "filters": filters, "metrics": sorted(task._metric_fn_list),
            "task_version": task.VERSION,
        }},
    }
    return header, records


def _target(name: str, doc_id: int, target) -> str:
    """`doc_to_target` as the text exact_match compares with (an int is written out)."""
    if isinstance(target, bool) or not isinstance(target, (str, int)):
        raise WorkbenchError(
            f"lm-eval task {name!r} document {doc_id}: target {target!r} is not one text; the "
            "workbench compares each generation with one target"
        )
    if not str(target).strip():
        raise WorkbenchError(f"lm-eval task {name!r} document {doc_id}: the target is empty")
    return str(target)
