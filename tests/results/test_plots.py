"""The CEL plots: the heatmap's axes are layer and head indices, so their ticks are integers."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

from workbench.results.plots import heads_heatmap
from workbench.results.result import CELConfig, CELResult
from workbench.tables import head_name


def _result(n_layers: int, n_heads: int) -> CELResult:
    layer, head = np.divmod(np.arange(n_layers * n_heads), n_heads)
    heads = pd.DataFrame(
        {
            "layer": layer,
            "head": head,
            "head_name": [head_name(int(l), int(h)) for l, h in zip(layer, head, strict=True)],
            "d_accuracy": np.random.default_rng(0).normal(0.0, 0.1, len(layer)),
            "candidate": np.arange(len(layer)) < 2,
        }
    )
    return CELResult(config=CELConfig(model="m", task="t", objective="accuracy"), heads=heads)


def _shown_ticks(axis, lo: float, hi: float) -> list[tuple[float, str]]:
    """(location, label) of the ticks drawn: matplotlib draws only those inside the view."""
    pairs = zip(axis.get_majorticklocs(), axis.get_majorticklabels(), strict=True)
    return [(loc, t.get_text()) for loc, t in pairs if lo <= loc <= hi]


@pytest.mark.parametrize(("n_layers", "n_heads"), [(3, 5), (1, 12), (1, 1), (2, 4), (48, 16)])
def test_heatmap_ticks_are_layer_and_head_indices(n_layers, n_heads):
    fig = heads_heatmap(_result(n_layers, n_heads))
    fig.savefig(io.BytesIO(), format="png")  # a full draw, so the tick labels are formatted
    (ax,) = [a for a in fig.axes if a.get_xlabel() == "head"]
    for axis, limits, n in (
        (ax.xaxis, ax.get_xlim(), n_heads),
        (ax.yaxis, ax.get_ylim(), n_layers),
    ):
        ticks = _shown_ticks(axis, *sorted(limits))
        assert ticks, f"no ticks on the {axis.axis_name} axis"
        for loc, label in ticks:
            value = int(label.replace("\N{MINUS SIGN}", "-"))  # ValueError on '0.5'
            assert value == loc and 0 <= value < n, (axis.axis_name, loc, label)


def _confirmed(p_holm: list[float]) -> CELResult:
    """A 2 x 4 result whose sizes 1..3 have the given Holm p-values; size 3 ranks first on
    the selection split."""
    result = _result(2, 4)
    result.confirmation = pd.DataFrame(
        {
            "size": [1, 2, 3],
            "heads": ["L0H1", "L0H1,L1H2", "L0H1,L1H2,L1H3"],
            "best": [False, False, True],
            "select_d_accuracy": [0.1, 0.2, 0.3],
            "d_accuracy": [0.1, 0.15, 0.2],
            "d_accuracy_lo": [0.05, 0.1, 0.1],
            "d_accuracy_hi": [0.15, 0.2, 0.3],
            "random_mean": [-0.2, -0.3, -0.4],
            "random_q95": [0.0, -0.1, -0.1],
            "p_holm": p_holm,
        }
    )
    return result


def _marked(fig) -> list[tuple[float, float]]:
    """(head, layer) of the points scattered on the heatmap."""
    (ax,) = [a for a in fig.axes if a.get_xlabel() == "head"]
    return sorted(tuple(map(float, p)) for c in ax.collections for p in c.get_offsets())


def _legend(fig) -> list[str]:
    """The texts of the figure's legend (below the panels)."""
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


def test_heatmap_marks_the_best_set_or_the_top_candidate():
    fig = heads_heatmap(_confirmed([0.01, 0.01, 0.01]))
    assert _marked(fig) == [(1.0, 0.0), (2.0, 1.0), (3.0, 1.0)]
    assert "best set: L0H1,L1H2,L1H3" in _legend(fig)
    # only size 1 significant: the best set is size 1, not the top candidate
    assert _marked(heads_heatmap(_confirmed([0.01, 0.2, 0.2]))) == [(1.0, 0.0)]
    fig = heads_heatmap(_confirmed([0.2, 0.2, 0.2]))
    assert any("top candidate (not significant)" in t for t in _legend(fig))
    assert _marked(fig) == [(1.0, 0.0), (2.0, 1.0), (3.0, 1.0)]


