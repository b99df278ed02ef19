"""`greedy_generate` (key-value cache, left-padded batches, finished rows dropped) against its
reference `naive_generate` (one full forward per row per step), and against Hugging Face's
`generate` on the same weights.

Models: the three embedded models (rotary, word vocabulary), the attention-only and GPT-2-like
tiny models (absolute positions; a word tokenizer without a Hugging Face one), and tiny random
GGUF files loaded through `load_model` next to transformers' own reading of the same file
(`tests/loading/test_gguf.py`): a Llama (GQA, tied, byte-level BPE) and a Gemma-3 (five local
layers with a 4-token window, shorter than every prompt, and a global one). Prompts differ in
length, so rows of one batch are padded differently. Clean, under zero ablation and under mean
ablation of a head set attached by the caller with `model.hooks`. Every comparison is token for
token; these small random models have no near-tied top logits on these prompts (checked: the
comparisons are exact).
"""

from __future__ import annotations

import copy
from contextlib import ExitStack, contextmanager

import pytest
import torch
from lm_eval.models.utils import postprocess_generated_text

from tests.helpers import hf_head_removed
from tests.loading.test_gguf import transformers_reading, write_tiny_gguf
from workbench import WorkbenchError, load_model
from workbench.ablation import ablation_hooks, compute_head_means
from workbench.generation import decode
from workbench.generation.decode import greedy_generate, naive_generate
from workbench.loading.shipped import CACHE_ENV

EMBEDDED = ("embedded", "embedded_llama", "embedded_neox")
EMBEDDED_PROMPTS = ["add 3 4", "copy 5 6 7 8 9", "sort 9 2", "map 1 2 3 4 5 6 7 |", "do"]
GGUF_PROMPTS = ["the cat sat on the mat", "a hat", "the the the cat", "cat", "he sat at the"]
GGUF = {"llama": ("bpe", True), "gemma3": ("sentencepiece", True)}
O_PROJ = "model.layers.{l}.self_attn.o_proj"


@pytest.fixture(scope="module", params=EMBEDDED)
def embedded(request):
    model = load_model(request.param)
    prompts = [torch.tensor(model.word_tokenizer.encode(p, prepend_bos=True))
               for p in EMBEDDED_PROMPTS]
    return model, prompts


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    """`{family: (load_model's model, transformers' model, tokenizer, prompts)}`."""
    folder = tmp_path_factory.mktemp("gguf")
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CACHE_ENV, str(folder / "cache"))
        for family, (tokenizer, tied) in GGUF.items():
            path = write_tiny_gguf(folder / f"{family}.gguf", family, tokenizer, tied)
            hf, tok = transformers_reading(path)
            model = load_model(path, device="cpu")
            prompts = [torch.tensor(tok(p)["input_ids"]) for p in GGUF_PROMPTS]
            out[family] = (model, hf, tok, prompts)
    return out


def _head_sets(model) -> list[list[tuple[int, int]]]:
    last = model.cfg.n_layers - 1
    return [[(0, 1)], [(0, 0), (last, 2)]]


def _same(model, prompts, n, until=(), rows_per_pass=None):
    got = greedy_generate(model, prompts, n, until, rows_per_pass)
    ref = naive_generate(model, prompts, n, until)
    assert got.tokens == ref.tokens
    assert got.texts == ref.texts
    return got


def test_embedded_clean_and_ablated_match_the_reference(embedded):
    model, prompts = embedded
    clean = _same(model, prompts, 7)
    means = compute_head_means(model, torch.nn.utils.rnn.pad_sequence(prompts, True)[:, :3])
    changed = 0
    for heads in _head_sets(model):
        for kind in ("zero", "mean"):
            with model.hooks(fwd_hooks=ablation_hooks(model, heads, kind, means)):
                got = _same(model, prompts, 7, rows_per_pass=2)
            changed += got.tokens != clean.tokens
    assert changed >= 2  # the hooks act on the generated tokens, not only on the prompts


def test_tiny_absolute_position_models_match_the_reference(attn_model, gpt2_like_model):
    for model in (attn_model, gpt2_like_model):
        tok = model.word_tokenizer
        prompts = [torch.tensor(tok.encode(p, prepend_bos=True))
                   for p in ["w1 w2 w3 w4 w5 w6", "w7", "w8 w9 w10"]]
        clean = _same(model, prompts, 9)
        with model.hooks(fwd_hooks=ablation_hooks(model, [(0, 2), (1, 1)])):
            assert _same(model, prompts, 9).tokens != clean.tokens


@pytest.mark.parametrize("family", sorted(GGUF))
def test_tiny_gguf_matches_the_reference_and_hugging_face(tiny_gguf, family):
    """The cached decoder == the reference; and each row == transformers' `generate`
    (greedy) on the same file, clean and with a head removed from `o_proj`."""
    model, hf, tok, prompts = tiny_gguf[family]
    n = 12  # the longest prompt plus 12 is past the window many times over
    sets = [None, *_head_sets(model)]
    outs = []
    for heads in sets:
        hooks = ablation_hooks(model, heads or [])
        with model.hooks(fwd_hooks=hooks):
            got = _same(model, prompts, n)
        outs.append(got.tokens)
        with torch.no_grad(), _removed(hf, heads, model.cfg.d_head) as ref:
            for p, ids in zip(prompts, got.tokens, strict=True):
                want = ref.generate(p[None], max_new_tokens=n, do_sample=False,
                                    eos_token_id=tok.eos_token_id,
                                    pad_token_id=tok.eos_token_id)[0, len(p):].tolist()
                assert ids == want[: len(ids)] and len(ids) == min(n, len(want))
    assert outs[0] != outs[1] and outs[0] != outs[2]


