"""Interactive views that load nothing from the network: the per-head heatmap and attention rows.

The matplotlib figures (`workbench.results.plots`) are the default and need nothing more. A
researcher used to TransformerLens's demos also wants to hover over a head and read its
numbers, so this module adds, for notebooks and `view.html`:

- `heads_heatmap`: the per-head table as a plotly heatmap, layer x head, red where removing
  the head helps; hovering a cell shows the head, its effect with the bootstrap interval, the
  examples it rests on (`n` of the split's, since racing stops decided heads early) and
  whether it was a candidate; a menu switches between the main task's metrics and each side
  task's. Under attribution screening the title says the values are estimates. The best set
  (or the top candidate, when no set is significant) is starred.
- `attention_rows_html`: the removed and the comparison heads' attention from the answer
  position on a few single examples (`HeadExplanation.attention_examples`, saved as
  `explanation/attention_examples.csv`), one row of tokens per head, shaded by attention,
  the weight in each token's tooltip. Plain HTML and CSS, no script and no extra: `view.html`
  always shows it, and it is the fallback of `workbench.explain.interactive.attention_view`
  (the CircuitsVis view).

Plotly and CircuitsVis are the optional extra `interactive` (`pip install
"cel-workbench[interactive]"`); nothing in the package imports them at module level, and a
function that needs one raises a `WorkbenchError` naming the extra (`require`). Both load
their JavaScript from a CDN by default (plotly's `include_plotlyjs="cdn"`, CircuitsVis's
unpkg bundle, after probing the internet); here the JavaScript is always read from the
installed package and written into the page (`OfflineHTML`), so a figure shows the same on
an air-gapped machine, and `OfflineHTML.page` adds `view.html`'s Content-Security-Policy,
which forbids every network load.
"""

from __future__ import annotations

import html
import importlib
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.errors import WorkbenchError
from workbench.results.result import CELResult
from workbench.screening.registry import methods

EXTRA = "interactive"
INSTALL = 'pip install "cel-workbench[interactive]"'
# what a page that holds these views allows: inline scripts and styles, images from data: URIs
# (plotly draws a heatmap to a canvas and shows it as one), and no load from anywhere
CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
       "script-src 'unsafe-inline'")
# no logo linking to plotly's site, no button that uploads the chart to a cloud
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True, "showSendToCloud": False,
                 "modeBarButtonsToRemove": ["sendChartToCloud", "sendDataToCloud"]}
REMOVED_COLOR = (200, 40, 40)  # attention rows: the removed heads' shade
COMPARISON_COLOR = (60, 90, 170)  # and the comparison heads'


