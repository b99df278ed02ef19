"""Progress in a log (`workbench.progress`): where stderr is not a terminal a run writes plain
lines, each stage's start and end and a bar's count at most every `PLAIN_EVERY_S`, with the
run's overall ETA from the pre-run estimate, and never tqdm's carriage-return frames. The
ETA's arithmetic is checked at given times (no test waits on a clock)."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

import workbench.progress as progress
from workbench.cli.commands import REPO_ROOT
from workbench.progress import PlainBar, RunTracker, progress_bar

ESTIMATE = {"screen": (10.0, 40.0), "search": (20.0, 80.0), "confirm": (5.0, 20.0)}


def test_the_eta_is_the_estimate_corrected_by_the_stages_done():
    """Mid-points 20, 40 and 10 s (geometric); a stage that took twice its estimate doubles
    the rest; a stage past its mid-point counts down to its high end."""
    t = RunTracker(ESTIMATE, io.StringIO(), started=0.0)
    assert t.remaining(0.0) == pytest.approx(70.0)
    t.current, t.stage_started = "screen", 0.0
    assert t.remaining(5.0) == pytest.approx(65.0)  # 15 s of screening left, then 50
    assert t.remaining(30.0) == pytest.approx(50.0 + 10.0)  # past its mid: to its high end
    t.done, t.took, t.current = ["screen"], 40.0, None  # it took 40 s, twice its 20
    assert t.scale() == pytest.approx(2.0)
    assert t.remaining(40.0) == pytest.approx(2 * 40.0 + 2 * 10.0)
    assert t.eta(40.0) == "; run ~29% done, ETA ~2 min"  # 40 s of 140
    assert RunTracker({}, io.StringIO()).eta() == ""  # no estimate, no ETA


def test_the_eta_expects_the_likely_time_where_the_estimate_says_one():
    """With the estimate's likely seconds (12, 30, 6) the ETA expects them, not the ranges'
    mid-points; a stage past its likely time counts down to its high end; a stage without
    one falls back to its mid-point."""
    t = RunTracker(ESTIMATE, io.StringIO(), started=0.0,
                   likely={"screen": 12.0, "search": 30.0, "confirm": 6.0})
    assert t.remaining(0.0) == pytest.approx(48.0)
    t.current, t.stage_started = "screen", 0.0
    assert t.remaining(20.0) == pytest.approx(20.0 + 36.0)  # past 12 s: to its high end, 40
    t.done, t.took, t.current = ["screen"], 24.0, None  # twice its likely 12 s
    assert t.remaining(24.0) == pytest.approx(2 * 36.0)
    partial = RunTracker(ESTIMATE, io.StringIO(), started=0.0, likely={"screen": 12.0})
    assert partial.remaining(0.0) == pytest.approx(12.0 + 40.0 + 10.0)


def test_stage_lines_carry_the_eta_and_bars_write_plain_lines(monkeypatch):
    log = io.StringIO()  # not a terminal
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.0)
    with progress.tracking(ESTIMATE, stream=log):
        with progress.stage("screen"):
            bar = progress_bar(3, "screening task")
            assert isinstance(bar, PlainBar)
            bar.stream = log
            for _ in range(3):
                bar.update(1)
            bar.close()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    assert lines[0] == "[0:00] screen: started; run ~0% done, ETA ~70 s"
    assert [line.split("; run")[0].split("] ")[1] for line in lines[1:4]] == [
        f"screen: screening task: {i}/3" for i in (1, 2, 3)]
    assert lines[-1].startswith("[0:00] screen: done in 0 s; run ~") and "ETA" in lines[-1]


def test_bars_are_throttled_and_tqdm_stays_at_a_terminal(monkeypatch):
    log = io.StringIO()
    bar = PlainBar(1000, "masks", stream=log)
    progress._LAST[0] = 0.0
    monkeypatch.setattr(progress.time, "perf_counter", lambda: 1000.0)
    for _ in range(1000):
        bar.update(1)
    assert log.getvalue().count("\n") == 1  # one line per PLAIN_EVERY_S, not per step

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stderr", Terminal())
    assert not isinstance(progress_bar(3, "masks"), PlainBar)
    with progress.tracking(ESTIMATE):  # at a terminal: tqdm's bars, no plain lines
        assert not progress._TRACKER.plain
        with progress.stage("screen"):
            pass
    assert "screen" not in sys.stderr.getvalue()  # the stage lines are for logs
    assert isinstance(progress_bar(3, "masks", disable=True), object)


@pytest.mark.slow
def test_a_run_logged_to_a_file_writes_plain_lines_with_an_eta(tmp_path):
    """`workbench cel ... 2> log`: stage lines with the run's ETA, no carriage return."""
    from workbench.cli.demo import write_demo

    model_dir, main, side = write_demo(tmp_path / "demo")
    log = tmp_path / "stderr.log"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    argv = ["cel", "--model", str(model_dir), "--task", str(main), "--others", str(side),
            "--out", str(tmp_path / "out"), "--n-random", "20", "--n-boot", "100",
            "--device", "cpu", "--no-explain"]
    with open(log, "w") as f:
        proc = subprocess.run([sys.executable, "-m", "workbench", *argv], stdout=subprocess.PIPE,
                              stderr=f, env=env, timeout=600, text=True)
    text = log.read_text()
    assert proc.returncode == 0, text[-2000:]
    assert "\r" not in text
    lines = text.splitlines()
    for stage in ("screen", "search", "confirm"):
        started = [x for x in lines if f"] {stage}: started" in x]
        done = [x for x in lines if f"] {stage}: done in " in x]
        assert len(started) == len(done) == 1, text
        assert "ETA ~" in started[0] and "ETA ~" in done[0]
    assert lines[-1].split("] ", 1)[1].startswith("confirm: done in")


