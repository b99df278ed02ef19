"""Hook ablation (`workbench.ablation`) against the slow obvious reference: zeroing the head's
slice of W_O; and resample ablation against a hand-written `hook_z` replacement from
`run_with_cache` of the counterfactual prompts."""

from __future__ import annotations

import copy
from dataclasses import replace
from functools import partial

import pytest
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

from tests.helpers import assert_close, randomize_biases, tiny_encoder, w_o_zeroed
from workbench import HeadSet, WorkbenchError, ablated, compute_head_means, encode_task, evaluate
from workbench.ablation import ablation_hooks, compute_resample_z, mask_hooks
from workbench.logits import answer_logits
from workbench.tasks.task import Example, Task

HEAD_SETS = [["L0H1"], ["L1H3"], [(0, 0), (0, 2), (1, 1)], "L0H3,L1H0"]


def _llama_gqa_model() -> HookedTransformer:
    cfg = HookedTransformerConfig(
        n_layers=2,
        d_model=32,
        n_ctx=32,
        d_head=8,
        n_heads=4,
        n_key_value_heads=2,
        d_mlp=64,
        d_vocab=22,
        act_fn="silu",
        normalization_type="RMS",
        positional_embedding_type="rotary",
        rotary_dim=8,
        gated_mlp=True,
        final_rms=True,
        seed=3,
    )
    model = HookedTransformer(cfg)
    model.eval()
    return model


@pytest.mark.parametrize("heads", HEAD_SETS)
def test_hook_zero_equals_w_o_zero_gpt2_like(gpt2_like_model, heads):
    tokens = torch.randint(0, gpt2_like_model.cfg.d_vocab, (3, 9))
    with ablated(gpt2_like_model, heads):
        hooked = gpt2_like_model(tokens)
    reference = w_o_zeroed(gpt2_like_model, heads)(tokens)
    assert_close(hooked, reference)
    assert (hooked - gpt2_like_model(tokens)).abs().max() > 1e-3  # the ablation did something


@pytest.mark.parametrize("heads", HEAD_SETS)
def test_hook_zero_equals_w_o_zero_llama_gqa(heads):
    model = _llama_gqa_model()
    randomize_biases(model, seed=3)
    tokens = torch.randint(0, model.cfg.d_vocab, (2, 11))
    with ablated(model, heads):
        hooked = model(tokens)
    assert_close(hooked, w_o_zeroed(model, heads)(tokens))


def test_folded_value_bias_would_not_be_removed(gpt2_like_model):
    """Why load_model never folds value biases: after folding, zeroing z leaves b_V's share."""
    folded = copy.deepcopy(gpt2_like_model)
    folded.load_state_dict(folded.fold_value_biases(folded.state_dict()))
    tokens = torch.randint(0, folded.cfg.d_vocab, (2, 7))
    with ablated(folded, ["L0H1"]):
        hooked = folded(tokens)
    with ablated(gpt2_like_model, ["L0H1"]):
        unfolded = gpt2_like_model(tokens)
    assert_close(folded(tokens), gpt2_like_model(tokens), atol=1e-4)  # same model when clean
    assert (hooked - unfolded).abs().max() > 1e-3


def test_hook_ablation_on_hooked_encoder():
    enc = tiny_encoder()
    tokens = torch.randint(0, 30, (2, 6))
    heads = [(1, 2), (0, 0)]
    with ablated(enc, heads):
        hooked = enc(tokens)
    assert_close(hooked, w_o_zeroed(enc, heads)(tokens))
    assert (hooked - enc(tokens)).abs().max() > 1e-3


def test_hooks_are_removed_after_exit_and_after_error(attn_model):
    tokens = torch.randint(0, attn_model.cfg.d_vocab, (2, 6))
    clean = attn_model(tokens)
    with ablated(attn_model, ["L0H0", "L1H1"]):
        assert (attn_model(tokens) - clean).abs().max() > 1e-4
    assert_close(attn_model(tokens), clean)
    with pytest.raises(RuntimeError, match="boom"), ablated(attn_model, ["L1H2"]):
        raise RuntimeError("boom")
    for block in attn_model.blocks:
        assert not block.attn.hook_z._forward_hooks
    assert_close(attn_model(tokens), clean)


def test_mean_ablation_with_own_means_changes_nothing(gpt2_like_model):
    model = gpt2_like_model
    prompt = torch.randint(0, model.cfg.d_vocab, (1, 8))
    own = compute_head_means(model, prompt)
    with ablated(model, ["L0H1", "L1H3"], kind="mean", means=own, per_position=True):
        same = model(prompt)
    assert_close(same, model(prompt))
    others = compute_head_means(model, torch.randint(0, model.cfg.d_vocab, (16, 8)))
    with ablated(model, ["L0H1", "L1H3"], kind="mean", means=others, per_position=True):
        changed = model(prompt)
    assert (changed - model(prompt)).abs().max() > 1e-3


