"""The body of `workbench compare A B [C ...]`: results folders side by side.

The command checks what it was given before pandas or torch is imported, so a typo answers
at once (`check_compare_inputs`: at least two folders, each a CEL results folder, none given
twice, an `--out` of its own), then reads the folders with their files' checks
(`workbench.results.compare.compare`: a table edited after it was written is refused), prints
one block per (task, objective) and writes `compare.csv` and `compare.png` to `--out`.
"""

from __future__ import annotations

from pathlib import Path

from workbench.errors import WorkbenchError

DEFAULT_COMPARE_OUT = "compare_results"


def check_compare_inputs(folders: list[Path], out: Path) -> None:
    """Refuse, before pandas or torch is imported, what cannot be compared: fewer than two
    folders, one given twice, one that is not a CEL results folder, an --out that is one of
    them or a CEL results folder. (A table changed after it was written is refused when the
    folders are read, as `CELResult.load` refuses it.)"""
    if len(folders) < 2:
        raise WorkbenchError(f"workbench compare needs at least two results folders; got "
                             f"{len(folders)} ({', '.join(map(str, folders))})")
    seen: dict[Path, Path] = {}
    for folder in folders:
        if not folder.exists():
            raise WorkbenchError(f"{str(folder)!r} does not exist; expected a CEL results folder")
        if not folder.is_dir():
            raise WorkbenchError(f"{str(folder)!r} is a file; expected a CEL results folder")
        if not (folder / "config.json").is_file():
            raise WorkbenchError(f"{str(folder)!r} is not a CEL results folder (no config.json)")
        key = folder.resolve()
        if key in seen:
            also = "" if str(seen[key]) == str(folder) else f" (also as {str(seen[key])!r})"
            raise WorkbenchError(f"{str(folder)!r} is given twice{also}")
        seen[key] = folder
    if out.resolve() in seen or (out / "config.json").is_file():
        raise WorkbenchError(f"--out {str(out)!r} is a CEL results folder; write the comparison "
                             "to a folder of its own")
    if out.exists() and not out.is_dir():
        raise WorkbenchError(f"--out {str(out)!r} is a file; expected a folder")


def compare_command(args) -> int:
    """Run `workbench compare`; returns the exit status."""
    folders = [Path(f) for f in args.folders]
    check_compare_inputs(folders, Path(args.out))  # no pandas, no torch yet
    from workbench.results.compare import (
        COMPARE_FIGURE,
        COMPARE_FILE,
        compare,
        compare_lines,
        save_compare,
    )

    table = compare(*folders)
    out = save_compare(table, args.out, plot=not args.no_plots)
    print(f"compare: {len(folders)} runs")
    print("\n".join(compare_lines(table)))
    figure = "" if args.no_plots else f", figure: {out / COMPARE_FIGURE}"
    print(f"\ntable: {out / COMPARE_FILE}{figure}")
    return 0
