"""The page of `view.html`: tables that sort and filter, in one file that loads nothing.

`html_table` writes a CSV table (text cells, exactly as read) as an HTML table: each cell shows
its number to 4 significant digits (`fmt_cell`; integers in full) and keeps the CSV's exact
text in `data-value` (what sorting compares) and in its tooltip; an effect with an interval
(`d_accuracy` with `d_accuracy_lo`, `d_accuracy_hi`: `interval_columns`) shows as
`value [lo, hi]`, and the columns a table does not show at first are hidden until its "all
columns" box is ticked. `html_page` wraps the sections in a page with its style and a small
inline script that sorts (click a column's header) and filters (the box above each table;
`#filter=L1H` in the address filters every table) the rows. The page references no URL and its
Content-Security-Policy (`workbench.results.interactive.CSP`) forbids every network load;
without JavaScript the tables still show, in the CSV's order. `workbench.results.view` builds
the page's sections from a results folder.
"""

from __future__ import annotations

import html
import math

import pandas as pd

from workbench.results.interactive import CSP


def esc(value) -> str:
    """`value` as HTML text (quotes escaped too, so it may stand in an attribute)."""
    return html.escape("" if value is None else str(value), quote=True)


def fmt_cell(text: str) -> str:
    """A CSV cell as the page shows it: numbers to 4 significant digits, integers in full,
    anything else unchanged."""
    try:
        v = float(text)
    except ValueError:
        return text
    if not math.isfinite(v):
        return text
    if v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.4g}"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def interval_columns(col: str, columns) -> tuple[str, str] | None:
    """The `(lo, hi)` columns of an effect column, or None: `d_x` -> `d_x_lo`, `d_x_hi`; a
    side task's `d_x_task` -> `d_x_lo_task`, `d_x_hi_task` (the per-head table's names)."""
    cols = set(columns)
    cuts = [i for i, ch in enumerate(col) if ch == "_"] + [len(col)]
    for k in sorted(cuts, reverse=True):
        lo, hi = f"{col[:k]}_lo{col[k:]}", f"{col[:k]}_hi{col[k:]}"
        if lo in cols and hi in cols:
            return lo, hi
    return None



