"""Where a CEL run's time goes, from a py-spy profile of `workbench cel`: seconds and
forward-times per stage and sub-stage (docs/speed.md, "Where a default run's forward-times go").

Record a run with py-spy (`pip install py-spy`; not a dependency), raw output:

    py-spy record -o run.prof -f raw -r 20 -- .venv/bin/python -m workbench cel \\
        --model smollm2-135m --task ioi --others induction --threads 2 --out /tmp/smol
    .venv/bin/python bench/profile_stages.py run.prof --rate 20 --out /tmp/smol

Each sample is a wall-clock stack; it is counted once, under the first of these frames it
holds: the search's knockouts and finalists (`interaction`'s two scoring calls), the random
baselines from all heads and from the pool (`random_baselines`' two looks), the found sets'
passes (`confirm_size`'s), the trade-off table (`tradeoff_rows`), the confirmation's rest,
screening, the explanation's removal passes, outcomes and capture, the explanation's rest,
and everything else (loading, setup, writing). With `--out`, the run's own forward
(`config.json`'s `cost.forward_s`) turns seconds into forward-times.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

# (label, function, the source line in that function that marks the part, or None for any)
PARTS = (
    ("search: knockouts", "interaction", "space.evaluate(sets"),
    ("search: finalists", "interaction", "space.score_sets(sets"),
    ("search: other", "search_stage", None),
    ("screen", "screen_stage", None),
    ("confirm: random baselines, all heads", "random_baselines", "all"),
    ("confirm: random baselines, pool", "random_baselines", "pool"),
    ("confirm: found sets", "confirm_size", None),
    ("confirm: trade-off table", "tradeoff_rows", None),
    ("confirm: other", "confirm_stage", None),
    ("explain: removal passes", "removal_table", None),
    ("explain: outcomes", "ablation_outcomes", None),
    ("explain: capture", "capture", None),
    ("explain: other", "explain_stage", None),  # `workbench cel`'s explanation
    ("explain: other", "explain_folder", None),  # `workbench explain`'s
)


def frames(stack: str) -> list[tuple[str, str, int]]:
    """`(function, file, line)` of each workbench frame of a raw py-spy stack, outermost
    first."""
    out = []
    for f in stack.split(";"):
        if "workbench/" not in f or " (" not in f:
            continue
        name, where = f.split(" (", 1)
        path, _, line = where.rstrip(")").rpartition(":")
        out.append((name, path, int(line) if line.isdigit() else -1))
    return out


def part_of(stack: list[tuple[str, str, int]], marks: dict) -> str:
    """The `PARTS` label a sample belongs to (`marks`: a part's marking line number)."""
    names = [f[0] for f in stack]
    for label, fn, mark in PARTS:
        if fn not in names:
            continue
        if mark is None:
            return label
        i = names.index(fn)
        if stack[i][2] == marks.get(label):
            return label
    return "load, setup, writing"


def source_lines(root: Path) -> dict:
    """The line numbers of the marked calls in this checkout's sources."""
    marks = {}
    interaction = (root / "workbench/search/strategies/interaction.py").read_text().splitlines()
    for label, _fn, mark in PARTS[:2]:
        marks[label] = next(i + 1 for i, x in enumerate(interaction) if mark in x.strip())
    baseline = (root / "workbench/confirmation/baseline.py").read_text().splitlines()
    calls = [i + 1 for i, x in enumerate(baseline) if "draw_in_looks(" in x and "def " not in x]
    marks["confirm: random baselines, all heads"], marks["confirm: random baselines, pool"] = \
        calls[0], calls[-1]
    return marks


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("profile", help="py-spy record -f raw output")
    p.add_argument("--rate", type=float, default=20.0, help="py-spy's samples per second")
    p.add_argument("--out", default=None, help="the run's results folder (for its forward)")
    args = p.parse_args()
    marks = source_lines(Path(__file__).resolve().parent.parent)
    seconds: Counter = Counter()
    for line in Path(args.profile).read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        # a frame's line is the one it executes: in a caller, the line of its call
        seconds[part_of(frames(stack), marks)] += int(n) / args.rate
    forward = None
    if args.out:
        forward = json.loads((Path(args.out) / "config.json").read_text())["cost"]["forward_s"]
    total = sum(seconds.values())
    print(f"| part | seconds | {'forward-times | ' if forward else ''}share |")
    print(f"|---|---|{'---|' if forward else ''}---|")
    for label in [*(p[0] for p in PARTS), "load, setup, writing"]:
        if label in seconds:
            s = seconds[label]
            ft = f" {s / forward:.1f} |" if forward else ""
            print(f"| {label} | {s:.0f} |{ft} {s / total:.1%} |")
    print(f"| all | {total:.0f} |{f' {total / forward:.1f} |' if forward else ''} 100% |")


if __name__ == "__main__":
    main()
