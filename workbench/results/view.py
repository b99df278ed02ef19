"""One HTML page per results folder that opens offline: `view.html`.

`report.md` is the run's written account; `view.html` is the place to look things up: the
per-head table (every head, sortable by any column, filterable by a text box), the found
sets with their held-out confirmation and intervals, the side effects, the explanation's
tables, every evaluated set, and the plots. It is built from the folder's files alone
(`config.json`, the CSV tables, `explanation/`, the PNG plots), so it can be rebuilt for any
results folder without the model (`workbench view DIR`); `run_cel`'s report stage writes it
at the end of every run (`workbench.results.stage`), after the explanation, and
`explain_folder` again when `workbench explain` explains a finished folder.

The page is one self-contained file: the tables are plain HTML that sort and filter
(`workbench.results.page`: `view.html#filter=L1H` opens every table filtered), the plots
are embedded as base64 `data:` URIs, and nothing is loaded from the network, so it shows
the same on an air-gapped machine.

With the optional extra `interactive` (plotly) installed, the per-head table is followed by
the interactive heatmap of `workbench.results.interactive` (hover a head for its effect,
interval and `n`), plotly.js written into the page from the installed package: the page then
weighs about 5 MB more, and `write_view(..., interactive=False)` (`workbench view --static`)
leaves it out; without the extra the heatmap is the PNG among the plots. The explanation's
section shows the removed and comparison heads' attention on its single examples token by
token (`attention_rows_html`, plain HTML, no extra needed).

A cell shows its number to 4 significant digits and an effect its interval (`page`); the
confirmation says why each size's set is or is not called best (`why`: not significant,
gamed, failing a guard, or not the set chosen; `workbench.results.result.best_reasons`)
next to `gamed`. The text is written as ASCII, other characters as HTML character
references, so the file reads the same whatever the locale's encoding.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pandas as pd

from workbench.errors import WorkbenchError
from workbench.results.explanation import (
    ATTENTION_EXAMPLES_FIGURE,
    EXPLANATION_DIR,
    EXPLANATION_FIGURE,
    not_significant_banner,
)
from workbench.results.frontier import FRONTIER_FILE
from workbench.results.interactive import (
    attention_rows_html,
    heatmap_figure,
    interactive_available,
    offline,
    require,
)
from workbench.results.page import esc, html_page, html_table, interval_columns
from workbench.results.result import GUARD_COLUMN, best_reasons
from workbench.results.store import read_folder, write_text
from workbench.screening.registry import screening_estimate
from workbench.tasks.format import small_splits_note

VIEW_FILE = "view.html"
# the plots in the order the report shows them; any other PNG of the folder follows
FIGURES = ("heads_heatmap.png", "gain_vs_size.png", "side_effects.png", "tradeoff.png",
           EXPLANATION_FIGURE, ATTENTION_EXAMPLES_FIGURE)
MAX_COMBOS = 1000  # evaluated sets shown (the best by score); combos.csv holds them all


def write_view(results_dir: str | Path, interactive: bool | None = None) -> Path:
    """Build `view.html` in a CEL results folder from its files and return its path.

    Args:
        results_dir: a results folder (`config.json`, the CSV tables, plots).
        interactive: add the interactive per-head heatmap (plotly.js inlined, about 5 MB);
            None: when plotly (the extra `interactive`) is installed.

    Returns:
        The path of `view.html` (written atomically).

    Raises:
        WorkbenchError: when the folder is not a CEL results folder, or a table it records
            was changed, truncated or is missing (as `workbench cel` refuses it).

    Example:
        >>> write_view("cel_results")   # then open cel_results/view.html in a browser
    """
    folder = Path(results_dir)
    run, _ = read_folder(folder)  # refuses a folder whose recorded tables were changed
    if interactive is None:
        interactive = interactive_available("plotly")
    text = render_view(folder, run, interactive)
    return write_text(folder / VIEW_FILE, text.encode("ascii", "xmlcharrefreplace").decode())


def render_view(folder: Path, run: dict, interactive: bool = False) -> str:
    """The page's HTML for `folder`, whose parsed `config.json` is `run`; with `interactive`,
    the per-head heatmap of `workbench.results.interactive` too (needs plotly)."""
    cfg = run["config"]
    objective = cfg.get("objective", "accuracy")
    tables = {n: _read_csv(folder / f"{n}.csv")
              for n in ("heads", "confirmation", "side_effects", "combos")}
    body = [f"<h1>CEL: {esc(cfg.get('task'))} on {esc(cfg.get('model'))}</h1>",
            _settings(cfg, run.get("summary", {}), tables["confirmation"])]
    conf = tables["confirmation"]
    metrics = _metrics(conf if conf is not None else tables["heads"], objective)
    alpha = float(run.get("summary", {}).get("alpha", 1.0 - float(cfg.get("ci", 0.95))))
    conf = _with_reasons(folder, conf, objective, alpha)
    body += _section("Found sets, confirmed on held-out examples", "confirmation", conf,
                     _confirmation_columns(metrics, conf), None,
                     f"The best set of each size from the search, re-scored on the held-out "
                     f"split: gain in each metric (ablated - clean) with its bootstrap "
                     f"interval over `d_{objective}_n` held-out examples, the one-sided p-value "
                     f"of a gain in `{objective}` and its Holm correction across sizes, and "
                     "where it falls among random sets of the same size (`percentile`: any "
                     "heads; `pool_percentile`: heads that do not clearly hurt). `why` says "
                     f"why a size's set is or is not called best: only a set with `p_holm` < "
                     f"{alpha:.2g} that is not `gamed` (its objective rising while accuracy or "
                     "log-prob falls) can be.")
    body += _section("Side effects on the other tasks", "side_effects", tables["side_effects"],
                     _side_columns(metrics), None,
                     "The same sets on each side task, in that task's metrics, with intervals "
                     "and two-sided p-values (Holm across all side rows per metric).")
    frontier = _read_csv(folder / FRONTIER_FILE)
    if frontier is not None:
        body += _section("What enhancement costs: the guards' frontier", "frontier", frontier,
                         None, None,
                         "For each guard, the sets the search scored that no other beats on "
                         "both the objective's gain and the guard metric's change (selection "
                         "split), from the least guard loss down; `feasible` sets passed every "
                         "guard there.")
    heads = tables["heads"]
    estimate = screening_estimate(cfg.get("method", "exact"))
    what = (f"{estimate.capitalize()}s of removing one head alone ({cfg.get('method')} "
            "screening: a first-order approximation, not a measured removal; `exact_d_*`, "
            "where present, are the measured effects)" if estimate else
            "Removing one head alone")
    body += _section("Per-head table" + (f": {estimate}s" if estimate else ""), "heads", heads,
                     _head_columns(heads, metrics, objective), (f"d_{objective}", True),
                     f"{what}, on the selection split: one row per head; positive means "
                     "removing it helps. Sorted by the objective's effect; click a header to "
                     "sort by another column.")
    if interactive:
        body += _heatmap(folder, run, conf)
    body += _explanation(folder / EXPLANATION_DIR)
    combos = tables["combos"]
    # the objective with the set removed (`score` in folders of older versions)
    score = next((c for c in (f"ablated_{objective}", "score")
                  if combos is not None and c in combos), None)
    note = (f"Every head set the search scored on the selection split, best `{score}` "
            "(the objective with the set removed) first.")
    if score is not None and len(combos) > MAX_COMBOS:
        order = pd.to_numeric(combos[score], errors="coerce").sort_values(
            ascending=False, kind="stable").index[:MAX_COMBOS]
        combos = combos.loc[sorted(order)]
        note += f" Only the {MAX_COMBOS} best are shown; combos.csv holds all."
    body += _section("Evaluated sets", "combos", combos, None,
                     (score, True) if score is not None else None, note)
    body += _figures(folder)
    body.append(f"<footer>Built from {esc(folder.name)}/ by <code>workbench view</code>: numbers "
                "to 4 significant digits, the CSV's exact value in each cell's tooltip.</footer>")
    return html_page(f"CEL: {cfg.get('task')} on {cfg.get('model')}", "\n".join(body))


def _read_csv(path: Path) -> pd.DataFrame | None:
    """A CSV as text cells, exactly as written (None when the file is missing)."""
    if not path.is_file():
        return None
    try:
        return pd.read_csv(path, dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def _metrics(df: pd.DataFrame | None, objective: str) -> list[str]:
    """The main task's metrics with intervals in `df`, the objective first."""
    if df is None:
        return [objective]
    found = [c[2:] for c in df.columns
             if c.startswith("d_") and f"{c}_lo" in df and f"{c}_hi" in df]
    return [objective] + [m for m in found if m != objective]