def test_head_means_against_cache(attn_model):
    tokens = torch.randint(0, attn_model.cfg.d_vocab, (4, 7))
    lengths = torch.tensor([7, 5, 3, 7])
    means = compute_head_means(attn_model, tokens, lengths, batch_size=3)
    _, cache = attn_model.run_with_cache(tokens)
    z = cache["blocks.1.attn.hook_z"]  # (B, T, H, D)
    real = torch.cat([z[i, : int(n)] for i, n in enumerate(lengths)])
    assert_close(means.averaged[1], real.mean(0))
    assert means.per_position is None  # unequal lengths


def test_mask_hooks_match_one_ablation_per_set(gpt2_like_model):
    model = gpt2_like_model
    tokens = torch.randint(0, model.cfg.d_vocab, (3, 6))
    sets = [[], ["L0H1"], ["L0H0", "L1H3"], ["L1H0", "L1H1", "L1H2"]]
    masks = torch.stack([HeadSet.of(model, s).mask() for s in sets])
    means = compute_head_means(model, torch.randint(0, model.cfg.d_vocab, (8, 6)))
    for kind in ("zero", "mean"):
        with model.hooks(fwd_hooks=mask_hooks(model, masks, kind, means)):
            batched = model(tokens.repeat(len(sets), 1))
        for m, heads in enumerate(sets):
            with ablated(model, heads, kind=kind, means=means):
                single = model(tokens)
            assert_close(batched[m * 3 : (m + 1) * 3], single, msg=f"{kind} {heads}")


def test_head_specs_parse_and_validate(attn_model):
    hs = HeadSet.of(attn_model, ["L1H2", (0, 3), "1.2"])
    assert list(hs) == [(0, 3), (1, 2)]
    assert str(hs) == "L0H3,L1H2"
    assert HeadSet.of(attn_model, "L0H1, L1H0").names == ["L0H1", "L1H0"]
    with pytest.raises(WorkbenchError, match=r"L2H0 is out of range.*n_layers=2 and n_heads=4"):
        HeadSet.of(attn_model, ["L2H0"])
    with pytest.raises(WorkbenchError, match="L0H4 is out of range"):
        with ablated(attn_model, [(0, 4)]):
            pass
    with pytest.raises(WorkbenchError, match="not of the form"):
        HeadSet.of(attn_model, ["layer0head1"])
    for negative in ((1, -1), (-1, 0), [(0, 1), (1, -2)]):  # never shown as L1H-1
        with pytest.raises(WorkbenchError, match="negative index"):
            HeadSet.of(attn_model, negative)
    with pytest.raises(WorkbenchError, match="ablation kind 'median' is unknown"):
        with ablated(attn_model, ["L0H0"], kind="median"):
            pass
    with pytest.raises(WorkbenchError, match="mean ablation needs means"):
        with ablated(attn_model, ["L0H0"], kind="mean"):
            pass


