"""The head explanations: checked on a hand-wired micro model and against exact decompositions.

The micro model has one layer and no layer norm, so every number can be worked out by hand:
head L0H0 attends to the previous token and writes `-2` along the answer direction whenever that
token is a filler word; head L0H1 attends to the marker word (by its QK circuit) and writes `+1`
along it. The answer direction is `+1` on `yes` and `-1` on `no`. So the clean model prefers
`no` (wrong), removing L0H0 fixes every example, L0H0's DLA onto `yes - no` is -4 and L0H1's is +2.
"""

from __future__ import annotations

import io
import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

from tests.helpers import assert_close, tiny_model, write_task
from workbench.errors import WorkbenchError
from workbench.explain import (
    OUTCOMES,
    ablation_outcomes,
    attention_by_role,
    attention_examples,
    comparison_heads,
    direct_logit_attribution,
    dla_components,
    explain_heads,
    ov_circuit,
    plot_answer_attention,
    plot_attention,
    plot_attention_examples,
    plot_dla,
    plot_removal_vs_dla,
    plot_role_bars,
    qk_circuit,
    removal_vs_dla,
    summarize_attention,
)
from workbench.explain.capture import capture
from workbench.explain.dla import attribute
from workbench.logits import answer_logits
from workbench.tables import check_head_table
from workbench.tasks.encoding import encode_task
from workbench.tasks.task import load_task
from workbench.tasks.tokenizer import WordTokenizer, get_tokenizer

MICRO_VOCAB = ["<bos>", "<pad>", "mk", "f0", "f1", "f2", "f3", "yes", "no"]
N_POS = 8
MARKER_DIM, FILLER_DIM, ANSWER_DIM = 8, 9, 10
SHARP = 6.0  # query/key scale: scores of 36 / sqrt(8) make attention all but one-hot


