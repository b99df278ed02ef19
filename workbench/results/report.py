"""The Markdown report of a CEL results folder: `report.md`, rendered from the saved run alone.

A run's `report.md` says what the run did and found: its settings, the clean model, the best
head set of each size confirmed on held-out examples with the headline and which set (if any)
is the best, every other metric of the main task and any set that games the objective, the
side effects on other tasks in their own metrics, the trade-off of found and random sets
(`workbench.results.tradeoff`), the top single heads, and links to the plots
(`workbench.results.plots`).
When the explanation is in `explanation/` (`run_cel`'s explain stage,
`workbench.explain.stage`, or `workbench explain`), the report ends with what the best set's
heads do, read back from those saved tables: so rewriting `report.md` (`CELResult.save`,
`workbench explain`) never needs the model, and the section stays in place. Tables are
Markdown with floats to 4 significant digits. `CELResult.report`, `.write_report` and
`.save` call this module; it reads the result's attributes and imports neither
`workbench.results.result` nor `workbench.explain`, so the dependency runs one way.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from workbench.environment import environment_line
from workbench.results.explanation import (
    EXPLANATION_DIR,
    explanation_section,
)
from workbench.results.export import TIDY_FILE, single_heads, tidy_table
from workbench.results.frontier import FRONTIER_FILE, frontier_table, guard_lines
from workbench.results.headline import gaming_lines, split_order
from workbench.results.store import write_text
from workbench.results.tradeoff import (
    GUARD_METRICS,
    format_interval,
    main_metrics_table,
    side_table,
)
from workbench.screening.registry import screening_estimate
from workbench.tables import markdown_table, save_table
from workbench.tasks.format import small_splits_note

REPORT_FILE = "report.md"
# the line under the timings that says what they were measured on (`workbench.environment`);
# a golden comparison leaves it out with the timings (`tests/golden.py`)
ENVIRONMENT_PREFIX = "Environment:"


def write_report(result, folder: str | Path, plots: bool = True) -> None:
    """Write a `CELResult`'s plots, its long table `tidy.csv` (`workbench.results.export`) and
    `report.md` (each atomically) into `folder`, with the explanation section when
    `folder/explanation/` explains the result's best set."""
    folder = Path(folder)
    tables = {n: getattr(result, n) for n in ("heads", "combos", "confirmation", "side_effects")}
    # `run` names the run by what it is, not where it lies: a copied or resumed folder's file is
    # the same (`workbench.tidy` names folders by their names when it stacks them)
    run = f"{result.config.model}:{result.config.task}"
    save_table(tidy_table(result.config.to_dict(), tables, run), folder / TIDY_FILE)
    frontier = frontier_table(result.combos, result.config.objective, result.config.guards)
    if not frontier.empty:
        save_table(frontier, folder / FRONTIER_FILE)
    if plots:  # matplotlib is imported only where plots are drawn
        from workbench.results.plots import save_plots

        save_plots(result, folder)
    section = None
    if (folder / EXPLANATION_DIR).is_dir():
        section = explanation_section(folder, result)
    write_text(folder / REPORT_FILE, render_report(result, plots=plots, explanation=section))