def test_hook_ablation_on_transformer_bridge(tmp_path):
    """TransformerBridge in compatibility mode, with value biases left unfolded (required:
    folding moves b_V into b_O, see test_folded_value_bias_would_not_be_removed)."""
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(2)
    hf = GPT2LMHeadModel(
        GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=50, n_positions=32)
    ).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.3)
    hf.save_pretrained(tmp_path / "g")
    bridge = TransformerBridge.boot_transformers(str(tmp_path / "g"), device="cpu")
    bridge.enable_compatibility_mode(disable_warnings=True, fold_value_biases=False)
    tokens = torch.randint(0, 50, (2, 6))
    with ablated(bridge, ["L1H2"]):
        hooked = bridge(tokens).log_softmax(-1)
    with torch.no_grad():
        hf.transformer.h[1].attn.c_proj.weight[16:24] = 0.0  # rows of head 2 (d_head 8)
        expected = hf(tokens).logits.log_softmax(-1)
    assert_close(hooked, expected, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# Resample ablation


@pytest.fixture(scope="module")
def cf_task():
    g = torch.Generator().manual_seed(3)
    examples = []
    for i in range(12):
        n = 3 + i % 4
        words = [f"w{int(j)}" for j in torch.randint(0, 20, (n,), generator=g)]
        cf = [f"w{int(j)}" for j in torch.randint(0, 20, (n,), generator=g)]
        examples.append(
            Example(
                id=f"r{i}",
                prompt=" ".join(words),
                answers=(words[0],),
                wrong=(cf[0],) if cf[0] != words[0] else ("w19" if words[0] != "w19" else "w18",),
                split="select",
                counterfactual=" ".join(cf),
            )
        )
    return Task(name="cf", examples=examples, metric="logit_diff")


def _replace_z(z, hook, head, new):
    z = z.clone()
    z[:, :, head] = new
    return z


@pytest.mark.parametrize("heads", [["L0H1"], ["L0H2", "L1H3"]])
def test_resample_ablation_equals_patching_z_from_the_counterfactual_run(
    gpt2_like_model, cf_task, heads
):
    model = gpt2_like_model
    scores = evaluate(model, cf_task, heads=heads, kind="resample", batch_size=5)
    batch = encode_task(model, cf_task)
    # Naive: cache the counterfactual run, then write each head's cached z into the clean run.
    hook_names = {f"blocks.{l}.attn.hook_z" for l in range(model.cfg.n_layers)}
    with torch.no_grad():
        _, cache = model.run_with_cache(
            batch.counterfactual_tokens, names_filter=lambda n: n in hook_names
        )
        hooks = []
        for spec in heads:
            layer, head = int(spec[1]), int(spec[3])
            name = f"blocks.{layer}.attn.hook_z"
            hooks.append((name, partial(_replace_z, head=head, new=cache[name][:, :, head])))
        logits = model.run_with_hooks(batch.tokens, fwd_hooks=hooks)
    rows = torch.arange(len(batch))
    at = logits[rows, batch.lengths - 1]
    expected = at[rows, batch.answer_ids[:, 0]] - at[rows, batch.wrong_ids[:, 0]]
    assert_close(scores["logit_diff"].to_numpy(), expected)
    clean = evaluate(model, cf_task)
    assert (scores["logit_diff"] - clean["logit_diff"]).abs().max() > 1e-3  # it did something


def test_resample_in_tiled_masks_equals_one_set_at_a_time(gpt2_like_model, cf_task):
    model = gpt2_like_model
    batch = encode_task(model, cf_task)
    resample = compute_resample_z(model, batch)
    sets = [["L0H1"], ["L0H2", "L1H3"], []]
    masks = torch.zeros(len(sets), model.cfg.n_layers, model.cfg.n_heads)
    for m, s in enumerate(sets):
        for spec in s:
            masks[m, int(spec[1]), int(spec[3])] = 1.0
    k = len(sets)  # mask-major tiling, as MaskScorer does
    tiled = replace(batch, tokens=batch.tokens.repeat(k, 1), lengths=batch.lengths.repeat(k))
    with torch.no_grad():
        got = answer_logits(model, tiled, mask_hooks(model, masks, "resample", resample=resample))
        for m, s in enumerate(sets):
            hooks = ablation_hooks(model, s or None, "resample", resample=resample)
            want = answer_logits(model, batch, hooks)
            assert_close(got[m * len(batch) : (m + 1) * len(batch)], want)


def test_resample_errors_are_clear(gpt2_like_model, tiny_task, cf_task):
    with pytest.raises(WorkbenchError, match="has no counterfactual prompts"):
        evaluate(gpt2_like_model, tiny_task, heads=["L0H1"], kind="resample")
    batch = encode_task(gpt2_like_model, cf_task)
    with pytest.raises(WorkbenchError, match="resample ablation needs the counterfactual run"):
        ablation_hooks(gpt2_like_model, ["L0H1"], "resample")
    short = compute_resample_z(gpt2_like_model, batch.rows(slice(0, 3)))
    with pytest.raises(WorkbenchError, match=r"resample activations are \[batch=3"):
        evaluate(gpt2_like_model, batch, heads=["L0H1"], kind="resample", resample=short)
    bad = replace(cf_task.examples[0], counterfactual="w1 w2 w3 w4 w5 w6 w7 w8")
    with pytest.raises(WorkbenchError, match="example 'r0': the counterfactual prompt is 9"):
        encode_task(gpt2_like_model, replace(cf_task, examples=[bad]))


def test_an_ablation_value_hooks_as_the_keywords_do(gpt2_like_model, tiny_task):
    """`Ablation(kind, means, per_position).hooks(...)` is `ablated(model, heads, kind, means,
    per_position)`; one mask of `Ablation.mask_hooks` is the same removal."""
    from workbench import Ablation

    model = gpt2_like_model
    batch = encode_task(model, tiny_task, "select")
    means = compute_head_means(model, batch.tokens, batch.lengths)
    heads = ["L0H1", "L1H3"]
    for ablation in (Ablation(), Ablation("mean", means)):
        with ablated(model, heads, ablation.kind, ablation.means), torch.no_grad():
            want = answer_logits(model, batch, [])
        with model.hooks(fwd_hooks=ablation.hooks(model, heads)), torch.no_grad():
            got = answer_logits(model, batch, [])
        assert_close(got, want)
        masks = HeadSet.of(model, heads).mask()[None]
        with torch.no_grad():
            tiled = answer_logits(model, batch, ablation.mask_hooks(model, masks))
        assert_close(tiled, want)
    with torch.no_grad():
        clean = answer_logits(model, batch, [])
    assert (clean - want).abs().max() > 1e-3  # the heads' removal changes the logits


def test_an_ablation_value_validates_and_parses():
    from workbench import Ablation, AblationKind

    assert Ablation("mean").kind is AblationKind.MEAN
    assert Ablation.of(None) == Ablation() and Ablation.of("resample").kind == "resample"
    ab = Ablation("zero")
    assert Ablation.of(ab) is ab
    with pytest.raises(WorkbenchError, match="ablation kind 'median'"):
        Ablation("median")
    with pytest.raises(WorkbenchError, match="HeadMeans"):
        Ablation("mean", means=torch.zeros(2, 4, 8))
    with pytest.raises(WorkbenchError, match="per_position"):
        Ablation("mean", per_position="yes")
    with pytest.raises(WorkbenchError, match="needs means"):
        Ablation("mean").fill(0, [1])
