"""The explanation in a results folder: what the best set's heads do, next to heads that were kept.

CEL finds heads whose removal helps; `explain_folder` says, in the run's own `report.md`,
what those heads were doing, from three angles of `explain_heads` on the held-out split:

- **attention by token role**: where each removed head looks from the answer position, and
  where comparison heads (random heads of the same layers that were not removed) look;
- **direct logit attribution**: what each head writes onto `mean_logit_diff` (the mean
  answer logit minus the mean wrong logit), removed heads next to comparison heads, with an
  interval; a removed head that helps by being removed should often push the wrong answer
  here, and the report says so only where the interval excludes 0;
- **removal**: which examples removing the whole set fixes or breaks, its effect on every
  metric as the confirmation measures it (`set_effect`), and how much of one head's effect
  is its direct output (the rest goes through later layers);
- **single examples**: the attention row from the answer position of every removed and
  comparison head on a fixed, a broken and an unchanged example (`attention_examples.png`).

It explains a finished run's best set (or its top candidate, marked as not significant, when
no set is) and writes `explanation/` (the tables and their `config.json`),
`explanation.png` (`explanation_figure`), `attention_examples.png` and the report with its
new section; `workbench explain DIR` calls it on any results folder, and `run_cel`'s explain
stage (`workbench.explain.stage`) writes the same files at the end of a run. The section
itself is rendered from the saved tables by `workbench.results.report`, so rewriting
`report.md` never needs the model.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.explain.attention import role_columns
from workbench.explain.explanation import HeadExplanation, explain_heads
from workbench.explain.figures import plot_attention_examples
from workbench.hooked import HookedModel
from workbench.results.explanation import (
    ATTENTION_EXAMPLES_FIGURE,
    EXPLANATION_DIR,
    EXPLANATION_FIGURE,
)
from workbench.results.result import CELResult
from workbench.results.store import ResultStore, write_json
from workbench.results.view import write_view


def explain_folder(
    folder: str | Path, model: HookedModel, task, result: CELResult, split: str = "heldout"
) -> HeadExplanation | None:
    """Explain `result`'s best set (or its top candidate) and write it into `folder`:
    `explanation/*.csv`, `explanation.png`, `attention_examples.png`, the section of
    `report.md`, and `view.html` again (`workbench.results.view`).

    Args:
        folder: the run's results folder (locked while writing).
        model, task: the model and main task the run was made from.
        result: the finished run (`CELResult.load(folder)`).
        split: the split to explain on (held out by default: the heads were chosen on
            `select`).

    Returns:
        The `HeadExplanation`, or None when the run confirmed no head set.
    """
    if not result.top_candidate:
        return None
    folder = Path(folder)
    ex = explanation_of(model, task, result, split=split)
    with ResultStore(folder):
        save_explanation(folder, ex)
        result.write_report(folder, plots=(folder / "heads_heatmap.png").is_file())
        write_view(folder)
    return ex


def explanation_of(model: HookedModel, task, result: CELResult,
                   split: str = "heldout") -> HeadExplanation:
    """`explain_heads` of `result`'s best set (or its top candidate) on `split`, its warnings
    left to the report, with the set it explains recorded (`config["top_candidate"]`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the report says so instead
        ex = explain_heads(model, task, result, split=split)
    ex.config["top_candidate"] = ",".join(result.top_candidate)
    return ex


def save_explanation(folder: Path, ex: HeadExplanation) -> None:
    """Write `ex` into the results folder `folder` (whose lock the caller holds):
    `explanation/*.csv` and its `config.json`, `explanation.png`, `attention_examples.png`."""
    target = folder / EXPLANATION_DIR
    ex.save(target)
    write_json(target / "config.json", ex.config)  # atomically, after the tables
    from workbench.results.plots import save_figure

    save_figure(explanation_figure(ex.roles, ex.comparison_roles, ex.dla_summary),
                folder / EXPLANATION_FIGURE)
    if not ex.attention_examples.empty:
        save_figure(plot_attention_examples(ex.attention_examples),
                    folder / ATTENTION_EXAMPLES_FIGURE)


def explanation_figure(roles: pd.DataFrame, comparison_roles: pd.DataFrame,
                       dla_summary: pd.DataFrame):
    """Two panels: mean attention by token role (removed heads solid, comparison heads
    hatched) and direct logit attribution per head (`dla_diff`, with standard errors).

    Returns:
        A matplotlib `Figure`.
    """
    from matplotlib.figure import Figure

    groups = [("removed", roles)]
    if not comparison_roles.empty:
        groups.append(("comparison", comparison_roles))
    role_cols = list(dict.fromkeys(c for _, g in groups for c in role_columns(g)))
    heads = [(name, g, row) for name, g in groups for _, row in g.iterrows()]
    fig = Figure(figsize=(max(7.0, 0.9 * len(heads) + 5.0), 3.6), layout="constrained")
    ax_role, ax_dla = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    x = np.arange(len(role_cols))
    width = 0.8 / max(len(heads), 1)
    for k, (group, _, row) in enumerate(heads):
        values = [float(row.get(c, 0.0)) if pd.notna(row.get(c)) else 0.0 for c in role_cols]
        ax_role.bar(x + (k - (len(heads) - 1) / 2) * width, values, width,
                    label=f"{row['head_name']} ({group})",
                    hatch="//" if group == "comparison" else None,
                    alpha=0.6 if group == "comparison" else 1.0)
    ax_role.set_xticks(x, [c[len("attn_"):] for c in role_cols], rotation=30, ha="right")
    ax_role.set_ylim(0, 1)
    ax_role.set_ylabel("mean attention from answer position")
    ax_role.set_title("Where the heads look", fontsize=9)
    ax_role.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    d = dla_summary.sort_values(["head_group", "layer", "head"], ascending=[False, True, True])
    colors = ["C3" if g == "removed" else "C7" for g in d["head_group"]]
    ax_dla.bar(np.arange(len(d)), d["dla_diff"], yerr=d["dla_diff_se"], color=colors, capsize=3)
    ax_dla.set_xticks(np.arange(len(d)), d["head_name"], rotation=45, ha="right", fontsize=7)
    ax_dla.axhline(0, color="black", lw=0.8)
    ax_dla.set_ylabel("dla_diff (nats)")
    ax_dla.set_title("What they write to the logits\n(red: removed, grey: comparison)",
                     fontsize=9)
    return fig