def render_report(result, plots: bool = True, explanation: list[str] | None = None) -> str:
    """A `CELResult` as a short Markdown report.

    Args:
        result: the run (a `CELResult`).
        plots: link the plots that have data (`workbench.results.plots.drawn_plots`).
        explanation: the Markdown lines of the explanation section (`explanation_section`),
            if any.
    """
    cfg, s = result.config, result.summary
    obj = cfg.objective
    lines = [f"# CEL: {cfg.task} on {_model_title(result)}", ""]
    lines.append(
        f"{cfg.kind.value} ablation, {cfg.method} screening, objective `{obj}` "
        f"(secondary `{cfg.secondary}`, ranked by {cfg.rank_by} first), sets up to size "
        f"{cfg.max_size}, strategies {', '.join(cfg.strategies)}, seed {cfg.seed}."
    )
    lines.append("Effects are ablated minus clean: positive means removing the heads helps.")
    if cfg.search_dtype.value != "float32":  # `workbench.precision`
        lines.append(
            f"Screening and the search's knockouts ran on a {cfg.search_dtype} copy of the "
            "model (`heads.csv` and the `ranked` rows of `combos.csv` hold its numbers, which "
            "only ranked heads); the finalist sets were compared, and every number below is "
            "measured, in the model's own dtype.")
    lines.append("")
    if s.get("n_examples"):
        n = s["n_examples"]
        lines.append(
            f"Examples: {n.get('select')} for selection, {n.get('heldout')} held out "
            "(no example in both)."
        )
    if s.get("few_examples"):
        lines.append(f"**Few examples:** {small_splits_note(s['few_examples'])}.")
    if s.get("clean"):
        lines.append("")
        lines.append("Clean model:")
        lines.append("")
        clean = {k: s["clean"][k] for k in split_order(s["clean"])}
        lines += markdown_table(pd.DataFrame(clean).T.reset_index(names="split/task"))
    if not result.confirmation.empty:
        lines += ["", "## Best head sets, confirmed on held-out examples", ""]
        lines += markdown_table(result.summary_table())
        lines.append("")
        sig = s.get("significant_sizes")
        if sig is not None:
            alpha = s.get("alpha", 1 - cfg.ci)
            lines.append(
                f"**Headline:** held-out enhancement significant at size(s) {sig} "
                f"(`p_holm` < {alpha:.2g})." if sig else
                f"**Headline:** no held-out enhancement is significant (`p_holm` >= "
                f"{alpha:.2g} at every size)."
            )
        lines += [*gaming_lines(result, "**Gamed objective:**"), _best_sentence(result),
                  *rescore_lines(result), ""]
        clustered = s.get("clustered", {}).get("heldout")
        unit = "groups (the task's `group` labels)" if clustered else "examples"
        lines.append(
            f"`d_{obj}` is the held-out gain over `heldout_n` examples with its "
            f"{int(cfg.ci * 100)} % paired bootstrap interval over {unit}; `p_value` is the "
            "one-sided sign-flip p-value of a gain > 0 and `p_holm` the same Holm-corrected "
            f"across sizes. The sets were chosen on the selection split only: `select_d_{obj}` "
            "is the set's gain there, over the `select_n` examples the search scored it on. "
            f"`percentile` (0-100) ranks the gain among {_how_many(result)} random head sets "
            "of the same size drawn from all heads (all of them where there are fewer; ties "
            "count half): most random heads hurt, so this baseline is easy to beat. "
            "`pool_percentile` draws them only from the heads whose single removal does not "
            "clearly hurt: it asks whether the search did better than removing harmless "
            "heads at random. `random_mean` and `pool_random_mean` average each random "
            "set's gain over the held-out examples it was scored on (racing stops a set "
            "once it is clearly below or above the found set: `n_random_complete` in "
            "`confirmation.csv` counts those that saw all of them)."
        )
        others = main_metrics_table(result.confirmation, obj)
        guarding = [m for m in GUARD_METRICS if m != obj and f"d_{m}" in result.confirmation]
        if len(others.columns) > 2:
            n_held = s.get("n_examples", {}).get("heldout")
            lines += ["", "Every other metric of the main task, held out (the same sets"
                      + (f" and {n_held} examples" if n_held else "") + "):", ""]
            lines += markdown_table(others)
            lines += ["", f"Each change has its {int(cfg.ci * 100)} % paired bootstrap interval; "
                      "`p_holm` is the two-sided sign-flip p-value of any change, Holm-corrected "
                      "across sizes. `gamed` marks a set whose objective rises while "
                      f"{' or '.join(guarding)} falls significantly "
                      "(`p_holm` < alpha): such a set is never called best."]
    lines += guard_lines(result)
    if not result.side_effects.empty:
        lines += ["", "## Side effects on other tasks", ""]
        lines += markdown_table(side_table(result.side_effects))
        lines += ["", "Each side task in its own metrics: accuracy and log-prob always, "
                  "`logit_diff` and `prob_diff` only where the task has a wrong answer. `d` is "
                  f"the change (ablated - clean) over the task's `n` examples with its "
                  f"{int(cfg.ci * 100)} % paired bootstrap interval; `p_value` is the "
                  "two-sided sign-flip p-value of any change and `p_holm` the same "
                  "Holm-corrected across all side rows, per metric."]
    if not result.tradeoff.empty:
        lines += ["", "## The trade-off: gain here, change elsewhere", ""]
        lines += markdown_table(tradeoff_summary(result.tradeoff))
        lines += ["", f"For each confirmed set, its held-out gain in `{obj}` with its interval "
                  "and its change on each side task with its interval (over all held-out "
                  "examples and all of the side task's: `gain_n`, `side_n` in `tradeoff.csv`), "
                  "next to the mean of "
                  "the same numbers over a sample of each random baseline's sets of that size "
                  "(`n_random`, `n_pool`: how many; every one of them, with its intervals, is "
                  "in `tradeoff.csv`" + (" and the plot `tradeoff.png`)." if plots else ").")]
    if not result.heads.empty:
        estimate = screening_estimate(cfg.method)
        lines += ["", "## Single heads (selection split)" + (f": {estimate}s, not measured"
                                                             if estimate else ""),
                  "", *_single_head_lines(result)]
    if s.get("attribution_rank_correlation"):
        rho = s["attribution_rank_correlation"]
        lines += [
            "",
            "Attribution vs exact screening, Spearman rank correlation: "
            + ", ".join(f"{k} {v:.3f}" for k, v in rho.items())
            + ".",
        ]
    if s.get("cs_coefficients"):
        lines += [
            "",
            "Compressed-sensing screen, positive coefficients: "
            + ", ".join(f"{k} {v:+.3g}" for k, v in s["cs_coefficients"].items())
            + ".",
        ]
    if result.timings:
        lines += [
            "",
            "Timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in result.timings.items()) + ".",
        ]
        if result.environment:  # beside the timings: what they were measured on
            lines.append(f"{ENVIRONMENT_PREFIX} {environment_line(result.environment)}.")
    if plots:
        from workbench.results.plots import drawn_plots

        lines += ["", *(f"![{p[:-4]}]({p})" for p in drawn_plots(result))]
    if explanation:
        lines += ["", *explanation]
    return "\n".join(lines) + "\n"


