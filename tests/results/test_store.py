"""Results folders and bad input: resume only from files this run's inputs made, one lock per
folder, and one clear line (exit status 2, nothing written or lost) for every bad input."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import workbench.cli.parser as cli
from workbench import WorkbenchError
from workbench.cli.demo import micro_model, write_demo
from workbench.loading.checkpoint import CONFIG_FILE as CKPT_CONFIG
from workbench.loading.checkpoint import WEIGHTS_FILE, load_checkpoint
from workbench.pipeline import run_cel
from workbench.results.fingerprint import task_fingerprint
from workbench.results.result import CELResult
from workbench.results.store import LOCK_FILE, ResultStore
from workbench.tasks.task import load_task

FAST = ["--n-random", "10", "--n-boot", "50", "--quiet", "--device", "cpu"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo model and tasks, and one finished run of them."""
    folder = tmp_path_factory.mktemp("demo")
    model_dir, main, side = write_demo(folder)
    done = folder / "done"
    assert cli.main(_argv(model_dir, main, done, "--others", str(side))) == 0
    return model_dir, main, side, done


def _argv(model_dir, task, out, *extra) -> list[str]:
    return ["cel", "--model", str(model_dir), "--task", str(task), "--out", str(out), *FAST,
            *extra]


def _snapshot(folder: Path) -> dict[str, str]:
    if not folder.exists():
        return {}
    if folder.is_file():
        return {folder.name: hashlib.sha256(folder.read_bytes()).hexdigest()}
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _fails(argv: list[str], capsys, watch: Path, match: str) -> None:
    """The command exits 2 with exactly one error line matching `match`, and `watch` (the
    results folder) is byte for byte as before."""
    capsys.readouterr()
    before = _snapshot(watch)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("workbench: error: "), err
    assert match in err[0], err[0]
    assert _snapshot(watch) == before


