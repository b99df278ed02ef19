"""Shared test helpers: one `assert_close` with stated tolerances, tiny model and task builders,
task files written line by line, and a naive greedy decoder."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

from workbench.errors import WorkbenchError
from workbench.tasks.tokenizer import WordTokenizer

# Float32 forward passes through a few layers agree to ~1e-6; 1e-5 leaves room for
# reordered reductions (batched vs one-at-a-time) without hiding a real difference.
ATOL = 1e-5
RTOL = 1e-5


def assert_close(actual, expected, atol: float = ATOL, rtol: float = RTOL, msg: str = "") -> None:
    """Compare tensors, arrays or numbers elementwise; NaNs must match positions."""
    a = (
        actual.detach().cpu().double().numpy()
        if isinstance(actual, torch.Tensor)
        else np.asarray(actual, dtype=float)
    )
    e = (
        expected.detach().cpu().double().numpy()
        if isinstance(expected, torch.Tensor)
        else np.asarray(expected, dtype=float)
    )
    np.testing.assert_allclose(a, e, atol=atol, rtol=rtol, equal_nan=True, err_msg=msg)


def word_tokenizer(n_words: int = 20) -> WordTokenizer:
    return WordTokenizer(["<bos>", "<pad>"] + [f"w{i}" for i in range(n_words)])


def tiny_model(
    attn_only: bool = True,
    n_layers: int = 2,
    n_heads: int = 4,
    d_model: int = 32,
    n_words: int = 20,
    seed: int = 0,
    **overrides,
) -> HookedTransformer:
    """A randomly initialised 2-layer model with a word tokenizer attached."""
    tok = word_tokenizer(n_words)
    torch.manual_seed(seed)
    cfg = HookedTransformerConfig(
        n_layers=n_layers,
        d_model=d_model,
        n_ctx=32,
        d_head=d_model // n_heads,
        n_heads=n_heads,
        d_vocab=len(tok),
        attn_only=attn_only,
        seed=seed,
        **{"act_fn": "gelu", "normalization_type": "LN", **overrides},
    )
    model = HookedTransformer(cfg)
    model.word_tokenizer = tok
    model.eval()
    return model


def randomize_biases(model: HookedTransformer, scale: float = 0.5, seed: int = 0) -> None:
    """Give every bias (b_Q, b_K, b_V, b_O, MLP biases) random non-zero values."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.split(".")[-1].startswith("b_"):
                p.copy_(torch.randn(p.shape, generator=g) * scale)