def _single_head_lines(result) -> list[str]:
    """The report's table of the top candidates, each effect with its `n`
    (`workbench.results.export.single_heads`), and what the `n`s mean."""
    cfg, obj = result.config, result.config.objective
    table = single_heads(result)
    if "candidate" in table:
        table = table[table["candidate"].astype(bool)]
    if "candidate_rank" in table:
        table = table.sort_values("candidate_rank")
    table = table.head(10).rename(columns={f"d_{obj}_n": "n"})
    searched = bool(table[f"search_d_{obj}"].notna().any())
    cols = ["head_name", f"d_{obj}", f"d_{obj}_lo", f"d_{obj}_hi", "n", f"exact_d_{obj}",
            *([f"d_{cfg.secondary}"] if cfg.secondary else []),
            *([f"search_d_{obj}", "search_n"] if searched else []), "candidate_rank"]
    lines = markdown_table(table[[c for c in cols if c in table]])
    n_select = result.summary.get("n_examples", {}).get("select")
    of = f" of the {n_select}" if n_select else ""
    estimate = screening_estimate(cfg.method)
    if estimate:  # the method's record says it estimates: say so, and what was measured
        are = f" and `d_{cfg.secondary}` are" if cfg.secondary else " is"
        text = (f"`d_{obj}` (with its {int(cfg.ci * 100)} % interval){are} **{estimate}s** "
                f"of removing the head alone ({cfg.method} screening), over its `n`{of} "
                "selection examples: a first-order approximation, not a measured removal, "
                "and it can be far from the measured effect.")
        if f"exact_d_{obj}" in table:
            text += (f" `exact_d_{obj}` is the head removed alone, measured on every selection "
                     "example (the estimate's exact check).")
    else:
        also = f" and `d_{cfg.secondary}` are the effects" if cfg.secondary else " is the effect"
        text = (f"`d_{obj}` (with its {int(cfg.ci * 100)} % interval){also} of removing the "
                f"head alone, over its `n`{of} selection examples: racing stops a head once "
                "its rank is decided, so a clearly helpful or harmful head rests on a first "
                "slice.")
    if searched and estimate:
        text += (f" `search_d_{obj}` is the head removed alone as the search measured it, over "
                 f"`search_n` examples (the value the confirmation's `select_d_{obj}` shows "
                 "for it).")
    elif searched:
        text += (f" Where the search later scored the head alone on more examples, "
                 f"`search_d_{obj}` is that gain over `search_n` examples (the value the "
                 f"confirmation's `select_d_{obj}` shows for it).")
    return [*lines, "", text]


