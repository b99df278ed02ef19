"""`view.html`: one self-contained page per results folder, checked cell by cell and in a browser.

The static checks read the page with `html.parser`: it references no URL (the plots are
`data:` URIs holding the PNG files' bytes), and every cell of its tables holds the CSV's exact
text, shown to 4 significant digits. The browser check opens the page in Debian's headless
chromium (`--dump-dom` after the inline script ran) and checks what only the script does:
the per-head table sorted by the objective, the row counts, a filter from the page's address.
Without a chromium on the machine that test is skipped with its reason (`.ci/run` installs
one where it can).
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from tests.browser import SKIP_REASON, chromium, headless, offline_loads
from workbench import cli
from workbench.errors import WorkbenchError
from workbench.results.page import fmt_cell, interval_columns
from workbench.results.view import VIEW_FILE, render_view, write_view

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "embedded_main_job"
TABLES = ("heads", "confirmation", "side_effects", "combos")


class _Page(HTMLParser):
    """The tables of a view page: id -> list of rows `(data-row, {col: (value, text, cls)})`,
    plus every `src` and `href` and the text of each element with an id."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list] = {}
        self.headers: dict[str, list[str]] = {}
        self.links: list[str] = []
        self.hidden_rows: dict[str, int] = {}
        self.texts: dict[str, str] = {}
        self._table = self._row = self._cell = self._id = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.links += [v for k, v in attrs if k in ("src", "href") and v is not None]
        if tag == "table":
            self._table = a.get("id")
            self.tables[self._table], self.headers[self._table] = [], []
            self.hidden_rows[self._table] = 0
        elif tag == "th" and self._table:
            self.headers[self._table].append(a["data-col"])
        elif tag == "tr" and self._table and "data-row" in a:
            self._row = {}
            self.tables[self._table].append((int(a["data-row"]), self._row))
            self.hidden_rows[self._table] += "hidden" in a
        elif tag == "td" and self._row is not None:
            self._cell = [a["data-col"], a["data-value"], "", a.get("class", "")]
        elif "id" in a:
            self._id = a["id"]
            self.texts[self._id] = ""

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[2] += data
        elif self._id is not None:
            self.texts[self._id] += data

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            col, value, text, cls = self._cell
            self._row[col] = (value, text, cls)
            self._cell = None
        elif tag == "tr":
            self._row = None
        elif tag == "table":
            self._table = None
        elif self._id is not None and tag in ("span", "div", "p"):
            self._id = None


