"""The `workbench` command end to end on the micro model, in temporary folders."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import workbench.cli as cli
from workbench.demo import write_demo
from workbench.results import CELResult

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
    # a second run resumes from the folder
    assert cli.main(argv) == 0
    assert "resuming from" in capsys.readouterr().out
    # different options on the same folder: a clear error, unless --overwrite
    assert cli.main([*argv, "--max-size", "2"]) == 2
    assert "different config" in capsys.readouterr().err
    assert cli.main([*argv, "--max-size", "2", "--overwrite"]) == 0


def test_no_arguments_runs_the_demo_when_the_embedded_model_is_missing(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(cli, "_embedded_defaults", lambda: None)
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