def tradeoff_summary(tradeoff: pd.DataFrame, metrics=GUARD_METRICS) -> pd.DataFrame:
    """The trade-off table of a report: per size, side task and side metric (of `metrics`),
    the confirmed set's gain and side change with intervals (as text), and the mean gain and
    side change of each random baseline's sampled sets."""
    t = tradeoff[tradeoff["metric"].isin(metrics)]
    rows = []
    for (size, task, metric), g in t.groupby(["size", "task", "metric"], sort=False):
        found = g[g["origin"] == "found"].iloc[0]
        row = {"size": int(size), "heads": found["heads"], "task": task, "metric": metric,
               "gain [lo, hi]": format_interval(found["gain"], found["gain_lo"], found["gain_hi"]),
               "side [lo, hi]": format_interval(found["side_d"], found["side_d_lo"],
                                                found["side_d_hi"])}
        for origin in ("random", "pool"):
            part = g[g["origin"] == origin]
            row[f"n_{origin}"] = len(part)
            row[f"{origin}: gain"] = float(part["gain"].mean()) if len(part) else float("nan")
            row[f"{origin}: side"] = float(part["side_d"].mean()) if len(part) else float("nan")
        rows.append(row)
    return pd.DataFrame(rows)


def _model_title(result) -> str:
    name = result.config.model
    if name in ("", "custom", "model") and not result.heads.empty:
        # TransformerLens names a model built from a config "custom"
        return (f"an in-memory model ({int(result.heads['layer'].max()) + 1} layers x "
                f"{int(result.heads['head'].max()) + 1} heads, `model_name` {name!r})")
    return name


def _how_many(result) -> str:
    """How many random sets the baselines drew: `n_random`, or up to it when some were drawn
    in more than one look (`workbench.confirmation.baseline`: `random_pct_hi` is then given)."""
    n = result.config.n_random
    conf = result.confirmation
    if "random_pct_hi" not in conf or conf["random_pct_hi"].isna().all():
        return str(n)
    return (f"up to {n} (drawn in looks, 50, 100, ..., until the share of them at least as "
            "good as the found set is decided against 1 - ci: `n_random` and "
            "`random_pct_hi` in `confirmation.csv`)")


def _gamed_heads(result, significant_only: bool = False) -> list[str]:
    """The head sets (as `heads` strings) flagged gamed, optionally only significant ones."""
    c = result.confirmation
    if c.empty or "gamed" not in c:
        return []
    keep = c["gamed"].astype(bool)
    if significant_only:
        keep &= c["p_holm"].astype(float) < result.summary.get("alpha", 1 - result.config.ci)
    return [str(h) for h in c.loc[keep, "heads"]]


def rescore_lines(result) -> list[str]:
    """For a run on an lm-eval task (its `summary["lm_eval"]`, `workbench.lm_eval.source`):
    the command that re-scores the best set (else the top candidate) with lm-eval's own code,
    on every document of the task, clean and ablated (`workbench.lm_eval.rescore`)."""
    spec = result.summary.get("lm_eval")
    heads = result.best or result.top_candidate
    if not spec or not heads:
        return []
    cfg = result.config
    command = (f"python -m workbench.lm_eval.rescore --model {cfg.model} --task {spec['spec']} "
               f"--heads {','.join(heads)} --kind {cfg.kind} "
               f"--num-fewshot {spec['num_fewshot']}")
    return [f"**Re-score with lm-eval** (its own scoring, on all of the task's documents, clean "
            f"and without {','.join(heads)}): `{command}`"]


def _best_sentence(result) -> str:
    best, top = result.best, result.top_candidate
    if best:
        why = "games the objective" if ",".join(top) in _gamed_heads(result) else "is not"
        extra = "" if best == top else (
            f" (the top candidate on the selection split, {','.join(top)}, {why})")
        return f"**Best set:** {','.join(best)}: its held-out gain is significant{extra}."
    if top and _gamed_heads(result, significant_only=True):
        return ("**Best set:** none: every significant set games the objective (above). The "
                f"top candidate on the selection split is {','.join(top)}.")
    if top:
        return ("**Best set:** none: no significant enhancement. The top candidate on the "
                f"selection split is {','.join(top)}.")
    return "**Best set:** none."