def _copy_run(done: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(done, out)
    return out


# --- resume -----------------------------------------------------------------------------------


def test_tables_without_config_are_refused(demo, tmp_path, capsys):
    model_dir, main, _, done = demo
    out = tmp_path / "orphans"
    out.mkdir()
    shutil.copy(done / "heads.csv", out / "heads.csv")
    _fails(_argv(model_dir, main, out), capsys, out, "holds CEL tables (heads.csv) but no")


@pytest.mark.parametrize("damage", ["truncate", "empty", "edit"])
def test_damaged_stage_file_is_refused(demo, tmp_path, capsys, damage):
    model_dir, main, side, done = demo
    out = _copy_run(done, tmp_path)
    heads = out / "heads.csv"
    lines = heads.read_text().splitlines(keepends=True)
    text = {"truncate": "".join(lines[:6]), "empty": "",
            "edit": "".join(lines).replace(",0.", ",1.", 1)}[damage]
    assert text != heads.read_text()
    heads.write_text(text)
    _fails(_argv(model_dir, main, out, "--others", str(side)), capsys, out,
           "heads.csv was changed, truncated or replaced")
    with pytest.raises(WorkbenchError, match="heads.csv was changed"):
        CELResult.load(out)


def test_missing_stage_file_is_refused(demo, tmp_path, capsys):
    model_dir, main, side, done = demo
    out = _copy_run(done, tmp_path)
    (out / "combos.csv").unlink()
    with pytest.raises(WorkbenchError, match="records combos.csv but the file is missing"):
        CELResult.load(out)
    _fails(_argv(model_dir, main, out, "--others", str(side)), capsys, out,
           "records combos.csv but the file is missing")


def test_run_stopped_between_a_table_and_its_record_resumes(demo, tmp_path, capsys):
    """A run killed after writing confirmation.csv but before recording it in config.json
    resumes: that table is recomputed (the same as the finished run's). An unrecorded table
    earlier than a recorded one was not written by this run's `save`, and is refused."""
    model_dir, main, side, done = demo
    out = _copy_run(done, tmp_path)
    run = json.loads((out / "config.json").read_text())
    for name in ("confirmation", "side_effects", "tradeoff"):  # the stage's tables, one save
        run["files"].pop(name, None)
    (out / "config.json").write_text(json.dumps(run))
    for name in ("side_effects", "tradeoff"):  # killed after the first table
        (out / f"{name}.csv").unlink(missing_ok=True)
    (out / "confirmation.csv").write_text("size,heads\n1,L0H0\n")  # not a finished table
    assert cli.main(_argv(model_dir, main, out, "--others", str(side))) == 0
    assert _snapshot(out)["confirmation.csv"] == _snapshot(done)["confirmation.csv"]
    assert CELResult.load(out).best == CELResult.load(done).best

    stray = _copy_run(done, tmp_path / "stray")
    run = json.loads((stray / "config.json").read_text())
    del run["files"]["heads"]
    (stray / "config.json").write_text(json.dumps(run))
    _fails(_argv(model_dir, main, stray, "--others", str(side)), capsys, stray,
           "heads.csv is not recorded")


def test_changed_task_header_is_refused(demo, tmp_path, capsys):
    """Same examples, another header: the old gains must not be reused."""
    model_dir, main, side, done = demo
    out = _copy_run(done, tmp_path)
    lines = Path(main).read_text().splitlines()
    header = json.loads(lines[0])
    header["task"]["prepend_bos"] = not load_task(main).prepend_bos
    changed = tmp_path / Path(main).name
    changed.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    assert task_fingerprint(load_task(changed)) != task_fingerprint(load_task(main))
    _fails(_argv(model_dir, changed, out, "--others", str(side)), capsys, out,
           "different config (differs in ['task_fingerprint'])")


def test_changed_model_and_seed_are_refused(tmp_path):
    model = micro_model()
    task = load_task(write_demo(tmp_path)[1])
    out = tmp_path / "run"
    run_cel(model, task, out_dir=out, n_random=5, n_boot=20, progress=False, plots=False)
    with pytest.raises(WorkbenchError, match=r"differs in \['seed'\]"):
        run_cel(model, task, out_dir=out, seed=1, n_random=5, n_boot=20, progress=False)
    with torch.no_grad():
        model.blocks[0].attn.W_O[0, 0, 0] += 1e-3
    with pytest.raises(WorkbenchError, match=r"differs in \['model_fingerprint'\]"):
        run_cel(model, task, out_dir=out, n_random=5, n_boot=20, progress=False)


def test_a_locked_folder_is_refused(demo, tmp_path, capsys):
    model_dir, main, side, done = demo
    out = _copy_run(done, tmp_path)
    with ResultStore(out):  # another run holds the folder
        assert (out / LOCK_FILE).is_file()
        _fails(_argv(model_dir, main, out, "--others", str(side), "--seed", "1"), capsys, out,
               "is in use by another run")
    assert not (out / LOCK_FILE).exists()
    with ResultStore(out) as store:  # released: the next run gets it
        assert store.previous is not None


_HOLD_LOCK = """
import sys, time
from workbench.results.store import ResultStore
store = ResultStore(sys.argv[1]).__enter__()
print("locked", flush=True)
time.sleep(300)
"""


@pytest.mark.slow
def test_overwrite_is_refused_while_another_process_holds_the_folder(demo, tmp_path, capsys):
    """Two real processes: while one holds the folder's lock, `--overwrite` deletes nothing,
    neither in the CLI's early check nor in `run_cel`'s own store; once it is gone,
    `--overwrite` replaces the folder."""
    model_dir, main, side, done = demo
    out = _copy_run(done, tmp_path)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(out)], env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        argv = _argv(model_dir, main, out, "--others", str(side), "--max-size", "2",
                     "--overwrite")
        _fails(argv, capsys, out, f"is in use by another run (process {holder.pid})")
        before = _snapshot(out)
        with pytest.raises(WorkbenchError, match="in use by another run"):
            run_cel(micro_model(), load_task(main), out_dir=out, overwrite=True)
        assert _snapshot(out) == before
    finally:
        holder.kill()
        holder.wait()
    assert cli.main(argv) == 0
    assert CELResult.load(out).config.max_size == 2
    assert (out / "report.md").is_file() and (out / "explanation" / "config.json").is_file()