def _parse(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    return page


@pytest.fixture
def folder(tmp_path):
    """The frozen embedded main job's tables and config, with a small plot beside them."""
    from matplotlib.figure import Figure

    out = tmp_path / "run"
    shutil.copytree(GOLDEN, out)
    fig = Figure(figsize=(2, 2))
    fig.subplots().plot([0, 1], [1, 0])
    fig.savefig(out / "heads_heatmap.png", format="png")
    return out


def test_view_holds_every_csv_number_and_no_url(folder):
    """The page without the interactive heatmap holds no URL at all."""
    path = write_view(folder, interactive=False)
    assert path == folder / VIEW_FILE
    text = path.read_text(encoding="ascii")  # non-ASCII text is written as references
    lowered = text.lower()
    for banned in ("http://", "https://", "//cdn", "<link", "@import", "url("):
        assert banned not in lowered, f"view.html references {banned!r}"
    page = _parse(text)
    assert page.links and all(s.startswith("data:image/png;base64,") for s in page.links)
    embedded = base64.b64decode(page.links[0].split(",", 1)[1])
    assert embedded == (folder / "heads_heatmap.png").read_bytes()
    for name in TABLES:
        csv = pd.read_csv(folder / f"{name}.csv", dtype=str, keep_default_na=False)
        numbers = pd.read_csv(folder / f"{name}.csv")  # as pandas reads the numbers
        rows = page.tables[name]
        columns = list(csv.columns)
        if name == "confirmation":  # the page adds why each set is or is not best
            columns.insert(columns.index("best") + 1, "why")
        assert page.headers[name] == columns
        assert sorted(i for i, _ in rows) == list(range(len(csv))), name
        assert page.texts[f"{name}-count"].startswith(f"{len(csv)} rows")  # before the script
        for i, cells in rows:
            assert list(cells) == columns
            for col, (value, shown, _) in cells.items():
                if col == "why":
                    continue
                assert value == csv.at[i, col], (name, i, col)
                if value == "":
                    continue
                span = interval_columns(col, csv.columns)
                expected = fmt_cell(value)
                if span and shown != expected:  # an effect shown with its interval
                    lo, hi = span
                    expected += f" [{fmt_cell(csv.at[i, lo])}, {fmt_cell(csv.at[i, hi])}]"
                assert shown == expected, (name, i, col)
                try:
                    v = float(value)
                except ValueError:
                    continue
                assert v == float(numbers.at[i, col]) or pd.isna(numbers.at[i, col])
                head = float(re.split(r" \[", shown)[0])  # 4 significant digits of v
                assert abs(head - v) <= 5e-4 * abs(v) + 1e-12, (name, i, col)
    # an effect with an interval is shown with it: the best set's held-out gain
    best = next(c for i, c in page.tables["confirmation"] if c["best"][0] == "True")
    assert best["d_accuracy"][1] == "0.5117 [0.4733, 0.55]"
    assert "extra" in best["d_accuracy_se"][2] and "extra" not in best["d_accuracy"][2]


def _outside_scripts(text: str) -> str:
    return re.sub(r"<script\b[^>]*>.*?</script>", "", text, flags=re.S | re.I)


def test_view_embeds_the_interactive_heatmap_when_plotly_is_installed(folder):
    """With plotly installed the page adds the heatmap, plotly.js inline: outside its scripts
    the page still holds no URL, and every table is as in the static page."""
    pytest.importorskip("plotly")
    text = write_view(folder).read_text(encoding="ascii")
    static = write_view(folder, interactive=False).read_text(encoding="ascii")
    assert "<h2>Per-head heatmap (interactive)</h2>" in text and "plotly-graph-div" in text
    assert "Per-head heatmap (interactive)" not in static and "plotly" not in static.lower()
    assert len(text) > len(static) + 1_000_000  # plotly.js itself
    for banned in ("http://", "https://", "//cdn", "<link", "@import", "url("):
        assert banned not in _outside_scripts(text).lower(), banned
    page, plain = _parse(text), _parse(static)
    assert all(s.startswith(("data:image/png;base64,", "#")) for s in page.links)
    assert page.tables == plain.tables and page.headers == plain.headers


def test_view_falls_back_to_the_png_without_the_extra(folder, monkeypatch):
    for name in [m for m in sys.modules if m.split(".")[0] == "plotly"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "plotly", None)  # `import plotly` raises ImportError
    text = write_view(folder).read_text()
    assert "Per-head heatmap (interactive)" not in text
    data = base64.b64encode((folder / "heads_heatmap.png").read_bytes()).decode()
    assert f"src='data:image/png;base64,{data}'" in text
    with pytest.raises(WorkbenchError, match=r"extra \[interactive\]"):
        write_view(folder, interactive=True)


def test_view_shows_the_attention_rows_of_the_explanation(folder):
    """explanation/attention_examples.csv becomes one row of tokens per head and example,
    each token carrying its weight (plain HTML: no extra needed)."""
    target = folder / "explanation"
    target.mkdir()
    rows = [{"id": "ex1", "layer": 1, "head": h, "head_name": f"L1H{h}", "outcome": "fixed",
             "head_group": g, "pos": p, "token": t, "attention": w}
            for h, g, ws in ((0, "removed", (0.1, 0.2, 0.7)), (3, "comparison", (0.5, 0.25, 0.25)))
            for p, (t, w) in enumerate(zip(("<bos>", "NA", "x"), ws, strict=True))]
    pd.DataFrame(rows).to_csv(target / "attention_examples.csv", index=False)
    text = write_view(folder, interactive=False).read_text()
    assert "<h3>attention on single examples</h3>" in text
    assert "example ex1 (fixed by the removal)" in text
    cells = re.findall(r"<td title='([^']*)' data-attention='([^']*)'", text)
    assert [float(w) for _, w in cells] == [r["attention"] for r in rows]
    assert cells[1][0] == "L1H0 -&gt; &#x27;NA&#x27; (position 1): 0.200"  # "NA" is a token


def test_view_shows_n_gamed_and_why_by_default(folder):
    """What decides is in view without "all columns": each effect's n, `gamed`, and why each
    size's set is or is not called best; a guarded run's p-value too."""
    page = _parse(write_view(folder).read_text())

    def shown(table: str) -> set[str]:
        return {col for col, (_, _, cls) in page.tables[table][0][1].items()
                if "extra" not in cls}

    assert {"why", "gamed", "d_accuracy_n", "p_holm", "n_random"} <= shown("confirmation")
    assert "d_accuracy_n" in shown("heads") and "d_accuracy_n" in shown("side_effects")
    why = {cells["size"][0]: cells["why"][1] for _, cells in page.tables["confirmation"]}
    assert why["3"] == "best: significant (p_holm 0.0003 < 0.05), not gamed, the top candidate"
    assert why["1"] == why["2"] == ("significant and not gamed, but not the top candidate "
                                    "(size 3, ranked first on the selection split, is best)")
    # a guarded run's column is shown, and a failing guard named
    conf = pd.read_csv(folder / "confirmation.csv", dtype=str, keep_default_na=False)
    conf["guarded_p_holm"] = ["0.2", "0.001", "0.001"]
    conf.to_csv(folder / "confirmation.csv", index=False)
    # rendered from the edited table directly: `write_view` refuses an edited folder
    run = json.loads((folder / "config.json").read_text())
    page = _parse(render_view(folder, run, interactive=False))
    assert "guarded_p_holm" in shown("confirmation")
    assert page.tables["confirmation"][0][1]["why"][1] == (
        "fails a guard (guarded_p_holm 0.2 >= 0.05)")


def test_view_of_attribution_screening_names_its_estimates(tmp_path):
    """Under attribution the per-head table is titled and described as estimates, with the
    measured `exact_d_*` shown beside them; under exact screening it is not."""
    out = tmp_path / "attr"
    shutil.copytree(GOLDEN.parent / "tiny_zero_attribution", out)
    text = write_view(out).read_text()
    assert "<h2>Per-head table: attribution estimates</h2>" in text
    assert "not a measured removal" in text
    page = _parse(text)
    cells = page.tables["heads"][0][1]
    assert "extra" not in cells["exact_d_logit_diff"][2]
    main = tmp_path / "main"
    shutil.copytree(GOLDEN, main)
    assert "<h2>Per-head table</h2>" in write_view(main).read_text()


def test_view_shows_the_best_combos_when_there_are_many(folder, monkeypatch):
    import workbench.results.view as view

    monkeypatch.setattr(view, "MAX_COMBOS", 20)
    page = _parse(write_view(folder).read_text())
    combos = pd.read_csv(folder / "combos.csv")
    assert "score" not in combos  # the objective with the set removed, named
    top = combos["ablated_accuracy"].sort_values(ascending=False, kind="stable").index[:20]
    assert sorted(i for i, _ in page.tables["combos"]) == sorted(top)


def test_view_of_a_folder_without_tables_says_so(tmp_path):
    """A run stopped before its first table: its config.json records none."""
    out = tmp_path / "partial"
    out.mkdir()
    run = json.loads((GOLDEN / "config.json").read_text())
    run["files"] = {}
    (out / "config.json").write_text(json.dumps(run))
    text = write_view(out).read_text()
    assert "heads.csv: not in this folder" in text and "<table" not in text


@pytest.mark.parametrize("change", ["edit", "delete", "unrecorded"])
def test_view_refuses_a_tampered_folder_as_cel_does(change, folder, capsys):
    """A table changed after the run wrote it, a recorded one gone, or one the run did not
    write: `workbench view` refuses it in one line (as `workbench cel` does) and writes no
    page from it."""
    run = json.loads((folder / "config.json").read_text())
    if change == "edit":
        text = (folder / "heads.csv").read_text()
        (folder / "heads.csv").write_text(text.replace("0.039999", "0.049999", 1))
        words = "heads.csv was changed, truncated or replaced after it was written"
    elif change == "delete":
        (folder / "heads.csv").unlink()
        words = "records heads.csv but the file is missing"
    else:
        del run["files"]["tradeoff"]
        (folder / "config.json").write_text(json.dumps(run))
        words = "tradeoff.csv is not recorded in config.json"
    assert cli.main(["view", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
    assert not (folder / VIEW_FILE).exists()


def test_cli_view_rebuilds_the_page_and_refuses_other_folders(folder, tmp_path, capsys):
    assert cli.main(["view", str(folder), "--static"]) == 0
    assert f"written: {folder / VIEW_FILE}" in capsys.readouterr().out
    assert "Per-head heatmap (interactive)" not in (folder / VIEW_FILE).read_text()
    assert cli.main(["view", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a CEL results folder (no config.json)" in err[0]


def test_run_cel_writes_the_view_and_explain_adds_its_figures(tmp_path):
    """The page is written at the end of every run, and again when `workbench explain`
    explains the folder (the run's own explanation turned off); a run that explains writes
    the page once, with the explanation."""
    from workbench.cli.demo import micro_model, write_demo
    from workbench.explain.report import explain_folder
    from workbench.pipeline import run_cel
    from workbench.tasks.task import load_task

    _, main, _ = write_demo(tmp_path)
    model, task = micro_model(), load_task(main)
    out = tmp_path / "run"
    result = run_cel(model, task, out_dir=out, n_random=10, n_boot=50, progress=False,
                     explain=False)
    page = _parse((out / VIEW_FILE).read_text())
    assert len(page.tables["heads"]) == model.cfg.n_layers * model.cfg.n_heads
    assert "explanation-roles" not in page.tables
    explain_folder(out, model, task, result)
    text = (out / VIEW_FILE).read_text()
    page = _parse(text)
    assert {"explanation-roles", "explanation-dla_summary"} <= set(page.tables)
    for png in ("explanation.png", "attention_examples.png"):
        data = base64.b64encode((out / png).read_bytes()).decode()
        assert f"src='data:image/png;base64,{data}'" in text
    examples = pd.read_csv(out / "explanation" / "attention_examples.csv")
    assert text.count(" data-attention='") == len(examples) > 0
    explained = tmp_path / "explained"
    run_cel(model, task, out_dir=explained, n_random=10, n_boot=50, progress=False)
    assert (explained / VIEW_FILE).read_text().replace("explained/", "run/") == text


def test_view_in_headless_chromium(folder, tmp_path):
    """In a real browser the inline script runs: the per-head table is sorted by the objective
    (the file has it in CSV order), the counts say how many rows show, and a filter from the
    address hides the other rows."""
    exe = chromium()
    if exe is None:
        pytest.skip(SKIP_REASON)
    path = write_view(folder)
    heads = pd.read_csv(folder / "heads.csv")
    static = _parse(path.read_text())
    assert [i for i, _ in static.tables["heads"]] == list(range(len(heads)))  # CSV order
    dom = _parse(headless(exe, tmp_path, path.as_uri(), "--dump-dom").stdout)
    order = heads["d_accuracy"].sort_values(ascending=False, kind="stable").index.tolist()
    assert order != list(range(len(heads)))  # so only the script can have sorted it
    assert [i for i, _ in dom.tables["heads"]] == order
    assert dom.tables["heads"][0][1]["head_name"][0] == heads.loc[order[0], "head_name"]
    for name in TABLES:
        n = len(pd.read_csv(folder / f"{name}.csv"))
        assert dom.texts[f"{name}-count"] == f"{n} of {n} rows"
    filtered = _parse(headless(exe, tmp_path, path.as_uri() + "#filter=L1H0",
                                "--dump-dom").stdout)
    assert filtered.texts["heads-count"] == f"1 of {len(heads)} rows"
    assert filtered.hidden_rows["heads"] == len(heads) - 1
    shot = tmp_path / "view.png"
    headless(exe, tmp_path, path.as_uri(), f"--screenshot={shot}", "--window-size=1200,1600")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_interactive_view_loads_nothing_in_headless_chromium(folder, tmp_path):
    """With the interactive heatmap, the page draws it (plotly's SVG and the heatmap's image
    in the DOM) with the network cut, and requests nothing, blocked or not."""
    pytest.importorskip("plotly")
    exe = chromium()
    if exe is None:
        pytest.skip(SKIP_REASON)
    loads, dom = offline_loads(exe, tmp_path, write_view(folder, interactive=True))
    assert loads == []
    assert "main-svg" in dom and "heatmaplayer" in dom
    heads = pd.read_csv(folder / "heads.csv")
    order = heads["d_accuracy"].sort_values(ascending=False, kind="stable").index.tolist()
    assert [i for i, _ in _parse(dom).tables["heads"]] == order  # the page's own script ran


# --- the CI step that installs the browser -----------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
INSTALL = ROOT / "scripts" / "install_browser.sh"


def _install(tmp_path: Path, uid: int, chromium: bool = False, apt_status: int = 0):
    """Run scripts/install_browser.sh with stand-ins for `id`, `apt-get` and `chromium` on an
    otherwise empty PATH; returns the process and the apt-get calls it made."""
    stubs = tmp_path / "bin"
    stubs.mkdir(parents=True)
    log = tmp_path / "apt-get.log"
    commands = {"id": f"echo {uid}", "apt-get": f'echo "$@" >> {log}\nexit {apt_status}'}
    if chromium:
        commands["chromium"] = "exit 0"
    for name, body in commands.items():
        (stubs / name).write_text(f"#!/bin/sh\n{body}\n")
        (stubs / name).chmod(0o755)
    proc = subprocess.run([shutil.which("bash"), str(INSTALL)], env={"PATH": str(stubs)},
                          capture_output=True, text=True, timeout=60)
    calls = log.read_text().splitlines() if log.is_file() else []
    return proc, calls


def test_install_browser_only_where_missing_as_root_and_never_fails(tmp_path):
    proc, calls = _install(tmp_path / "present", uid=0, chromium=True)
    assert proc.returncode == 0 and calls == [] and "nothing to install" in proc.stdout
    proc, calls = _install(tmp_path / "user", uid=1000)
    assert proc.returncode == 0 and calls == [] and "will skip" in proc.stdout
    proc, calls = _install(tmp_path / "root", uid=0)
    assert proc.returncode == 0 and calls == ["update -qq", "install -y -qq chromium"]
    proc, calls = _install(tmp_path / "broken", uid=0, apt_status=100)
    assert proc.returncode == 0 and calls == ["update -qq"]
    assert "could not install chromium" in proc.stdout


def test_ci_installs_the_browser_then_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    command = next(line for line in readme.splitlines() if line.endswith("-m pytest"))
    lines = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert lines[-1] == command
    assert "bash scripts/install_browser.sh || true" in lines[:-1]
