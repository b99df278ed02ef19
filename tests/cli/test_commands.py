"""The subcommands' bodies (`workbench.cli.commands`) end to end on the micro model, in
temporary folders: `cel` (and with no arguments, the demo or the embedded model), `explain`,
the console script, threads and `--quiet` reaching the loader, the best-set line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import workbench.cli.commands as commands
import workbench.cli.parser as cli
from workbench.config import resolve_threads
from workbench.errors import WorkbenchError
from workbench.loading.shipped import CACHE_ENV
from workbench.results.cost import STAGES
from workbench.results.headline import best_line
from workbench.results.result import CELResult

FAST = ["--n-random", "20", "--n-boot", "100", "--quiet"]


def test_cel_end_to_end(demo_files, tmp_path, capsys):
    model_dir, main, side = demo_files
    out = tmp_path / "out"
    argv = [
        "cel",
        "--model",
        str(model_dir),
        "--task",
        str(main),
        "--others",
        str(side),
        "--out",
        str(out),
        "--device",
        "cpu",
        *FAST,
    ]
    started = time.perf_counter()
    assert cli.main(argv) == 0
    elapsed = time.perf_counter() - started
    printed = capsys.readouterr().out
    assert "best set: L0H1,L0H3,L1H1" in printed
    # what the run cost, in forward-times: every stage, adding up to the command's wall time
    cost = json.loads((out / "config.json").read_text())["cost"]
    stages = cost["stages"]
    assert set(stages) == set(STAGES)
    assert sum(s["seconds"] for s in stages.values()) == pytest.approx(cost["seconds"], abs=0.01)
    assert sum(s["share"] for s in stages.values()) == pytest.approx(1.0, abs=1e-3)
    assert cost["forward_times"] == pytest.approx(cost["seconds"] / cost["forward_s"], rel=1e-3)
    # measured at the start (the estimate's) and at the end; the faster is the unit
    assert len(cost["forwards_s"]) == 2 and cost["forward_s"] == min(cost["forwards_s"])
    assert cost["seconds"] <= elapsed
    assert stages["report"]["seconds"] > 0  # no stage counted twice (the rest is left over)
    assert f"cost: {cost['forward_times']:.1f} forward-times" in printed
    assert "micro_short" in printed
    result = CELResult.load(out)
    assert result.best == ["L0H1", "L0H3", "L1H1"]
    assert result.config.others == ("micro_short",)
    assert (out / "report.md").is_file() and (out / "side_effects.png").is_file()
    report = (out / "report.md").read_text()
    assert report.startswith("# CEL: micro_map on ")
    assert "\nzero ablation, exact screening" in report
    assert "AblationKind" not in report
    assert "## What the best set's heads do (heldout split" in report
    assert (out / "explanation.png").is_file()
    # a second run resumes from the folder, and prints the splits in the same order
    assert cli.main(argv) == 0
    again = capsys.readouterr().out
    assert "resuming from" in again
    (line,) = [x for x in again.splitlines() if x.startswith("clean ")]
    (first,) = [x for x in printed.splitlines() if x.startswith("clean ")]
    assert line == first and line.index("select") < line.index("heldout")
    # different options on the same folder: a clear error naming --overwrite, unless given
    assert cli.main([*argv, "--max-size", "2"]) == 2
    err = capsys.readouterr().err
    assert "different config" in err and "--overwrite" in err
    assert cli.main([*argv, "--max-size", "2", "--overwrite"]) == 0
    assert CELResult.load(out).config.max_size == 2


def test_no_arguments_runs_the_demo_when_the_embedded_model_is_missing(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(commands, "embedded_defaults", lambda: None)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["workbench", *FAST])
    assert cli.main() == 0
    printed = capsys.readouterr().out
    assert "built-in demo" in printed
    assert "best set: L0H1,L0H3,L1H1" in printed
    assert (tmp_path / "cel_results" / "config.json").is_file()
    assert CELResult.load(tmp_path / "cel_results").config.model == "demo"


def test_no_arguments_runs_the_embedded_model_and_its_tasks(
    demo_files, tmp_path, monkeypatch, capsys
):
    import workbench.zoo as zoo

    model_dir, main, side = demo_files
    import workbench.loading.shipped as shipped

    monkeypatch.setattr(shipped, "EMBEDDED_PATH", model_dir)  # where loading reads it
    monkeypatch.setattr(zoo, "EMBEDDED_PATH", model_dir)
    monkeypatch.setattr(zoo, "DEFAULT_TASK", str(main))
    monkeypatch.setattr(zoo, "SIDE_TASKS", [str(side)])
    monkeypatch.chdir(tmp_path)
    assert cli.main(FAST) == 0
    printed = capsys.readouterr().out
    assert "built-in demo" not in printed and "model embedded" in printed
    result = CELResult.load(tmp_path / "cel_results")
    assert (result.config.model, result.config.task) == ("embedded", "micro_map")
    assert result.config.others == ("micro_short",)


@pytest.mark.slow
def test_console_script(demo_files, tmp_path):
    """The installed `workbench` entry point, in a subprocess."""
    exe = Path(sys.executable).with_name("workbench")
    if not exe.is_file():
        pytest.skip("the workbench console script is not installed next to this Python")
    model_dir, main, _ = demo_files
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [
            str(exe),
            "cel",
            "--model",
            str(model_dir),
            "--task",
            str(main),
            "--out",
            str(tmp_path / "o"),
            *FAST,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "best set: L0H1,L0H3,L1H1" in proc.stdout


def test_compute_flags_reach_run_cel():
    """`--threads` and `--token-budget` reach run_cel's Compute; without them the token
    budget is the device's and the threads are the default, auto."""
    from workbench.compute import Compute
    from workbench.config import DEFAULT_THREADS

    args = cli.build_parser("cel").parse_args(["cel", "--threads", "2", "--token-budget", "64"])
    options = commands.run_options(args)
    assert (options["threads"], options["token_budget"]) == (2, 64)
    options = commands.run_options(cli.build_parser("sweep").parse_args(["sweep"]))
    assert options["threads"] == DEFAULT_THREADS == Compute().threads == "auto"
    assert "token_budget" not in options