@pytest.fixture(scope="module")
def micro_model() -> HookedTransformer:
    tok = WordTokenizer(MICRO_VOCAB)
    cfg = HookedTransformerConfig(
        n_layers=1,
        d_model=16,
        n_ctx=N_POS,
        d_head=8,
        n_heads=2,
        d_vocab=len(tok),
        attn_only=True,
        normalization_type=None,
        act_fn="gelu",
    )
    model = HookedTransformer(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        ids = {w: i for i, w in enumerate(MICRO_VOCAB)}
        for p in range(N_POS):
            model.W_pos[p, p] = 1.0
        model.W_E[ids["mk"], MARKER_DIM] = 1.0
        for w in ("f0", "f1", "f2", "f3"):
            model.W_E[ids[w], FILLER_DIM] = 1.0
        attn = model.blocks[0].attn
        # L0H0: the query at position p matches the key at p - 1; it reads "filler", writes -2.
        for p in range(N_POS):
            attn.W_Q[0, p, p] = SHARP
            if p + 1 < N_POS:
                attn.W_K[0, p, p + 1] = SHARP
        attn.W_V[0, FILLER_DIM, 0] = 1.0
        attn.W_O[0, 0, ANSWER_DIM] = -2.0
        # L0H1: a constant query matches the marker's key; it reads "marker", writes +1.
        attn.b_Q[1, 0] = SHARP
        attn.W_K[1, MARKER_DIM, 0] = SHARP
        attn.W_V[1, MARKER_DIM, 0] = 1.0
        attn.W_O[1, 0, ANSWER_DIM] = 1.0
        model.W_U[ANSWER_DIM, ids["yes"]] = 1.0
        model.W_U[ANSWER_DIM, ids["no"]] = -1.0
    model.word_tokenizer = tok
    model.eval()
    return model


@pytest.fixture(scope="module")
def micro_task(tmp_path_factory):
    """Prompts `f f mk f f ...`: the marker never at the last two positions."""
    rng = np.random.default_rng(0)
    lines = [json.dumps({"task": {"name": "micro", "metric": "accuracy"}})]
    for i in range(12):
        length = int(rng.integers(4, N_POS))  # prompt words; with BOS at most N_POS tokens
        marker = int(rng.integers(0, length - 2))
        words = [f"f{int(j)}" for j in rng.integers(0, 4, size=length)]
        words[marker] = "mk"
        roles = ["context"] * length
        roles[marker] = "marker"
        roles[-1] = "query"
        lines.append(
            json.dumps(
                {
                    "id": f"m{i}",
                    "prompt": " ".join(words),
                    "answer": "yes",
                    "wrong": ["no"],
                    "roles": roles,
                    "split": "heldout" if i % 2 else "select",
                }
            )
        )
    path = tmp_path_factory.mktemp("micro") / "micro.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return load_task(path)


@pytest.fixture(scope="module")
def micro_explained(micro_model, micro_task):
    return explain_heads(micro_model, micro_task, ["L0H0", "L0H1"], split=None, comparison=None)


# ----------------------------------------------------------------- the micro model, by hand


def test_micro_attention_reports_the_wired_roles(micro_model, micro_task):
    by_task = attention_by_role(micro_model, micro_task, ["L0H0", "L0H1"], split=None)
    marker = by_task[by_task["head_name"] == "L0H1"]
    assert (marker["top_role"] == "marker").all()
    assert (marker["top_token"] == "mk").all()
    assert marker["attn_marker"].min() > 0.99
    by_pos = attention_by_role(micro_model, micro_task, ["L0H0"], split=None, roles="positional")
    assert (by_pos["top_role"] == "previous").all()
    assert by_pos["attn_previous"].min() > 0.99
    role_cols = [c for c in by_task.columns if c.startswith("attn_")]
    assert_close(by_task[role_cols].sum(axis=1), np.ones(len(by_task)))


def test_micro_summary_tables(micro_explained):
    roles = check_head_table(micro_explained.roles)
    assert list(roles["top_role"]) == ["context", "marker"]  # L0H0's previous token: context
    assert roles.loc[1, "top_tokens"].startswith("'mk'x12")
    assert set(micro_explained.roles_by_outcome["outcome"]) <= set(OUTCOMES)


def test_micro_dla_signs_and_values(micro_explained):
    dla = micro_explained.dla.set_index(["head_name", "id"])
    assert (dla.loc["L0H1", "dla_diff"] > 0).all()
    assert (dla.loc["L0H0", "dla_diff"] < 0).all()
    # Near one-hot attention: L0H1 writes +1 (yes +1, no -1), L0H0 writes -2.
    assert_close(dla.loc["L0H1", "dla_diff"], np.full(12, 2.0), atol=0.02)
    assert_close(dla.loc["L0H0", "dla_diff"], np.full(12, -4.0), atol=0.04)
    assert_close(dla.loc["L0H1", "dla_correct"], -dla.loc["L0H1", "dla_wrong"])
    summary = check_head_table(micro_explained.dla_summary)
    assert list(summary["head_group"]) == ["removed", "removed"]


def test_micro_outcomes_removal_fixes(micro_model, micro_task):
    out = ablation_outcomes(micro_model, micro_task, ["L0H0"], split=None)
    assert (out["correct_clean"] == 0).all() and (out["outcome"] == "fixed").all()
    assert (out["d_logprob"] > 0).all()
    out = ablation_outcomes(micro_model, micro_task, ["L0H1"], split=None)
    assert (out["outcome"] == "unchanged").all()


def test_micro_removal_is_all_direct(micro_explained):
    """One layer, no layer norm: ablating a head changes the logits only through its own
    output, so the whole change is the direct effect, and it is minus the DLA."""
    removal = micro_explained.removal
    assert_close(removal["direct_effect"], -removal["dla_diff"])
    assert_close(removal["d_mean_logit_diff"], removal["direct_effect"], atol=1e-4)
    assert_close(removal["indirect_effect"], np.zeros(len(removal)), atol=1e-4)
    fixed = removal[removal["head_name"] == "L0H0"]
    assert (fixed["d_logprob"] > 0).all()  # removing L0H0 alone helps every example


def test_micro_ov_and_qk_circuits(micro_explained):
    ov = micro_explained.ov.set_index(["head_name", "source_token"])
    assert (
        ov.index.get_level_values("source_token")[micro_explained.ov["head_name"] == "L0H1"][0]
        == "mk"
    )
    row = ov.loc[("L0H1", "mk")]
    assert row["promoted"].startswith("'yes'") and row["suppressed"].startswith("'no'")
    filler = micro_explained.ov[
        (micro_explained.ov["head_name"] == "L0H0")
        & micro_explained.ov["source_token"].str.startswith("f")
    ].iloc[0]
    assert filler["promoted"].startswith("'no'") and filler["suppressed"].startswith("'yes'")
    qk = micro_explained.qk
    top = qk[(qk["head_name"] == "L0H1") & (qk["rank"] == 0)].iloc[0]
    assert top["source_token"] == "mk" and top["source_role"] == "marker"


def test_micro_functions_agree_with_explain_heads(micro_model, micro_task, micro_explained):
    args = (micro_model, micro_task, ["L0H0", "L0H1"])
    dla = direct_logit_attribution(*args, split=None, comparison=None)
    pd.testing.assert_frame_equal(dla, micro_explained.dla)
    pd.testing.assert_frame_equal(ov_circuit(*args, split=None), micro_explained.ov)
    pd.testing.assert_frame_equal(qk_circuit(*args, split=None), micro_explained.qk)
    removal = removal_vs_dla(*args, split=None)
    pd.testing.assert_frame_equal(removal, micro_explained.removal.drop(columns="outcome"))


# ----------------------------------------------------------------- exact decompositions


def _folded_copy(model: HookedTransformer) -> HookedTransformer:
    """The same network with its layer norms folded and writing weights centred, as
    `load_model` processes hub models."""
    cfg = HookedTransformerConfig.unwrap(model.cfg.to_dict() | {"normalization_type": "LNPre"})
    folded = HookedTransformer(cfg)
    folded.load_and_process_state_dict(
        model.state_dict(),
        fold_ln=True,
        center_writing_weights=True,
        center_unembed=True,
        fold_value_biases=False,
    )
    folded.word_tokenizer = model.word_tokenizer
    folded.eval()
    return folded


@pytest.mark.parametrize("folded", [False, True], ids=["LN", "folded-LNPre"])
def test_dla_components_sum_to_logit_difference(gpt2_like_model, tiny_task, folded):
    """Right-padded prompts of varied length; LN with weights and random biases (or folded).
    Heads, MLPs, embeddings and biases sum to the final logit difference; `other` is ~0."""
    model = _folded_copy(gpt2_like_model) if folded else gpt2_like_model
    comps = dla_components(model, tiny_task, split=None)
    batch = encode_task(model, tiny_task)
    with torch.no_grad():
        logits = answer_logits(model, batch)
    answer = logits.gather(1, batch.answer_ids)[:, 0]
    diff = answer - logits.gather(1, batch.wrong_ids)[:, 0]
    known = comps[comps["component"] != "other"]
    totals = known.groupby("id", sort=False)[["dla_correct", "dla_diff"]].sum()
    assert list(totals.index) == batch.task.ids
    assert_close(totals["dla_diff"], diff, atol=1e-4, rtol=0)
    if not folded:  # center_unembed shifts every logit of a position by one constant
        assert_close(totals["dla_correct"], answer, atol=1e-4, rtol=0)
    assert comps.loc[comps["component"] == "other", "dla_diff"].abs().max() < 1e-4
    counts = comps.groupby("component").size() / len(batch)
    assert counts["head"] == 8 and counts["mlp"] == 2 and counts["b_O"] == 2


def test_removal_direct_effect_matches_mean_ablation_by_hand(gpt2_like_model, tiny_task):
    removal = removal_vs_dla(gpt2_like_model, tiny_task, ["L1H3"], split=None, kind="mean")
    assert_close(
        removal["d_mean_logit_diff"],
        removal["direct_effect"] + removal["indirect_effect"],
        atol=1e-5,
    )
    assert removal["indirect_effect"].abs().max() > 1e-3  # LN scale: not all direct here
    zero = removal_vs_dla(gpt2_like_model, tiny_task, ["L1H3"], split=None)
    assert_close(zero["direct_effect"], -zero["dla_diff"])


def test_rival_is_used_without_wrong_answers(attn_model, tmp_path):
    path = write_task(tmp_path / "nowrong.jsonl", n=10)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    for rec in lines[1:]:
        rec.pop("wrong")
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    task = load_task(path)
    dla = direct_logit_attribution(attn_model, task, ["L0H0"], split=None, comparison=None)
    assert (dla["wrong_source"] == "rival").all()
    assert (dla["wrong"] != dla["answer"]).all()


# ----------------------------------------------------------------- helpers and errors


def test_comparison_heads_same_layer_not_in_set(attn_model):
    heads = ["L0H1", "L1H2", "L1H3"]
    comp = comparison_heads(attn_model, heads, seed=3)
    assert len(comp) == 3 and not set(comp.heads) & {(0, 1), (1, 2), (1, 3)}
    assert sorted(l for l, _ in comp) == [0, 1, 1]
    assert comp == comparison_heads(attn_model, heads, seed=3)


def test_explain_tables_follow_schemas(attn_model, tiny_task, tmp_path):
    ex = explain_heads(attn_model, tiny_task, ["L1H0", "L0H2"], split="heldout")
    for name in ("roles", "dla_summary"):
        check_head_table(getattr(ex, name))
    for name in ("attention", "dla", "removal"):
        assert tuple(getattr(ex, name).columns[:4]) == ("id", "layer", "head", "head_name")
    for name in ("ov", "qk", "roles_by_outcome"):
        assert tuple(getattr(ex, name).columns[:3]) == ("layer", "head", "head_name")
    assert set(ex.dla["head_group"]) == {"removed", "comparison"}
    assert len(ex.outcomes) == len(tiny_task.subset("heldout"))
    folder = ex.save(tmp_path / "explain")
    assert json.loads((folder / "config.json").read_text())["heads"] == "L0H2,L1H0"
    assert len(pd.read_csv(folder / "dla.csv")) == len(ex.dla)


def test_explain_the_helpful_removal(micro_model, micro_task):
    """Explaining L0H0 alone (the set whose removal fixes everything), against L0H1."""
    ex = explain_heads(
        micro_model, micro_task, ["L0H0"], split=None, comparison=["L0H1"], roles="positional"
    )
    assert (ex.outcomes["outcome"] == "fixed").all()
    by = ex.roles_by_outcome
    assert list(by["outcome"]) == ["fixed"] and list(by["top_role"]) == ["previous"]
    summary = ex.dla_summary.set_index("head_name")
    assert summary.loc["L0H0", "head_group"] == "removed" and summary.loc["L0H0", "dla_diff"] < 0
    assert summary.loc["L0H1", "head_group"] == "comparison" and summary.loc["L0H1", "dla_diff"] > 0
    with pytest.raises(WorkbenchError, match="no column"):
        summarize_attention(ex.attention, by="nope")


def test_errors(attn_model, tiny_task, micro_model, micro_task):
    with pytest.raises(WorkbenchError, match="labels no token roles"):
        attention_by_role(attn_model, tiny_task, ["L0H0"], roles="task")
    with pytest.raises(WorkbenchError, match="role scheme"):
        attention_by_role(micro_model, micro_task, ["L0H0"], split=None, roles="nope")
    with pytest.raises(WorkbenchError, match="out of range"):
        explain_heads(attn_model, tiny_task, ["L5H0"])
    with pytest.raises(WorkbenchError, match="also in the head set"):
        direct_logit_attribution(attn_model, tiny_task, ["L0H0"], comparison=["L0H0"])


def test_plots_render(micro_model, micro_task, micro_explained):
    figs = [
        plot_attention(micro_model, micro_task, ["L0H0", "L0H1"], example="m1", split=None),
        plot_answer_attention(micro_model, micro_task, "L0H1", split=None, n_examples=4),
        plot_role_bars(micro_explained.roles),
        plot_role_bars(micro_explained.roles_by_outcome),
        plot_dla(micro_explained.dla_summary),
        plot_removal_vs_dla(micro_explained.removal),
        plot_attention_examples(micro_explained.attention_examples),
    ]
    for fig in figs:
        assert fig.axes
        fig.savefig(io.BytesIO(), format="png")
    labels = [t.get_text() for t in figs[0].axes[0].get_xticklabels()]
    assert labels[0] == "<bos>" and "mk" in labels


# --- the explanation of a CEL result -----------------------------------------------------------

FAST_CEL = dict(n_random=10, n_boot=50, progress=False)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """The demo micro model (built in memory), its task and a finished CEL run in a folder."""
    from workbench.cli.demo import micro_model as demo_model
    from workbench.cli.demo import write_demo
    from workbench.pipeline import run_cel

    folder = tmp_path_factory.mktemp("demo")
    _, main, _ = write_demo(folder)
    model, task = demo_model(), load_task(main)
    # unexplained, so that the tests below see what `explain_folder` adds
    result = run_cel(model, task, out_dir=folder / "run", explain=False, **FAST_CEL)
    return model, task, result, folder / "run"


def test_explain_heads_takes_a_cel_result(demo_run):
    """A significant result is explained as its best set would be by hand, without warning."""
    import warnings

    model, task, result, _ = demo_run
    assert result.best == ["L0H1", "L0H3", "L1H1"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ex = explain_heads(model, task, result)
    by_hand = explain_heads(model, task, result.best, kind=result.config.kind)
    assert str(ex.heads) == "L0H1,L0H3,L1H1" and ex.config["significant"] is True
    # the intervals follow the run's bootstrap (by hand: `Stats()`'s 1000 resamples)
    assert ex.config["n_boot"] == FAST_CEL["n_boot"] and by_hand.config["n_boot"] == 1000
    for name in ex.TABLES:
        ours, theirs = getattr(ex, name), getattr(by_hand, name)
        bounds = [c for c in ours if c.endswith(("_lo", "_hi"))]
        pd.testing.assert_frame_equal(ours.drop(columns=bounds), theirs.drop(columns=bounds))
    # what the comparison heads attend to is summarised like the removed heads
    assert list(ex.comparison_roles["head_name"]) == ex.comparison.names


def test_explain_heads_warns_on_a_set_that_is_not_significant(demo_run, tmp_path):
    from dataclasses import replace

    from workbench.explain.report import explain_folder

    model, task, result, folder = demo_run
    weak = replace(result, confirmation=result.confirmation.assign(p_holm=1.0))
    assert weak.best == [] and weak.top_candidate == result.best
    with pytest.warns(UserWarning, match="no significant enhancement"):
        ex = explain_heads(model, task, weak)
    assert ex.config["significant"] is False and "not established" in ex.config["note"]
    assert str(ex.heads) == ",".join(weak.top_candidate)
    import shutil

    out = tmp_path / "weak"
    shutil.copytree(folder, out)
    explain_folder(out, model, task, weak)
    report = (out / "report.md").read_text()
    assert "## What the top candidate's heads do" in report and "**Not significant.**" in report


def test_report_explains_the_best_set_with_the_tables_numbers(demo_run):
    from workbench.explain.report import explain_folder

    model, task, result, folder = demo_run
    report = (folder / "report.md").read_text()
    # an in-memory model is named by its shape, not by TransformerLens's "custom"
    assert report.startswith("# CEL: micro_map on an in-memory model (2 layers x 4 heads")
    assert "What the best set" not in report  # run with explain=False
    ex = explain_folder(folder, model, task, result)
    report = (folder / "report.md").read_text()
    section = report[report.index("## What the best set's heads do"):]
    dla = ex.dla_summary.set_index("head_name")
    for name in ex.heads.names + ex.comparison.names:
        group = "removed" if name in ex.heads.names else "comparison"
        row = next(x for x in section.splitlines() if x.startswith(f"| {name} | {group} |"))
        assert f"| {dla.loc[name, 'dla_diff']:.4g} |" in row
    fixed = int((ex.outcomes["outcome"] == "fixed").sum())
    assert f"fixes {fixed} examples" in section
    assert "![explanation](explanation.png)" in section and (folder / "explanation.png").is_file()
    assert "### Attention on single examples" in section
    assert "![attention on single examples](attention_examples.png)" in section
    assert (folder / "attention_examples.png").is_file()
    saved = pd.read_csv(folder / "explanation" / "attention_examples.csv")
    assert_close(saved["attention"], ex.attention_examples["attention"], atol=1e-9)
    # rewriting the report keeps the section: it is read back from explanation/
    result.write_report(folder, plots=False)
    assert section in (folder / "report.md").read_text()


def test_answer_roles_sum_attention_on_the_answer_tokens_in_the_prompt(gpt2_like_model, tiny_task):
    """A task without role labels whose prompts hold an answer token (the tiny task's answer
    is its first word; IOI's indirect object, induction's target) gets the `answers` roles
    under `auto`: `attn_answer` / `attn_wrong` equal the head's own pattern summed over the
    positions holding a correct / wrong answer's first token (the naive reference), and
    the positional roles elsewhere."""
    model = gpt2_like_model
    batch = encode_task(model, tiny_task, None)
    table = attention_by_role(model, tiny_task, ["L1H2"], split=None)
    assert {"attn_answer", "attn_self", "attn_previous"} <= set(table.columns)
    explicit = attention_by_role(model, tiny_task, ["L1H2"], split=None, roles="answers")
    assert_close(table["attn_answer"], explicit["attn_answer"])
    with torch.no_grad():
        _, cache = model.run_with_cache(batch.tokens, names_filter="blocks.1.attn.hook_pattern")
    pattern = cache["blocks.1.attn.hook_pattern"][:, 2]  # (batch, query, key)
    for i in range(len(batch)):
        n = int(batch.lengths[i])
        row = pattern[i, n - 1, :n]
        toks = batch.tokens[i, : n - 1].tolist()
        ans = {int(t) for t in batch.answer_ids[i].tolist() if t >= 0}
        bad = {int(t) for t in batch.wrong_ids[i].tolist() if t >= 0} - ans
        start = 1 if batch.prepend_bos else 0
        at_answer = sum(float(row[p]) for p in range(start, n - 1) if toks[p] in ans)
        at_wrong = sum(float(row[p]) for p in range(start, n - 1) if toks[p] in bad)
        got = table.iloc[i]
        assert_close(got["attn_answer"], at_answer, atol=1e-6)
        assert_close(got.get("attn_wrong", 0.0), at_wrong, atol=1e-6)
        assert_close(got["attn_self"], float(row[n - 1]), atol=1e-6)
    assert (table["attn_answer"] > 0).all()


# --- attention on single examples --------------------------------------------------------------


def test_pick_examples_takes_each_outcome_in_turn():
    from workbench.explain.examples import pick_examples

    ids = ["a", "b", "c", "d", "e", "f"]
    outcomes = pd.DataFrame({"id": ids, "outcome": ["unchanged", "fixed", "fixed", "unchanged",
                                                    "broken", "fixed"]})
    assert pick_examples(ids, outcomes, 3) == [1, 4, 0]  # fixed, broken, unchanged
    assert pick_examples(ids, outcomes, 5) == [1, 4, 0, 2, 3]
    assert pick_examples(ids, outcomes, 10) == [1, 4, 0, 2, 3, 5]
    assert pick_examples(ids, None, 2) == [0, 1]


@pytest.fixture(scope="module")
def embedded_model():
    from workbench.loading import load_model
    from workbench.loading.checkpoint import is_checkpoint
    from workbench.zoo import EMBEDDED_PATH

    if not is_checkpoint(EMBEDDED_PATH):
        pytest.skip(f"the embedded model is not shipped ({EMBEDDED_PATH} has no checkpoint)")
    return load_model("embedded", device="cpu")


def test_attention_examples_plot_the_models_own_patterns(embedded_model):
    """Each panel of `plot_attention_examples` holds, row by row, the head's attention pattern
    from the answer position exactly as `run_with_cache` gives it on the prompt alone (the
    naive reference: one unpadded forward per example, `blocks.{l}.attn.hook_pattern`), its
    x labels are the model's own tokenization of the prompt, and every row sums to 1."""
    model = embedded_model
    task = load_task("embedded_map")
    heads, comparison = ["L1H0", "L1H4"], ["L0H3", "L1H2"]  # in HeadSet's (sorted) order
    outcomes = ablation_outcomes(model, task, heads, split="heldout")
    table = attention_examples(model, task, heads, comparison=comparison, n_examples=3,
                               outcomes=outcomes)
    fig = plot_attention_examples(table)
    ids = list(dict.fromkeys(table["id"]))
    assert len(ids) == 3
    # one example of each outcome there is, fixed first
    got = outcomes.set_index("id").loc[ids, "outcome"].tolist()
    present = [o for o in OUTCOMES if o in set(outcomes["outcome"])]
    assert got[: len(present)] == present[:3]
    sums = table.groupby(["id", "head_name"])["attention"].sum()
    assert_close(sums.to_numpy(), np.ones(len(sums)), atol=1e-5)
    prompts = {e.id: e.prompt for e in task.examples}
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == len(ids)
    for ax, ex_id in zip(panels, ids, strict=True):
        tokens = model.to_tokens(prompts[ex_id])  # (1, T): the tokenizer's ids, BOS as it adds
        assert [t.get_text() for t in ax.get_xticklabels()] == model.to_str_tokens(
            prompts[ex_id])
        assert [t.get_text() for t in ax.get_yticklabels()] == heads + comparison
        with torch.no_grad():
            _, cache = model.run_with_cache(tokens)
        naive = np.stack([
            cache[f"blocks.{l}.attn.hook_pattern"][0, h, -1].numpy()
            for l, h in [(1, 0), (1, 4), (0, 3), (1, 2)]
        ])  # (heads, T): the last query position's row
        plotted = np.asarray(ax.images[0].get_array())
        assert plotted.shape == naive.shape
        assert_close(plotted, naive, atol=1e-6)
        assert_close(plotted.sum(axis=1), np.ones(len(naive)), atol=1e-5)


def test_explain_heads_keeps_attention_examples(micro_model, micro_task):
    """`explain_heads`'s table is the standalone function's on the same examples and heads."""
    ex = explain_heads(micro_model, micro_task, ["L0H0"], split=None)
    alone = attention_examples(micro_model, micro_task, ["L0H0"], comparison=ex.comparison,
                               split=None, outcomes=ex.outcomes)
    pd.testing.assert_frame_equal(ex.attention_examples, alone)
    assert list(ex.attention_examples.columns[:4]) == ["id", "layer", "head", "head_name"]
    assert set(ex.attention_examples["head_group"]) == {"removed", "comparison"}


# ------------------------------------------------------- a norm after attention (Gemma-2, Gemma-3)


@pytest.fixture(scope="module")
def post_norm_model():
    """Gemma-3's block in miniature: RMS norms before and after attention and MLP, per-head
    q/k norms, rotary positions, 4 query heads on 2 key/value heads; every norm weight random
    (TransformerLens initialises them to 1, which would hide a missing weight)."""
    model = tiny_model(attn_only=False, seed=3, normalization_type="RMS",
                       use_normalization_before_and_after=True, use_qk_norm=True,
                       positional_embedding_type="rotary", rotary_dim=8, n_key_value_heads=2,
                       act_fn="gelu_pytorch_tanh", gated_mlp=True)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".w"):
                p.copy_(0.5 + 1.5 * torch.rand(p.shape, generator=g))
    return model


def test_dla_components_sum_to_logit_difference_after_a_post_attention_norm(post_norm_model,
                                                                             tiny_task):
    """With `ln1_post`, heads and `b_O` enter the residual stream through the norm: their
    shares at its clean scale and weight, with the MLPs' (already after `ln2_post`) and the
    embedding, sum to the logit difference, `other` ~0. The same heads read before the norm
    (the old reading) leave most of the difference in `other`."""
    model = post_norm_model
    batch = encode_task(model, tiny_task)
    cap = capture(model, batch)
    assert cap.post_scale is not None and cap.post_scale.shape == (len(batch), 2)
    assert (cap.post_scale - 1).abs().min() > 0.05  # the scale matters here
    comps = dla_components(model, tiny_task, split=None)
    with torch.no_grad():
        logits = answer_logits(model, batch)
    diff = logits.gather(1, batch.answer_ids)[:, 0] - logits.gather(1, batch.wrong_ids)[:, 0]
    totals = comps[comps["component"] != "other"].groupby("id", sort=False)["dla_diff"].sum()
    assert_close(totals, diff, atol=1e-4, rtol=0)  # float32 sums of O(1) terms: 1e-6 measured
    assert comps.loc[comps["component"] == "other", "dla_diff"].abs().max() < 1e-4
    old = attribute(model, replace(cap, post_scale=None))  # each head read before the norm
    assert float(old.diff("other").abs().max()) > 0.1


def test_removal_after_a_post_attention_norm_splits_exactly(post_norm_model, tiny_task):
    """Zero ablation's direct effect is minus the head's (post-norm) DLA, and direct plus
    indirect is the change measured by the ablated forward, for mean ablation too."""
    for kind in ("zero", "mean"):
        removal = removal_vs_dla(post_norm_model, tiny_task, ["L1H2"], split=None, kind=kind)
        assert_close(removal["d_mean_logit_diff"],
                     removal["direct_effect"] + removal["indirect_effect"], atol=1e-5)
        if kind == "zero":
            assert_close(removal["direct_effect"], -removal["dla_diff"], atol=1e-6)


def test_qk_circuit_applies_the_heads_query_and_key_norms(post_norm_model, tiny_task):
    """The QK table's scores are TransformerLens's own queries and keys (its
    `calculate_qkv_matrices`, which applies the q/k norms) of the tokens' embeddings through
    `ln1`, without position, averaged over the query tokens as documented."""
    model = post_norm_model
    batch = encode_task(model, tiny_task, "heldout")
    table = qk_circuit(model, tiny_task, ["L1H1"], top_k=50)
    attn = model.blocks[1].attn
    n = batch.lengths
    src = sorted({t for i in range(len(batch)) for t in batch.tokens[i, : n[i]].tolist()})
    dest = batch.tokens[torch.arange(len(batch)), n - 1]
    x = model.blocks[1].ln1(model.W_E[torch.tensor(src)][None].float())
    xd = model.blocks[1].ln1(model.W_E[dest][None].float())
    with torch.no_grad():
        _, k, _ = attn.calculate_qkv_matrices(x, x, x)
        q, _, _ = attn.calculate_qkv_matrices(xd, xd, xd)
        kv = 1 // (model.cfg.n_heads // model.cfg.n_key_value_heads)  # query head 1's key/value
        want = (q[0, :, 1] @ k[0, :, kv].T).mean(0) / attn.attn_scale  # (n_src,)
    tok = get_tokenizer(model)
    got = dict(zip(table["source_token"], table["score"], strict=True))
    for j, tid in enumerate(src):
        assert got[tok.str_tokens([tid])[0]] == pytest.approx(float(want[j]), abs=1e-5)


@pytest.mark.parametrize("heads", [[(1, 3)], [(0, 2), (1, 0), (1, 3)]])
def test_removal_passes_restarted_at_the_heads_layer_equal_passes_from_the_embedding(
        gpt2_like_model, tiny_task, heads):
    # the explanation's removal passes restart from the clean run's residual entering each
    # head's layer: the same numbers, bit for bit, as one pass from the embedding per head
    from workbench.ablation import Ablation, AblationKind, ablation_hooks
    from workbench.explain.removal import _removal_logits
    from workbench.logits import answer_logits
    from workbench.tasks.encoding import encode_task

    model = gpt2_like_model
    batch = encode_task(model, tiny_task)
    got = _removal_logits(model, batch, heads, Ablation(AblationKind.ZERO), batch_size=7)
    with torch.no_grad():
        for h in heads:
            hooks = ablation_hooks(model, [h], AblationKind.ZERO, None, False)
            ref = torch.cat([answer_logits(model, batch.rows(slice(s, s + 7)), hooks).float()
                             for s in range(0, len(batch), 7)])
            assert torch.equal(got[h], ref), h
