"""`workbench.results.interactive`: the plotly heatmap holds the per-head table's numbers, its
hover says effect, interval and n, nothing is fetched (plotly.js inline, checked in headless
chromium with the network cut), the attention rows hold every weight, and without the extra
one clear error names it."""

from __future__ import annotations

import json
import re
import shutil
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.browser import SKIP_REASON, chromium, offline_loads
from workbench.errors import WorkbenchError
from workbench.results.interactive import (
    CSP,
    EXTRA,
    OfflineHTML,
    attention_rows_html,
    heads_heatmap,
    heatmap_figure,
    interactive_available,
    offline,
    require,
)
from workbench.tables import table_to_matrix

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
MAIN_JOB = GOLDEN / "embedded_main_job"


def _run(name: str = "embedded_main_job") -> tuple[pd.DataFrame, dict]:
    data = json.loads((GOLDEN / name / "config.json").read_text())
    return pd.read_csv(GOLDEN / name / "heads.csv"), data


@pytest.fixture
def no_extra(monkeypatch):
    """The extra uninstalled, as far as imports can tell (`import plotly` raises)."""
    for name in [m for m in sys.modules if m.split(".")[0] in ("plotly", "circuitsvis")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "plotly", None)
    monkeypatch.setitem(sys.modules, "circuitsvis", None)


def test_without_the_extra_one_error_names_it(no_extra):
    assert not interactive_available()
    assert not interactive_available("plotly")
    heads, data = _run()
    for call in (lambda: heatmap_figure(heads, data["config"], data["summary"]),
                 lambda: heads_heatmap(MAIN_JOB), lambda: require("circuitsvis", "the view")):
        with pytest.raises(WorkbenchError) as e:
            call()
        message = str(e.value)
        assert f"[{EXTRA}]" in message and 'pip install "cel-workbench[interactive]"' in message
        assert len(message.splitlines()) == 1


def test_the_package_imports_no_extra_at_module_level():
    """Importing the whole package (and building a static view) leaves plotly and CircuitsVis
    unimported: they are needed only by the functions that draw with them."""
    import subprocess

    code = ("import sys, pkgutil, importlib, workbench\n"
            "for m in pkgutil.walk_packages(workbench.__path__, 'workbench.'):\n"
            "    if '.theory' in m.name or m.name.endswith('__main__'): continue\n"
            "    importlib.import_module(m.name)\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'plotly', 'circuitsvis'}))")
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=root, timeout=300, env={**_env(root)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def _env(root: Path) -> dict:
    import os

    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}


# --- the heatmap ----------------------------------------------------------------------------

def test_heatmap_holds_the_table_and_says_effect_interval_and_n():
    pytest.importorskip("plotly")
    heads, data = _run()
    cfg, summary = data["config"], data["summary"]
    fig = heatmap_figure(heads, cfg, summary, ["L1H0", "L1H4", "L1H6"])
    traces = [t for t in fig.data if t.type == "heatmap"]
    names = [t.name for t in traces]
    assert names[:4] == ["d_accuracy", "d_logprob", "d_logit_diff", "d_prob_diff"]
    assert "d_accuracy embedded_copy" in names and "d_logprob embedded_sort" in names
    assert [t.visible for t in traces] == [True] + [False] * (len(traces) - 1)
    for trace in traces:  # each trace is its column, cell for cell (the naive reference)
        metric, _, task = trace.name[2:].partition(" ")
        column = f"d_{metric}" + (f"_{task}" if task else "")
        np.testing.assert_array_equal(np.asarray(trace.z, dtype=float),
                                      table_to_matrix(heads, column))
    main = traces[0]
    full = summary["n_examples"]["select"]
    for row in heads.itertuples():
        text = main.text[row.layer][row.head]
        assert text.startswith(f"<b>{row.head_name}</b> (layer {row.layer}, head {row.head})")
        assert f"d_accuracy {row.d_accuracy:.4g}" in text
        assert f"[{row.d_accuracy_lo:.4g}, {row.d_accuracy_hi:.4g}]" in text
        n = int(row.d_accuracy_n)
        if n < full:
            assert f"n {n} of {full} examples (racing stopped it early)" in text
        else:
            assert f"n {n} examples" in text
        assert ("the interval excludes 0" in text) == (row.d_accuracy_lo > 0
                                                       or row.d_accuracy_hi < 0)
        assert ("candidate, rank" in text) == bool(row.candidate)
    assert heads["d_accuracy_n"].min() < full  # so the "of 600" branch was checked
    star = next(t for t in fig.data if t.type == "scatter")
    assert sorted(zip(star.y, star.x, strict=True)) == [(1, 0), (1, 4), (1, 6)]
    assert star.name == "best set"
    assert fig.layout.title.text.startswith("Removing one head: d_accuracy on embedded_map")
    menu = fig.layout.updatemenus[0].buttons
    assert [b.label for b in menu] == names
    assert menu[1].args[0]["visible"] == [i == 1 for i in range(len(traces))] + [True]


def test_heatmap_of_a_folder_and_an_estimate(tmp_path):
    """From a folder, the best set is starred; under attribution screening the title says the
    values are estimates, and with no significant set the top candidate is starred as such."""
    pytest.importorskip("plotly")
    fig = heads_heatmap(MAIN_JOB)
    assert fig.data[-1].name == "best set" and len(fig.data[-1].x) == 3
    folder = tmp_path / "attr"
    shutil.copytree(GOLDEN / "tiny_zero_attribution", folder)
    fig = heads_heatmap(folder)
    assert fig.layout.title.text.startswith("Attribution estimate of removing one head: "
                                            "d_logit_diff on main")
    assert fig.data[-1].name == "top candidate (not significant)"
    heads = pd.read_csv(folder / "heads.csv")
    with pytest.raises(WorkbenchError, match="needs a per-head table"):
        heatmap_figure(heads.iloc[0:0], {"objective": "logit_diff"})