def test_overwrite_keeps_the_lock_between_emptying_and_writing(demo, tmp_path):
    """`ResultStore(overwrite=True)` empties the folder only once it holds the lock, and
    keeps holding it: another store is refused while the emptied folder is being written."""
    _, _, _, done = demo
    out = _copy_run(done, tmp_path)
    (out / "explanation" / "extra.csv").write_text("x\n")
    with ResultStore(out, overwrite=True) as store:
        assert store.previous is None and sorted(p.name for p in out.iterdir()) == [LOCK_FILE]
        with pytest.raises(WorkbenchError, match="in use"):
            ResultStore(out, overwrite=True).__enter__()
    assert list(out.iterdir()) == []


def test_overwrite_refuses_a_folder_that_is_not_a_results_folder(demo, tmp_path, capsys):
    model_dir, main, _, _ = demo
    out = tmp_path / "mine"
    out.mkdir()
    (out / "config.json").write_text('{"mine": 1}')  # someone else's config
    _fails(_argv(model_dir, main, out, "--overwrite"), capsys, out, "not a CEL results config")


def test_resample_without_counterfactuals_writes_nothing(demo, tmp_path, capsys):
    model_dir, main, _, _ = demo
    out = tmp_path / "new"
    _fails(_argv(model_dir, main, out, "--ablation", "resample"), capsys, out,
           "needs a 'counterfactual' prompt on every example")
    assert not out.exists()
    with pytest.raises(WorkbenchError, match="counterfactual"):
        run_cel(micro_model(), load_task(main), kind="resample", out_dir=out)
    assert not out.exists()


def test_resumed_run_equals_finished_one(demo, tmp_path):
    model_dir, main, side, done = demo
    out = _copy_run(done, tmp_path)
    assert cli.main(_argv(model_dir, main, out, "--others", str(side))) == 0
    assert _snapshot(out)["heads.csv"] == _snapshot(done)["heads.csv"]
    assert CELResult.load(out).best == CELResult.load(done).best == ["L0H1", "L0H3", "L1H1"]


# --- bad input --------------------------------------------------------------------------------


def test_duplicate_side_task_names_are_refused(demo, tmp_path, capsys):
    model_dir, main, side, _ = demo
    copy = tmp_path / "copy_of_side.jsonl"
    shutil.copy(side, copy)  # same task name in its header
    out = tmp_path / "out"
    _fails(_argv(model_dir, main, out, "--others", str(side), str(copy)), capsys, out,
           "side tasks must have distinct names; ['micro_short']")
    assert not out.exists()


def test_negative_seed_fails_before_any_work(demo, tmp_path, capsys):
    model_dir, main, _, _ = demo
    out = tmp_path / "out"
    _fails(_argv(model_dir, main, out, "--seed", "-1"), capsys, out, "seed must be an integer >= 0")
    assert not out.exists()


def test_out_that_is_a_file_is_refused(demo, tmp_path, capsys):
    model_dir, main, _, _ = demo
    out = tmp_path / "a_file"
    out.write_text("keep me")
    _fails(_argv(model_dir, main, out), capsys, out, "is a file; expected a folder")
    assert out.read_text() == "keep me"


def test_out_in_a_read_only_folder_is_refused(demo, tmp_path, capsys):
    model_dir, main, _, _ = demo
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o555)
    try:
        if os.access(parent, os.W_OK):
            pytest.skip("running as root: permissions do not stop writes here")
        _fails(_argv(model_dir, main, parent / "out"), capsys, parent,
               "cannot create results folder")
    finally:
        parent.chmod(0o755)


def test_non_utf8_task_file_is_refused(demo, tmp_path, capsys):
    model_dir, main, _, _ = demo
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes(Path(main).read_bytes().replace(b"f0 x0", "f0 \xe9".encode("latin-1")))
    out = tmp_path / "out"
    _fails(_argv(model_dir, bad, out), capsys, out, "is not UTF-8 text")


# --- damaged checkpoints ----------------------------------------------------------------------


def _copy_model(model_dir: Path, tmp_path: Path) -> Path:
    target = tmp_path / "model"
    shutil.copytree(model_dir, target)
    return target


