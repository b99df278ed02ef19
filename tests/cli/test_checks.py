"""Every option is checked before the model loads (`workbench.cli.checks`): a bad value is one
line and exit status 2, without torch, and creates no results folder. So is a results folder
that cannot be used: held, read-only, not writable, tampered, or made with other options."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import workbench.cli.parser as cli
import workbench.loading.model
from workbench.cli.commands import REPO_ROOT

# (arguments, words the one line must hold); the model and tasks are the demo's
BAD_OPTIONS = [
    (["--threads", "0"], "expected auto or an integer >= 1; got '0'"),
    (["--threads", "many"], "expected auto or an integer >= 1; got 'many'"),
    (["--token-budget", "0"], "expected an integer >= 1; got '0'"),
    (["--max-size", "0"], "max_size must be an integer >= 1; got 0"),
    (["--n-random", "-1"], "n_random must be an integer >= 0; got -1"),
    (["--top-m", "0"], "top_m must be an integer >= 1"),
    (["--seed", "-1"], "seed must be an integer >= 0"),
    (["--n-boot", "0"], "n_boot must be an integer >= 1"),
    (["--max-examples", "0"], "max_examples must be an integer >= 1"),
    (["--side-examples", "0"], "side_examples must be an integer >= 1"),
    (["--search-budget", "0"], "search_budget must be an integer >= 1"),
    (["--per-position"], "per_position applies to mean ablation only"),
    (["--strategy", "gates", "--gates-steps", "x"], "gates setting 'steps' must be an integer"),
    (["--objective", "nosuch"], "objective 'nosuch' is not a metric; expected one of accuracy,"),
    (["--objective", "logit_dif"], "did you mean 'logit_diff'"),
    (["--objective", "logit_diff", "--task", "{nowrong}"],
     "objective 'logit_diff' compares the answer with wrong answers, and task 'nowrong' has"),
    (["--device", "nosuch"], "device 'nosuch' is not a torch device"),
    (["--device", "cuda:x"], "device 'cuda:x' is not a torch device"),
    (["--dtype", "float8"], "dtype 'float8' is unknown; expected 'auto' or one of"),
    (["--ablation", "sideways"], "invalid choice: 'sideways'"),
    (["--search-dtype", "float8"],
     "invalid choice: 'float8' (choose from 'auto', 'float32', 'bfloat16')"),
    (["--racing", "sometimes"], "invalid choice: 'sometimes' (choose from 'auto', 'on', 'off')"),
]

_CHECK = """
import contextlib, io, json, os, sys
from workbench.cli.parser import main
results = []
for argv, out in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code
    results.append([rc, err.getvalue(), os.path.exists(out)])
heavy = [m for m in ("torch", "transformer_lens", "pandas") if m in sys.modules]
print(json.dumps([results, heavy]))
"""


@pytest.fixture(scope="module")
def nowrong(demo_files, tmp_path_factory):
    """The demo's main task without wrong answers."""
    _, main, _ = demo_files
    lines = Path(main).read_text().splitlines()
    header = json.loads(lines[0])
    header["task"]["name"] = "nowrong"
    rows = [{k: v for k, v in json.loads(line).items() if k != "wrong"} for line in lines[1:]]
    path = tmp_path_factory.mktemp("nowrong") / "nowrong.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [header, *rows]) + "\n")
    return path


def _argv(command, demo_files, nowrong, extra, out):
    model_dir, main, side = demo_files
    extra = [a.format(nowrong=nowrong) for a in extra]
    if command == "sweep":
        base = ["sweep", "--models", str(model_dir), "--tasks", str(main)]
    else:
        task = [] if "--task" in extra else ["--task", str(main)]
        base = ["cel", "--model", str(model_dir), *task, "--others", str(side)]
    return [*base, *extra, "--out", str(out), "--quiet"]


@pytest.mark.slow
def test_every_bad_option_is_one_line_before_torch_and_creates_no_folder(
        demo_files, nowrong, tmp_path):
    """In one fresh interpreter, each bad option of `cel` (and a few of `sweep`): exit status
    2, one line that says what is allowed, no results folder, and torch, TransformerLens and
    pandas never imported."""
    cases = [(command, extra, words) for extra, words in BAD_OPTIONS for command in ("cel",)]
    cases += [("sweep", ["--max-size", "0"], "max_size must be an integer >= 1"),
              ("sweep", ["--threads", "many"], "expected auto or an integer >= 1")]
    runs = [(_argv(c, demo_files, nowrong, extra, tmp_path / f"out{i}"), str(tmp_path / f"out{i}"))
            for i, (c, extra, _) in enumerate(cases)]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", _CHECK, json.dumps(runs)], capture_output=True,
                          text=True, env=env, timeout=600)
    results, heavy = json.loads(proc.stdout.strip().splitlines()[-1])
    for (command, extra, words), (rc, err, created) in zip(cases, results, strict=True):
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1, (command, extra, err)
        assert lines[0].startswith("workbench: error: ") and words in lines[0], (extra, err)
        assert not created, (command, extra)
    assert heavy == []


