"""Tokenisation behind one small interface, for hub models and for the project's own models.

Tasks are text; models eat token ids. A Hugging Face tokenizer (what `from_pretrained` models
carry as `model.tokenizer`) and the project's `WordTokenizer` (a fixed whitespace vocabulary,
used by the embedded model) are both reached through `get_tokenizer(model)`, which returns an
object with `encode`, `decode`, `str_tokens`, `bos_id` and `continuation`. `load_model`
attaches a `WordTokenizer` to the models it loads from workbench checkpoints as
`model.word_tokenizer`, and the same vocabulary as a Hugging Face tokenizer
(`word_level_hf_tokenizer`) as `model.tokenizer`, so TransformerLens's string methods
(`to_tokens`, `to_str_tokens`, `model("text")`, `generate`) work on them with the same ids.

A prompt is encoded as the model's own tokenizer encodes it (`encode_prompt`): a Hugging Face
tokenizer's `tokenizer(prompt)["input_ids"]`, special tokens only where that tokenizer adds
them (SmolLM2 adds none, Llama-2 and Llama-3 add their BOS; GPT-2's tokenizer adds none
either), and the word tokenizer's BOS, which the project's models were trained with. A task
may force a BOS on or off (`prepend_bos`). A special token a tokenizer appends after the text
(an EOS) is left off: the prompt is continued, so its last token must be the text's.

Answers are tokenized in context. A subword tokenizer does not, in general, encode a prompt
followed by an answer as the prompt's tokens followed by the answer's own tokens: SentencePiece
(Llama-2, Mistral) writes the answer " cold" alone as "▁" + "▁cold" but after a prompt as
"▁cold"; Llama-3 splits digits into groups of three from the left, so "17" + "32" is encoded as
"173" + "2". `continuation(prompt, prompt_ids, texts)` therefore encodes `prompt + text` and
returns the tokens after the prompt's own, or None when the prompt's tokens are not a prefix
(then no token position holds the answer's start, and the task cannot be scored as written).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.hooked import HookedModel


@dataclass
class WordTokenizer:
    """A whitespace tokenizer over an explicit vocabulary: one word, one id.

    Args:
        vocab: the words, in id order. Must contain `bos` and `pad` and no duplicates.
        bos: the beginning-of-sequence token, prepended by `encode(..., prepend_bos=True)`.
        pad: the padding token.
    """

    vocab: list[str]
    bos: str = "<bos>"
    pad: str = "<pad>"
    _ids: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.vocab = list(self.vocab)
        self._ids = {w: i for i, w in enumerate(self.vocab)}
        if len(self._ids) != len(self.vocab):
            raise WorkbenchError("WordTokenizer vocab has duplicate words")
        for special in (self.bos, self.pad):
            if special not in self._ids:
                raise WorkbenchError(f"WordTokenizer vocab lacks the special token {special!r}")
        bad = [w for w in self.vocab if not w or any(c.isspace() for c in w)]
        if bad:
            raise WorkbenchError(f"vocabulary words may not be empty or contain spaces: {bad[:5]}")

    @property
    def bos_id(self) -> int:
        return self._ids[self.bos]

    @property
    def pad_id(self) -> int:
        return self._ids[self.pad]

    def __len__(self) -> int:
        return len(self.vocab)

    def token_id(self, word: str) -> int:
        """The id of one word; a clear error for a word outside the vocabulary."""
        try:
            return self._ids[word]
        except KeyError:
            raise WorkbenchError(
                f"word {word!r} is not in the vocabulary ({len(self.vocab)} words, e.g. "
                f"{self.vocab[2:7]})"
            ) from None

    def encode(self, text: str, prepend_bos: bool = False) -> list[int]:
        """Split on whitespace and map each word to its id."""
        ids = [self.token_id(w) for w in text.split()]
        return [self.bos_id, *ids] if prepend_bos else ids

    def encode_prompt(self, text: str, prepend_bos: bool | None = None) -> tuple[list[int], int]:
        """A prompt's ids and how many special tokens lead them: BOS first unless
        `prepend_bos` is False (the project's models were trained with it)."""
        bos = True if prepend_bos is None else prepend_bos
        return self.encode(text, prepend_bos=bos), int(bos)

    def decode(self, ids) -> str:
        return " ".join(self.vocab[int(i)] for i in ids)

    def continuation(
        self, prompt: str, prompt_ids: list[int], texts: list[str]
    ) -> list[list[int] | None]:
        """The ids of each text written after `prompt`: words are separated by whitespace, so a
        continuation is its own words whatever the prompt (`prompt_ids` is unused)."""
        return [self.encode(t) for t in texts]

    def str_tokens(self, ids) -> list[str]:
        return [self.vocab[int(i)] for i in ids]

    def to_dict(self) -> dict:
        return {"kind": "word", "vocab": self.vocab, "bos": self.bos, "pad": self.pad}

    @classmethod
    def from_dict(cls, d: dict) -> "WordTokenizer":
        if d.get("kind") != "word" or "vocab" not in d:
            raise WorkbenchError(
                f"tokenizer description must have kind='word' and a vocab; got keys {sorted(d)}"
            )
        return cls(vocab=d["vocab"], bos=d.get("bos", "<bos>"), pad=d.get("pad", "<pad>"))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=0))

    @classmethod
    def load(cls, path: str | Path) -> "WordTokenizer":
        return cls.from_dict(json.loads(Path(path).read_text()))


