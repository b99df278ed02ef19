"""Faults of the machine around a run: each ends in one line on stderr and
exit status 2, loses nothing already saved, and a rerun resumes. A full disk while writing a
table or a plot, a results folder held by another run. A hub that cannot be reached is
tests/loading/test_hub.py."""

from __future__ import annotations

import errno
import hashlib
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.figure import Figure

import workbench.cli.parser as cli
import workbench.loading.model
from workbench.cli.demo import write_demo
from workbench.results.result import CELResult
from workbench.results.store import CONFIG_FILE, LOCK_FILE, TABLES, ResultStore, read_run_file

FAST = ["--n-random", "10", "--n-boot", "50", "--quiet", "--device", "cpu", "--no-explain"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo model and tasks, and one finished run of them."""
    folder = tmp_path_factory.mktemp("demo")
    model_dir, main, side = write_demo(folder)
    done = folder / "done"
    assert cli.main(_argv(model_dir, main, side, done)) == 0
    return model_dir, main, side, done


def _argv(model_dir, main, side, out) -> list[str]:
    return ["cel", "--model", str(model_dir), "--task", str(main), "--others", str(side),
            "--out", str(out), *FAST]


def _hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.glob("*.csv"))}


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("workbench: error: "), err
    return err[0]


def _disk_full(path) -> OSError:
    return OSError(errno.ENOSPC, "No space left on device", str(path))


def test_a_full_disk_while_writing_a_table_is_one_line_and_the_rerun_resumes(
        demo, tmp_path, capsys, monkeypatch):
    """The disk fills while combos.csv is half written: one line naming the file and the way
    to resume, exit 2; heads.csv stays recorded, no partial file is left, the lock is
    released; the same command then resumes from heads.csv and ends as a full run did."""
    model_dir, main, side, done = demo
    out = tmp_path / "out"
    to_csv = pd.DataFrame.to_csv

    def fill_up(df, path=None, *args, **kwargs):
        if str(path).endswith("combos.csv.tmp"):
            Path(path).write_text("strategy,size,heads\ninteraction,1,L0")  # a partial write
            raise _disk_full(path)
        return to_csv(df, path, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_csv", fill_up)
    capsys.readouterr()
    assert cli.main(_argv(model_dir, main, side, out)) == 2
    line = _one_error_line(capsys)
    assert "No space left on device writing" in line and "combos.csv" in line, line
    assert "(ENOSPC)" in line and f"rerun the same command to resume from {out}" in line, line
    assert sorted(p.name for p in out.iterdir()) == [CONFIG_FILE, "heads.csv"]
    assert set(read_run_file(out)["files"]) == {"heads"}
    monkeypatch.undo()

    assert cli.main(_argv(model_dir, main, side, out)) == 0
    assert f"resuming from {out}" in capsys.readouterr().out
    assert _hashes(out)["heads.csv"] == _hashes(done)["heads.csv"]
    assert CELResult.load(out).best == CELResult.load(done).best == ["L0H1", "L0H3", "L1H1"]
    assert not (out / LOCK_FILE).exists()


def test_a_full_disk_while_writing_a_plot_is_one_line_and_the_rerun_writes_it(
        demo, tmp_path, capsys, monkeypatch):
    """Every table is saved and recorded before the plots: a full disk at the first plot
    loses none of them, and the rerun recomputes nothing and writes the plots."""
    model_dir, main, side, done = demo
    out = tmp_path / "out"

    def fill_up(fig, path, *args, **kwargs):
        raise _disk_full(path)

    monkeypatch.setattr(Figure, "savefig", fill_up)
    capsys.readouterr()
    assert cli.main(_argv(model_dir, main, side, out)) == 2
    line = _one_error_line(capsys)
    assert "No space left on device writing" in line and ".png" in line, line
    assert set(read_run_file(out)["files"]) == set(TABLES)  # every table, recorded
    assert not list(out.glob("*.png")) and not list(out.glob("*tmp*"))
    saved = _hashes(out)
    assert saved == _hashes(done)
    timings = read_run_file(out)["timings"]
    monkeypatch.undo()

    assert cli.main(_argv(model_dir, main, side, out)) == 0
    assert _hashes(out) == saved
    assert read_run_file(out)["timings"]["search"] == timings["search"]  # not run again
    assert (out / "heads_heatmap.png").is_file() and (out / "report.md").is_file()


def test_other_os_errors_are_not_swallowed(demo, tmp_path, monkeypatch):
    """Only a full or read-only disk becomes the one line; any other OSError is a bug to see."""
    model_dir, main, side, _ = demo

    def broken(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(Figure, "savefig", broken)
    with pytest.raises(OSError, match="Input/output"):
        cli.main(_argv(model_dir, main, side, tmp_path / "out"))


def test_a_held_folder_is_refused_before_loading_and_before_resuming(
        demo, tmp_path, capsys, monkeypatch):
    """A second run into a folder another run holds: one line, exit 2, before the model is
    loaded and before "resuming" is printed; nothing in the folder changes."""
    import shutil

    model_dir, main, side, done = demo
    out = tmp_path / "held"
    shutil.copytree(done, out)
    loads = []
    monkeypatch.setattr(workbench.loading.model, "load_model", lambda *a, **k: loads.append(a))
    before = _hashes(out)
    capsys.readouterr()
    with ResultStore(out):  # the other run
        assert cli.main(_argv(model_dir, main, side, out)) == 2
    printed = capsys.readouterr()
    assert printed.err.count("\n") == 1 and "is in use by another run" in printed.err
    assert "resuming" not in printed.out and loads == []
    assert _hashes(out) == before


