"""The README's table of a CEL sweep: every cell's best set of each size, from its folder.

    python bench/real_sweep.py SWEEP_FOLDER [--out table.md]

`workbench sweep` writes one results folder per cell and `sweep.csv` with the best set of each
cell. This prints, for every finished cell and every size, what a reader needs to judge a
claimed improvement: the set, its held-out gain in the task's objective with the bootstrap
interval, the accuracy gain, `p_holm`, its percentile among random sets of the same size from
all heads and from the search pool, and its side effects on the other tasks (how many it hurts
or helps, by the log-prob interval, and the worst one). It reads the tables only: nothing is
run. Cell folders that `sweep.csv` does not list (a sweep stopped early, or earlier commands
into the same folder) are read too.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workbench.results.result import mark_best  # noqa: E402
from workbench.sweep import TABLE_FILE, finished_result  # noqa: E402


def _num(x: float, digits: int) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:+.{digits}f}"


def _plain(x: float, digits: int) -> str:
    return "–" if math.isnan(x) else f"{x:.{digits}f}"


def _interval(row, metric: str, digits: int) -> str:
    d = row.get(f"d_{metric}", math.nan)
    lo, hi = row.get(f"d_{metric}_lo", math.nan), row.get(f"d_{metric}_hi", math.nan)
    return f"{_num(d, digits)} [{_num(lo, digits)}, {_num(hi, digits)}]"


def _digits(objective: str) -> int:
    return 3 if objective in ("prob_diff", "accuracy") else 2


def _side(side: pd.DataFrame, size: int) -> str:
    """Side tasks hurt / helped (log-prob interval below / above 0) and the worst one."""
    mine = side[side["size"] == size] if not side.empty else side
    if mine.empty:
        return "–"
    hurt = int((mine["d_logprob_hi"] < 0).sum())
    helped = int((mine["d_logprob_lo"] > 0).sum())
    worst = mine.loc[mine["d_logprob"].astype(float).idxmin()]
    return (f"{hurt} hurt, {helped} helped of {len(mine)}; worst {worst['task']} "
            f"{_interval(worst, 'logprob', 2)}")


def cell_rows(folder: Path) -> list[dict]:
    """One row per confirmed size of a finished cell folder (none when it is not finished)."""
    result = finished_result(folder)
    if result is None:
        return []
    cfg = result.config
    obj = cfg.objective
    c = mark_best(result.confirmation, obj, result.alpha)
    n = result.summary.get("n_examples", {})
    rows = []
    for _, r in c.sort_values("size").iterrows():
        rows.append({
            "task": cfg.task,
            "kind": cfg.kind.value if hasattr(cfg.kind, "value") else str(cfg.kind),
            "objective": obj,
            "n": f"{n.get('select', '?')}/{n.get('heldout', '?')}",
            "clean": r.get(f"clean_{obj}", math.nan),
            "size": int(r["size"]),
            "heads": str(r["heads"]),
            "best": bool(r.get("best", False)),
            "gain": _interval(r, obj, _digits(obj)),
            "accuracy": _interval(r, "accuracy", 3) if obj != "accuracy" else "",
            "p_holm": float(r.get("p_holm", math.nan)),
            "percentile": float(r.get("percentile", math.nan)),
            "pool_percentile": float(r.get("pool_percentile", math.nan)),
            "side": _side(result.side_effects, int(r["size"])),
        })
    return rows


def sweep_markdown(sweep: Path) -> str:
    """The markdown table of every finished cell of `sweep`, by folder name (`sweep.csv`
    says which cells were skipped)."""
    # `sweep.csv` lists the cells of the last command into the folder only, and a sweep
    # stopped early has none: the other cell folders are read too
    table = (pd.read_csv(sweep / TABLE_FILE) if (sweep / TABLE_FILE).is_file()
             else pd.DataFrame(columns=["model", "folder", "status"]))
    listed = set(table["folder"].astype(str))
    folders = sorted(p.name for p in sweep.iterdir()
                     if (p / "config.json").is_file() and p.name not in listed)
    table = pd.concat([table, pd.DataFrame({
        "model": [f.split("__")[0] for f in folders], "folder": folders, "status": "done"})],
        ignore_index=True).sort_values("folder", kind="stable")
    lines = [
        "| model | task (objective), ablation | select / held-out | clean | size | heads | "
        "held-out gain [95 % CI] | accuracy gain | `p_holm` | percentile | pool % | "
        "side effects (log-prob) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for cell in table.itertuples():
        if cell.status == "skipped":
            continue
        for i, r in enumerate(cell_rows(sweep / cell.folder)):
            heads = f"**{r['heads']}**" if r["best"] else r["heads"]
            model, what, n, clean = "", "", "", ""
            if i == 0:  # the cell's own columns on its first row only
                model = Path(str(cell.model)).name
                what = f"{r['task']} (`{r['objective']}`), {r['kind']}"
                n, clean = r["n"], f"{r['clean']:.3f}"
            lines.append(
                f"| {model} | {what} | {n} | {clean} | {r['size']} | {heads} | {r['gain']} "
                f"| {r['accuracy']} | {_plain(r['p_holm'], 4)} | {_plain(r['percentile'], 1)} "
                f"| {_plain(r['pool_percentile'], 1)} | {r['side']} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sweep", type=Path, help="a `workbench sweep --out` folder")
    p.add_argument("--out", type=Path, default=None, help="write the table here too")
    args = p.parse_args(argv)
    text = sweep_markdown(args.sweep)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