def test_the_share_done_never_goes_back():
    """A stage that overruns its high end, and a finished stage that doubles the rest, would
    lower the share done by the estimate: the lines hold the share they last printed."""
    t = RunTracker(ESTIMATE, io.StringIO(), started=0.0)
    t.current, t.stage_started = "screen", 0.0
    shares = []
    for now in (10.0, 20.0, 30.0, 40.0, 60.0, 90.0):  # the screen runs to 90 s (high: 40)
        t.eta(now)
        shares.append(t.shown)
    t.done, t.took, t.current = ["screen"], 90.0, None  # 4.5x its mid-point: the rest too
    raw = 90.0 / (90.0 + t.remaining(90.0))
    assert raw < shares[-1]  # the estimate alone would go back here
    t.eta(90.0)
    shares.append(t.shown)
    assert shares == sorted(shares) and shares[-1] == shares[-2]


def test_a_run_past_a_minute_without_an_estimate_prints_one_once():
    """The pre-run estimate line is printed for runs it expects to take over `LONG_RUN_S`;
    a run it underestimated prints one line when a stage starts or ends past that, with what
    is left by its progress, and only once; a run whose estimate was printed prints none."""
    log = io.StringIO()
    t = RunTracker(ESTIMATE, log, started=0.0, announced=False)
    t.line("screen: started", now=1.0)
    assert "estimate:" not in log.getvalue()
    t.current, t.stage_started = "screen", 1.0
    t.line("screen: 10/20", now=61.0)
    t.line("screen: 20/20", now=70.0)
    lines = [ln for ln in log.getvalue().splitlines() if ln.startswith("estimate:")]
    assert lines == ["estimate: this run has taken 1:01, longer than its pre-run estimate "
                     f"said; by its progress so far, {progress.about(t.remaining(61.0))} more"]
    quiet = io.StringIO()
    RunTracker(ESTIMATE, quiet, started=0.0, announced=True).line("x", now=100.0)
    assert "estimate:" not in quiet.getvalue()


def test_at_a_terminal_only_the_late_estimate_is_printed(monkeypatch):
    """At a terminal the bars are tqdm's and the stage lines are not printed, but a run past
    a minute without an estimate still says what is left."""
    term = io.StringIO()
    monkeypatch.setattr(progress, "plain", lambda stream=None: False)
    with progress.tracking(ESTIMATE, stream=term, announced=False):
        progress._TRACKER.started -= 120.0  # the run has taken two minutes
        with progress.stage("screen"):
            pass
    text = term.getvalue()
    assert text.startswith("estimate: this run has taken 2:00") and text.count("\n") == 1