def _with_reasons(folder: Path, conf: pd.DataFrame | None, objective: str,
                  alpha: float) -> pd.DataFrame | None:
    """The confirmation's text cells with `why` (`best_reasons`) after `best`."""
    if conf is None or conf.empty or "best" not in conf:
        return conf
    try:
        typed = pd.read_csv(folder / "confirmation.csv")
        why = best_reasons(typed, objective, alpha).tolist()
    except (KeyError, ValueError, TypeError):  # a table this version cannot read: no reasons
        return conf
    out = conf.copy()
    out.insert(list(out.columns).index("best") + 1, "why", why)
    return out


def _confirmation_columns(metrics: list[str], conf: pd.DataFrame | None = None) -> list[str]:
    """What the confirmation shows at first: the decision and why, the objective's gain with
    its n, the p-values (a guarded run's too), the baselines, then the other metrics."""
    obj = metrics[0]
    guard = [GUARD_COLUMN] if conf is not None and GUARD_COLUMN in conf else []
    return ["size", "heads", "best", "why", "gamed", f"d_{obj}", f"d_{obj}_n", "p_value",
            "p_holm", *guard, "random_mean", "percentile", "n_random", "pool_percentile",
            *[c for m in metrics[1:] for c in (f"d_{m}", f"d_{m}_p_holm")]]