def require(module: str, purpose: str):
    """Import `module` of the `interactive` extra, or raise one clear `WorkbenchError`.

    Args:
        module: `"plotly"`, `"plotly.graph_objects"`, `"circuitsvis"`, ...
        purpose: what needs it, for the message (e.g. `"the interactive heatmap"`).
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        top = module.split(".")[0]
        raise WorkbenchError(
            f"{purpose} needs {top}, which is in the optional extra [{EXTRA}]: {INSTALL} (the "
            "matplotlib figures need nothing more)"
        ) from None


def interactive_available(*modules: str) -> bool:
    """True when `modules` (default: plotly and circuitsvis, the whole extra) import."""
    for module in modules or ("plotly", "circuitsvis"):
        try:
            importlib.import_module(module)
        except ImportError:
            return False
    return True


class OfflineHTML:
    """An HTML fragment whose scripts are all inline: shown by Jupyter (`_repr_html_`), or
    written as a page of its own (`save`). Nothing in it is fetched from the network."""

    def __init__(self, fragment: str, title: str = "workbench view") -> None:
        self.html = fragment
        self.title = title

    def _repr_html_(self) -> str:
        return self.html

    def __html__(self) -> str:
        return self.html

    def page(self) -> str:
        """A whole HTML document holding the fragment, with the Content-Security-Policy
        that forbids every network load (`CSP`)."""
        return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
                f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
                f"<title>{html.escape(self.title)}</title></head>\n<body>\n{self.html}\n"
                "</body></html>\n")

    def save(self, path: str | Path) -> Path:
        """Write `page()` to `path` (ASCII, other characters as references); return it."""
        path = Path(path)
        path.write_text(self.page().encode("ascii", "xmlcharrefreplace").decode())
        return path


# --- the per-head heatmap -------------------------------------------------------------------

def heatmap_views(heads: pd.DataFrame, objective: str, others: Sequence[str] = ()) -> list[dict]:
    """What the heatmap's menu offers: for the main task every metric with an interval (the
    objective first), then for each side task its metrics; each a dict of the columns of its
    effect, interval and `n`, and its task (None: the main task)."""
    def view(metric: str, task: str | None) -> dict | None:
        s = "" if task is None else f"_{task}"
        cols = {"value": f"d_{metric}{s}", "lo": f"d_{metric}_lo{s}",
                "hi": f"d_{metric}_hi{s}", "n": f"d_{metric}_n{s}"}
        if cols["value"] not in heads or not heads[cols["value"]].notna().any():
            return None
        return {**cols, "metric": metric, "task": task}

    side = {f"_{t}" for t in others}
    metrics = [c[2:-3] for c in heads.columns if c.startswith("d_") and c.endswith("_lo")
               and not any(c.endswith(f"_lo{s}") for s in side)]
    metrics = [objective] + [m for m in dict.fromkeys(metrics) if m != objective]
    out = [view(m, None) for m in metrics]
    for task in others:
        found = [c[2:-len(f"_lo_{task}")] for c in heads.columns
                 if c.startswith("d_") and c.endswith(f"_lo_{task}")]
        ordered = [m for m in dict.fromkeys([objective, *found]) if m in found]
        out += [view(m, task) for m in ordered]
    return [v for v in out if v is not None]


def _fmt(x) -> str:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return "-"
    if not math.isfinite(v):
        return "-"
    return str(int(v)) if v.is_integer() and abs(v) < 1e15 else f"{v:.4g}"


def _hover(heads: pd.DataFrame, view: dict, full_n, candidates: bool) -> list[str]:
    """One hover text per row of `heads` for `view`."""
    texts = []
    for _, row in heads.iterrows():
        lo, hi = row.get(view["lo"]), row.get(view["hi"])
        n = row.get(view["n"])
        parts = [f"<b>{row['head_name']}</b> (layer {row['layer']}, head {row['head']})",
                 f"d_{view['metric']} {_fmt(row.get(view['value']))} [{_fmt(lo)}, {_fmt(hi)}]"]
        try:
            if float(lo) > 0 or float(hi) < 0:
                parts[-1] += ": the interval excludes 0"
        except (TypeError, ValueError):
            pass
        if _fmt(n) != "-":
            short = full_n and float(n) < float(full_n)
            parts.append(f"n {_fmt(n)}" + (f" of {_fmt(full_n)} examples (racing stopped it "
                                           "early)" if short else " examples"))
        if candidates and view["task"] is None and "candidate" in heads:
            rank = row.get("candidate_rank")
            parts.append(f"candidate, rank {_fmt(rank)}" if _truthy(row["candidate"])
                         else "not a candidate")
        texts.append("<br>".join(parts))
    return texts


def _truthy(v) -> bool:
    return str(v).strip().lower() in ("true", "1", "1.0")


def _is_estimate(method: str | None) -> bool:
    """Whether the screening method's effects are estimates (attribution), from its record."""
    if method is None:
        return False
    record = methods().get(str(method))
    return record is not None and not record.exact