def write_task(
    path: Path, n: int = 40, n_words: int = 20, header: dict | None = None, seed: int = 0
) -> Path:
    """A small next-word task over the tiny model's vocabulary, with varied prompt lengths."""
    rng = np.random.default_rng(seed)
    lines = [json.dumps({"task": header or {"name": path.stem, "metric": "accuracy"}})]
    for i in range(n):
        length = int(rng.integers(3, 8))
        words = [f"w{int(j)}" for j in rng.integers(0, n_words, size=length)]
        answer = words[0]
        wrong = f"w{(int(answer[1:]) + 1) % n_words}"
        lines.append(
            json.dumps(
                {
                    "id": f"e{i}",
                    "prompt": " ".join(words),
                    "answer": answer,
                    "wrong": [wrong],
                    "group": "long" if length > 5 else "short",
                }
            )
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def micro_cel(folder: Path):
    """The hand-built CEL micro model (`workbench.cli.demo`) and its two task files in `folder`.

    Known answer: L0H3 hurts alone; L0H1 and L1H1 hurt only jointly (an OR gate).
    Returns `(model, main_task_path, side_task_path)`.
    """
    from workbench.cli.demo import micro_model, write_micro_tasks

    main, side = write_micro_tasks(folder)
    return micro_model(), main, side


def linear_model(seed: int = 0) -> HookedTransformer:
    """One attention-only layer, no normalization: logits are affine in every head's `z`, so
    a first-order attribution of `logit_diff` is exact."""
    tok = word_tokenizer(20)
    cfg = HookedTransformerConfig(
        n_layers=1,
        d_model=32,
        n_ctx=32,
        d_head=8,
        n_heads=4,
        d_vocab=len(tok),
        normalization_type=None,
        attn_only=True,
        seed=seed,
    )
    model = HookedTransformer(cfg)
    randomize_biases(model, seed=seed)
    model.word_tokenizer = tok
    model.eval()
    return model


def tiny_encoder(seed: int = 5):
    """A 2-layer HookedEncoder with random weights (HookedEncoder leaves them uninitialised)."""
    from transformer_lens import HookedEncoder

    cfg = HookedTransformerConfig(
        n_layers=2,
        d_model=32,
        n_ctx=16,
        d_head=8,
        n_heads=4,
        d_vocab=30,
        act_fn="gelu",
        d_mlp=64,
        seed=seed,
    )
    enc = HookedEncoder(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in enc.named_parameters():
            if name.split(".")[-1].startswith("W"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    enc.eval()
    return enc


def w_o_zeroed(model, heads):
    """The slow obvious reference for zero ablation: a copy of the model with each head's rows
    of `W_O` set to zero."""
    import copy

    from workbench import HeadSet

    ref = copy.deepcopy(model)
    with torch.no_grad():
        for layer, head in HeadSet.of(model, heads):
            ref.blocks[layer].attn.W_O[head] = 0.0
    return ref


def loop_head_effects(model, batch, kind="zero", means=None, per_position=False, heads=None):
    """The slowest obvious reference for screening: for each head, the full model's own
    logits (`model(tokens)`, every position, no prefix reuse, no chunking) with that head
    ablated; mean over examples of ablated - clean, `{metric: [n_layers, n_heads]}` float64.
    `heads`: only these `(layer, head)` pairs (the others stay NaN); default every head."""
    from workbench.ablation import ablated
    from workbench.metrics.scores import score_logits

    def scores():
        with torch.no_grad():
            logits = model(batch.tokens)
        at = logits[torch.arange(len(batch)), batch.answer_pos]
        return score_logits(at, batch)

    clean = scores()
    L, H = model.cfg.n_layers, model.cfg.n_heads
    out = {m: np.full((L, H), np.nan) for m in clean}
    for layer, head in heads if heads is not None else np.ndindex(L, H):
        with ablated(model, [(layer, head)], kind, means, per_position):
            ablated_scores = scores()
        for m, v in ablated_scores.items():
            out[m][layer, head] = float((v.double() - clean[m].double()).nanmean())
    return out


@contextmanager
def hf_head_removed(hf, o_proj: str, layer: int, head: int, d_head: int, mean_z=None):
    """The Hugging Face model `hf` with `head`'s input columns of layer `layer`'s attention
    output projection (`o_proj`, a module path with `{l}`) zeroed, and, for mean ablation,
    the projection's bias increased by that head's mean output `W_O[:, head] @ mean_z`:
    the Hugging Face side of "removing a head". Edits in place; restored on exit."""
    proj = hf.get_submodule(o_proj.format(l=layer))
    cols = slice(head * d_head, (head + 1) * d_head)
    conv1d = type(proj).__name__ == "Conv1D"  # GPT-2 stores [in, out]
    weight = proj.weight.detach().clone()
    bias = proj.bias.detach().clone() if proj.bias is not None else None
    with torch.no_grad():
        w_head = (proj.weight[cols, :].T if conv1d else proj.weight[:, cols]).clone()
        if conv1d:
            proj.weight[cols, :] = 0.0
        else:
            proj.weight[:, cols] = 0.0
        if mean_z is not None:
            if proj.bias is None:
                proj.bias = torch.nn.Parameter(torch.zeros(w_head.shape[0], dtype=w_head.dtype))
            proj.bias += w_head @ mean_z.to(w_head.dtype)
    try:
        yield hf
    finally:
        with torch.no_grad():
            proj.weight.copy_(weight)
            if bias is None:
                proj.bias = None
            else:
                proj.bias.copy_(bias)


def save_tiny_gpt2(folder: Path, n_words: int = 20, seed: int = 3) -> Path:
    """A 2-layer x 4-head Hugging Face GPT-2 with random weights (std 0.3, so heads matter)
    and random non-zero biases, saved to `folder` with the word-level vocabulary `w0..w{n-1}`
    as its Hugging Face tokenizer (`word_level_hf_tokenizer`; `<unk>` included, since
    TransformerBridge encodes "a" at boot). Prompts and answers are then written with spaces
    between words (`write_spaced_task`). Returns `folder`."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from workbench.tasks.tokenizer import word_level_hf_tokenizer

    tok = WordTokenizer(["<bos>", "<pad>", "<unk>"] + [f"w{i}" for i in range(n_words)])
    torch.manual_seed(seed)
    cfg = GPT2Config(
        n_layer=2, n_embd=32, n_head=4, vocab_size=len(tok), n_positions=32,
        bos_token_id=tok.bos_id, eos_token_id=tok.bos_id, initializer_range=0.3,
    )
    hf = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.3)
    hf.save_pretrained(folder)
    word_level_hf_tokenizer(tok).save_pretrained(folder)
    return folder


def write_spaced_task(
    path: Path, n: int = 16, n_words: int = 20, header: dict | None = None, seed: int = 0
) -> Path:
    """`write_task`'s task with answers written as a subword tokenizer needs them, after a
    space (" w3"), and a counterfactual prompt per example (its first word changed, same
    length), for models with a Hugging Face word-level tokenizer (`save_tiny_gpt2`)."""
    write_task(path, n=n, n_words=n_words, header=header, seed=seed)
    head, *records = [json.loads(line) for line in path.read_text().splitlines()]
    for r in records:
        r["answer"] = " " + r["answer"]
        r["wrong"] = [" " + w for w in r["wrong"]]
        first, *rest = r["prompt"].split()
        r["counterfactual"] = " ".join([f"w{(int(first[1:]) + 7) % n_words}", *rest])
    path.write_text("\n".join(json.dumps(r) for r in [head, *records]) + "\n")
    return path


def hf_checks_batch(tokenizer, examples, name: str, prepend_bos: bool = False):
    """A `TaskBatch` of `(prompt, answer, wrong)` triples tokenized by a Hugging Face
    `tokenizer` exactly as it writes them (right-padded with 0), each answer and wrong answer
    one token alone: the real-model exactness tests' inputs, independent of `encode_task`."""
    from workbench.tasks.encoding import TaskBatch
    from workbench.tasks.task import Example, Task

    ids = [tokenizer(p)["input_ids"] for p, _, _ in examples]
    width = max(map(len, ids))
    tokens = torch.tensor([row + [0] * (width - len(row)) for row in ids])  # right-padded
    one = [tokenizer(a, add_special_tokens=False)["input_ids"] for _, a, _ in examples]
    wrong = [tokenizer(w, add_special_tokens=False)["input_ids"] for _, _, w in examples]
    assert all(len(t) == 1 for t in one + wrong)
    rows = [
        Example(id=str(i), prompt=p, answers=(a,), split="select", wrong=(w,))
        for i, (p, a, w) in enumerate(examples)
    ]
    return TaskBatch(
        task=Task(name=name, examples=rows),
        tokens=tokens,
        lengths=torch.tensor([len(r) for r in ids]),
        answer_ids=torch.tensor(one),
        wrong_ids=torch.tensor(wrong),
        candidate_ids=None,
        str_tokens=[tokenizer.convert_ids_to_tokens(r) for r in ids],
        roles=None,
        prepend_bos=prepend_bos,
    )


def write_lines(path: Path, lines) -> Path:
    """A task file of `lines` as given: dicts as JSON, strings as they are (a malformed line),
    no final newline."""
    path.write_text("\n".join(json.dumps(x) if not isinstance(x, str) else x for x in lines))
    return path


def write_examples(path: Path, examples, header=None, bom: bool = False) -> Path:
    """A task file: `{"task": header}` first when a header is given, then one example per line,
    UTF-8, after a byte-order mark when `bom`."""
    lines = ([{"task": header}] if header is not None else []) + examples
    text = "\n".join(json.dumps(x) for x in lines) + "\n"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    return path


def refusal(call) -> str:
    """The message of the `WorkbenchError` that `call()` raises."""
    with pytest.raises(WorkbenchError) as e:
        call()
    return str(e.value)


def greedy_decode(model, ids: list[int], n: int) -> list[int]:
    """Naive greedy decoding: one full forward per new token."""
    out = list(ids)
    with torch.no_grad():
        for _ in range(n):
            out.append(int(model(torch.tensor([out]))[0, -1].argmax()))
    return out[len(ids) :]


def hf_reading(name: str):
    """transformers' own reading of the shipped real model `name`'s GGUF file ("smollm2-135m"
    or "gemma-3-270m"), `(model, tokenizer)`, float32, CPU: the independent reference the
    real-model tests compare the workbench with."""
    from workbench.loading.gguf import read_gguf
    from workbench.loading.shipped import REAL_MODELS

    path = REAL_MODELS[name].path()
    if name == "gemma-3-270m":
        return read_gguf(path)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kw = dict(gguf_file=path.name, local_files_only=True)
    hf = AutoModelForCausalLM.from_pretrained(path.parent, dtype=torch.float32, **kw)
    return hf.eval(), AutoTokenizer.from_pretrained(path.parent, **kw)


def workbench_reading(name: str, hf_pair):
    """`load_model(name)` (float32, CPU) from the conversion cache; on a cold cache the entry
    is converted from `hf_pair`, transformers' reading of the same file, so the GGUF file (the
    slow part) is read once."""
    from workbench import load_model
    from workbench.loading.gguf import cache_entry
    from workbench.loading.shipped import REAL_MODELS

    cache_entry(REAL_MODELS[name].path(), read=hf_pair)
    return load_model(name, device="cpu")


@contextmanager
def scaled_weight(model, name: str, factor: float):
    """`model` with its parameter `name` (e.g. "unembed.W_U") multiplied by `factor` in
    place: a real change of one weight matrix, undone on exit."""
    param = model.get_parameter(name)
    saved = param.detach().clone()
    with torch.no_grad():
        param.mul_(factor)
    try:
        yield model
    finally:
        with torch.no_grad():
            param.copy_(saved)


def prompt_positions(lengths, width: int) -> torch.Tensor:
    """`[batch, pos]` True at prompt positions, False at padding (which no metric reads)."""
    return torch.arange(width)[None, :] < lengths[:, None]


def measure_logits(model, hf, batch) -> dict[str, float]:
    """Max |ours - HF| log-softmax over the prompt positions of the batch, and the first
    prompt's answer probability (" Paris" in the real-model checks) under each."""
    with torch.no_grad():
        got = model(batch.tokens).log_softmax(-1)
        expected = hf(batch.tokens).logits.log_softmax(-1)
    real = prompt_positions(batch.lengths, batch.tokens.shape[1])
    paris, end = int(batch.answer_ids[0, 0]), int(batch.lengths[0]) - 1
    return {
        "logits": float((got - expected).abs()[real].max()),
        "p_paris": float(got[0, end, paris].exp()),
        "p_paris_hf": float(expected[0, end, paris].exp()),
    }


def measure_ablations(model, hf, batch, heads, o_proj: str, d_head: int,
                      hf_heads=None) -> dict[str, float]:
    """Max |ours - HF| log-softmax over the prompt positions for zero and mean ablation of
    each head of `heads` (HF: `hf_head_removed` on `o_proj`), and the largest change a head
    makes (so the checks can fail). `hf_heads`: the heads HF removes instead, one per head
    of `heads` (another head: a real change the comparison must catch)."""
    from workbench.ablation import ablated, compute_head_means

    means = compute_head_means(model, batch.tokens, batch.lengths)
    tokens = batch.tokens
    real = prompt_positions(batch.lengths, tokens.shape[1])
    out = {"zero": 0.0, "mean": 0.0, "head_effect": 0.0}

    def gap(a, b) -> float:
        return float((a - b).abs()[real].max())

    with torch.no_grad():
        clean = hf(tokens).logits.log_softmax(-1)
        for (layer, head), (hf_layer, hf_head) in zip(heads, hf_heads or heads, strict=True):
            with hf_head_removed(hf, o_proj, hf_layer, hf_head, d_head):
                ref = hf(tokens).logits.log_softmax(-1)
            hf_mean = means.averaged[hf_layer, hf_head]
            with hf_head_removed(hf, o_proj, hf_layer, hf_head, d_head, hf_mean):
                ref_mean = hf(tokens).logits.log_softmax(-1)
            with ablated(model, [(layer, head)]):
                got = model(tokens).log_softmax(-1)
            with ablated(model, [(layer, head)], "mean", means):
                got_mean = model(tokens).log_softmax(-1)
            out["zero"] = max(out["zero"], gap(got, ref))
            out["mean"] = max(out["mean"], gap(got_mean, ref_mean))
            out["head_effect"] = max(out["head_effect"], gap(ref, clean))
    return out


def load_script(path: Path):
    """A script that is not a module of a package (`tasks/generate_*.py`), imported from
    its path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_task_file(path: Path) -> tuple[dict, list[dict]]:
    """A task file's header record and example records, as JSON values."""
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return records[0], records[1:]
