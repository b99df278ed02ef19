"""The search stage's checkpoint: every scoring call recorded, and replayed on a rerun.

Everything in the search is determined by its inputs (the config, which carries the model's
and the tasks' fingerprints, and `heads.csv`): the strategies draw their knockout masks from
the config's seed, racing scores a seeded order of the examples, and every decision (a racing
look, a regression, the finalists, a side-task guard) is made from the scores the scorer
returns. So a rerun that gets, call for call, the scores an interrupted run got makes every
decision again and writes the same numbers, and needs no other state of the strategies.

`ReplayScorer` wraps each scorer of the stage (anything with `clean()` and `score(masks, progress,
desc, rows)`, `workbench.scoring.scorer.Scorer`) and records each `score` call: the scorer's name,
the masks, the rows and the returned scores, kept where they were computed (no copy to the CPU in
the search's loops). With `PART_MASKS` set, a call of more masks (the interaction search's knockouts
on a real model) is scored and recorded in parts of that many, so that an interrupt inside it keeps
the parts done (off by default: see `PART_MASKS`). On a rerun the recorded calls are answered from
the record, in order, while each asks the same scorer for the same masks and rows; the first call
past the record (or one that differs from it, which a deterministic search never makes) is computed,
and recorded in turn. The search space counts the forward-equivalents of the calls it makes,
replayed or not, so the summary is the same too.

`SearchCheckpoint` keeps the record in the results folder, `search.partial.pt`
(`workbench.results.store.ResultStore.save_partial_bytes`: written atomically, recorded in
`config.json` with its sha256 and the inputs of `combos.csv`, so that a checkpoint of other
inputs is not taken up): every `SAVE_SECONDS` of the stage and when the stage is interrupted
(Ctrl-C, SIGTERM, an error), copying to the CPU only the calls recorded since the last save.
A rerun with the same inputs loads it; saving the stage's table deletes it. A resumed run's
folder is the same, byte for byte, as an uninterrupted one's (`tests/search/test_replay.py`).
"""

from __future__ import annotations

import io
import pickle
import time

import torch
from torch import Tensor

STAGE = "search"  # the checkpoint's name (`search.partial.pt`)
FORMAT = "cel-search-replay"
SAVE_SECONDS = 30.0  # the longest a run may lose to an interrupt that cannot save (SIGKILL)
# A call with more masks is scored and recorded in parts of this many; None: never split. Off by
# default: a part changes which masks share a forward pass, so a real model's knockout effects
# would move in their last float bits against runs made before, and a near-tie could pick
# another finalist; the knockouts (one call) are then lost to an interrupt inside them.
PART_MASKS: int | None = None


class ReplayScorer:
    """A scorer (`scorer`) whose `score` calls are recorded in `log` and, while the log holds
    recorded calls not yet replayed, answered from it (module docstring). Every other
    attribute is the wrapped scorer's."""

    def __init__(self, scorer, name: str, log: "_Log", after=None) -> None:
        self.scorer, self.name, self.log = scorer, name, log
        self.after = after  # called after each computed call (the checkpoint's timed save)

    def __getattr__(self, attr: str):
        inner = self.__dict__.get("scorer")
        if inner is None:
            raise AttributeError(attr)
        return getattr(inner, attr)

    def clean(self) -> dict[str, Tensor]:
        return self.scorer.clean()

    def score(self, masks: Tensor, progress: bool = False, desc: str = "masks",
              rows: Tensor | None = None) -> dict[str, Tensor]:
        """The wrapped scorer's `score`, from the record where it holds this call."""
        n = int(masks.shape[0])
        if PART_MASKS is None or n <= PART_MASKS:
            return self._part(masks, progress, desc, rows)
        parts = [self._part(masks[i:i + PART_MASKS], progress,
                            f"{desc} [{i // PART_MASKS + 1}/{-(-n // PART_MASKS)}]", rows)
                 for i in range(0, n, PART_MASKS)]
        return {m: torch.cat([p[m] for p in parts]) for m in parts[0]}

    def _part(self, masks, progress, desc, rows) -> dict[str, Tensor]:
        recorded = self.log.replay(self.name, masks, rows)
        if recorded is not None:
            device = next(iter(self.scorer.clean().values())).device
            return {m: v.to(device) for m, v in recorded.items()}
        scores = self.scorer.score(masks, progress, desc, rows=rows)
        self.log.record(self.name, masks, rows, scores)
        if self.after is not None:
            self.after()
        return scores