@pytest.mark.parametrize("wide", [True, False])
def test_search_dtype_auto_says_what_it_chose_and_a_resumed_run_keeps_it(wide, demo_files,
                                                                         tmp_path, capsys,
                                                                         monkeypatch):
    """`--search-dtype auto` on a CPU with AVX-512 BF16 (stood in for): bfloat16 when the model
    is at least `AUTO_MIN_D_MODEL` wide (lowered here to the demo model's width), said in one
    line and recorded in the config; float32 otherwise, silently, writing what a float32 run
    writes. Resumed under auto on a CPU without it, the run keeps the folder's choice."""
    import workbench.precision

    model_dir, main, _ = demo_files
    monkeypatch.setattr(workbench.precision, "cpu_flags", lambda *a: {"avx512_bf16"})
    if wide:
        monkeypatch.setattr(workbench.precision, "AUTO_MIN_D_MODEL", 1)
    out = tmp_path / "out"
    argv = ["cel", "--model", str(model_dir), "--task", str(main), "--out", str(out),
            "--device", "cpu", "--no-explain", "--search-dtype", "auto", *FAST]
    assert cli.main(argv) == 0
    said = [x for x in capsys.readouterr().out.splitlines() if x.startswith("search: ")]
    want = "bfloat16" if wide else "float32"
    assert CELResult.load(out).config.search_dtype == want
    if wide:
        assert len(said) == 1 and "this CPU has avx512_bf16" in said[0]
    else:
        assert said == [] and "search_dtype" not in json.loads(
            (out / "config.json").read_text())["config"]
    monkeypatch.setattr(workbench.precision, "cpu_flags", lambda *a: set())
    assert cli.main(argv) == 0  # resumed: nothing to compute, the folder's choice kept
    assert "resuming from" in capsys.readouterr().out
    assert CELResult.load(out).config.search_dtype == want