def test_check_options_refuses_a_bad_racing_or_search_dtype_by_name():
    """`check_options` itself (not only the parser's choices) refuses a `--racing` or
    `--search-dtype` outside its option type, naming the values allowed, and a resumed run
    under `--racing auto` takes `adaptive` from its folder, under `--search-dtype auto` its
    `search_dtype` (`resumed_choices`)."""
    import argparse

    from workbench.cli.checks import check_options, resumed_choices
    from workbench.errors import WorkbenchError

    with pytest.raises(WorkbenchError, match=r"racing 'sometimes' is unknown; expected one of "
                       r"\['auto', 'on', 'off'\]"):
        check_options(argparse.Namespace(racing="sometimes"), {})
    with pytest.raises(WorkbenchError, match=r"search dtype 'float8' is unknown; expected one "
                       r"of \['auto', 'float32', 'bfloat16'\]"):
        check_options(argparse.Namespace(racing="auto"), {"search_dtype": "float8"})
    assert check_options(argparse.Namespace(racing="off"), {"search_dtype": "bfloat16"}) \
        .search_dtype == "bfloat16"
    ns = argparse.Namespace
    assert resumed_choices(ns(racing="auto")) == ("adaptive",)
    assert resumed_choices(ns(racing="on", search_dtype="auto")) == ("search_dtype",)
    assert resumed_choices(ns(racing="on", search_dtype="float32")) == ()
    assert resumed_choices(ns(racing="auto", search_dtype="bfloat16")) == ("adaptive",)


@pytest.fixture
def no_load(monkeypatch):
    """`load_model` replaced by a failure: these runs must be refused before it."""
    def loader(*args, **kwargs):
        raise AssertionError("the model was loaded before the run was refused")

    monkeypatch.setattr(workbench.loading.model, "load_model", loader)


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("workbench: error: "), err
    return err[0]


@pytest.fixture(scope="module")
def finished(demo_files, tmp_path_factory):
    """A finished run of the demo (its folder)."""
    out = tmp_path_factory.mktemp("finished") / "out"
    argv = _argv("cel", demo_files, None, ["--n-random", "10", "--n-boot", "50",
                                           "--no-explain"], out)
    assert cli.main(argv) == 0
    return out, argv


def test_a_finished_folder_on_a_read_only_file_system_is_refused_before_the_model_loads(
        finished, no_load, capsys, monkeypatch):
    out, argv = finished
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **k: False if Path(p) == out
                        else real_access(p, mode, **k))
    monkeypatch.setattr(os, "statvfs", lambda p: os.statvfs_result((0,) * 8 + (os.ST_RDONLY, 0)))
    capsys.readouterr()
    assert cli.main(argv) == 2
    line = _one_line(capsys)
    assert f"results folder {str(out)!r} is on a read-only file system" in line, line
    assert "free space" not in line
    monkeypatch.setattr(os, "statvfs", lambda p: os.statvfs_result((0,) * 10))
    assert cli.main(argv) == 2
    assert "is not writable by this user (permission denied)" in _one_line(capsys)


def test_a_tampered_folder_and_other_options_are_refused_before_the_model_loads(
        finished, no_load, capsys, tmp_path):
    import shutil

    out, argv = finished
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    argv = [copy if a == str(out) else a for a in argv]
    argv = [str(a) for a in argv]
    capsys.readouterr()
    assert cli.main([*argv, "--max-size", "2"]) == 2
    assert "holds a CEL run with a different config (differs in ['max_size'])" in \
        _one_line(capsys)
    with open(copy / "heads.csv", "a") as f:
        f.write("\n")
    assert cli.main(argv) == 2
    assert "heads.csv was changed, truncated or replaced" in _one_line(capsys)


@pytest.mark.parametrize("code, words", [
    (errno.EROFS, "the file system is read-only; copy the folder to a writable place"),
    (errno.EACCES, "permission denied; make the folder writable for this user"),
    (errno.ENOSPC, "free space"),
])
def test_a_failed_write_says_what_fits_the_fault(code, words, finished, capsys, monkeypatch):
    """`workbench view` on a folder it cannot write: read-only is not "free space"."""
    import workbench.results.view as view

    def fail(path, text):
        raise OSError(code, os.strerror(code), str(path))

    monkeypatch.setattr(view, "write_text", fail)
    out, _ = finished
    capsys.readouterr()
    assert cli.main(["view", str(out)]) == 2
    line = _one_line(capsys)
    assert words in line and "view.html" in line, line
    assert ("free space" in line) == (code == errno.ENOSPC)
