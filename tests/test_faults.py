"""Faults of the machine around a run (issue 33, item 4): each ends in one line on stderr and
exit status 2, loses nothing already saved, and a rerun resumes. A full disk while writing a
table or a plot, a results folder held by another run, a hub that cannot be reached. No test
touches the network: the hub is kept out by `HF_HUB_OFFLINE=1` (conftest) or a stand-in for
huggingface_hub's request."""

from __future__ import annotations

import errno
import hashlib
import time
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.figure import Figure

import workbench.cli.parser as cli
import workbench.loading.model
from workbench.cli.demo import write_demo
from workbench.errors import WorkbenchError
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


def test_an_offline_hub_name_answers_at_once_without_torch(capsys):
    """Under HF_HUB_OFFLINE=1 (conftest) a hub name not in the cache is refused before torch
    would be needed, in one line naming HF_HUB_OFFLINE=1 and --model /path."""
    t0 = time.perf_counter()
    assert cli.main(["cel", "--model", "pythia-70m", "--task", "ioi", "--quiet"]) == 2
    elapsed = time.perf_counter() - t0
    line = _one_error_line(capsys)
    assert "'EleutherAI/pythia-70m' is not in the local Hugging Face cache" in line, line
    assert "HF_HUB_OFFLINE=1" in line and "--model /path" in line, line
    assert elapsed < 5.0, elapsed


def test_an_unreachable_hub_is_one_line_without_retries(monkeypatch):
    """With the hub out of reach (a stand-in for huggingface_hub's request that fails as a
    refused connection does), loading asks once, never calls TransformerLens's loader, and
    says HF_HUB_OFFLINE=1 and --model /path."""
    import huggingface_hub
    from huggingface_hub import constants
    from transformer_lens import HookedTransformer

    from workbench.loading import load_model

    asked = []

    def refused(url, *args, **kwargs):
        asked.append(url)
        raise ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")

    def never(*args, **kwargs):
        raise AssertionError("from_pretrained was called")

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", refused)
    monkeypatch.setattr(HookedTransformer, "from_pretrained", never)
    with pytest.raises(WorkbenchError) as info:
        load_model("gpt2", device="cpu")
    message = str(info.value)
    assert "\n" not in message and "the Hugging Face hub is unreachable for 'gpt2'" in message
    assert "HF_HUB_OFFLINE=1" in message and "--model /path" in message
    assert asked == ["https://huggingface.co/gpt2/resolve/main/config.json"]


def test_a_hub_that_answers_lets_loading_go_on(monkeypatch):
    """Any answer of the hub counts as reachable: the probe raises nothing."""
    import huggingface_hub
    from huggingface_hub import constants

    from workbench.loading.names import check_hub

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", lambda *a, **k: object())
    check_hub("gpt2")

    def weird(*args, **kwargs):
        raise KeyError("not a transport failure")

    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", weird)
    with pytest.raises(KeyError):  # a bug is not reported as an unreachable hub
        check_hub("gpt2")


def test_hub_repo_agrees_with_transformer_lens():
    """`names.hub_repo` (no torch) maps every official name and alias as TransformerLens's
    own `get_official_model_name` does."""
    from transformer_lens.loading_from_pretrained import make_model_alias_map

    from workbench.loading.names import hub_repo
    from workbench.loading.shipped import REAL_MODELS as SHIPPED_REAL

    aliases = make_model_alias_map()
    assert len(aliases) > 100
    for name, official in aliases.items():
        # a shipped model loads without the hub, whatever TransformerLens calls it
        assert hub_repo(name) == (None if name in SHIPPED_REAL else official), name
    assert hub_repo("embedded") is None and hub_repo("smollm2-135m") is None
    assert hub_repo("no-such-model") is None