@pytest.mark.parametrize("fast", [True, False])
def test_a_bf16_search_runs_and_says_once_where_it_will_be_slow(fast, demo_files, tmp_path,
                                                               capsys, monkeypatch):
    """`--search-dtype bfloat16` reaches the config; on a device without fast bfloat16 (the
    CPU's flags, `workbench.precision.fast_bf16`, stood in for) the run goes on and says so in
    one line, once; the found sets are the float32 run's."""
    import workbench.precision

    monkeypatch.setattr(workbench.precision, "fast_bf16", lambda device, flags=None: fast)
    model_dir, main, _ = demo_files
    out = tmp_path / "out"
    argv = ["cel", "--model", str(model_dir), "--task", str(main), "--out", str(out),
            "--device", "cpu", "--no-explain", "--search-dtype", "bfloat16", *FAST]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    notes = [x for x in (captured.out + captured.err).splitlines() if "bfloat16" in x]
    if fast:
        assert notes == []
    else:
        assert notes == ["note: --search-dtype bfloat16: this CPU has neither AVX-512 BF16 nor "
                         "AMX (no avx512_bf16 or amx_bf16 in /proc/cpuinfo), so bfloat16 "
                         "matmuls are emulated and screening and the search's knockouts "
                         "will be slower than in float32; the results are as valid"]
    result = CELResult.load(out)
    assert result.config.search_dtype == "bfloat16" and result.best == ["L0H1", "L0H3", "L1H1"]
    report = (out / "report.md").read_text()
    assert "Screening and the search's knockouts ran on a bfloat16 copy" in report
    assert commands.run_options(cli.build_parser("cel").parse_args(
        ["cel", "--search-dtype", "bfloat16"]))["search_dtype"] == "bfloat16"


def test_racing_auto_is_measured_once_and_a_rerun_keeps_the_folders_choice(
        demo_files, tmp_path, capsys, monkeypatch):
    """`--racing auto` (the default) takes `workbench.racing.auto_racing`'s decision (a GPU's
    measurement, stood in for here) into the config and prints its line; a rerun resumes
    with the folder's choice without measuring; `--racing on` / `off` set it outright."""
    import workbench.racing

    monkeypatch.setattr(workbench.racing, "auto_racing",
                        lambda scorer, distributed=False: (False, "racing off: stand-in"))
    model_dir, main, _ = demo_files
    out = tmp_path / "out"
    argv = ["cel", "--model", str(model_dir), "--task", str(main), "--out", str(out),
            "--device", "cpu", "--no-explain", *FAST]
    assert cli.main(argv) == 0
    assert "racing off: stand-in" in capsys.readouterr().out.splitlines()
    assert CELResult.load(out).config.adaptive is False
    monkeypatch.setattr(workbench.racing, "auto_racing",
                        lambda scorer, distributed=False: (True, "racing on: measured again"))
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "resuming from" in printed and "measured again" not in printed
    assert cli.main([*argv, "--racing", "on"]) == 2  # another config than the folder's
    assert "different config" in capsys.readouterr().err
    for flag, adaptive in (("on", True), ("off", False)):
        args = cli.build_parser("cel").parse_args(["cel", "--racing", flag])
        assert commands.run_options(args)["adaptive"] is adaptive
    assert "adaptive" not in commands.run_options(cli.build_parser("cel").parse_args(["cel"]))


class _Stop(WorkbenchError):
    """Raised by a stand-in for the model loader: the test has seen what it needs."""


@pytest.fixture
def calls(monkeypatch):
    """What torch.set_num_threads and the model loader were called with, in order; loading
    stops the command (exit 2)."""
    import torch

    import workbench.loading.model
    import workbench.sweep

    seen = []

    def stop(*args, **kwargs):
        seen.append("load")
        raise _Stop("stopped before loading")

    monkeypatch.setattr(torch, "set_num_threads", lambda n: seen.append(("threads", n)))
    monkeypatch.setattr(workbench.loading.model, "load_model", stop)
    monkeypatch.setattr(workbench.sweep, "run_sweep", stop)
    return seen