class HFTokenizer:
    """The same interface over a Hugging Face tokenizer (as `model.tokenizer` holds).

    Args:
        tokenizer: the Hugging Face tokenizer.
        default_prepend_bos: the model's `cfg.default_prepend_bos`, or None for a bare
            tokenizer. TransformerLens's `set_tokenizer` swaps a model's tokenizer for a copy
            that always adds BOS, and its `to_tokens` then drops or adds the BOS as
            `cfg.default_prepend_bos` says; the workbench's loaders set that flag to what the
            model's own tokenizer does, so following it gives the own tokenizer's ids.
    """

    def __init__(self, tokenizer, default_prepend_bos: bool | None = None) -> None:
        self.tokenizer = tokenizer
        self.default_prepend_bos = default_prepend_bos

    @property
    def bos_id(self) -> int | None:
        tok = self.tokenizer
        return tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id

    @property
    def pad_id(self) -> int:
        tok = self.tokenizer
        for candidate in (tok.pad_token_id, tok.eos_token_id, tok.bos_token_id, 0):
            if candidate is not None:
                return int(candidate)
        return 0

    def __len__(self) -> int:
        return len(self.tokenizer)

    def encode(self, text: str, prepend_bos: bool = False) -> list[int]:
        ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        if prepend_bos and self.bos_id is not None:
            ids = [self.bos_id, *ids]
        return ids

    def encode_prompt(self, text: str, prepend_bos: bool | None = None) -> tuple[list[int], int]:
        """A prompt's ids as `tokenizer(text)` gives them, and how many special tokens lead.

        Args:
            text: the prompt.
            prepend_bos: None: the tokenizer's own special tokens before the text (none for
                SmolLM2 or GPT-2, `<s>` for Llama-2), with the BOS dropped or added as the
                model's `default_prepend_bos` says, exactly as TransformerLens's
                `model.to_tokens(text)`; True: those, or the BOS where there are none;
                False: the text's tokens alone.

        A special token the tokenizer appends after the text (an EOS) is left off: the prompt
        is continued, so its last token must be the text's own.
        """
        body = self.encode(text)
        if prepend_bos is False:
            return body, 0
        lead = self._lead(text, body)
        bos = self.tokenizer.bos_token_id
        if prepend_bos is None and self.default_prepend_bos is False and lead[:1] == [bos]:
            lead = lead[1:]
        if (prepend_bos or self.default_prepend_bos) and not lead:
            if self.bos_id is None:
                raise WorkbenchError(
                    "a BOS is asked for (the task's prepend_bos, or the model's "
                    "default_prepend_bos) but this tokenizer has neither a bos_token nor an "
                    "eos_token; set the task's prepend_bos to false"
                )
            lead = [self.bos_id]
        return [*lead, *body], len(lead)

    def _lead(self, text: str, body: list[int]) -> list[int]:
        """The special tokens `tokenizer(text)` puts before the text's own tokens."""
        full = list(self.tokenizer(text)["input_ids"])
        special = set(self.tokenizer.all_special_ids)
        n = len(body)
        for k in range(len(full) - n + 1):
            if full[k : k + n] == body and all(t in special for t in full[:k] + full[k + n :]):
                return full[:k]
        raise WorkbenchError(
            f"the tokenizer's encoding of {text[:40]!r} with special tokens is not its encoding "
            f"without them plus special tokens around it ({len(full)} vs {n} tokens); set the "
            "task's prepend_bos to true or false to choose the prompt's ids explicitly"
        )

    def decode(self, ids) -> str:
        return self.tokenizer.decode([int(i) for i in ids])

    def continuation(
        self, prompt: str, prompt_ids: list[int], texts: list[str]
    ) -> list[list[int] | None]:
        """The ids each text gets when written right after `prompt` (no BOS in `prompt_ids`):
        the tail of `encode(prompt + text)`, or None where `prompt_ids` is not its prefix."""
        if not texts:
            return []
        encoded = self.tokenizer([prompt + t for t in texts], add_special_tokens=False)
        n = len(prompt_ids)
        out: list[list[int] | None] = []
        for ids in encoded["input_ids"]:
            ids = list(ids)
            out.append(ids[n:] if ids[:n] == list(prompt_ids) else None)
        return out

    def str_tokens(self, ids) -> list[str]:
        return [self.tokenizer.decode([int(i)]) for i in ids]


