"""The search stage resumes from its last finished batch of sets (`workbench.search.replay`): a
run interrupted inside the search saves the scoring calls it finished into
`search.partial.pt`, the rerun replays them and computes only the rest, and its folder is then
the same, byte for byte, as that of a run never interrupted. A checkpoint made from other
inputs is not taken up."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest
import torch

import workbench.pipeline as pipeline
import workbench.search.replay as replay
from tests.confirmation.test_stage import SETTINGS, _files
from tests.golden import tiny_inputs
from workbench.results.store import (
    CONFIG_FILE,
    LOCK_FILE,
    ResultStore,
    partial_name,
    read_run_file,
)
from workbench.scoring.scorer import MaskScorer
from workbench.search.stage import search_stage
from workbench.tasks.task import load_task

PARTIAL = "search.partial.pt"
# the tiny golden model's search: the knockouts (42 masks on 16 examples) and two racing looks
# of the finalist sets; with side-task guards, then a side-task check per size
REAL_STAGE, REAL_SCORE = search_stage, MaskScorer.score
GUARDED = {"guards": ("main:accuracy:0.05", "side:accuracy:0.1"), "guard_rule": "no_fall"}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    model, main, side = tiny_inputs(tmp_path_factory.mktemp("tiny"))
    return model, load_task(main), [load_task(side)]


def _run(inputs, out, **settings):
    model, main, side = inputs
    return pipeline.run_cel(model, main, others=side, out_dir=out, **{**SETTINGS, **settings})


def _search_calls(monkeypatch, stop_at: int | None = None) -> list[int]:
    """Count `MaskScorer.score` calls made inside the search stage (their numbers of masks);
    with `stop_at`, the call after `stop_at` of them raises KeyboardInterrupt (replacing
    an earlier count)."""
    calls, inside = [], [False]
    real_stage, real_score = REAL_STAGE, REAL_SCORE

    def stage(*args, **kwargs):
        inside[0] = True
        try:
            return real_stage(*args, **kwargs)
        finally:
            inside[0] = False

    def score(self, masks, *args, **kwargs):
        if inside[0]:
            if len(calls) == stop_at:
                raise KeyboardInterrupt
            calls.append(int(masks.shape[0]))
        return real_score(self, masks, *args, **kwargs)

    monkeypatch.setattr(pipeline, "STAGES", tuple(
        replace(s, run=stage) if s.name == "search" else s for s in pipeline.STAGES))
    monkeypatch.setattr(MaskScorer, "score", score)
    return calls


@pytest.fixture(scope="module")
def uninterrupted(inputs, tmp_path_factory):
    """Finished folders of the plain and the guarded run, and the search calls each made."""
    done = {}
    with pytest.MonkeyPatch.context() as mp:
        for name, settings in (("plain", {}), ("guarded", GUARDED)):
            calls = _search_calls(mp)
            out = tmp_path_factory.mktemp(name) / "out"
            _run(inputs, out, **settings)
            assert not (out / PARTIAL).exists()
            done[name] = (out, list(calls))
    return done


@pytest.mark.parametrize("case, done, part", [
    ("plain", 1, None),  # after the knockouts
    ("plain", 2, None),  # after the finalists' first look
    ("plain", 3, 10),  # the knockouts in parts of 10 masks: after their third part
    ("guarded", 4, None),  # inside the side-task guards
])
def test_an_interrupted_search_resumes_from_its_last_call_byte_for_byte(
        case, done, part, inputs, uninterrupted, tmp_path, monkeypatch):
    settings = GUARDED if case == "guarded" else {}
    whole, full = uninterrupted[case]
    if part is not None:  # the reference is split the same way
        monkeypatch.setattr(replay, "PART_MASKS", part)
        full = _search_calls(monkeypatch)
        whole = tmp_path / "whole" / "out"  # view.html names its folder
        _run(inputs, whole, **settings)
        assert full[:5] == [10, 10, 10, 10, 2]
    assert len(full) > done
    out = tmp_path / "out"
    _search_calls(monkeypatch, stop_at=done)
    with pytest.raises(KeyboardInterrupt):
        _run(inputs, out, **settings)
    recorded = read_run_file(out)
    assert set(recorded["files"]) == {"heads"}  # no combos table yet
    assert set(recorded["partial"]) == {"search"} and recorded["partial"]["search"]["file"] == \
        PARTIAL and (out / PARTIAL).is_file()
    assert not (out / LOCK_FILE).exists() and not list(out.glob("*.tmp"))

    computed = _search_calls(monkeypatch)
    _run(inputs, out, **settings)
    assert computed == full[done:]  # the rerun computed only the calls not saved
    assert not (out / PARTIAL).exists() and "partial" not in read_run_file(out)
    assert _files(out) == _files(whole)


def test_a_run_killed_without_saving_resumes_from_its_last_timed_save(
        inputs, uninterrupted, tmp_path, monkeypatch):
    """SIGKILL leaves no chance to save: the checkpoint saved every `SAVE_SECONDS` (here after
    every call) is what the rerun takes up."""
    whole, full = uninterrupted["plain"]
    out = tmp_path / "out"
    monkeypatch.setattr(replay, "SAVE_SECONDS", 0.0)
    monkeypatch.setattr(replay.SearchCheckpoint, "__exit__", lambda self, *exc: None)
    _search_calls(monkeypatch, stop_at=2)
    with pytest.raises(KeyboardInterrupt):
        _run(inputs, out)
    monkeypatch.undo()
    computed = _search_calls(monkeypatch)
    _run(inputs, out)
    assert computed == full[2:]
    assert _files(out) == _files(whole)


def test_a_checkpoint_of_other_inputs_is_not_taken_up(inputs, uninterrupted, tmp_path,
                                                      monkeypatch):
    """A checkpoint copied in from a run of another config is ignored, whether `config.json`
    records it with its own inputs or claims this run's: the rerun computes every call."""
    whole, full = uninterrupted["plain"]
    other, out = tmp_path / "other", tmp_path / "out"
    _search_calls(monkeypatch, stop_at=2)
    with pytest.raises(KeyboardInterrupt):
        _run(inputs, other, seed=1)
    _search_calls(monkeypatch, stop_at=2)
    with pytest.raises(KeyboardInterrupt):
        _run(inputs, out)
    monkeypatch.undo()
    theirs = read_run_file(other)["partial"]["search"]
    for claim in ("theirs", "ours"):
        folder = tmp_path / claim / "out"  # view.html names its folder
        shutil.copytree(out, folder)
        shutil.copy(other / PARTIAL, folder / PARTIAL)
        data = read_run_file(folder)
        data["partial"]["search"] = {**data["partial"]["search"], "sha256": theirs["sha256"],
                                     **({"inputs": theirs["inputs"]} if claim == "theirs" else {})}
        (folder / CONFIG_FILE).write_text(json.dumps(data))
        computed = _search_calls(monkeypatch)
        _run(inputs, folder)
        monkeypatch.undo()
        assert computed == full, claim
        assert _files(folder) == _files(whole)