def test_offline_figure_inlines_plotly_and_references_no_url(tmp_path):
    plotly = pytest.importorskip("plotly")
    heads, data = _run()
    view = offline(heatmap_figure(heads, data["config"], data["summary"]), "heatmap")
    bundled = (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_text()
    assert len(view.html) > len(bundled) > 1_000_000  # plotly.js is in the fragment
    assert view._repr_html_() == view.html
    page = view.page()
    assert f'content="{CSP}"' in page and "default-src 'none'" in CSP
    outside = _outside_scripts(page)
    for banned in ("http://", "https://", "//cdn", "<link", "@import", "url("):
        assert banned not in outside.lower(), banned
    assert _attribute_urls(page) == []
    path = view.save(tmp_path / "heatmap.html")
    assert path.read_text(encoding="ascii") == page.encode("ascii", "xmlcharrefreplace").decode()


def _outside_scripts(text: str) -> str:
    return re.sub(r"<script\b[^>]*>.*?</script>", "", text, flags=re.S | re.I)


class _Urls(HTMLParser):
    def __init__(self):
        super().__init__()
        self.urls = []

    def handle_starttag(self, tag, attrs):
        self.urls += [v for k, v in attrs if k in ("src", "href") and v and not
                      v.startswith(("data:", "#"))]


def _attribute_urls(text: str) -> list[str]:
    parser = _Urls()
    parser.feed(text)
    return parser.urls


def test_heatmap_page_draws_and_loads_nothing_in_headless_chromium(tmp_path):
    """The saved page renders plotly's heatmap with the network cut, and the probe records no
    request and no blocked load. A page that asks for plotly from its CDN is caught."""
    pytest.importorskip("plotly")
    exe = chromium()
    if exe is None:
        pytest.skip(SKIP_REASON)
    heads, data = _run()
    path = offline(heatmap_figure(heads, data["config"], data["summary"])).save(
        tmp_path / "heatmap.html")
    loads, dom = offline_loads(exe, tmp_path, path)
    assert loads == []
    assert "main-svg" in dom and "heatmaplayer" in dom  # plotly drew the heatmap
    buttons = set(re.findall(r'data-title="([^"]*)"', dom))
    assert "Download plot as a PNG" in buttons and "Zoom" in buttons
    assert not any("share" in b.lower() or "cloud" in b.lower() for b in buttons), buttons
    cdn = tmp_path / "cdn.html"
    cdn.write_text(OfflineHTML("<script src='https://cdn.plot.ly/plotly-2.35.2.min.js'>"
                               "</script>").page())
    loads, _ = offline_loads(exe, tmp_path, cdn)
    assert any("https://cdn.plot.ly/" in x for x in loads)


# --- attention rows -------------------------------------------------------------------------

def _examples_table() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for ex, outcome in (("a", "fixed"), ("b", "broken")):
        for name, group in (("L1H0", "removed"), ("L1H4", "removed"), ("L0H2", "comparison")):
            w = rng.dirichlet(np.ones(4))
            for pos, tok in enumerate(["<bos>", "do", "x y", "<q>"]):
                rows.append({"id": ex, "layer": int(name[1]), "head": int(name[3]),
                             "head_name": name, "outcome": outcome, "head_group": group,
                             "pos": pos, "token": tok, "attention": float(w[pos])})
    return pd.DataFrame(rows)


class _Rows(HTMLParser):
    """Per example caption, the rows' head names and their cells' weights and texts."""

    def __init__(self):
        super().__init__()
        self.captions, self.rows, self.scripts = [], [], 0
        self._cell = self._th = self._cap = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.scripts += tag == "script"
        if tag == "tr":
            self.rows.append({"group": a["class"], "head": "", "cells": []})
        elif tag == "th":
            self._th = ""
        elif tag == "td":
            self._cell = [float(a["data-attention"]), a["title"], ""]
        elif tag == "figcaption":
            self._cap = ""

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[2] += data
        elif self._th is not None:
            self._th += data
        elif self._cap is not None:
            self._cap += data

    def handle_endtag(self, tag):
        if tag == "td":
            self.rows[-1]["cells"].append(tuple(self._cell))
            self._cell = None
        elif tag == "th":
            self.rows[-1]["head"] = self._th.split()[0]
            self._th = None
        elif tag == "figcaption":
            self.captions.append(self._cap)
            self._cap = None


def test_attention_rows_hold_every_weight_removed_heads_first():
    table = _examples_table()
    page = _Rows()
    page.feed(attention_rows_html(table))
    assert page.scripts == 0
    assert page.captions == ["example a (fixed by the removal)",
                             "example b (broken by the removal)"]
    assert [r["head"] for r in page.rows] == ["L1H0", "L1H4", "L0H2"] * 2
    assert [r["group"] for r in page.rows] == ["removed", "removed", "comparison"] * 2
    for k, row in enumerate(page.rows):
        ex = "ab"[k // 3]
        want = table[(table["id"] == ex) & (table["head_name"] == row["head"])]
        assert [c[0] for c in row["cells"]] == pytest.approx(want["attention"].tolist(),
                                                             rel=1e-5)
        assert [c[2] for c in row["cells"]] == ["<bos>", "do", "x\u00b7y", "<q>"]
        assert row["cells"][2][1] == (f"{row['head']} -> 'x y' (position 2): "
                                      f"{want['attention'].iloc[2]:.3f}")
    only_one = _Rows()
    only_one.feed(attention_rows_html(table, max_examples=1))
    assert len(only_one.captions) == 1
    assert "no attention examples" in attention_rows_html(table.iloc[0:0])