def word_level_hf_tokenizer(word: WordTokenizer):
    """The word tokenizer as a Hugging Face `PreTrainedTokenizerFast`, with the same ids.

    A `tokenizers` WordLevel model over the same vocabulary, split on whitespace as
    `WordTokenizer.encode` splits (`str.split`), with a post-processor that puts the BOS first,
    as the project's models were trained. `<bos>` also serves as EOS (TransformerLens's
    `generate` stops at it), and `<pad>` pads. `add_bos_token` and `name_or_path` are set so
    that TransformerLens's `set_tokenizer` keeps this tokenizer instead of reloading one. A
    word outside the vocabulary is a `WorkbenchError` naming it, as it is from
    `WordTokenizer` (`tokenizers` alone would say "Missing [UNK] token").
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    ids = {w: i for i, w in enumerate(word.vocab)}
    # WordLevel needs an unk token; the vocabulary has none, so any unknown word fails.
    tok = Tokenizer(models.WordLevel(ids, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(
        single=f"{word.bos} $A", pair=f"{word.bos} $A {word.bos} $B",
        special_tokens=[(word.bos, word.bos_id)],
    )
    tok.decoder = decoders.WordPiece(prefix="\0", cleanup=False)  # join with single spaces
    return _word_level_class()(
        tokenizer_object=tok, bos_token=word.bos, eos_token=word.bos, pad_token=word.pad,
        add_bos_token=True, padding_side="right", name_or_path="workbench-word-level",
    )


@functools.cache
def _word_level_class():
    """`PreTrainedTokenizerFast` that checks every word against its vocabulary first (built
    on first use: transformers is imported only when a word-level model is loaded)."""
    from transformers import PreTrainedTokenizerFast

    class WordLevelTokenizerFast(PreTrainedTokenizerFast):
        """A word-level tokenizer whose unknown words are one clear error."""

        def _encode_plus(self, text, text_pair=None, *args, **kwargs):
            # every encoding (`__call__`, `encode`, `tokenize`) of transformers passes here
            vocab = self.get_vocab()
            for part in (text, text_pair):
                unknown = [w for w in _words(part) if w not in vocab]
                if unknown:
                    known = [w for w in sorted(vocab, key=vocab.get) if not w.startswith("<")]
                    raise WorkbenchError(
                        f"word {unknown[0]!r} is not in this model's vocabulary ({len(vocab)} "
                        f"words, e.g. {known[:5]}; all: model.tokenizer.get_vocab()); a "
                        "word-level model knows only the words of its own language"
                    )
            return super()._encode_plus(text, text_pair, *args, **kwargs)

    return WordLevelTokenizerFast


def _words(part) -> list[str]:
    """The words of a tokenizer input: a text, a pre-split list of words, or a batch of
    either (None: none)."""
    if part is None:
        return []
    if isinstance(part, str):
        return part.split()
    return [w for item in part for w in _words(item)]


def get_tokenizer(model: HookedModel) -> WordTokenizer | HFTokenizer:
    """The tokenizer of a model: its `word_tokenizer` if it has one, else its HF tokenizer."""
    word = getattr(model, "word_tokenizer", None)
    if word is not None:
        return word
    hf = getattr(model, "tokenizer", None)
    if hf is not None:
        return HFTokenizer(hf, getattr(model.cfg, "default_prepend_bos", None))
    raise WorkbenchError(
        "this model has no tokenizer: load it with load_model (which attaches one), or set "
        "model.word_tokenizer = WordTokenizer(vocab) before using text tasks"
    )
