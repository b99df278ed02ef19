"""The confirmation stage (`workbench.confirmation.stage`) resumes from its last finished size:
a run interrupted inside the confirmation, between sizes or inside the trade-off table,
computes on its rerun only the sizes it had not finished, and its folder is then the same,
byte for byte, as that of a run never interrupted. Its checkpoint proves its origin like the
tables (a changed one is refused) and leaves no file in a finished folder."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

import workbench.confirmation.stage as stage
from tests.golden import TINY, config_text, report_text, tiny_inputs
from workbench.errors import WorkbenchError
from workbench.pipeline import run_cel
from workbench.results.store import CONFIG_FILE, LOCK_FILE, read_run_file
from workbench.tasks.task import load_task

# the tiny golden model with three sizes, plots and every stage: seconds
SETTINGS = {**TINY, "max_size": 3, "plots": True, "kind": "zero", "method": "exact"}
PARTIAL = "confirm.partial.json"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """The tiny golden model and tasks, with a second side task named to sort before the
    first (a summary read back from JSON has its keys sorted; the report keeps run order)."""
    folder = tmp_path_factory.mktemp("tiny")
    model, main, side = tiny_inputs(folder)
    aside = folder / "aside.jsonl"
    aside.write_text(side.read_text().replace('"name": "side"', '"name": "aside"', 1))
    return model, load_task(main), [load_task(side), load_task(aside)]


@pytest.fixture(scope="module")
def uninterrupted(inputs, tmp_path_factory):
    model, main, side = inputs
    out = tmp_path_factory.mktemp("whole") / "out"
    run_cel(model, main, others=side, out_dir=out, **SETTINGS)
    return out


def _files(folder: Path) -> dict[str, str]:
    """Every file of a results folder as compared: its bytes' sha256, report.md without its
    timings and environment lines, config.json without them (`tests/golden.py`)."""
    out = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        name = str(path.relative_to(folder))
        if name == "report.md":
            text = report_text(path)
        elif name == CONFIG_FILE:
            text = config_text(path)
        else:
            text = path.read_bytes().hex()
        out[name] = hashlib.sha256(text.encode()).hexdigest()
    return out


def _size(name: str, args: tuple) -> int:
    """The size a call of `confirm_size(heldout, size, ...)` or `tradeoff_rows(heldout,
    others, size, ...)` is for."""
    return args[1] if name == "confirm_size" else args[2]


def _interrupt_after(monkeypatch, name: str, calls: int) -> list:
    """`stage.<name>` raises KeyboardInterrupt on its call number `calls + 1`; returns the
    sizes it was called for."""
    real, sizes = getattr(stage, name), []

    def counted(*args, **kwargs):
        if len(sizes) == calls:
            raise KeyboardInterrupt
        sizes.append(_size(name, args))
        return real(*args, **kwargs)

    monkeypatch.setattr(stage, name, counted)
    return sizes


@pytest.mark.parametrize("where, done", [("confirm_size", 1), ("confirm_size", 2),
                                          ("tradeoff_rows", 1)])
def test_an_interrupted_confirmation_resumes_from_its_last_size_byte_for_byte(
        where, done, inputs, uninterrupted, tmp_path, monkeypatch):
    model, main, side = inputs
    out = tmp_path / "out"
    sizes = _interrupt_after(monkeypatch, where, done)
    with pytest.raises(KeyboardInterrupt):
        run_cel(model, main, others=side, out_dir=out, **SETTINGS)
    monkeypatch.undo()
    assert sizes == list(range(1, done + 1))
    recorded = read_run_file(out)
    assert set(recorded["files"]) == {"heads", "combos"}  # no confirmation table yet
    assert set(recorded["partial"]) == {"confirm"} and (out / PARTIAL).is_file()
    assert not (out / LOCK_FILE).exists() and not list(out.glob("*.tmp"))

    computed = {"confirm_size": [], "tradeoff_rows": []}
    for name in computed:  # the rerun computes only what the interrupted run had not saved
        real = getattr(stage, name)

        def record(*args, _real=real, _seen=computed[name], _name=name, **kwargs):
            _seen.append(_size(_name, args))
            return _real(*args, **kwargs)

        monkeypatch.setattr(stage, name, record)
    run_cel(model, main, others=side, out_dir=out, **SETTINGS)
    if where == "confirm_size":
        assert computed == {"confirm_size": list(range(done + 1, 4)), "tradeoff_rows": [1, 2, 3]}
    else:
        assert computed == {"confirm_size": [], "tradeoff_rows": list(range(done + 1, 4))}
    assert not (out / PARTIAL).exists() and "partial" not in read_run_file(out)
    assert _files(out) == _files(uninterrupted)


def test_a_changed_checkpoint_is_refused_and_an_unrecorded_one_is_dropped(
        inputs, tmp_path, monkeypatch):
    model, main, side = inputs
    out = tmp_path / "out"
    _interrupt_after(monkeypatch, "confirm_size", 1)
    with pytest.raises(KeyboardInterrupt):
        run_cel(model, main, others=side, out_dir=out, **SETTINGS)
    monkeypatch.undo()
    saved = (out / PARTIAL).read_text()
    (out / PARTIAL).write_text(saved.replace('"size": 1', '"size": 1 ', 1))
    with pytest.raises(WorkbenchError, match=f"{PARTIAL} was changed after it was written"):
        run_cel(model, main, others=side, out_dir=out, **SETTINGS)
    # written but never recorded (the run stopped between the two writes): not taken up
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    data = read_run_file(copy)
    del data["partial"]
    (copy / CONFIG_FILE).write_text(json.dumps(data))
    computed = []
    real = stage.confirm_size
    monkeypatch.setattr(stage, "confirm_size",
                        lambda *a, **k: computed.append(a[1]) or real(*a, **k))
    run_cel(model, main, others=side, out_dir=copy, **SETTINGS)
    assert computed == [1, 2, 3] and not (copy / PARTIAL).exists()