def _side_columns(metrics: list[str]) -> list[str]:
    # accuracy and log-prob are measured on every example of every side task: their n is n
    return ["size", "heads", "task", "d_accuracy_n",
            *[c for m in metrics for c in (f"d_{m}", f"d_{m}_p_holm")]]


def _head_columns(heads: pd.DataFrame | None, metrics: list[str], objective: str) -> list[str]:
    shown = ["layer", "head", "head_name", *[f"d_{m}" for m in metrics], f"d_{objective}_n",
             f"exact_d_{objective}", "candidate", "candidate_rank"]
    if heads is not None:  # the objective on each side task
        shown += [c for c in heads.columns if c.startswith(f"d_{objective}_")
                  and c not in shown and interval_columns(c, heads.columns)]
    return shown


def _settings(cfg: dict, summary: dict, conf: pd.DataFrame | None) -> str:
    best, top = "", ""
    if conf is not None and {"best", "top_candidate", "heads"} <= set(conf.columns):
        best = ", ".join(conf.loc[conf["best"] == "True", "heads"])
        top = ", ".join(conf.loc[conf["top_candidate"] == "True", "heads"])
    sizes = summary.get("significant_sizes", [])
    found = (f"<b>{esc(best)}</b>" if best else
             f"none significant{'; top candidate ' + esc(top) if top else ''}")
    rows = [("objective", f"{cfg.get('objective')} (secondary {cfg.get('secondary')})"),
            ("ablation", f"{cfg.get('kind')}, {cfg.get('method')} screening"),
            ("search", f"{', '.join(cfg.get('strategies', []))}, sets up to size "
                       f"{cfg.get('max_size')}, seed {cfg.get('seed')}"),
            ("side tasks", ", ".join(cfg.get("others", [])) or "none"),
            ("significant sizes", ", ".join(map(str, sizes)) or "none")]
    if summary.get("few_examples"):
        rows.append(("few examples", small_splits_note(summary["few_examples"])))
    items = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in rows)
    return f"<dl>{items}<dt>best set</dt><dd>{found}</dd></dl>"


