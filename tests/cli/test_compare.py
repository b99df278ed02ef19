"""`workbench compare` (`workbench.cli.compare`): two tiny runs of the demo side by side, and
every bad input refused in one line with exit status 2 (the parser's tests check that those
answer before pandas or torch is imported)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

import workbench.cli.parser as cli

FAST = ["--n-random", "20", "--n-boot", "100", "--quiet"]


GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def test_compare_puts_two_ablations_side_by_side(demo_files, tmp_path, capsys):
    """Two tiny runs of the demo (zero and mean ablation) in one block, every confirmed set a
    row of compare.csv, the figure written."""
    model_dir, main, side = demo_files
    folders = []
    for kind in ("zero", "mean"):
        out = tmp_path / kind
        assert cli.main(["cel", "--model", str(model_dir), "--task", str(main), "--others",
                         str(side), "--ablation", kind, "--out", str(out), "--device", "cpu",
                         "--no-explain", "--max-size", "2", *FAST]) == 0
        folders.append(out)
    capsys.readouterr()
    cmp = tmp_path / "cmp"
    assert cli.main(["compare", *map(str, folders), "--out", str(cmp)]) == 0
    printed = capsys.readouterr().out
    blocks = [ln for ln in printed.splitlines() if ln.startswith("task ")]
    assert blocks == ["task micro_map, objective accuracy (held out; ablated - clean): zero, mean"]
    table = pd.read_csv(cmp / "compare.csv")
    for folder in folders:
        conf = pd.read_csv(folder / "confirmation.csv")
        mine = table[table["run"] == folder.name]
        assert mine["heads"].tolist() == conf["heads"].tolist()
        assert mine["d_accuracy"].tolist() == conf["d_accuracy"].tolist()
        assert set(mine["kind"]) == {folder.name}
    assert (cmp / "compare.png").is_file()
    assert f"table: {cmp / 'compare.csv'}, figure: {cmp / 'compare.png'}" in printed


@pytest.mark.parametrize("case,message", [
    ("one", "needs at least two results folders; got 1"),
    ("not_results", "is not a CEL results folder (no config.json)"),
    ("missing", "does not exist; expected a CEL results folder"),
    ("twice", "is given twice"),
    ("tampered", "heads.csv was changed, truncated or replaced after it was written"),
    ("out_is_a_run", "is a CEL results folder; write the comparison to a folder of its own"),
])
def test_compare_refuses_bad_folders_in_one_line(case, message, tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(GOLDEN / "tiny_zero_exact", a)
    shutil.copytree(GOLDEN / "tiny_mean_exact", b)
    argv = {"one": [a], "not_results": [a, tmp_path], "missing": [a, tmp_path / "nope"],
            "twice": [a, b, Path(f"{a}/")], "tampered": [a, b],
            "out_is_a_run": [a, b, "--out", b]}[case]
    if case == "tampered":
        with (b / "heads.csv").open("a") as f:
            f.write("1,2\n")
    out = [] if "--out" in argv else ["--out", str(tmp_path / "cmp")]
    assert cli.main(["compare", *map(str, argv), *out]) == 2
    err = capsys.readouterr().err
    assert err.startswith("workbench: error:") and message in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "cmp").exists()
