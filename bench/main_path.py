"""The main job's path through the code: which modules the run object passes through.

Traces `run_prepared(run)` on the CEL micro model (`workbench.cli.demo`, a known answer, a few
seconds) with `sys.setprofile`. A call is on the path when one of its arguments is the run object
itself (`prepare_run`'s `CELRun`; the run's own methods are not counted: they use the run, they do
not pass it on), so the trace follows the run through every call that passes
it on, whatever the stage. Each call is attributed to its unit: a package folder of `workbench`
(`workbench.confirmation`) or a top-level module (`workbench.pipeline`). Printed: the units in
the order first entered, how many times the path enters each, the number of units, and the
returns, an entry into a unit the path had already left (A -> B -> A counts one).

    python bench/main_path.py              # on this checkout
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def unit(module: str) -> str:
    """`workbench.confirmation.stage` -> `workbench.confirmation`; `workbench.pipeline` stays."""
    parts = module.split(".")
    if len(parts) >= 3 or (len(parts) == 2 and (ROOT / "workbench" / parts[1]).is_dir()):
        return ".".join(parts[:2])
    return module


def trace_path(run, go) -> list[str]:
    """The modules, in call order, of every call made while `go()` runs that takes `run` as an
    argument (positional or keyword; not the run's own methods, whose `self` it is)."""
    path: list[str] = []

    def profile(frame, event, arg):
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("workbench"):
            return
        code = frame.f_code
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        # the run's own methods (`self` is the run) use it; they do not pass it on
        if any(frame.f_locals.get(n) is run for n in names if n != "self"):
            path.append(module)

    sys.setprofile(profile)
    try:
        go()
    finally:
        sys.setprofile(None)
    return path


def returns(path: list[str], driver: str | None = None) -> tuple[list[str], int]:
    """The path with consecutive repeats merged, and its count of re-entries into a unit
    already left (not counting the `driver`'s, the unit that loops over the stages)."""
    merged = [u for i, u in enumerate(path) if i == 0 or path[i - 1] != u]
    seen, back = set(), 0
    for u in merged:
        back += u in seen and u != driver
        seen.add(u)
    return merged, back


def main() -> None:
    from workbench.cli.demo import micro_model, write_micro_tasks
    from workbench.pipeline import prepare_run, run_prepared

    with tempfile.TemporaryDirectory() as tmp:
        main_task, side = write_micro_tasks(Path(tmp))
        run = prepare_run(micro_model(), str(main_task), [str(side)], n_random=20, n_boot=200,
                          max_size=2)
        path = trace_path(run, lambda: run_prepared(run, out_dir=Path(tmp) / "out", plots=False))
    modules = {m for m in path}
    path = [unit(m) for m in path]
    merged, back = returns(path)
    entries = Counter(merged)
    print(f"modules on the path: {len(modules)}; units (packages, top-level modules): "
          f"{len(entries)}; returns to a unit already left: {back}, of which into "
          f"{path[0]}, which loops over the stages: {back - returns(path, path[0])[1]}")
    for u in dict.fromkeys(merged):
        print(f"  {u}: entered {entries[u]} time(s)")
    print("order: " + " -> ".join(merged))


if __name__ == "__main__":
    main()