def test_gain_vs_size_legend_is_clear_of_the_random_band():
    from workbench.results.plots import gain_vs_size

    fig = gain_vs_size(_confirmed([0.01, 0.01, 0.01]))
    fig.savefig(io.BytesIO(), format="png")  # lay out
    (ax,) = fig.axes
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1  # beside the axes, so over no data


def _outlined(fig) -> list[tuple[float, float]]:
    """(head, layer) of the heads outlined on the main panel (black, unfilled squares)."""
    ax = next(a for a in fig.axes if a.get_xlabel() == "head")
    return sorted((p.get_x() + 0.5, p.get_y() + 0.5) for p in ax.patches
                  if not p.get_hatch() and p.get_linewidth() > 1)


@pytest.mark.parametrize("strategy,searched", [
    ("interaction", ["L1H0", "L0H3"]),  # its finalists, not every candidate
    ("exhaustive", ["L0H0", "L0H1"]),  # the top_m of the candidates
])
def test_heatmap_outlines_only_the_heads_the_search_scored_sets_of(strategy, searched):
    """A quick look once outlined 78 candidates as "the search starts from them" while
    its search used the top 6. The outline is what each strategy's record says it searched."""
    result = _result(2, 4)
    result.config = CELConfig(model="m", task="t", objective="accuracy",
                              strategies=(strategy,), top_m=2)
    result.summary = {"candidates": ["L0H0", "L0H1", "L1H0", "L1H2", "L0H3"],
                      "interaction": {"finalists": ["L1H0", "L0H3"]}}
    fig = heads_heatmap(result)
    want = sorted((float(int(h[3])), float(int(h[1]))) for h in searched)
    assert _outlined(fig) == want
    assert any(f"the 2 heads whose sets the search scored ({strategy}: 2" in t
               for t in _legend(fig))


def test_heatmap_of_attribution_screening_says_it_shows_estimates():
    """Under a screening method that estimates (its record's `exact` is False), the panels
    are titled as its estimates, not as removals; under exact screening as removals."""
    result = _result(2, 4)
    result.config = CELConfig(model="m", task="t", objective="accuracy", method="attribution")
    ax = next(a for a in heads_heatmap(result).axes if a.get_xlabel() == "head")
    assert ax.get_title().startswith("Removing one head, attribution estimate (not measured)")
    result.config = CELConfig(model="m", task="t", objective="accuracy", method="exact")
    ax = next(a for a in heads_heatmap(result).axes if a.get_xlabel() == "head")
    assert ax.get_title().startswith("Removing one head: ")


def test_a_run_without_side_tasks_writes_and_shows_no_side_figures(tmp_path):
    """No figure for a section with no data: a run with no side tasks has no side-effects or
    trade-off plot, in the folder or in report.md; a stale one from an earlier write goes."""
    from workbench.results.plots import PLOT_FUNCTIONS, drawn_plots, save_plots
    from workbench.results.report import render_report

    result = _result(2, 4)
    assert result.side_effects.empty and result.tradeoff.empty
    (tmp_path / "side_effects.png").write_bytes(b"stale")
    written = {p.name for p in save_plots(result, tmp_path)}
    assert written == set(drawn_plots(result)) == set(PLOT_FUNCTIONS) - {
        "side_effects.png", "tradeoff.png"}
    assert {p.name for p in tmp_path.glob("*.png")} == written
    report = render_report(result, plots=True)
    assert "![heads_heatmap](heads_heatmap.png)" in report
    assert "side_effects.png" not in report and "tradeoff.png" not in report
