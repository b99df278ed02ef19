"""Progress a person can follow: tqdm bars at a terminal, plain lines with an overall ETA in logs.

At a terminal (or in a notebook, where tqdm draws widgets) a run shows tqdm bars, as ever.
Written to a file (`workbench cel ... 2> run.log`, a SLURM job's log) those bars are
carriage-return frames, hundreds per stage, and say nothing about the run as a whole. So where
stderr is not a terminal, `progress_bar` returns a `PlainBar`, which writes one plain line at
most every `PLAIN_EVERY_S` seconds (what it counts, and where it stands), and each stage of
`run_cel` writes a line when it starts and when it ends (`stage`).

Each of those lines carries the run's overall ETA when the command line gave the pre-run
estimate (`tracking`, from `workbench.estimate.estimate_run`'s seconds per stage): the
stages still to run at their expected time (the estimate's likely seconds where it says them,
`RunEstimate.likely`, else the geometric mid-point of its range), scaled by how long the
stages finished so far took against their own expected time (the estimate is timed from one
forward at the moment's load: the finished stages correct it), less the time the current
stage has run. Imports no torch.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

PLAIN_EVERY_S = 30.0  # the least time between two plain progress lines of the bars
# a run that has taken this long without having printed an estimate prints one (`RunTracker`);
# `workbench cel` prints its pre-run estimate for runs it expects to take as long
LONG_RUN_S = 60.0

Span = tuple[float, float]


def is_terminal(stream) -> bool:
    """Whether `stream` is a terminal (where tqdm's frames redraw one line)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def _in_notebook() -> bool:
    """Whether tqdm draws notebook widgets here (`tqdm.auto` picks its notebook bar where
    `tqdm.autonotebook` finds a Jupyter kernel, else the terminal's)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from tqdm.autonotebook import tqdm as auto
    from tqdm.std import tqdm as std

    return auto is not std


@contextmanager
def stdout_off(off: bool = True) -> Iterator[None]:
    """Nothing on stdout while `off` (prints go to `os.devnull`), restored afterwards: for the
    `print`s of code that takes no switch (TransformerLens's `Moving model to device` and
    `Loaded pretrained model`); errors and warnings still go to stderr."""
    if not off:
        yield
        return
    import contextlib
    import os

    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        yield


def plain(stream=None) -> bool:
    """Whether progress goes to `stream` (default stderr) as plain lines: not a terminal and
    not a notebook."""
    return not is_terminal(stream or sys.stderr) and not _in_notebook()


def about(seconds: float) -> str:
    """A time rounded to its nearest unit: `~45 s`, `~3 min`, `~1.5 h` (an expected time, no
    bound; `workbench.estimate` rounds its bounds down instead)."""
    if seconds < 90:
        return f"~{seconds:.0f} s"
    if seconds < 5400:
        return f"~{seconds / 60:.0f} min"
    return f"~{seconds / 3600:.1f} h"


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _mid(span: Span) -> float:
    """The geometric mid-point of an estimate's `(low, high)` seconds."""
    low, high = span
    return math.sqrt(low * high) if low > 0 and high > 0 else max(low, high)


@dataclass
class RunTracker:
    """The run's stages, their estimated seconds and how far the run has come.

    Attributes:
        estimate: `{stage: (low, high)}` seconds for the stages still to run, in run order.
        stream: where the lines go.
        started: `time.perf_counter()` when the run started.
        likely: `{stage: seconds}` the estimate expects of a stage (else the geometric
            mid-point of its range).
    """

    estimate: dict[str, Span]
    stream: object
    started: float = field(default_factory=time.perf_counter)
    likely: dict[str, float] = field(default_factory=dict)
    current: str | None = None
    stage_started: float = 0.0
    done: list[str] = field(default_factory=list)
    took: float = 0.0  # seconds of the stages finished in this process
    last_line: float = 0.0
    announced: bool = False  # an estimate of the run's time has been printed
    plain: bool = True  # lines go to a log (False at a terminal: only `late_estimate`'s)
    shown: float = 0.0  # the largest share done a line has printed: progress never goes back

    def expected(self, stage: str) -> float:
        """A stage's expected seconds: its likely time, else its range's geometric mid-point."""
        return self.likely[stage] if stage in self.likely else _mid(self.estimate[stage])

    def scale(self) -> float:
        """How long the finished stages took against their estimate (1 before any)."""
        expected = sum(self.expected(s) for s in self.done if s in self.estimate)
        return self.took / expected if expected > 0 else 1.0

    def remaining(self, now: float | None = None) -> float | None:
        """Seconds the run still needs, by the estimate (None without one)."""
        if not self.estimate:
            return None
        now = time.perf_counter() if now is None else now
        k = self.scale()
        left = [s for s in self.estimate if s not in self.done and s != self.current]
        seconds = sum(k * self.expected(s) for s in left)
        if self.current in self.estimate:
            ran = now - self.stage_started
            low = k * self.expected(self.current)
            high = max(low, k * self.estimate[self.current][1])
            seconds += low - ran if ran < low else max(0.0, high - ran)
        return seconds

    def share(self, now: float | None = None) -> float | None:
        """The share of the run done, by the estimate; never less than a line said before
        (a stage that overruns its estimate holds the share instead of taking it back)."""
        now = time.perf_counter() if now is None else now
        left = self.remaining(now)
        if left is None:
            return None
        ran = now - self.started
        share = ran / (ran + left) if ran + left > 0 else 1.0
        return max(share, self.shown)

    def eta(self, now: float | None = None) -> str:
        """`"; run ~40% done, ETA ~3 min"`, or `""` without an estimate."""
        now = time.perf_counter() if now is None else now
        share = self.share(now)
        if share is None:
            return ""
        self.shown = share
        return f"; run ~{100 * share:.0f}% done, ETA {about(self.remaining(now))}"

    def late_estimate(self, now: float | None = None) -> str | None:
        """For a run that has taken `LONG_RUN_S` without an estimate printed: a line saying
        what it has taken and what it still needs by its progress (once; None otherwise)."""
        now = time.perf_counter() if now is None else now
        if self.announced or now - self.started < LONG_RUN_S:
            return None
        self.announced = True
        left = self.remaining(now)
        rest = (f"by its progress so far, {about(left)} more" if left is not None
                else "no estimate of the rest (none was measured)")
        return (f"estimate: this run has taken {_clock(now - self.started)}, longer than its "
                f"pre-run estimate said; {rest}")

    def line(self, text: str, now: float | None = None) -> None:
        now = time.perf_counter() if now is None else now
        late = self.late_estimate(now)
        if late is not None:
            print(late, file=self.stream, flush=True)
        if self.plain:
            print(f"[{_clock(now - self.started)}] {text}{self.eta(now)}", file=self.stream,
                  flush=True)
        self.last_line = now


_TRACKER: RunTracker | None = None


@contextmanager
def tracking(estimate: Mapping[str, Span] | None = None, stream=None,
             likely: Mapping[str, float] | None = None, announced: bool = True) -> Iterator[None]:
    """The run's progress while inside: plain lines with its ETA where `stream` (default
    stderr) is not a terminal; `estimate`: `{stage: (low, high)}` seconds of the stages to
    run; `likely`: `{stage: seconds}` expected of them, where the estimate says it;
    `announced`: whether the estimate's line was printed. If not, a run that takes over
    `LONG_RUN_S` prints one when a stage starts or ends after that (at a terminal too)."""
    global _TRACKER
    stream = stream or sys.stderr
    before = _TRACKER
    _TRACKER = RunTracker(dict(estimate or {}), stream, likely=dict(likely or {}),
                          announced=announced, plain=plain(stream))
    try:
        yield
    finally:
        _TRACKER = before


@contextmanager
def stage(name: str, enabled: bool = True) -> Iterator[None]:
    """One line when stage `name` starts and one when it ends, with the run's ETA, while a
    `tracking` is active (or, with `enabled`, to a stderr that is not a terminal)."""
    global _TRACKER
    own = _TRACKER is None and enabled and plain()
    if own:  # lines for this stage alone: no run to estimate
        _TRACKER = RunTracker({}, sys.stderr, announced=True)
    tracker = _TRACKER
    if tracker is None or not enabled:
        yield
        return
    tracker.current, tracker.stage_started = name, time.perf_counter()
    tracker.line(f"{name}: started")
    try:
        yield
        took = time.perf_counter() - tracker.stage_started
        tracker.done.append(name)
        tracker.took += took if name in tracker.estimate else 0.0
        tracker.current = None
        tracker.line(f"{name}: done in {about(took).lstrip('~')}")
    finally:
        tracker.current = None
        if own:
            _TRACKER = None


class PlainBar:
    """A progress bar as plain lines (module docstring): `update` and `close`, like tqdm's."""

    def __init__(self, total: int, desc: str, stream=None) -> None:
        self.total, self.desc, self.n = total, desc, 0
        self.stream = stream or sys.stderr
        self.started = time.perf_counter()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.perf_counter()
        tracker = _TRACKER
        last = tracker.last_line if tracker is not None else _LAST[0]
        if now - last < PLAIN_EVERY_S:
            return
        text = f"{self.desc}: {self.n}/{self.total}"
        if tracker is not None:
            where = f"{tracker.current}: " if tracker.current else ""
            tracker.line(where + text, now)
        else:
            print(f"[{_clock(now - self.started)}] {text}", file=self.stream, flush=True)
            _LAST[0] = now

    def close(self) -> None:
        pass


_LAST = [0.0]  # when a bar without a tracker last wrote a line


def progress_bar(total: int, desc: str, disable: bool = False, leave: bool = False):
    """A progress bar over `total` steps: tqdm's at a terminal or in a notebook, a
    `PlainBar` where stderr is a file or a pipe, a disabled tqdm bar when `disable`."""
    from tqdm.auto import tqdm

    if disable or not plain():
        return tqdm(total=total, desc=desc, disable=disable, leave=leave)
    return PlainBar(total, desc)