def heatmap_figure(heads: pd.DataFrame, config: Mapping, summary: Mapping | None = None,
                   marked: Sequence[str] = (), marked_label: str = "best set"):
    """The interactive heatmap of a per-head table (see `heads_heatmap`).

    Args:
        heads: a per-head screening table (`heads.csv`: `layer, head, head_name`, the effects
            `d_<m>` with `_lo`, `_hi`, `_n`, side tasks' `d_<m>_<task>`, `candidate`).
        config: the run's config (`config.json`'s `config`, or `CELConfig.to_dict()`).
        summary: the run's summary (its `n_examples` give each split's size).
        marked: head names to star (the best set), labelled `marked_label`.

    Returns:
        A `plotly.graph_objects.Figure`: one heatmap trace per metric and task, the first
        shown and a menu for the rest.
    """
    go = require("plotly.graph_objects", "the interactive heatmap")
    if heads is None or heads.empty or not {"layer", "head", "head_name"} <= set(heads.columns):
        raise WorkbenchError("the interactive heatmap needs a per-head table (heads.csv) with "
                             "layer, head and head_name; this run has none yet")
    objective = str(config.get("objective", "accuracy"))
    others = [str(t) for t in config.get("others", ())]
    counts = dict((summary or {}).get("n_examples", {}))
    views = heatmap_views(heads, objective, others)
    if not views:
        raise WorkbenchError(f"the per-head table has no d_{objective} column to draw")
    heads = heads.sort_values(["layer", "head"]).reset_index(drop=True)
    n_layers, n_heads = int(heads["layer"].max()) + 1, int(heads["head"].max()) + 1
    estimate = _is_estimate(config.get("method"))
    what = ("Attribution estimate of removing one head" if estimate
            else "Removing one head")
    fig = go.Figure()
    titles = []
    for k, view in enumerate(views):
        z = np.full((n_layers, n_heads), np.nan)
        text = np.full((n_layers, n_heads), "", dtype=object)
        layer, head = heads["layer"].to_numpy(int), heads["head"].to_numpy(int)
        z[layer, head] = pd.to_numeric(heads[view["value"]], errors="coerce").to_numpy(float)
        split = "select" if view["task"] is None else view["task"]
        full_n = counts.get(split)
        if full_n is None and view["n"] in heads:
            full_n = pd.to_numeric(heads[view["n"]], errors="coerce").max()
        text[layer, head] = _hover(heads, view, full_n, candidates=True)
        finite = z[np.isfinite(z)]
        lim = float(np.abs(finite).max()) if finite.size and np.abs(finite).max() > 0 else 1.0
        where = (f"{config.get('task')} (main task), selection split" if view["task"] is None
                 else f"{view['task']} (side task), its examples")
        titles.append(f"{what}: d_{view['metric']} on {where}")
        fig.add_trace(go.Heatmap(
            z=z, x=list(range(n_heads)), y=list(range(n_layers)), text=text,
            hovertemplate="%{text}<extra></extra>", colorscale="RdBu", reversescale=True,
            zmin=-lim, zmax=lim, zmid=0, visible=k == 0,
            name=f"d_{view['metric']}" + ("" if view["task"] is None else f" {view['task']}"),
            colorbar={"title": {"text": f"d_{view['metric']}<br>(ablated - clean)"}}))
    marked_rows = heads[heads["head_name"].isin(list(marked))]
    if len(marked_rows):
        fig.add_trace(go.Scatter(
            x=marked_rows["head"].tolist(), y=marked_rows["layer"].tolist(), mode="markers",
            marker={"symbol": "star", "size": 14, "color": "gold",
                    "line": {"color": "black", "width": 1}},
            name=marked_label, hoverinfo="skip", showlegend=True))
    extra = [True] * int(len(marked_rows) > 0)
    buttons = [{"label": trace.name, "method": "update",
                "args": [{"visible": [i == k for i in range(len(views))] + extra},
                         {"title.text": titles[k]}]}
               for k, trace in enumerate(fig.data[:len(views)])]
    fig.update_layout(
        title={"text": titles[0], "font": {"size": 13}},
        xaxis={"title": {"text": "head"}, "dtick": 1, "constrain": "domain"},
        yaxis={"title": {"text": "layer"}, "dtick": 1, "autorange": "reversed"},
        width=min(1100, 320 + 34 * n_heads), height=min(1400, 240 + 24 * n_layers),
        legend={"orientation": "h", "y": -0.12},
        margin={"t": 90},
        updatemenus=[{"buttons": buttons, "x": 0, "xanchor": "left", "y": 1.0,
                      "yanchor": "bottom", "pad": {"b": 6}}] if len(views) > 1 else [],
    )
    return fig


def heads_heatmap(source):
    """The per-head table of a CEL run as an interactive plotly heatmap.

    Layer x head (layer 0 at the top, as TransformerLens's demos draw it), the effect of
    removing each head alone on the selection split (ablated - clean: red = removal helps).
    Hovering a cell shows the head, its effect with the bootstrap interval, the examples it
    rests on (of the split's) and its candidate rank; the menu switches to the main task's
    other metrics and to each side task. The best set is starred (the top candidate, marked
    so, when no set is significant). Under attribution screening the title says the values
    are estimates. Needs the `interactive` extra (plotly).

    Args:
        source: a `CELResult` or a results folder (read with its files' checks).

    Returns:
        A `plotly.graph_objects.Figure`; `offline(fig)` shows it with plotly.js inlined.

    Example:
        >>> fig = heads_heatmap("cel_results")
        >>> offline(fig).save("heatmap.html")   # opens offline
    """
    require("plotly", "the interactive heatmap")
    if isinstance(source, (str, Path)):
        source = CELResult.load(source)
    best, label = source.best, "best set"
    if not best and source.top_candidate:
        best, label = source.top_candidate, "top candidate (not significant)"
    return heatmap_figure(source.heads, source.config.to_dict(), source.summary, best, label)


