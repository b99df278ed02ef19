"""The `workbench` command end to end on the micro model, in temporary folders."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import workbench.cli.commands as commands
import workbench.cli.parser as cli
from workbench.cli.demo import write_demo
from workbench.config import CELConfig, auto_threads, resolve_threads
from workbench.errors import WorkbenchError
from workbench.loading.shipped import CACHE_ENV
from workbench.results.result import CELResult

FAST = ["--n-random", "20", "--n-boot", "100", "--quiet"]


@pytest.fixture(scope="module")
def demo_files(tmp_path_factory):
    return write_demo(tmp_path_factory.mktemp("demo"))


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
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "best set: L0H1,L0H3,L1H1" in printed
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


@pytest.mark.parametrize(
    "argv,message",
    [
        (["cel", "--model", "{model}", "--task", "no_such_task"], "no_such_task"),
        (["cel", "--model", "{model}", "--task", "{main}", "--objective", "bleu"], "bleu"),
        (["cel", "--model", "/nonexistent/model", "--task", "{main}"], "nonexistent"),
        (["cel", "--model", "{model}"], "--task is required"),
        (["cel", "--model", "embeded"], "unknown model 'embeded'; did you mean 'embedded'"),
        (["cel", "--model", "gtp2"], "unknown model 'gtp2'; did you mean 'gpt2'?"),
        (["cel", "--model", "gtp2", "--task", "ioi"], "did you mean 'gpt2'?"),
        (["cel", "--model", "gtp2", "--task", "ioi"], "expected an embedded model (embedded, "
         "embedded_llama, embedded_neox), a shipped model (smollm2-135m, gemma-3-270m), a GGUF "
         "file (.gguf), a workbench checkpoint folder, a Hugging Face folder"),
        (["cel", "--model", "gpt2", "--task", "ioii"], "task 'ioii' is neither a file nor a "
         "task in"),
        (["cel", "--model", "gpt2", "--task", "ioii"], "did you mean 'ioi'?"),
        (["cel", "--model", "embedded_map"], "'embedded_map' is a task, not a model"),
        (["sweep", "--models", "gpt2", "embeded", "--tasks", "ioi"], "did you mean 'embedded'"),
        (["sweep", "--models", "gpt2", "--tasks", "ioi", "iot"], "task 'iot'"),
    ],
)
def test_errors_are_one_line_and_exit_2(demo_files, tmp_path, capsys, argv, message):
    model_dir, main, _ = demo_files
    argv = [a.format(model=model_dir, main=main) for a in argv]
    assert cli.main([*argv, "--out", str(tmp_path / "o"), *FAST]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.startswith("workbench: error:") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_unknown_strategy_is_rejected_by_the_parser(demo_files, capsys):
    model_dir, main, _ = demo_files
    with pytest.raises(SystemExit) as e:
        cli.main(["cel", "--model", str(model_dir), "--task", str(main), "--strategy", "magic"])
    assert e.value.code == 2
    assert "invalid choice: 'magic'" in capsys.readouterr().err


def test_subcommands_are_registered(capsys):
    assert cli.main(["notebooks"]) == 0
    assert "jupyter lab" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    helptext = capsys.readouterr().out
    assert "cel" in helptext and "notebooks" in helptext
    try:
        import workbench.theory.cli  # noqa: F401
    except ImportError:
        pytest.skip("workbench.theory.cli is not importable here")
    assert "theory" in helptext


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


def _python(code: str, *args: str, **kw) -> subprocess.CompletedProcess:
    path = os.pathsep.join(p for p in (str(commands.REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env, timeout=300, **kw)


_HEAVY = ("torch", "transformer_lens", "transformers", "pandas", "matplotlib")


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [["--help"], ["sweep", "--help"], ["cel", "--model", "gtp2"], ["cel", "--model", "embeded"],
     ["cel", "--model", "gpt2", "--task", "ioii"], ["cel", "--model", "gpt2"]],
)
def test_help_and_typos_import_no_torch(argv):
    """`--help` and a mistyped name answer before torch, TransformerLens, pandas or matplotlib
    are imported (those imports are the seconds of start-up); in a fresh interpreter."""
    proc = _python(
        "import sys, json\n"
        "from workbench.cli.parser import main\n"
        "try:\n    rc = main(sys.argv[1:])\nexcept SystemExit as e:\n    rc = e.code\n"
        f"print(json.dumps([rc, [m for m in {_HEAVY!r} if m in sys.modules]]))",
        *argv,
    )
    rc, heavy = json.loads(proc.stdout.strip().splitlines()[-1])
    assert heavy == [], (argv, heavy)
    assert rc == (0 if "--help" in argv else 2), proc.stderr


def test_sweep_help_describes_every_option(capsys):
    with pytest.raises(SystemExit):
        cli.main(["sweep", "--help"])
    text = capsys.readouterr().out
    for option in ("--models", "--tasks", "--out"):
        block = text[text.index(f"  {option}"):].split("\n  -")[0]
        assert len(block.split()) > 4, (option, block)  # more than the option and metavar


def test_parser_choices_are_the_option_types():
    """The parser's choices are the values of the option types of `workbench.options` and the
    registries' names (the CEL methods less the naive reference), and the light modules that
    stand in for heavy ones agree with them."""
    from transformer_lens.loading_from_pretrained import make_model_alias_map

    from workbench.loading import names, sources
    from workbench.loading.checkpoint import CONFIG_FILE
    from workbench.options import AblationKind, ClusterMode, SweepSplit
    from workbench.search.registry import strategy_list
    from workbench.tasks.names import TASKS_DIR

    for command, several in (("cel", False), ("sweep", True)):
        actions = _actions(command)
        assert actions["--ablation"].choices == ["zero", "mean", "resample"]
        assert actions["--ablation"].choices == AblationKind.values()
        assert actions["--method"].choices == ("attribution", "exact")
        assert actions["--cluster"].choices == ClusterMode.values()
        assert tuple(actions["--strategy"].choices) == strategy_list()
        assert (actions["--ablation"].nargs == "+") is several
    assert _actions("sweep")["--split"].choices == SweepSplit.values()
    assert sources.CHECKPOINT_CONFIG == CONFIG_FILE
    assert TASKS_DIR == Path(__file__).resolve().parent.parent / "tasks"
    # the TransformerLens names read from its source without importing it, vs its own map
    assert set(names.official_names()) == set(make_model_alias_map())


def _actions(command: str) -> dict:
    """The options of a subcommand's parser: flag -> argparse action."""
    parser = cli.build_parser(command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {o: a for a in sub.choices[command]._actions for o in a.option_strings}


def _help(command: str, option: str, capsys) -> str:
    """The help text of one option of `workbench <command> --help`, on one line."""
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = capsys.readouterr().out
    block = text[text.index(f"  {option} "):].split("\n  -")[0]
    return " ".join(block.split())


def test_flag_defaults_are_the_config_defaults():
    """Every flag of a `CELConfig` field stores under its name with the field's default, so
    `cel` and `sweep` with no options run the default config (nothing is declared twice)."""
    defaults = {f.name: f.default for f in dataclasses.fields(CELConfig)}
    flagged = {"kind", "per_position", "method", "check_attribution", "max_size", "strategies",
               "cluster", "top_m", "search_budget", "objective", "n_random", "n_boot",
               "max_examples", "side_screening", "side_examples", "seed"}
    for command in ("cel", "sweep"):
        args = cli.build_parser(command).parse_args([command])
        options = commands.run_options(args)
        assert options.pop("threads") == "auto"  # a Compute field, always given (its default)
        assert set(options) == flagged - ({"kind"} if command == "sweep" else set())
        for name, value in options.items():
            value = tuple(value) if isinstance(value, list) else value
            assert value == defaults[name] and type(value) is type(defaults[name]), name
        assert CELConfig(model="m", task="t", **options) == CELConfig(model="m", task="t")
    sweep = cli.build_parser("sweep").parse_args(["sweep"])
    assert sweep.kinds == [defaults["kind"]]
    from workbench.sweep import run_sweep

    assert sweep.split == inspect.signature(run_sweep).parameters["split"].default


def test_help_shows_the_defaults_and_the_model_sources(capsys):
    defaults = {f.name: f.default for f in dataclasses.fields(CELConfig)}
    for option, field in (("--max-size", "max_size"), ("--top-m", "top_m"),
                          ("--n-random", "n_random"), ("--n-boot", "n_boot"),
                          ("--seed", "seed")):
        text = _help("cel", option, capsys)
        assert text.endswith(f"(default {defaults[field]})"), (option, text)
        assert len(text.split()) > 5, (option, text)  # says what the option is, too
    model = _help("cel", "--model", capsys)
    assert "GGUF file" in model and "smollm2-135m" in model and "embedded" in model
    # `dtype=None` is each source's float32 (a checkpoint: its saved dtype); `auto` is not it
    dtype = _help("cel", "--dtype", capsys)
    assert "(default: float32, or the dtype a workbench checkpoint was saved in" in dtype
    assert "float16 on older ones" in dtype
    for command in ("cel", "sweep", "explain"):
        threads = _help(command, "--threads", capsys)
        assert "auto (the default)" in threads and "bench/threads.py" in threads, threads


@pytest.mark.parametrize("value", ["0", "-2", "two"])
def test_threads_below_one_is_a_parser_error(value, capsys):
    for command in ("cel", "sweep", "explain"):
        with pytest.raises(SystemExit) as e:
            cli.build_parser(command).parse_args([command, "--out", "x", "--threads", value])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert f"argument --threads: expected auto or an integer >= 1; got '{value}'" in err


def test_auto_threads_take_the_idle_cores_and_stay_fixed():
    """`auto`: the cores less the whole jobs the load average counts, at least 1, at most the
    cores; resolved once per process (a run's own load never lowers it later)."""
    from workbench.compute import Compute

    assert auto_threads(2, 0.0) == auto_threads(2, 0.9) == 2
    assert auto_threads(2, 1.0) == auto_threads(2, 1.7) == auto_threads(2, 6.3) == 1
    assert auto_threads(16, 3.5) == 13 and auto_threads(1, 0.0) == 1
    first = resolve_threads("auto")
    assert first == int(os.environ["OMP_NUM_THREADS"])  # conftest sets it; torchrun does too
    assert resolve_threads("auto") == first and resolve_threads(3) == 3
    assert resolve_threads(None) is None
    for bad in (0, -1, "two", 1.5, True):
        with pytest.raises(WorkbenchError, match="threads must be an integer >= 1 or 'auto'"):
            resolve_threads(bad)
        with pytest.raises(WorkbenchError, match="threads must be"):
            Compute(threads=bad)
    import torch

    before = torch.get_num_threads()
    with Compute(threads="auto").threads_set():
        assert torch.get_num_threads() == first
    assert torch.get_num_threads() == before


def test_auto_threads_read_the_load_without_omp_num_threads(monkeypatch):
    import workbench.config as config

    monkeypatch.setattr(config.os, "getloadavg", lambda: (1.2, 0.0, 0.0))
    monkeypatch.setattr(config.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    try:
        for omp, want in (("", 3), ("2", 2), ("x", 3)):
            monkeypatch.setenv("OMP_NUM_THREADS", omp)
            config._threads_at_start.cache_clear()
            assert resolve_threads("auto") == want
    finally:
        monkeypatch.undo()
        config._threads_at_start.cache_clear()


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
    made after the command are not."""
    from tqdm.auto import tqdm

    import workbench.loading.model

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


def test_theory_subcommand_keeps_its_options(capsys):
    try:
        import workbench.theory.cli  # noqa: F401
    except ImportError:
        pytest.skip("workbench.theory.cli is not importable here")
    with pytest.raises(SystemExit):
        cli.main(["theory", "--help"])
    assert "--quick" in capsys.readouterr().out


_SLOW_SEARCH = """
import faulthandler, signal, sys, time
import workbench.pipeline as pipeline

faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks where a slow exit hangs

def slow_search(run, result):  # the real run, stopped in its second stage
    print("searching", flush=True)
    time.sleep(300)

pipeline.search_stage = slow_search
from workbench.cli.parser import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_ctrl_c_prints_one_line_exits_130_and_the_rerun_resumes(demo_files, tmp_path, capsys):
    """A real process interrupted by SIGINT in the middle of a run: one line on stderr, no
    traceback, status 130; the same command then resumes from the stage files."""
    import signal

    model_dir, main, _ = demo_files
    out = tmp_path / "o"
    argv = ["cel", "--model", str(model_dir), "--task", str(main), "--out", str(out),
            "--device", "cpu", *FAST]
    env = {**os.environ, "PYTHONPATH": str(commands.REPO_ROOT), "OMP_NUM_THREADS": "1"}
    # A shell starts background jobs with SIGINT ignored, children inherit that, and Python
    # then installs no KeyboardInterrupt handler: the suite run as `.ci/run &` made this test
    # wait out its timeout. Ctrl-C at a terminal comes with the default disposition; restore it.
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_SEARCH, *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        for line in proc.stdout:
            if line.strip() == "searching":
                break
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:  # say where it hangs (it once did, under load)
            proc.send_signal(signal.SIGUSR1)
            try:
                _, err = proc.communicate(timeout=20)
            except subprocess.TimeoutExpired as e:  # still running: what it wrote so far
                err = e.stderr.decode() if isinstance(e.stderr, bytes) else str(e.stderr)
            pytest.fail(f"no exit 120 s after SIGINT; the process's stacks:\n{err[-6000:]}")
    finally:
        proc.kill()
    assert proc.returncode == 130
    lines = [x for x in err.splitlines() if x.strip()]
    assert lines == [f"interrupted; rerun the same command to resume from {out}"], err
    assert (out / "heads.csv").is_file() and not (out / "combos.csv").exists()
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "resuming from" in printed and "best set: L0H1,L0H3,L1H1" in printed


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
    assert commands.best_line(result).startswith(line)
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


def test_package_exports_load_lazily():
    """`__all__` names exactly the lazily imported names, each the object its module
    defines."""
    import importlib

    import workbench

    assert set(workbench.__all__) == {*workbench._EXPORTS, "WorkbenchError"}
    for name, module in workbench._EXPORTS.items():
        assert getattr(workbench, name) is getattr(importlib.import_module(module), name)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        workbench.nope  # noqa: B018


def test_quiet_silences_a_real_gguf_conversion(tmp_path, monkeypatch, capsys):
    """A tiny GGUF file converted for real: its bars (the workbench's and transformers')
    show without `--quiet` and not with it."""
    from tests.test_gguf import write_tiny_gguf
    from workbench.loading import load_model

    path = write_tiny_gguf(tmp_path / "m.gguf", "qwen2")
    for quiet in (False, True):
        monkeypatch.setenv(CACHE_ENV, str(tmp_path / f"cache-{quiet}"))
        capsys.readouterr()
        with commands.bars_off(quiet):
            load_model(path, device="cpu")
        err = capsys.readouterr().err
        assert ("converting m.gguf" in err) is not quiet, err[-500:]
        assert ("de-quantizing" in err) is not quiet, err[-500:]
