"""Generation scoring (`workbench.metrics.generation`): `exact_match` of the greedy generation
and the target's teacher-forced `logprob`, against the slow obvious references (the argmax of
one full forward per step; the log-softmax of one forward over prompt + target), clean and
under a head set's ablation hooks, and `task_metric` picking it for a generation batch."""

from __future__ import annotations

import torch

from workbench.ablation import ablation_hooks
from workbench.metrics.generation import (
    evaluate_generation,
    generation_metric,
    generations,
    naive_generation_metric,
)
from workbench.metrics.scores import builtin_metric, evaluate, task_metric
from workbench.tasks.encoding import encode_task
from workbench.tasks.task import Task
from workbench.tasks.tokenizer import get_tokenizer

SETTINGS = {"max_new_tokens": 3, "until": ["w7"], "extractor": {"regex": r"(w\d+)"}}


def gen_task(model, n: int = 24, name: str = "gen") -> Task:
    """Prompts of 2-6 words; in half the examples (both splits) the target is the first word
    the clean model writes (so the clean exact match is about 1/2 and a head set can move
    it), in the others a word it does not write first."""
    rows = [{"id": f"g{i}", "target": "w0", "split": "select" if i % 2 else "heldout",
             "prompt": " ".join(f"w{(i * 5 + 3 * k) % 20}" for k in range(2 + i % 5))}
            for i in range(n)]
    draft = Task.from_records(rows, name=name, generation=SETTINGS)
    texts = generations(model, encode_task(model, draft))
    for i, (row, text) in enumerate(zip(rows, texts, strict=True)):
        first = (text.split() or ["w1"])[0]
        row["target"] = first if i % 4 < 2 else ("w1" if first != "w1" else "w2")
    return Task.from_records(rows, name=name, generation=SETTINGS)


def _reference(model, batch):
    """Per example: the greedy text by one full forward per step (no cache, no batching),
    cut at the stop sequence, and log p(target | prompt) from one forward over both."""
    tok = get_tokenizer(model)
    settings = batch.task.generation
    em, logp = [], []
    for prompt, seqs, ex in zip(batch.prompts(), batch.answer_seqs, batch.task.examples,
                                strict=True):
        seq = prompt.tolist()
        new = []
        for _ in range(settings.max_new_tokens):
            new.append(int(model(torch.tensor([seq + new]))[0, -1].argmax()))
            if "w7" in tok.decode(new):
                break
        text = tok.decode(new).split("w7")[0]
        em.append(settings.score(text, ex.target))
        target = seqs[0]
        logits = model(torch.tensor([seq + target]))[0].log_softmax(-1)
        logp.append(sum(float(logits[len(seq) - 1 + k, t]) for k, t in enumerate(target)))
    return torch.tensor(em), torch.tensor(logp)


def test_generation_metric_is_the_reference_clean_and_ablated(attn_model):
    batch = encode_task(attn_model, gen_task(attn_model))
    for heads in (None, ["L0H1", "L1H2"]):
        hooks = [] if heads is None else ablation_hooks(attn_model, heads, "zero")
        with torch.no_grad(), attn_model.hooks(fwd_hooks=hooks):
            fast = generation_metric(attn_model, batch)
            naive = naive_generation_metric(attn_model, batch)
            em, logp = _reference(attn_model, batch)
        assert torch.equal(fast["exact_match"].cpu(), em) and torch.equal(
            naive["exact_match"].cpu(), em)
        # float32 sums of a handful of log-probs: the cache path reorders the additions
        torch.testing.assert_close(fast["logprob"].cpu(), logp, rtol=0, atol=1e-4)
        torch.testing.assert_close(naive["logprob"].cpu(), logp, rtol=0, atol=1e-4)
        if heads is None:
            assert 0.25 <= float(em.mean()) <= 0.75  # a task a head set can move


def test_task_metric_picks_generation_and_evaluate_has_its_columns(attn_model, tiny_task):
    batch = encode_task(attn_model, gen_task(attn_model))
    assert task_metric(None, batch) is generation_metric and builtin_metric(generation_metric)
    assert task_metric(generation_metric, encode_task(attn_model, tiny_task)) is None
    table = evaluate(attn_model, batch, heads=["L0H1"])
    assert list(table) == ["id", "split", "group", "exact_match", "logprob", "prediction",
                           "generation"]
    with attn_model.hooks(fwd_hooks=ablation_hooks(attn_model, ["L0H1"], "zero")):
        want = generation_metric(attn_model, batch)
    assert table["exact_match"].tolist() == want["exact_match"].int().tolist()
    assert evaluate_generation(attn_model, batch)["generation"].map(
        lambda t: "w7" not in t).all()


def test_attribution_ranks_by_logprob_without_decoding(attn_model, monkeypatch):
    """Attribution on a generation task differentiates the target's log-prob and decodes
    nothing (its exact-match estimate is NaN whatever the generations are): its `logprob`
    estimates equal those through a metric that also decodes (`naive_generation_metric`, one
    row at a time), exactly per example up to float error, and no decoder runs."""
    import workbench.generation.decode as decode
    from workbench.screening.attribution import attribution_effects

    batch = encode_task(attn_model, gen_task(attn_model), "select")
    clean_ref, est_ref = attribution_effects(attn_model, batch, metric=naive_generation_metric)
    calls = []
    for name in ("greedy_generate", "naive_generate"):
        real = getattr(decode, name)
        monkeypatch.setattr(decode, name, lambda *a, _r=real, **k: calls.append(1) or _r(*a, **k))
    import workbench.metrics.generation as generation

    monkeypatch.setattr(generation, "greedy_generate", decode.greedy_generate)
    monkeypatch.setattr(generation, "naive_generate", decode.naive_generate)
    clean, est = attribution_effects(attn_model, batch, metric=generation_metric)
    assert calls == []
    assert est["exact_match"].isnan().all() and clean["exact_match"].isnan().all()
    assert est_ref["exact_match"].isnan().all() and not clean_ref["exact_match"].isnan().any()
    torch.testing.assert_close(est["logprob"], est_ref["logprob"], rtol=0, atol=1e-5)
    torch.testing.assert_close(clean["logprob"], clean_ref["logprob"], rtol=0, atol=1e-5)
    assert est["logprob"].abs().max() > 1e-2  # the heads move the log-prob