def offline(fig, title: str = "workbench view", div_id: str = "workbench-figure") -> OfflineHTML:
    """A plotly figure as an `OfflineHTML` fragment with plotly.js inlined from the installed
    package (never its CDN), shown by Jupyter and savable as a page of its own. The figure's
    element is `div_id` (plotly's default is a random id, which made the same folder's
    `view.html` differ byte for byte between a resumed and a fresh run)."""
    pio = require("plotly.io", "an interactive figure")
    fragment = pio.to_html(fig, full_html=False, include_plotlyjs=True, config=PLOTLY_CONFIG,
                           div_id=div_id)
    return OfflineHTML(fragment, title)


# --- attention rows on single examples --------------------------------------------------------

def attention_rows_html(table: pd.DataFrame, max_examples: int | None = None) -> str:
    """The answer position's attention of the removed and the comparison heads on single
    examples, as HTML: per example, one row of the prompt's tokens per head, each token shaded
    by the head's attention to it (removed heads red, comparison heads blue) with the weight
    in its tooltip. No script: it shows the same anywhere.

    Args:
        table: `HeadExplanation.attention_examples` (or `explanation/attention_examples.csv`):
            `id, head_name, head_group, pos, token, attention`, and `outcome` where known.
        max_examples: show at most this many examples (default all).
    """
    if table is None or table.empty:
        return "<p class='missing'>no attention examples</p>"
    out = []
    ids = list(dict.fromkeys(table["id"]))[:max_examples]
    for ex_id in ids:
        part = table[table["id"] == ex_id]
        outcome = part["outcome"].iloc[0] if "outcome" in part else None
        label = f"example {ex_id}" + (f" ({outcome} by the removal)" if isinstance(outcome, str)
                                      and outcome else "")
        rows = []
        for group in ("removed", "comparison"):
            for name, cells in part[part["head_group"] == group].groupby("head_name", sort=False):
                rows.append(_attention_row(str(name), group, cells.sort_values("pos")))
        out.append(f"<figure class='attn'><figcaption>{html.escape(label)}</figcaption>"
                   f"<table class='attn'><tbody>{''.join(rows)}</tbody></table></figure>")
    legend = ("<p class='attn-note'>Attention from the answer position (the last token) to "
              "each token of the prompt: <span style='background:rgba(200,40,40,0.6)'>removed "
              "heads</span> above <span style='background:rgba(60,90,170,0.6)'>comparison "
              "heads</span> (kept heads of the same layers); darker is more, and each token's "
              "tooltip gives the weight (a head's row sums to 1).</p>")
    return (f"<div class='attention-rows'><style>{ATTENTION_ROWS_STYLE}</style>{legend}"
            f"{''.join(out)}</div>")


def _attention_row(name: str, group: str, cells: pd.DataFrame) -> str:
    r, g, b = REMOVED_COLOR if group == "removed" else COMPARISON_COLOR
    tds = []
    for pos, token, a in zip(cells["pos"], cells["token"], cells["attention"], strict=True):
        a = float(a) if pd.notna(a) else 0.0
        tip = f"{name} -> {token!r} (position {pos}): {a:.3f}"
        color = "#fff" if a > 0.55 else "#222"
        tds.append(f"<td title='{html.escape(tip, quote=True)}' data-attention='{a:.6g}' "
                   f"style='background:rgba({r},{g},{b},{min(1.0, a):.3f});color:{color}'>"
                   f"{html.escape(str(token).replace(' ', chr(183)))}</td>")
    return (f"<tr class='{group}'><th>{html.escape(name)} <small>{group}</small></th>"
            f"{''.join(tds)}</tr>")


ATTENTION_ROWS_STYLE = """
table.attn { border-collapse: collapse; font-family: monospace; font-size: 0.8em; }
table.attn th { text-align: right; padding: 0.1em 0.6em; white-space: nowrap; font-weight: 600; }
table.attn td { padding: 0.15em 0.3em; border: 1px solid #eee; white-space: pre; }
table.attn td:hover { outline: 2px solid #000; }
table.attn tr.comparison:first-of-type th, table.attn tr.removed + tr.comparison th,
table.attn tr.removed + tr.comparison td { border-top: 3px solid #fff; }
figure.attn { margin: 0.8em 0; } figure.attn figcaption { font-size: 0.85em; color: #444; }
.attn-note { font-size: 0.85em; }
"""