class _Log:
    """The calls of one search stage, in order: `calls[:saved]` are on the CPU as saved (or
    loaded), the rest as computed; `next` is the first call not yet replayed."""

    def __init__(self, calls: list[dict], keep: bool = True) -> None:
        self.calls, self.saved, self.next = calls, len(calls), 0
        self.keep = keep  # False: nothing is recorded (a run without a results folder)
        self.changed = False  # since the last save

    def replay(self, name: str, masks: Tensor, rows: Tensor | None) -> dict | None:
        if self.next >= len(self.calls):
            return None
        call = self.calls[self.next]
        same = (call["scorer"] == name and torch.equal(call["masks"], (masks != 0).cpu())
                and (call["rows"] is None) == (rows is None)
                and (rows is None or torch.equal(call["rows"], rows.cpu().long())))
        if not same:  # the rest of the record is not this run's: compute from here
            del self.calls[self.next:]
            self.saved = min(self.saved, self.next)
            self.changed = True
            return None
        self.next += 1
        return call["scores"]

    def record(self, name: str, masks: Tensor, rows: Tensor | None, scores: dict) -> None:
        if not self.keep:
            return
        self.calls.append({"scorer": name, "masks": masks, "rows": rows, "scores": dict(scores)})
        self.next = len(self.calls)
        self.changed = True

    def to_cpu(self) -> list[dict]:
        """Every call on the CPU (the calls since the last save copied once)."""
        for call in self.calls[self.saved:]:
            call["masks"] = (call["masks"] != 0).cpu()
            call["rows"] = None if call["rows"] is None else call["rows"].cpu().long()
            call["scores"] = {m: v.cpu() for m, v in call["scores"].items()}
        self.saved = len(self.calls)
        return self.calls


class SearchCheckpoint:
    """The record of a search stage's scoring calls, loaded from and saved to the results
    folder (`store`, an open `workbench.results.store.ResultStore`; None or an in-memory
    store: nothing is recorded, and large calls are still scored in parts, as with one).

    Use as a context manager around the stage, and `wrap` each scorer it scores with: the
    record is saved every `SAVE_SECONDS` and when the block ends with an exception.
    `seconds` is what earlier runs spent on the stage (0 for a fresh one).
    """

    def __init__(self, store, config: dict, result) -> None:
        self.store, self.result = store, result
        self.inputs = (store.stage_inputs("combos", config)
                       if store is not None and store.folder is not None else None)
        saved = self._load()
        self.log = _Log(saved.get("calls", []), keep=self.inputs is not None)
        self.seconds = float(saved.get("seconds", 0.0))
        self.started = self.last_save = time.perf_counter()

    def _load(self) -> dict:
        data = None if self.inputs is None else self.store.load_partial_bytes(STAGE, self.inputs)
        if data is None:
            return {}
        try:
            saved = torch.load(io.BytesIO(data), weights_only=True)
        except (RuntimeError, ValueError, EOFError, pickle.UnpicklingError):
            return {}  # not a record this version reads (its bytes are as written: sha256)
        # a record of other inputs (copied in from another folder) is not taken up
        if saved.get("format") != FORMAT or saved.get("inputs") != self.inputs:
            return {}
        return saved

    def wrap(self, scorer, name: str) -> ReplayScorer:
        """`scorer` recorded and replayed under `name` (one name per scorer of the stage)."""
        return ReplayScorer(scorer, name, self.log, after=self._timed_save)

    def _timed_save(self) -> None:
        if time.perf_counter() - self.last_save >= SAVE_SECONDS:
            self.save()

    def save(self) -> None:
        """Write the record (when anything changed since the last save)."""
        self.last_save = time.perf_counter()
        if self.inputs is None or not self.log.changed:
            return
        buffer = io.BytesIO()
        torch.save({"format": FORMAT, "inputs": self.inputs, "calls": self.log.to_cpu(),
                    "seconds": self.seconds + time.perf_counter() - self.started}, buffer)
        self.store.save_partial_bytes(self.result.run_file(), STAGE, self.inputs,
                                      buffer.getvalue(), suffix="pt")
        self.log.changed = False

    def __enter__(self) -> "SearchCheckpoint":
        return self

    def __exit__(self, kind, *exc) -> None:
        if kind is not None:  # interrupted or failed: keep the calls done
            self.save()

