"""Shipped task names resolve to their files, the benchmark-format tasks of `tasks/benchmarks/`
as the probe tasks of `tasks/` do, for `load_task`, `--task` and `--others`, without the
default sweep picking the benchmark tasks up."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.errors import WorkbenchError
from workbench.tasks import load_task
from workbench.tasks.names import (
    benchmark_task_names,
    check_task_name,
    hub_task_names,
    task_file,
    task_names,
)

ROOT = Path(__file__).resolve().parents[2] / "tasks"


def test_benchmark_tasks_resolve_by_name_to_their_files():
    assert benchmark_task_names() == ["gen_arith", "gen_facts", "mc_facts_letters",
                                      "mc_facts_text"]
    for name in benchmark_task_names():
        assert task_file(name) == ROOT / "benchmarks" / f"{name}.jsonl"
        check_task_name(name)  # --task and --others accept the name
        assert name in task_names()
    assert task_file("ioi") == ROOT / "ioi.jsonl"
    assert task_file("benchmarks/mc_facts_text") is None and task_file("") is None
    assert task_file("mc_facts_nothing") is None


def test_load_task_by_name_equals_load_task_by_path():
    by_name = load_task("mc_facts_text")
    by_path = load_task(ROOT / "benchmarks" / "mc_facts_text.jsonl")
    assert by_name.name == by_path.name == "mc_facts_text"
    assert by_name.metric == "acc_norm" and by_name.is_multiple_choice
    assert by_name.examples == by_path.examples
    assert len(by_name.examples) == 168


def test_no_name_is_in_both_folders_and_the_sweep_keeps_to_the_probe_tasks():
    top = {p.stem for p in ROOT.glob("*.jsonl")}
    bench = {p.stem for p in (ROOT / "benchmarks").glob("*.jsonl")}
    assert bench and not top & bench
    assert sorted(top | bench) == task_names()
    assert not set(hub_task_names()) & bench


def test_an_unknown_name_lists_the_benchmark_tasks_too():
    with pytest.raises(WorkbenchError, match="mc_facts_txt.*did you mean 'mc_facts_text'"):
        check_task_name("mc_facts_txt")
    with pytest.raises(WorkbenchError, match="mc_facts_text"):
        load_task("mc_facts_txt")
