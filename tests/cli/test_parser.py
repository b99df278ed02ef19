"""The command line's parser and `main` (`workbench.cli.parser`, `workbench.cli.options`):
one-line errors with exit status 2, choices and defaults read from the option types and
`CELConfig`, help texts, `--help` and typos answered without torch, Ctrl-C's one line and
exit status 130."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import workbench.cli.commands as commands
import workbench.cli.parser as cli
from workbench.config import CELConfig

FAST = ["--n-random", "20", "--n-boot", "100", "--quiet"]


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


def _python(code: str, *args: str, **kw) -> subprocess.CompletedProcess:
    path = os.pathsep.join(p for p in (str(commands.REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env, timeout=300, **kw)


_HEAVY = ("torch", "transformer_lens", "transformers", "pandas", "matplotlib")


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [["--help"], ["--version"], ["sweep", "--help"], ["cel", "--model", "gtp2"],
     ["cel", "--model", "embeded"],
     ["cel", "--model", "gpt2", "--task", "ioii"], ["cel", "--model", "gpt2"],
     ["compare", "--help"], ["compare", "/nonexistent/a"],
     ["compare", "/nonexistent/a", "/nonexistent/b"]],
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
    assert rc == (0 if {"--help", "--version"} & set(argv) else 2), proc.stderr
    if argv == ["--version"]:  # the package's version, as pyproject.toml gives it
        from workbench import __version__

        assert proc.stdout.startswith(f"workbench {__version__}\n")


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
    from workbench.options import AblationKind, ClusterMode, Racing, SearchDtype, SweepSplit
    from workbench.search.registry import strategy_list
    from workbench.tasks.names import TASKS_DIR

    for command, several in (("cel", False), ("sweep", True)):
        actions = _actions(command)
        assert actions["--ablation"].choices == ["zero", "mean", "resample"]
        assert actions["--ablation"].choices == AblationKind.values()
        assert actions["--method"].choices == ("attribution", "exact")
        assert actions["--cluster"].choices == ClusterMode.values()
        assert tuple(actions["--strategy"].choices) == strategy_list()
        assert actions["--search-dtype"].choices == SearchDtype.values()
        assert actions["--racing"].choices == Racing.values() == ["auto", "on", "off"]
        assert (actions["--ablation"].nargs == "+") is several
    assert _actions("sweep")["--split"].choices == SweepSplit.values()
    assert sources.CHECKPOINT_CONFIG == CONFIG_FILE
    assert TASKS_DIR == Path(__file__).resolve().parents[2] / "tasks"
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
    # up to the next option, or the blank line before the next argument group's title
    block = text[text.index(f"  {option} "):].split("\n  -")[0].split("\n\n")[0]
    return " ".join(block.split())


def test_flag_defaults_are_the_config_defaults():
    """Every flag of a `CELConfig` field stores under its name with the field's default, so
    `cel` and `sweep` with no options run the default config (nothing is declared twice)."""
    defaults = {f.name: f.default for f in dataclasses.fields(CELConfig)}
    flagged = {"kind", "per_position", "method", "check_attribution", "max_size", "strategies",
               "cluster", "top_m", "search_budget", "objective", "n_random", "n_boot",
               "max_examples", "side_screening", "side_examples", "seed", "guards", "guard_rule",
               "search_dtype"}
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


@pytest.mark.parametrize("command", ["cel", "sweep"])
def test_a_bad_search_dtype_is_one_line_naming_the_allowed_values(command, capsys):
    """Before anything loads: one line, exit status 2 (`test_help_and_typos_import_no_torch`
    checks that no torch was imported by then)."""
    with pytest.raises(SystemExit) as e:
        cli.main([command, "--search-dtype", "float8"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "workbench: error: argument --search-dtype: invalid choice: 'float8' (choose from "
        f"'auto', 'float32', 'bfloat16') (`workbench {command} --help` lists the options)"]
    assert _actions(command)["--search-dtype"].choices == ["auto", "float32", "bfloat16"]
    assert _actions(command)["--search-dtype"].default == CELConfig.search_dtype == "float32"


def test_theory_subcommand_keeps_its_options(capsys):
    try:
        import workbench.theory.cli  # noqa: F401
    except ImportError:
        pytest.skip("workbench.theory.cli is not importable here")
    with pytest.raises(SystemExit):
        cli.main(["theory", "--help"])
    assert "--quick" in capsys.readouterr().out


_SLOW_SEARCH = """
import dataclasses, faulthandler, signal, sys, time
import workbench.pipeline as pipeline

faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks where a slow exit hangs

def slow_search(run, result, store=None):  # the real run, stopped in its second stage
    print("searching", flush=True)
    time.sleep(300)

pipeline.STAGES = tuple(dataclasses.replace(s, run=slow_search) if s.name == "search" else s
                        for s in pipeline.STAGES)
from workbench.cli.parser import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("signum, status, said", [
    ("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "terminated (SIGTERM)")])
def test_ctrl_c_and_sigterm_print_one_line_release_the_lock_and_the_rerun_resumes(
        signum, status, said, demo_files, tmp_path, capsys):
    """A real process interrupted by SIGINT (Ctrl-C) or SIGTERM (what `timeout`, SLURM and
    torchrun send) in the middle of a run: one line on stderr, no traceback, status 130 or
    143, the folder's lock released; the same command then resumes from the stage files."""
    import signal

    from workbench.results.store import LOCK_FILE

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
        proc.send_signal(getattr(signal, signum))
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:  # say where it hangs (it once did, under load)
            proc.send_signal(signal.SIGUSR1)
            try:
                _, err = proc.communicate(timeout=20)
            except subprocess.TimeoutExpired as e:  # still running: what it wrote so far
                err = e.stderr.decode() if isinstance(e.stderr, bytes) else str(e.stderr)
            pytest.fail(f"no exit 120 s after {signum}; the process's stacks:\n{err[-6000:]}")
    finally:
        proc.kill()
    assert proc.returncode == status
    lines = [x for x in err.splitlines() if x.strip()]
    assert lines == [f"{said}; rerun the same command to resume from {out}"], err
    assert (out / "heads.csv").is_file() and not (out / "combos.csv").exists()
    assert not (out / LOCK_FILE).exists()
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "resuming from" in printed and "best set: L0H1,L0H3,L1H1" in printed