def html_table(df: pd.DataFrame, table_id: str, shown: list[str] | None,
               sort: tuple[str, bool] | None) -> str:
    """An HTML table holding every cell of `df`; columns outside `shown` are hidden at first."""
    cols = list(df.columns)
    main = set(cols if shown is None else [c for c in shown if c in cols])
    intervals = {c: interval_columns(c, cols) for c in main}
    head = []
    for c in cols:
        label = f"{c} [lo, hi]" if intervals.get(c) else c
        extra = "" if c in main else " class='extra'"
        head.append(f"<th data-col='{esc(c)}'{extra}>{esc(label)}</th>")
    rows = []
    for i, rec in zip(df.index, df.to_dict("records"), strict=True):
        cells = []
        for c in cols:
            v = rec[c]
            text = fmt_cell(v)
            if intervals.get(c) and v != "":
                lo, hi = intervals[c]
                text = f"{text} [{fmt_cell(rec[lo])}, {fmt_cell(rec[hi])}]"
            classes = ("" if c in main else "extra ") + ("" if text != v or v == "" or
                                                          _is_number(v) else "txt")
            extra = f" class='{classes.strip()}'" if classes.strip() else ""
            tip = f" title='{esc(v)}'" if c in main else ""  # hidden cells: no tooltip
            cells.append(f"<td data-col='{esc(c)}' data-value='{esc(v)}'{tip}{extra}>"
                         f"{esc(text)}</td>")
        best = " class='best'" if rec.get("best") == "True" else ""
        rows.append(f"<tr data-row='{i}'{best}>{''.join(cells)}</tr>")
    sort_attr = (f" data-sort='{esc(sort[0])}' data-desc='{int(sort[1])}'"
                 if sort and sort[0] in cols else "")
    n = len(df)
    controls = (f"<div class='controls'><input type='search' class='filter' "
                f"data-table='{table_id}' placeholder='filter rows, e.g. L1H'>"
                f"<label><input type='checkbox' class='all-cols' data-table='{table_id}'> "
                f"all columns</label> <span class='count' id='{table_id}-count'>{n} rows "
                "(sorting and filtering need JavaScript)</span></div>")
    return (f"{controls}<div class='scroll'><table id='{table_id}' class='view'{sort_attr}>"
            f"<thead><tr>{''.join(head)}</tr></thead><tbody>\n" + "\n".join(rows)
            + "\n</tbody></table></div>")


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
dl { display: grid; grid-template-columns: max-content auto; gap: 0.2em 1em; }
dt { font-weight: 600; } dd { margin: 0; }
.scroll { overflow-x: auto; max-height: 32em; overflow-y: auto; border: 1px solid #ddd; }
table.view { border-collapse: collapse; font-size: 0.8em; }
table.view th, table.view td { padding: 0.15em 0.5em; border-bottom: 1px solid #eee;
  text-align: right; white-space: nowrap; }
table.view td.txt { text-align: left; }
table.view th { position: sticky; top: 0; background: #f4f4f4; cursor: pointer; }
table.view th.asc::after { content: " \\25B2"; } table.view th.desc::after { content: " \\25BC"; }
table.view .extra { display: none; } table.view.all .extra { display: table-cell; }
tr.best { background: #fff3c4; font-weight: 600; }
.controls { margin: 0.4em 0; font-size: 0.85em; } .controls input[type=search] { width: 16em; }
.count { color: #555; margin-left: 1em; } .source, .missing { color: #777; font-size: 0.8em; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
footer { margin-top: 2em; color: #777; font-size: 0.8em; }
.banner { background: #fdecea; border-left: 4px solid #c0392b; padding: 0.4em 0.8em; }
"""

# Sorting compares `data-value` (numbers as numbers, empty cells last); filtering keeps the
# rows whose text holds the box's text; the count says how many rows show.
_SCRIPT = """
(function () {
  function cellKey(row, col) {
    var td = row.querySelector("td[data-col='" + col + "']");
    var v = td ? td.getAttribute("data-value") : "";
    var x = Number(v);
    return v === "" ? null : (isNaN(x) ? v : x);
  }
  function compare(a, b) {
    if (a === null || b === null) { return a === b ? 0 : (a === null ? 1 : -1); }
    if (typeof a !== typeof b) { return typeof a === "number" ? -1 : 1; }
    return a < b ? -1 : (a > b ? 1 : 0);
  }
  function sortTable(table, col, desc) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (r, s) {
      var a = cellKey(r, col), b = cellKey(s, col);
      if (a === null || b === null) { return compare(a, b); }
      return desc ? compare(b, a) : compare(a, b);
    });
    rows.forEach(function (r) { body.appendChild(r); });
    table.querySelectorAll("th").forEach(function (th) {
      th.classList.remove("asc", "desc");
      if (th.getAttribute("data-col") === col) { th.classList.add(desc ? "desc" : "asc"); }
    });
    table.setAttribute("data-sorted", col + (desc ? " desc" : " asc"));
  }
  function count(table) {
    var rows = table.tBodies[0].rows, shown = 0;
    for (var i = 0; i < rows.length; i++) { if (!rows[i].hidden) { shown++; } }
    var el = document.getElementById(table.id + "-count");
    if (el) { el.textContent = shown + " of " + rows.length + " rows"; }
  }
  function filter(table, text) {
    var q = text.toLowerCase();
    Array.prototype.forEach.call(table.tBodies[0].rows, function (r) {
      r.hidden = q !== "" && r.textContent.toLowerCase().indexOf(q) < 0;
    });
    count(table);
  }
  var hash = new URLSearchParams(location.hash.replace(/^#/, ""));
  document.querySelectorAll("table.view").forEach(function (table) {
    if (table.hasAttribute("data-sort")) {
      sortTable(table, table.getAttribute("data-sort"), table.getAttribute("data-desc") === "1");
    }
    table.querySelectorAll("th").forEach(function (th) {
      th.addEventListener("click", function () {
        var col = th.getAttribute("data-col");
        sortTable(table, col, th.classList.contains("asc"));
      });
    });
    count(table);
  });
  document.querySelectorAll("input.filter").forEach(function (box) {
    var table = document.getElementById(box.getAttribute("data-table"));
    box.addEventListener("input", function () { filter(table, box.value); });
    if (hash.get("filter")) { box.value = hash.get("filter"); filter(table, box.value); }
  });
  document.querySelectorAll("input.all-cols").forEach(function (box) {
    var table = document.getElementById(box.getAttribute("data-table"));
    box.addEventListener("change", function () { table.classList.toggle("all", box.checked); });
  });
})();
"""


def html_page(title: str, body: str) -> str:
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
            f"<title>{esc(title)}</title><style>{_STYLE}</style></head>\n<body>\n{body}\n"
            f"<script>{_SCRIPT}</script>\n</body></html>\n")

