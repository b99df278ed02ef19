"""`workbench.explain.interactive`: the full attention patterns of the removed and the comparison
heads on chosen examples, against one unpadded `run_with_cache` per example, and their
CircuitsVis view, which inlines CircuitsVis's bundle, loads nothing (checked in headless
chromium with the network cut) and without the extra names it in one error."""

from __future__ import annotations

import json
import re
import sys

import numpy as np
import pytest
import torch

from tests.browser import SKIP_REASON, chromium, offline_loads
from tests.helpers import assert_close
from workbench.errors import WorkbenchError
from workbench.explain import ablation_outcomes, attention_examples, explain_heads
from workbench.explain.interactive import attention_patterns, attention_view, patterns_view
from workbench.tasks.task import load_task

HEADS, COMPARISON = ["L1H0", "L1H4"], ["L0H3", "L1H2"]


@pytest.fixture(scope="module")
def embedded_model():
    from workbench.loading import load_model
    from workbench.loading.checkpoint import is_checkpoint
    from workbench.zoo import EMBEDDED_PATH

    if not is_checkpoint(EMBEDDED_PATH):
        pytest.skip(f"the embedded model is not shipped ({EMBEDDED_PATH} has no checkpoint)")
    return load_model("embedded", device="cpu")


@pytest.fixture(scope="module")
def task():
    return load_task("embedded_map")


def test_patterns_are_the_models_own_on_each_prompt_alone(embedded_model, task):
    """Each example's patterns equal `run_with_cache` on its prompt alone (the naive
    reference: no padding, no batch), rows sum to 1 below the diagonal, the tokens are the
    model's own, and the answer position's row is `attention_examples`'s."""
    model = embedded_model
    outcomes = ablation_outcomes(model, task, HEADS, split="heldout")
    patterns = attention_patterns(model, task, HEADS, comparison=COMPARISON, examples=3,
                                  outcomes=outcomes)
    table = attention_examples(model, task, HEADS, comparison=COMPARISON, n_examples=3,
                               outcomes=outcomes)
    assert [p.id for p in patterns] == list(dict.fromkeys(table["id"]))
    prompts = {e.id: e.prompt for e in task.examples}
    by_id = outcomes.set_index("id")["outcome"]
    for ex in patterns:
        assert ex.heads == HEADS + COMPARISON
        assert ex.groups == ["removed"] * 2 + ["comparison"] * 2
        assert ex.outcome == by_id[ex.id]
        assert ex.tokens == model.to_str_tokens(prompts[ex.id])
        with torch.no_grad():
            _, cache = model.run_with_cache(model.to_tokens(prompts[ex.id]))
        naive = np.stack([cache[f"blocks.{l}.attn.hook_pattern"][0, h].numpy()
                          for l, h in [(1, 0), (1, 4), (0, 3), (1, 2)]])
        assert ex.pattern.shape == naive.shape == (4, len(ex.tokens), len(ex.tokens))
        assert_close(ex.pattern, naive, atol=1e-6)
        assert_close(ex.pattern.sum(axis=-1), np.ones(naive.shape[:2]), atol=1e-5)
        assert np.all(np.triu(ex.pattern, k=1) == 0)  # causal: nothing after the query
        rows = table[table["id"] == ex.id]
        for k, name in enumerate(ex.heads):
            answer_row = rows[rows["head_name"] == name].sort_values("pos")["attention"]
            assert_close(ex.pattern[k, -1], answer_row.to_numpy(), atol=1e-6)


def test_patterns_of_an_explanation_show_its_examples(embedded_model, task):
    model = embedded_model
    ex = explain_heads(model, task, HEADS, split="heldout")
    patterns = attention_patterns(model, task, ex)
    assert [p.id for p in patterns] == list(dict.fromkeys(ex.attention_examples["id"]))
    assert patterns[0].heads == ex.heads.names + ex.comparison.names
    chosen = [e.id for e in task.examples if e.split == "heldout"][5:7]
    assert [p.id for p in attention_patterns(model, task, HEADS, comparison=None,
                                             examples=chosen)] == chosen
    assert attention_patterns(model, task, HEADS, comparison=None, examples=chosen)[0].groups \
        == ["removed", "removed"]
    with pytest.raises(WorkbenchError, match="not in split 'heldout'"):
        attention_patterns(model, task, HEADS, examples=["no-such-id"])


def _renders(text: str) -> list[tuple[str, dict]]:
    calls = re.findall(r"CircuitsVis\.render\((\"[^\"]+\"), CircuitsVis\.AttentionHeads, "
                       r"(\{.*?\})\);</script>", text, re.S)
    return [(json.loads(div), json.loads(props.replace("<\\/", "</"))) for div, props in calls]


def test_attention_view_inlines_circuitsvis_once_and_holds_the_patterns(embedded_model, task,
                                                                       tmp_path):
    cv = pytest.importorskip("circuitsvis")
    from pathlib import Path

    model = embedded_model
    patterns = attention_patterns(model, task, HEADS, comparison=COMPARISON, examples=2)
    view = patterns_view(patterns)
    bundle = (Path(cv.__file__).parent / "dist" / "cdn" / "iife.js").read_text()
    assert view.html.count(bundle[:2000]) == 1  # the bundle, once, before every view
    assert "unpkg" not in view.html.replace(bundle, "")
    renders = _renders(view.html)
    assert len(renders) == 2 and len({div for div, _ in renders}) == 2
    for (div, props), ex in zip(renders, patterns, strict=True):
        assert f"id='{div}'" in view.html
        assert props["tokens"] == ex.tokens
        assert props["attentionHeadNames"] == ["L1H0 (removed)", "L1H4 (removed)",
                                               "L0H3 (comparison)", "L1H2 (comparison)"]
        assert_close(np.asarray(props["attention"]), ex.pattern, atol=5e-5)  # 4 decimals
    again = attention_view(model, task, HEADS, comparison=COMPARISON, examples=2)
    assert [p for _, p in _renders(again.html)] == [p for _, p in renders]


def test_attention_view_draws_offline_in_headless_chromium(embedded_model, task, tmp_path):
    """CircuitsVis renders from the inlined bundle with the network cut (its "Head Selector"
    is in the DOM) and the page requests nothing."""
    pytest.importorskip("circuitsvis")
    exe = chromium()
    if exe is None:
        pytest.skip(SKIP_REASON)
    path = attention_view(embedded_model, task, HEADS, comparison=COMPARISON,
                          examples=1).save(tmp_path / "attention.html")
    loads, dom = offline_loads(exe, tmp_path, path)
    assert loads == []
    assert "Head Selector" in dom and "L1H0 (removed)" in dom


def test_attention_view_without_the_extra_names_it(embedded_model, task, monkeypatch):
    for name in [m for m in sys.modules if m.split(".")[0] == "circuitsvis"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "circuitsvis", None)
    with pytest.raises(WorkbenchError) as e:
        attention_view(embedded_model, task, HEADS)
    assert 'the CircuitsVis attention view needs circuitsvis, which is in the optional extra ' \
           '[interactive]: pip install "cel-workbench[interactive]"' in str(e.value)