@pytest.mark.parametrize("command", ["cel", "sweep"])
def test_threads_reach_torch_before_the_model_loads(command, demo_files, tmp_path, calls):
    model_dir, main, _ = demo_files
    models = ["--model", str(model_dir), "--task"] if command == "cel" else \
        ["--models", str(model_dir), "--tasks"]
    argv = [command, *models, str(main), "--out", str(tmp_path / "o"), "--quiet"]
    assert cli.main([*argv, "--threads", "3"]) == 2
    assert calls == [("threads", 3), "load"]
    calls.clear()
    assert cli.main(argv) == 2  # no --threads: the default, auto
    assert calls == [("threads", resolve_threads("auto")), "load"]


@pytest.mark.parametrize("quiet", [True, False])
def test_quiet_silences_every_bar_while_the_model_loads(quiet, demo_files, tmp_path,
                                                        monkeypatch):
    """`--quiet` reaches the bars that loading shows without a switch (the GGUF conversion's
    and transformers' are bare tqdm bars): one made inside the loader is disabled, and bars
    made after the command are not. (At a terminal: in a log no loading bar shows.)"""
    from tqdm.auto import tqdm

    import workbench.loading.model
    import workbench.progress

    monkeypatch.setattr(workbench.progress, "plain", lambda *a: False)

    seen = []

    def loader(*args, **kwargs):
        with tqdm(total=3, desc="converting (stand-in)", file=sys.stderr) as bar:
            seen.append(bar.disable)
        raise _Stop("stopped after the bar")

    monkeypatch.setattr(workbench.loading.model, "load_model", loader)
    model_dir, main, _ = demo_files
    argv = ["cel", "--model", str(model_dir), "--task", str(main), "--out", str(tmp_path / "o")]
    assert cli.main([*argv, "--quiet"] if quiet else argv) == 2
    assert seen == [quiet]
    with tqdm(total=1, file=sys.stderr) as after:
        assert after.disable is False


def _confirmation(p_holm):
    return pd.DataFrame({"size": [1, 2, 3], "heads": ["L0H3", "L0H1,L1H1", "L0H1,L0H3,L1H1"],
                         "best": [False, False, True], "select_d_accuracy": [0.2, 0.1, 0.3],
                         "d_accuracy": [0.2, 0.1, 0.3], "p_holm": p_holm})


@pytest.mark.parametrize(
    "p_holm,best,line",
    [
        ([0.01, 0.01, 0.01], ["L0H1", "L0H3", "L1H1"], "best set: L0H1,L0H3,L1H1  ("),
        ([0.01, 0.5, 0.5], ["L0H3"], "best set: L0H3  ("),
        ([0.5, 0.01, 0.2], ["L0H1", "L1H1"], "best set: L0H1,L1H1  ("),
        ([1.0, 1.0, 1.0], [], "best set: none: no significant enhancement (p_holm >= 0.05 at "
         "every size); top candidate: L0H1,L0H3,L1H1 ("),
    ],
)
def test_best_is_only_a_significant_set(p_holm, best, line):
    """`best` is the top candidate when significant, else the significant set with the
    largest selection gain, else none, and the CLI and the report say which."""
    from workbench.config import CELConfig
    from workbench.results.result import mark_best

    result = CELResult(config=CELConfig(model="m", task="t", objective="accuracy"),
                       confirmation=_confirmation(p_holm))
    assert result.best == best
    assert result.top_candidate == ["L0H1", "L0H3", "L1H1"]
    assert best_line(result).startswith(line)
    marked = mark_best(result.confirmation, "accuracy", 0.05)
    assert marked["best"].sum() == (1 if best else 0)
    assert list(marked["top_candidate"]) == [False, False, True]
    assert mark_best(marked, "accuracy", 0.05).equals(marked)  # idempotent
    report = result.report(plots=False)
    if best:
        assert f"**Best set:** {','.join(best)}: its held-out gain is significant" in report
    else:
        assert "no significant enhancement. The top candidate on the selection split is " \
            "L0H1,L0H3,L1H1" in report