def _section(title: str, table_id: str, df: pd.DataFrame | None, shown: list[str] | None,
             sort: tuple[str, bool] | None, note: str) -> list[str]:
    out = [f"<h2>{esc(title)}</h2>", f"<p>{esc(note)}</p>"]
    if df is None or df.empty:
        out.append(f"<p class='missing'>{table_id}.csv: not in this folder (not computed yet, "
                   "or nothing to show).</p>")
        return out
    out.append(f"<p class='source'>from {table_id}.csv</p>")
    out.append(html_table(df, table_id, shown, sort))
    return out


def _explanation(target: Path) -> list[str]:
    """The explanation's summary tables, when `explain_folder` wrote them, under the
    not-significant banner `report.md` shows (`not_significant_banner`)."""
    if not target.is_dir():
        return []
    out = ["<h2>What the removed heads do</h2>"]
    try:
        config = json.loads((target / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    banner = not_significant_banner(config)
    if banner:
        text = esc(banner.removeprefix("**Not significant.**").strip())
        out.append(f"<p class='banner'><b>Not significant.</b> {text}</p>")
    out.append("<p>From explanation/ (see report.md): attention by token role of the removed "
               "and the comparison heads, their direct logit attribution onto "
               "<code>mean_logit_diff</code> with its interval (nats), and the whole set's "
               "effect on each metric (<code>d_&lt;metric&gt;</code>, as in the confirmation)."
               "</p>")
    for name in ("set_effect", "roles", "comparison_roles", "dla_summary"):
        df = _read_csv(target / f"{name}.csv")
        if df is not None and not df.empty:
            out += [f"<h3>{name}</h3>", html_table(df, f"explanation-{name}", None, None)]
    examples = _read_csv(target / "attention_examples.csv")
    if examples is not None and not examples.empty:
        examples["attention"] = pd.to_numeric(examples["attention"], errors="coerce")
        examples["pos"] = pd.to_numeric(examples["pos"], errors="coerce")
        out += ["<h3>attention on single examples</h3>", attention_rows_html(examples)]
    return out


def _heatmap(folder: Path, run: dict, conf: pd.DataFrame | None) -> list[str]:
    """The interactive per-head heatmap (plotly), or nothing when there is no per-head table."""
    require("plotly", "the interactive heatmap of view.html")  # asked for, so say what is missing
    path = folder / "heads.csv"
    if not path.is_file():
        return []
    marked, label = [], "best set"
    if conf is not None and {"best", "top_candidate", "heads"} <= set(conf.columns):
        for column, name in (("best", "best set"), ("top_candidate", "top candidate (not "
                                                                      "significant)")):
            rows = conf.loc[conf[column] == "True", "heads"]
            if len(rows):
                marked, label = rows.iloc[0].split(","), name
                break
    try:
        fig = heatmap_figure(pd.read_csv(path), run["config"], run.get("summary", {}), marked,
                             label)
    except WorkbenchError:  # no effect column to draw
        return []
    return ["<h2>Per-head heatmap (interactive)</h2>",
            "<p>The per-head table as a heatmap: hover a head for its effect, interval and the "
            "examples it rests on; the menu switches metric and task; the star marks the "
            f"{esc(label)}. Drawn by plotly, whose script is part of this file.</p>",
            f"<div class='interactive'>{offline(fig).html}</div>"]


def _figures(folder: Path) -> list[str]:
    names = [n for n in FIGURES if (folder / n).is_file()]
    names += sorted(p.name for p in folder.glob("*.png") if p.name not in FIGURES)
    if not names:
        return []
    out = ["<h2>Plots</h2>"]
    for name in names:
        data = base64.b64encode((folder / name).read_bytes()).decode("ascii")
        out.append(f"<figure><img alt='{esc(name)}' src='data:image/png;base64,{data}'>"
                   f"<figcaption>{esc(name)}</figcaption></figure>")
    return out
