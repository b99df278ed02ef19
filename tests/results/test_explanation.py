"""The explanation section: a direction only where its interval excludes 0, and the
not-significant banner in `view.html` wherever `report.md` has it."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

from workbench.explain.dla import summarize_dla
from workbench.results.explanation import direct_reading, head_readings
from workbench.results.view import VIEW_FILE
from workbench.stats import Stats, effect_summary

BANNER = "Not significant."


def _row(diff: float, lo: float, hi: float) -> pd.Series:
    return pd.Series({"dla_diff": diff, "dla_diff_se": 0.01, "dla_diff_lo": lo,
                      "dla_diff_hi": hi})


def test_a_direction_is_stated_only_when_the_interval_excludes_zero():
    # the two readings: -0.00825 and +0.00129 with standard errors near 0.018
    assert direct_reading(_row(-0.00825, -0.044, 0.027)).startswith(
        "has no clear direct effect (`dla_diff` -0.00825 [-0.044, +0.027]")
    assert direct_reading(_row(0.00129, -0.035, 0.038)).startswith("has no clear direct effect")
    assert direct_reading(_row(-1.48, -1.62, -1.34)) == (
        "directly pushes toward the wrong answer (`dla_diff` -1.48 [-1.62, -1.34]")
    assert direct_reading(_row(0.4, 0.1, 0.7)) == (
        "directly pushes toward the answer (`dla_diff` +0.4 [+0.1, +0.7]")
    # an interval that touches 0 does not exclude it
    assert "no clear direct effect" in direct_reading(_row(0.4, 0.0, 0.7))
    # a table without intervals (explained by an earlier version) claims no direction
    old = pd.Series({"dla_diff": -1.0, "dla_diff_se": 0.01})
    assert direct_reading(old).startswith("has no measured direction")


def test_summarize_dla_intervals_decide_the_reading():
    """Per head, `summarize_dla`'s interval is `effect_summary`'s on its per-example values;
    a head writing a clear negative amount reads as pushing toward the wrong answer, a head
    whose values straddle 0 as no clear direct effect."""
    rng = np.random.default_rng(0)
    n = 40
    clear = -0.5 + 0.05 * rng.standard_normal(n)
    noise = 0.018 * np.sqrt(n) * rng.standard_normal(n)  # a standard error near 0.018
    noise -= noise.mean() - 0.002
    rows = []
    for head, values in ((0, clear), (1, noise)):
        rows += [{"id": f"e{i}", "layer": 1, "head": head, "head_name": f"L1H{head}",
                  "head_group": "removed", "dla_correct": v, "dla_wrong": 0.0, "dla_diff": v}
                 for i, v in enumerate(values)]
    stats = Stats(n_boot=500, seed=3)
    summary = summarize_dla(pd.DataFrame(rows), stats)
    for head, values in ((0, clear), (1, noise)):
        want = effect_summary(torch.tensor(values)[None], 500, 3, 0.95)
        got = summary[summary["head"] == head].iloc[0]
        assert got["dla_diff_lo"] == pytest.approx(float(want["_lo"][0]), abs=1e-12)
        assert got["dla_diff_hi"] == pytest.approx(float(want["_hi"][0]), abs=1e-12)
    roles = pd.DataFrame({"head_name": ["L1H0", "L1H1"], "top_role": ["bos", "bos"],
                          "attn_bos": [0.9, 0.8]})
    lines = head_readings({"roles": roles, "comparison_roles": pd.DataFrame(),
                           "dla_summary": summary})
    assert "directly pushes toward the wrong answer" in lines[0]
    assert "has no clear direct effect" in lines[1] and "pushes" not in lines[1]
    assert "(0.90 of its attention)" in lines[0] and "(0.80 of its attention)" in lines[1]
    # a role that is no Python identifier (a generation task's `few-shot`) is read by name
    roles = pd.DataFrame({"head_name": ["L1H0"], "top_role": ["few-shot"],
                          "attn_few-shot": [0.75], "attn_question": [0.25]})
    lines = head_readings({"roles": roles, "comparison_roles": pd.DataFrame(),
                           "dla_summary": summary})
    assert "attends mostly to `few-shot` (0.75 of its attention)" in lines[0]


@pytest.fixture(scope="module")
def demo_folder(tmp_path_factory):
    """The demo run, explained: its best set is significant."""
    from workbench.cli.demo import micro_model, write_demo
    from workbench.pipeline import run_cel
    from workbench.tasks.task import load_task

    folder = tmp_path_factory.mktemp("banner")
    _, main, _ = write_demo(folder)
    model, task = micro_model(), load_task(main)
    result = run_cel(model, task, out_dir=folder / "run", n_random=10, n_boot=50,
                     progress=False)
    return model, task, result, folder / "run"


def test_the_banner_is_in_view_html_where_report_md_has_it(demo_folder, tmp_path):
    from workbench.explain.report import explain_folder

    model, task, result, folder = demo_folder
    assert result.best  # significant: no banner in either file
    report, view = (folder / "report.md").read_text(), (folder / VIEW_FILE).read_text()
    assert "## What the best set's heads do" in report and "What the removed heads do" in view
    assert BANNER not in report and BANNER not in view
    weak = replace(result, confirmation=result.confirmation.assign(p_holm=1.0))
    out = tmp_path / "weak"
    shutil.copytree(folder, out)
    explain_folder(out, model, task, weak)
    report, view = (out / "report.md").read_text(), (out / VIEW_FILE).read_text()
    assert f"> **{BANNER}**" in report
    section = view[view.index("<h2>What the removed heads do</h2>"):]
    assert section.index(f"<b>{BANNER}</b>") < section.index("<table")  # above its tables
    assert "whose held-out gain is not established" in section
    # and the set's effect, as the confirmation measures it, is one of the view's tables
    assert "id='explanation-set_effect'" in section


def test_the_set_effect_sentence_says_when_it_is_not_the_confirmations(demo_folder, tmp_path):
    """Held out under the run's ablation it is the confirmation's number; on another split,
    or under zero ablation for a resample run, the sentence says it differs."""
    from workbench.ablation import AblationKind
    from workbench.results.explanation import explanation_section

    _, _, result, folder = demo_folder

    def sentence(res, path) -> str:
        lines = explanation_section(path, res)
        return next(x for x in lines if x.startswith("Removing the whole set"))

    assert "as the confirmation table measures them" in sentence(result, folder)
    resample = replace(result, config=replace(result.config, kind=AblationKind.RESAMPLE))
    assert "the confirmation's resample ablation" in sentence(resample, folder)
    out = tmp_path / "select"
    shutil.copytree(folder, out)
    path = out / "explanation" / "config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps({**config, "split": "select"}))
    text = sentence(result, out)
    assert "on the select split, so not the confirmation's numbers" in text
    assert "as the confirmation table measures them" not in text