@contextmanager
def _removed(hf, heads, d_head):
    """`hf` with every head of `heads` removed (its `o_proj` input columns zeroed)."""
    with ExitStack() as stack:
        for layer, head in heads or []:
            stack.enter_context(hf_head_removed(hf, O_PROJ, layer, head, d_head))
        yield hf


def test_a_row_decodes_as_it_does_alone(tiny_gguf):
    """Batching (left padding, cache compaction) changes no row: each row alone, in groups of
    2 and all together give the same tokens."""
    model, _, _, prompts = tiny_gguf["gemma3"]
    alone = [greedy_generate(model, [p], 10).tokens[0] for p in prompts]
    assert greedy_generate(model, prompts, 10, rows_per_pass=2).tokens == alone
    assert greedy_generate(model, prompts, 10).tokens == alone


def test_stop_sequences_cut_text_as_lm_eval(tiny_gguf):
    """A stop sequence ends its row at the token that completes it (across tokens too), and
    the text is lm-eval's: the decoded continuation split before the first stop sequence."""
    model, _, tok, prompts = tiny_gguf["llama"]
    free = greedy_generate(model, prompts, 12)
    # stops taken from the free texts, so they occur: a 2-character one inside row 0's text
    # and a later, longer one
    until = [free.texts[0][3:5], free.texts[1][4:8]]
    got = _same(model, prompts, 12, until)
    for ids, text, full in zip(got.tokens, got.texts, free.tokens, strict=True):
        assert ids == full[: len(ids)]  # the same decoding, ended earlier or not
        decoded = tok.decode(ids, skip_special_tokens=True)
        assert text == postprocess_generated_text(decoded, until, None)
        if len(ids) < 12:  # ended by a stop: the last token completed it, not an earlier one
            assert any(s in decoded for s in until)
            assert not any(s in tok.decode(ids[:-1], skip_special_tokens=True) for s in until)
    assert any(len(ids) < 12 for ids in got.tokens)
    assert any(len(ids) == 12 for ids in got.tokens)


def test_finished_rows_leave_the_batch(embedded):
    """Each forward runs exactly the unfinished rows, on a cache as wide as the longest of
    them: rows that stopped cost nothing, nor do their leading pad slots."""
    model, prompts = embedded
    free = greedy_generate(model, prompts, 7)
    until = [free.texts[2].split()[1]]  # a word row 2 writes second
    shapes = []

    def record(scores, hook):
        shapes.append(tuple(scores.shape))  # (batch, head, query pos, key pos)

    with model.hooks(fwd_hooks=[("blocks.0.attn.hook_attn_scores", record)]):
        got = greedy_generate(model, prompts, 7, until)
    lens = [len(t) for t in got.tokens]
    assert min(lens) < 7 == max(lens)
    expected = []
    for step in range(max(lens)):
        running = [j for j, n in enumerate(lens) if n > step]
        width = max(len(prompts[j]) for j in running) + step
        expected.append((len(running), width, 1 if step else width))
    assert [(b, k, q) for b, _, q, k in shapes] == [(b, w, q) for b, w, q in expected]
    assert got.n_forwards == max(lens)


def test_a_row_ends_at_eos(embedded, monkeypatch):
    """A row ends at the tokenizer's EOS; the EOS is kept in `tokens` and skipped in the text
    (lm-eval decodes with skip_special_tokens)."""
    model, prompts = embedded
    free = greedy_generate(model, prompts, 7)
    # a token some row writes after another one first, so that row ends early
    word = next(t for ids in free.tokens for k, t in enumerate(ids) if k and t not in ids[:k])
    tokenizer = copy.deepcopy(model.tokenizer)
    tokenizer.eos_token = model.word_tokenizer.vocab[word]
    monkeypatch.setattr(model, "tokenizer", tokenizer)
    got = _same(model, prompts, 7)
    for ids, text, full in zip(got.tokens, got.texts, free.tokens, strict=True):
        cut = full.index(word) + 1 if word in full else len(full)
        assert ids == full[:cut]
        assert model.word_tokenizer.vocab[word] not in text.split()
    assert got.tokens != free.tokens


def test_a_model_without_a_cache_takes_the_reference(embedded, monkeypatch):
    model, prompts = embedded
    monkeypatch.setattr(decode, "can_cache", lambda m: False)
    got = greedy_generate(model, prompts, 5)
    assert got.n_forwards == sum(len(t) for t in got.tokens)  # one forward per row per step


@pytest.mark.parametrize("kwargs,message", [
    (dict(max_new_tokens=0), "max_new_tokens must be an integer >= 1; got 0"),
    (dict(max_new_tokens=2.0), "max_new_tokens must be an integer >= 1; got 2.0"),
    (dict(max_new_tokens=2, until=["x", ""]), "stop sequences must be non-empty strings"),
    (dict(max_new_tokens=2, rows_per_pass=0), "rows_per_pass must be None or an integer"),
    (dict(max_new_tokens=12), "runs past the model's context of n_ctx=16"),
])
def test_bad_input_is_one_line(embedded, kwargs, message):
    model, prompts = embedded
    for run in (greedy_generate, naive_generate):
        with pytest.raises(WorkbenchError, match=message.replace("(", r"\(")) as err:
            run(model, prompts, **kwargs)
        assert "\n" not in str(err.value)


def test_bad_prompts_are_refused(embedded):
    model, _ = embedded
    for prompts, message in [([], "non-empty list"), ([torch.tensor([])], "non-empty 1-D"),
                             ([torch.tensor([[1, 2]])], "1-D"),
                             ([torch.tensor([0, 999])], "outside")]:
        with pytest.raises(WorkbenchError, match=message):
            greedy_generate(model, prompts, 2)