@pytest.mark.parametrize("damage", ["truncated", "overwritten"])
def test_damaged_checkpoint_is_refused(demo, tmp_path, capsys, damage):
    model_dir, main, _, _ = demo
    target = _copy_model(model_dir, tmp_path)
    weights = target / WEIGHTS_FILE
    data = bytearray(weights.read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 2]
    else:  # same length, bytes overwritten in the middle of the tensor data
        mid = len(data) // 2
        data[mid : mid + 64] = b"\xff" * 64
    weights.write_bytes(bytes(data))
    out = tmp_path / "out"
    _fails(_argv(target, main, out), capsys, out, "is damaged")
    assert not out.exists()


def test_unhashed_checkpoint_with_bad_bytes_is_refused(demo, tmp_path):
    """Without a recorded hash (older or third-party files) the load still refuses weights
    that cannot be real: unreadable files and non-finite values."""
    model_dir, _, _, _ = demo
    target = _copy_model(model_dir, tmp_path)
    config = json.loads((target / CKPT_CONFIG).read_text())
    del config["weights_sha256"]
    (target / CKPT_CONFIG).write_text(json.dumps(config))
    state = load_file(str(target / WEIGHTS_FILE))
    state["blocks.0.attn.W_O"][0, 0, 0] = float("nan")
    save_file(state, str(target / WEIGHTS_FILE))
    with pytest.raises(WorkbenchError, match=r"non-finite weights in \['blocks.0.attn.W_O'\]"):
        load_checkpoint(target)
    (target / WEIGHTS_FILE).write_bytes(b"\x00" * 100)
    with pytest.raises(WorkbenchError, match="cannot be read"):
        load_checkpoint(target)


def test_checkpoint_with_wrong_shapes_is_refused(demo, tmp_path):
    model_dir, _, _, _ = demo
    target = _copy_model(model_dir, tmp_path)
    config = json.loads((target / CKPT_CONFIG).read_text())
    config["cfg"]["d_head"] = config["cfg"]["d_head"] * 2
    (target / CKPT_CONFIG).write_text(json.dumps(config))
    with pytest.raises(WorkbenchError, match="checkpoint weights do not match its config"):
        load_checkpoint(target)


# --- fingerprints -----------------------------------------------------------------------------


def test_task_fingerprint_covers_the_header(demo):
    task = load_task(demo[1])
    base = task_fingerprint(task)
    for change in ({"metric": "logprob"}, {"prepend_bos": not task.prepend_bos},
                   {"description": task.description + "!"}):
        assert task_fingerprint(type(task)(**{**task.__dict__, **change})) != base


def test_a_folder_written_with_float_counts_still_loads_and_resumes(demo, tmp_path):
    """Before counts were written as integers, heads.csv said `24.0`: such a folder (its
    records made from those bytes) loads with the same numbers and resumes to the same best."""
    import re

    from workbench.results.fingerprint import file_digest
    from workbench.results.store import TABLES, stage_inputs

    model_dir, main, side, done = demo
    out = _copy_run(done, tmp_path)
    heads = out / "heads.csv"
    lines = heads.read_text().splitlines()
    counts = [i for i, c in enumerate(lines[0].split(",")) if "n" in c.split("_")]
    assert counts
    floats = [",".join(f"{v}.0" if i in counts and re.fullmatch(r"\d+", v) else v
                       for i, v in enumerate(row.split(","))) for row in lines[1:]]
    heads.write_text("\n".join([lines[0], *floats]) + "\n")
    config = json.loads((out / "config.json").read_text())
    config["files"]["heads"]["sha256"] = file_digest(heads)
    for name in TABLES:  # the later tables' records, as that run made them from those bytes
        if name in config["files"]:
            config["files"][name]["inputs"] = stage_inputs(name, config["config"], config["files"])
    (out / "config.json").write_text(json.dumps(config, indent=1))
    old, new = CELResult.load(out), CELResult.load(done)
    assert old.best == new.best
    assert list(old.heads.columns) == list(new.heads.columns) and len(old.heads) == len(new.heads)
    for column in new.heads.columns[3:]:
        if new.heads[column].dtype.kind in "fiu":
            a = old.heads[column].to_numpy(dtype=float)
            b = new.heads[column].to_numpy(dtype=float)
            assert ((a == b) | (a != a) & (b != b)).all(), column
    assert cli.main(_argv(model_dir, main, out, "--others", str(side))) == 0
    assert CELResult.load(out).best == ["L0H1", "L0H3", "L1H1"]