def test_a_run_on_a_sample_is_explained_on_that_sample(demo_files, tmp_path, capsys):
    """`--max-examples`: the run records the sample's fingerprint and `cel` and `explain`
    explain the sample's held-out examples."""
    model_dir, main, _ = demo_files
    out = tmp_path / "out"
    argv = ["cel", "--model", str(model_dir), "--task", str(main), "--out", str(out),
            "--device", "cpu", "--max-examples", "10", *FAST]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "10 selection / 10 held-out examples" in printed
    first = json.loads((out / "explanation" / "config.json").read_text())
    assert first["n_examples"] == 10
    assert cli.main(["explain", "--out", str(out), "--task", str(main), "--device", "cpu"]) == 0
    assert json.loads((out / "explanation" / "config.json").read_text()) == first


def test_explain_command_redoes_the_explanation(demo_files, tmp_path, capsys, monkeypatch):
    """`workbench explain DIR` reloads the task file the folder's config.json records (no
    --task); a recorded file that is gone, or a folder that records none and a task name not
    in tasks/, is one line saying what to pass."""
    model_dir, main, side = demo_files
    task_file = tmp_path / "my_task.jsonl"
    shutil.copyfile(main, task_file)
    out = tmp_path / "out"
    argv = ["cel", "--model", str(model_dir), "--task", str(task_file), "--out", str(out),
            "--device", "cpu", "--no-explain", *FAST]
    assert cli.main(argv) == 0
    assert not (out / "explanation").exists()
    assert "What the best set" not in (out / "report.md").read_text()
    summary = json.loads((out / "config.json").read_text())["summary"]
    assert summary["task_file"] == str(task_file.resolve())
    assert summary["side_task_files"] == {}
    capsys.readouterr()
    # another task than the run's is refused by its fingerprint
    assert cli.main(["explain", str(out), "--task", str(side), "--device", "cpu"]) == 2
    assert "not the task" in capsys.readouterr().err
    # the folder given twice, differently
    assert cli.main(["explain", str(out), "--out", str(tmp_path), "--device", "cpu"]) == 2
    assert "differ" in capsys.readouterr().err
    # --threads reaches torch before the model loads
    import torch

    import workbench.loading.model

    seen, load = [], workbench.loading.model.load_model
    monkeypatch.setattr(torch, "set_num_threads", lambda n: seen.append(("threads", n)))
    monkeypatch.setattr(workbench.loading.model, "load_model",
                        lambda *a, **k: (seen.append("load"), load(*a, **k))[1])
    assert cli.main(["explain", str(out), "--device", "cpu", "--threads", "2"]) == 0
    assert seen == [("threads", 2), "load"]
    assert "explained L0H1,L0H3,L1H1 on the heldout split" in capsys.readouterr().out
    saved = json.loads((out / "explanation" / "config.json").read_text())
    assert saved["heads"] == "L0H1,L0H3,L1H1" and saved["significant"] is True
    report = (out / "report.md").read_text()
    assert "## What the best set's heads do (heldout split" in report
    assert "| L0H3 | removed |" in report and "| comparison |" in report
    # the recorded task file is gone: one line naming it
    task_file.unlink()
    assert cli.main(["explain", str(out), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(task_file.resolve()) in err[0] and "gone" in err[0], err
    # a folder of an older version records no task file: the task name, not in tasks/
    config = json.loads((out / "config.json").read_text())
    del config["summary"]["task_file"]
    (out / "config.json").write_text(json.dumps(config))
    assert cli.main(["explain", "--out", str(out), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "micro_map" in err[0] and "--task" in err[0], err
    assert cli.main(["explain", "--out", str(out), "--task", str(main), "--device", "cpu"]) == 0


def test_explain_command_rebuilds_the_demo(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(commands, "embedded_defaults", lambda: None)
    monkeypatch.chdir(tmp_path)
    assert cli.main([*FAST, "--no-explain"]) == 0
    capsys.readouterr()
    assert cli.main(["explain", "--out", "cel_results", "--device", "cpu"]) == 0
    assert "explained L0H1,L0H3,L1H1" in capsys.readouterr().out
    assert (tmp_path / "cel_results" / "explanation" / "roles.csv").is_file()


def test_quiet_silences_a_real_gguf_conversion(tmp_path, monkeypatch, capsys):
    """A tiny GGUF file converted for real: its bars (the workbench's and transformers')
    show without `--quiet` and not with it."""
    import workbench.progress
    from tests.loading.test_gguf import write_tiny_gguf
    from workbench.loading import load_model

    path = write_tiny_gguf(tmp_path / "m.gguf", "qwen2")
    for quiet, terminal in ((False, True), (True, True), (False, False)):
        # stderr at a terminal, or a log file (no bar there either: its frames are "\r"s)
        monkeypatch.setattr(workbench.progress, "plain", lambda *a, _t=terminal: not _t)
        monkeypatch.setenv(CACHE_ENV, str(tmp_path / f"cache-{quiet}-{terminal}"))
        capsys.readouterr()
        with commands.bars_off(quiet):
            load_model(path, device="cpu")
        printed = capsys.readouterr()
        bars = not quiet and terminal
        assert ("converting m.gguf" in printed.err) is bars, printed.err[-500:]
        assert ("de-quantizing" in printed.err) is bars, printed.err[-500:]
        assert ("\r" in printed.err) is bars
        # TransformerLens's own print (twice for a GGUF model): never, load_model silences it
        assert "Moving model to device" not in printed.out, printed.out


def test_a_task_with_few_examples_is_named_before_the_run(demo_files, tmp_path, capsys):
    """`workbench cel` on fewer than 10 examples per split says so in one
    line right after the model and task line, before the first stage, and runs (rc 0)."""
    model_dir, main, side = demo_files
    out = tmp_path / "few"
    argv = ["cel", "--model", str(model_dir), "--task", str(main), "--others", str(side),
            "--out", str(out), "--device", "cpu", "--max-examples", "3", "--quiet",
            "--no-explain", *FAST]
    assert cli.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("model "))
    assert "3 selection / 3 held-out examples" in lines[at]
    assert lines[at + 1] == (
        "warning: task 'micro_map': fewer than 10 examples (select 3, heldout 3, micro_short "
        "6): no interval or p-value rests on enough examples to be trusted; with 3 held-out "
        "examples the smallest one-sided sign-flip p-value is 0.12, so a set may not be "
        "significant whatever it does; give at least 10 per split")
    assert "**Few examples:**" in (out / "report.md").read_text()


def test_the_cost_counts_loading_until_the_run_is_prepared_and_no_second_more(
        demo_files, tmp_path, monkeypatch):
    # `load` ends where the pipeline's setup timer starts (`prepare_run`): no second is in both
    import workbench.pipeline as pipeline

    model_dir, main, side = demo_files
    real, called = pipeline.prepare_run, []
    monkeypatch.setattr(pipeline, "prepare_run",
                        lambda *a, **k: called.append(time.perf_counter()) or real(*a, **k))
    started = time.perf_counter()
    out = tmp_path / "out"
    assert cli.main(["cel", "--model", str(model_dir), "--task", str(main), "--others",
                     str(side), "--out", str(out), "--device", "cpu", *FAST]) == 0
    stages = CELResult.load(out).cost["stages"]
    assert stages["load"]["seconds"] <= called[0] - started
    assert stages["load"]["seconds"] + stages["setup"]["seconds"] <= (
        time.perf_counter() - started - stages["screen"]["seconds"])