class _Scorer:
    """A scorer whose every computed call returns a new value (its number) on 4 examples."""

    def __init__(self) -> None:
        self.computed = 0

    def clean(self):
        return {"m": torch.zeros(4)}

    def score(self, masks, progress=False, desc="masks", rows=None):
        self.computed += 1
        return {"m": torch.full((len(masks), 4 if rows is None else len(rows)),
                                float(self.computed))}


class _Result:
    def run_file(self) -> dict:
        return {"format": "cel-result", "config": {}}


def test_calls_are_replayed_in_order_until_one_differs_and_large_ones_in_parts(
        tmp_path, monkeypatch):
    monkeypatch.setattr(replay, "PART_MASKS", 2)
    masks = [torch.zeros(n, 3, 3).index_fill_(1, torch.tensor([i]), 1.0)  # call i: layer i
             for i, n in enumerate((1, 3, 2))]
    rows = torch.tensor([2, 0])
    with ResultStore(tmp_path / "out") as store:
        first, scorer = replay.SearchCheckpoint(store, {}, _Result()), _Scorer()
        wrapped = first.wrap(scorer, "main")
        before = [wrapped.score(masks[0]), wrapped.score(masks[1]),
                  wrapped.score(masks[2], rows=rows)]
        assert scorer.computed == 4 and before[1]["m"][:, 0].tolist() == [2.0, 2.0, 3.0]
        first.save()
        assert not list(store.folder.glob("*.tmp"))

        again, scorer = replay.SearchCheckpoint(store, {}, _Result()), _Scorer()
        wrapped = again.wrap(scorer, "main")
        # every call replayed, none computed
        for m, r, b in zip(masks, (None, None, rows), before, strict=True):
            assert torch.equal(wrapped.score(m, rows=r)["m"], b["m"])
        assert scorer.computed == 0

        other, scorer = replay.SearchCheckpoint(store, {}, _Result()), _Scorer()
        wrapped = other.wrap(scorer, "main")
        assert torch.equal(wrapped.score(masks[0])["m"], before[0]["m"])
        assert wrapped.score(masks[2])["m"][0, 0] == 1.0  # not the recorded call: computed
        assert wrapped.score(masks[1])["m"][0, 0] == 2.0 and scorer.computed == 3  # and the rest
        # another config's folder records other inputs: nothing is replayed
        assert replay.SearchCheckpoint(store, {"seed": 1}, _Result()).log.calls == []


def test_a_checkpoint_is_found_by_its_recorded_name_inside_the_folder_only():
    assert partial_name("confirm", {}) == "confirm.partial.json"
    assert partial_name("search", {"file": "search.partial.pt"}) == "search.partial.pt"
    assert partial_name("search", {"file": "../search.partial.pt"}) == "search.partial.json"
    assert partial_name("search", {"file": "heads.csv"}) == "search.partial.json"
