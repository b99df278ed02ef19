"""The explanation on generated text (`workbench.explain.generated`, `.decisions`), against slow
obvious references: the decisions against naive greedy decoding (one full forward per token, no
cache) and the extractor's own answer; the captured attention and DLA at each decision against
one unpadded `run_with_cache` over exactly that sequence (DLA read through TransformerLens's
own `apply_ln_to_stack`); the components of each decision summing to its logit difference; the
outcomes against `evaluate_generation`; and `run_cel` on a generation task writing the
explanation, whose `set_effect` is the confirmation's row."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

from tests.helpers import assert_close, greedy_decode, tiny_model
from tests.metrics.test_generation import gen_task
from workbench.ablation import ablation_hooks
from workbench.errors import TaskWarning
from workbench.explain import EXAMPLE_INDEX, dla_components, explain_heads
from workbench.explain.decisions import (
    DECISION_INDEX,
    answer_span,
    decision_roles,
    token_offsets,
)
from workbench.explain.explanation import GeneratedExplanation, TableSizes
from workbench.explain.report import explain_folder
from workbench.generation.decode import text_decoder
from workbench.generation.extract import get_extractor
from workbench.metrics.generation import evaluate_generation
from workbench.pipeline import run_cel
from workbench.results.explanation import load_explanation
from workbench.tasks.encoding import encode_task
from workbench.tasks.task import Task

HEADS = ["L1H2", "L0H1"]
# every extractor kind: the whole text (every generated token decides), a regex's second word
# (one token, not the first), the last word of several groups, the first line, gsm8k's rules
EXTRACTORS = ["none", {"regex": r"w\d+ (w\d+)"}, {"regex": r"(w1\d)|(w\d)", "group_select": -1},
              "first_line"]


def _task(model, extractor, n: int = 24) -> Task:
    task = gen_task(model, n)
    settings = {"max_new_tokens": 4, "until": ["w7"], "extractor": extractor}
    rows = [{"id": e.id, "prompt": e.prompt, "target": e.target, "split": e.split}
            for e in task.examples]
    return Task.from_records(rows, name="gen", generation=settings)


@pytest.mark.parametrize("extractor", ["none", "first_line", "strict-match", "flexible-extract",
                                       {"regex": r"(a+)|(b\d)", "group_select": -1},
                                       {"regex": r"x", "group_select": 1}])
def test_answer_span_is_where_the_extractor_reads_its_answer(extractor):
    extract = get_extractor(extractor)
    texts = ["", "  72\n", " #### 1,234\nrest", "$12 and 7 then 3.5.", " b7 aa b9 ", "x yx",
             "\n\nfirst\nsecond", "no digits", " ####  9", "a b1 #### -4"]
    for text in texts:
        span, answer = answer_span(extractor, text), extract(text).strip()
        if span is None:  # nothing, or the fallback where nothing matched
            assert answer in ("", "[invalid]"), (extractor, text, answer)
        else:
            assert text[span[0]:span[1]] == answer, (extractor, text, span, answer)


def test_token_offsets_cover_the_decoded_text(attn_model):
    decode = text_decoder(attn_model)
    ids = [3, 8, 2, 15]
    offsets = token_offsets(decode, ids)
    full = decode(ids)
    assert offsets[0][0] == 0 and offsets[-1][1] == len(full)
    assert all(a[1] == b[0] for a, b in zip(offsets, offsets[1:], strict=False))
    # each token's characters are its own word (with the space before it)
    assert [full[a:b].strip() for a, b in offsets] == [attn_model.word_tokenizer.vocab[i]
                                                         for i in ids]


def _naive_decisions(model, task, batch):
    """Per example of `batch`: the naive greedy tokens, their text, and the expected decision
    steps, found on words (the word tokenizer writes one word per token)."""
    settings = task.generation
    extract, out = settings.extract, []
    for prompt in batch.prompts():
        new = []
        for t in greedy_decode(model, prompt.tolist(), settings.max_new_tokens):
            new.append(t)
            if "w7" in text_decoder(model)(new):
                break
        words = [model.word_tokenizer.vocab[t] for t in new]
        text = " ".join(words).split("w7")[0]
        answer = extract(text).strip()
        kept = text.split()
        if not answer or answer == "[invalid]":
            steps, found = [0], False
        elif settings.extractor == "none" or settings.extractor == "first_line":
            steps, found = list(range(len(kept))), True
        else:  # one word: the one the regex's selected match is
            span = answer_span(settings.extractor, text)
            steps, found = [len(text[:span[0]].split())], True
        out.append((new, steps, found))
    return out


@pytest.mark.parametrize("extractor", EXTRACTORS, ids=["none", "second", "last", "first_line"])
def test_decisions_are_the_naive_greedy_tokens_that_write_the_answer(attn_model, extractor):
    task = _task(attn_model, extractor)
    ex = explain_heads(attn_model, task, HEADS, split="heldout")
    assert isinstance(ex, GeneratedExplanation)
    batch = encode_task(attn_model, task, "heldout")
    naive = _naive_decisions(attn_model, task, batch)
    dec = ex.decisions
    expected = [(e.id, k, f) for e, (_, steps, f) in zip(batch.task.examples, naive, strict=True)
                for k in steps]
    assert list(zip(dec["id"], dec["step"], dec["in_answer"], strict=True)) == expected
    assert dec["step"].max() >= 1 or extractor == "first_line"  # later tokens are read too
    prompts = {e.id: p.tolist() for e, p in zip(batch.task.examples, batch.prompts(), strict=True)}
    tokens = {e.id: n for e, (n, _, _) in zip(batch.task.examples, naive, strict=True)}
    for r in dec.itertuples():
        seq = prompts[r.id] + tokens[r.id][: r.step]
        assert r.query_pos == len(seq) - 1
        with torch.no_grad():  # no cache, the exact prefix: its argmax is the generated token
            logits = attn_model(torch.tensor([seq]))[0, -1]
        assert int(logits.argmax()) == r.decided_id == tokens[r.id][r.step]
        assert r.decided == attn_model.word_tokenizer.vocab[r.decided_id]


def _naive_row(model, seq, heads):
    """The clean cache over `seq` alone, the ablated model's argmax on `seq`, and the comparison
    token: that argmax where it differs from the clean one, else the clean runner-up."""
    with torch.no_grad():
        logits, cache = model.run_with_cache(torch.tensor([seq]))
        with model.hooks(fwd_hooks=ablation_hooks(model, heads, "zero")):
            ablated = int(model(torch.tensor([seq]))[0, -1].argmax())
    clean = logits[0, -1]
    top2 = clean.topk(2).indices.tolist()
    return cache, clean, ablated, (ablated if ablated != top2[0] else top2[1])


@pytest.mark.parametrize("which", ["attn", "gpt2"])
def test_attention_and_dla_at_the_decisions_are_run_with_cache_on_that_sequence(
        attn_model, gpt2_like_model, which):
    model = attn_model if which == "attn" else gpt2_like_model
    task = _task(model, "none", n=16)
    ex = explain_heads(model, task, HEADS, split="heldout", comparison=None)
    batch = encode_task(model, task, "heldout")
    prompts = {e.id: p.tolist() for e, p in zip(batch.task.examples, batch.prompts(), strict=True)}
    dec = ex.decisions.set_index(["id", "step"])
    att = ex.attention.set_index(["id", "step", "head_name"])
    dla = ex.dla.set_index(["id", "step", "head_name"])
    assert list(ex.attention.columns[:7]) == [*EXAMPLE_INDEX, *DECISION_INDEX]
    assert list(ex.dla.columns[:8]) == [*EXAMPLE_INDEX, *DECISION_INDEX, "outcome"]
    checked = 0
    for (ex_id, step), r in dec.iterrows():
        seq = prompts[ex_id] + [int(t) for t in _generated(ex, ex_id)][:step]
        cache, clean, ablated, comparison = _naive_row(model, seq, HEADS)
        assert r.comparison_id == comparison
        assert r.comparison_source == ("ablated" if ablated != r.decided_id else "runner_up")
        assert_close(r.logit_diff, float(clean[r.decided_id] - clean[comparison]), atol=1e-5)
        direction = model.W_U[:, r.decided_id] - model.W_U[:, comparison]
        for layer, head in ((1, 2), (0, 1)):
            name = f"L{layer}H{head}"
            row = cache[f"blocks.{layer}.attn.hook_pattern"][0, head, -1]  # (T,)
            a = att.loc[(ex_id, step, name)]
            assert_close(a["attn_generated"] if step else 0.0,
                         float(row[len(prompts[ex_id]):].sum()), atol=1e-6)
            assert_close(a["attn_bos"], float(row[0]), atol=1e-6)
            assert a["top_pos"] == int(row.argmax())
            out = cache[f"blocks.{layer}.attn.hook_z"][0, -1, head] @ model.W_O[layer, head]
            through_ln = cache.apply_ln_to_stack(out[None, None], layer=-1, pos_slice=-1)[0, 0]
            assert_close(dla.loc[(ex_id, step, name), "dla_diff"],
                         float(through_ln @ direction), atol=1e-5)
            checked += 1
    assert checked >= 2 * len(prompts) and dec.reset_index()["step"].max() >= 1


def _generated(ex, ex_id):
    """The clean generation's decided ids of one example, by step (every token decides under
    the `none` extractor until the stop)."""
    d = ex.decisions[ex.decisions["id"] == ex_id].sort_values("step")
    return d["decided_id"].tolist()


def test_each_decisions_components_sum_to_its_logit_difference(gpt2_like_model):
    from workbench.explain.capture import capture
    from workbench.explain.decisions import decision_batch
    from workbench.generation.decode import greedy_generate

    model = gpt2_like_model
    task = _task(model, "none", n=16)
    batch = encode_task(model, task, "heldout")
    gen = greedy_generate(model, batch.prompts(), 4, ["w7"])
    dec = decision_batch(model, batch, gen.tokens, gen.texts)
    from workbench.explain.generated import comparison_tokens

    cap = capture(model, dec.batch)
    wrong, _ = comparison_tokens(model, dec, cap, ablation_hooks(model, HEADS, "zero"))
    from dataclasses import replace

    rows = replace(dec.batch, wrong_ids=wrong[:, None])
    totals = dla_components(model, rows, split=None).groupby("id", sort=False)["dla_diff"].sum()
    expected = []
    for seq, n, a, w in zip(rows.tokens.tolist(), rows.lengths.tolist(),
                            rows.answer_ids[:, 0].tolist(), wrong.tolist(), strict=True):
        with torch.no_grad():
            logits = model(torch.tensor([seq[:n]]))[0, -1]
        expected.append(float(logits[a] - logits[w]))
    # float32 sums of O(1) terms, as tests/explain/test_explain.py's decomposition
    assert_close(totals.to_numpy(), np.array(expected), atol=1e-4, rtol=0)


def test_outcomes_are_evaluate_generation_clean_and_ablated(attn_model):
    task = _task(attn_model, {"regex": r"w\d+ (w\d+)"})
    ex = explain_heads(attn_model, task, HEADS, split="heldout")
    batch = encode_task(attn_model, task, "heldout")
    clean = evaluate_generation(attn_model, batch)
    abl = evaluate_generation(attn_model, batch, ablation_hooks(attn_model, HEADS, "zero"))
    o = ex.outcomes
    assert o["id"].tolist() == clean["id"].tolist()
    for col in ("exact_match", "prediction", "generation"):
        assert o[f"{col}_clean"].tolist() == clean[col].tolist()
        assert o[f"{col}_ablated"].tolist() == abl[col].tolist()
    assert_close(o["logprob_clean"], clean["logprob"], atol=1e-5)
    assert_close(o["logprob_ablated"], abl["logprob"], atol=1e-5)
    assert o["answer_changed"].tolist() == (clean["prediction"] != abl["prediction"]).tolist()
    d = abl["exact_match"] - clean["exact_match"]
    assert o["outcome"].tolist() == ["fixed" if x > 0 else "broken" if x < 0 else "unchanged"
                                     for x in d]
    assert set(o["outcome"]) != {"unchanged"}  # the ablation changes some answer here
    assert_close(ex.set_effect["d_exact_match"].iloc[0], float(d.mean()), atol=1e-7)


def test_table_sizes_reach_the_circuit_tables_at_the_decisions(attn_model):
    """`sizes` sizes `ov` and `qk` on a generation task as on any other (the defaults list 3
    sources and 5 tokens)."""
    task = _task(attn_model, "none", n=16)
    ex = explain_heads(attn_model, task, HEADS, split="heldout", comparison=None,
                       sizes=TableSizes(n_sources=1, top_k=2))
    assert isinstance(ex, GeneratedExplanation)
    assert ex.ov.groupby("head_name").size().to_dict() == {h: 1 for h in HEADS}
    for col in ("promoted", "suppressed"):
        assert all(len(cell.split(", ")) == 2 for cell in ex.ov[col]), col
    assert ex.qk.groupby("head_name")["rank"].apply(list).to_dict() == {h: [0, 1] for h in HEADS}


def test_roles_mark_few_shot_question_and_generated_tokens():
    model = tiny_model(attn_only=True, n_words=20)
    batch = encode_task(model, _task(model, "none", n=4), None)
    decode = text_decoder(model)
    n = int(batch.lengths[0])
    roles = decision_roles(batch, 0, decode, n, n + 2)
    # a word prompt has no blank line: bos, then prompt, then what the model wrote
    assert roles == ["bos"] + ["prompt"] * (n - 1) + ["generated"] * 2

    class Lines:  # the decoding of a prompt with two blank lines: "a\n\nb c\n\nd e"
        words = ["<bos>", "a", "\n\n", "b", " c", "\n\n", "d", " e"]

        def __call__(self, ids):
            return "".join(self.words[i] for i in ids)

    from dataclasses import replace

    lines = replace(batch.rows([0]), tokens=torch.arange(8)[None], prepend_bos=True, roles=None)
    assert decision_roles(lines, 0, Lines(), 8, 9) == (
        ["bos", "few-shot", "few-shot", "few-shot", "few-shot", "few-shot", "question",
         "question", "generated"])


def test_a_cel_run_on_a_generation_task_writes_the_explanation(attn_model, tiny_task, tmp_path):
    out = tmp_path / "run"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TaskWarning)
        task = gen_task(attn_model, 40)
        result = run_cel(attn_model, task, others=[tiny_task], out_dir=out,
                         method="attribution", n_random=20, n_boot=100, progress=False,
                         max_size=2)
    assert result.top_candidate
    folder = out / "explanation"
    for name in (*GeneratedExplanation.TABLES, "config"):
        assert (folder / f"{name}.{'json' if name == 'config' else 'csv'}").is_file(), name
    config = json.loads((folder / "config.json").read_text())
    assert config["generation"] and config["heads"] == ",".join(result.top_candidate)
    assert (out / "explanation.png").is_file() and (out / "attention_examples.png").is_file()
    report = (out / "report.md").read_text()
    assert "decisions.csv" in report and "`exact_match` by" in report
    _, tables = load_explanation(out)
    conf = result.confirmation
    row = conf[conf["heads"] == ",".join(result.top_candidate)].iloc[0]
    effect = tables["set_effect"].iloc[0]
    for m in ("exact_match", "logprob"):  # the confirmation's number, on the same examples
        assert_close(effect[f"d_{m}"], row[f"d_{m}"], atol=1e-6)
        assert int(effect[f"d_{m}_n"]) == int(row[f"d_{m}_n"])
    (folder / "decisions.csv").unlink()  # `workbench explain DIR` writes it again
    again = explain_folder(out, attn_model, task, result)
    assert isinstance(again, GeneratedExplanation) and (folder / "decisions.csv").is_file()
    assert "decisions.csv" in (out / "report.md").read_text()
