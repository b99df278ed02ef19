"""`HookedLM` against lm-eval's own Hugging Face model (`HFLM`) on the same weights.

A tiny GPT-2 (2 layers x 4 heads, random weights and biases, a word-level Hugging Face
tokenizer that puts BOS first) is saved once (`save_tiny_gpt2`); `load_model` reads it as a
HookedTransformer and transformers as itself. `lm_eval.simple_evaluate` runs a local
multiple-choice task (30 documents, 2-4 choices of 1-3 words) through both: the `acc` and
`acc_norm` counts must be equal and every choice's log-likelihood within the shared
`assert_close` tolerance (1e-5 absolute + 1e-5 relative; measured: 4.8e-6 at most, on
log-likelihoods of 2-20 nats), clean and with heads removed (Hugging Face: the head's input
columns of `c_proj` zeroed, or for mean ablation its mean output added to the bias). Each
comparison also checks that the heads change the log-likelihoods by far more than the
tolerance, so it could fail.
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers import assert_close, hf_head_removed, refusal, save_tiny_gpt2
from tests.lm_eval.tasks import arc_style, word_task

lm_eval = pytest.importorskip("lm_eval", reason="lm-eval is the optional extra lm_eval")

from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.models.huggingface import HFLM  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from workbench import compute_head_means, load_model  # noqa: E402
from workbench.lm_eval import HookedLM  # noqa: E402

O_PROJ = "transformer.h.{l}.attn.c_proj"
D_HEAD = 8


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save_tiny_gpt2(tmp_path_factory.mktemp("gpt2"))


@pytest.fixture(scope="module")
def trio(folder):
    """`(hooked, hf, tokenizer)`: one tiny GPT-2 as a HookedTransformer and as itself."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    return load_model(str(folder), device="cpu"), hf, AutoTokenizer.from_pretrained(folder)


@pytest.fixture(scope="module")
def manager(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lm_eval_tasks")
    word_task(folder)
    return TaskManager(include_path=str(folder), include_defaults=False)


def _evaluate(lm, manager, task: str = "tiny_mc") -> dict:
    """lm-eval's scores of `lm` on `task`: `acc`/`acc_norm` counts, every choice's
    log-likelihood and greedy flag, in document order."""
    out = lm_eval.simple_evaluate(model=lm, tasks=[task], task_manager=manager,
                                  num_fewshot=0, log_samples=True)
    samples = sorted(out["samples"][task], key=lambda s: s["doc_id"])
    n = len(samples)
    scores = out["results"][task]
    return {
        "acc": round(scores["acc,none"] * n), "acc_norm": round(scores["acc_norm,none"] * n),
        "ll": [float(r[0][0]) for s in samples for r in s["resps"]],
        "greedy": [bool(r[0][1]) for s in samples for r in s["resps"]],
        "n": n,
    }


def _hflm(hf, tokenizer) -> HFLM:
    return HFLM(pretrained=hf, tokenizer=tokenizer, device="cpu", batch_size=4)


def _assert_same(got: dict, expected: dict, what: str) -> None:
    assert (got["acc"], got["acc_norm"]) == (expected["acc"], expected["acc_norm"]), what
    assert got["greedy"] == expected["greedy"], what
    assert_close(got["ll"], expected["ll"], msg=what)


def test_clean_scores_equal_lm_evals_hugging_face_model(trio, manager):
    hooked, hf, tokenizer = trio
    expected = _evaluate(_hflm(hf, tokenizer), manager)
    got = _evaluate(HookedLM(hooked, batch_size=3), manager)
    _assert_same(got, expected, "clean")
    assert expected["n"] == 30 and len(expected["ll"]) > 60
    assert 0 < expected["acc"] < expected["n"] and expected["acc"] != expected["acc_norm"]


def test_a_transformer_bridge_scores_as_lm_evals_hugging_face_model(trio, folder, manager):
    """A TransformerBridge in compatibility mode (value biases unfolded), booted from the
    same folder, through `HookedLM`: the same counts and log-likelihoods as `HFLM`."""
    from transformer_lens.model_bridge import TransformerBridge

    _, hf, tokenizer = trio
    bridge = TransformerBridge.boot_transformers(str(folder), device="cpu")
    bridge.enable_compatibility_mode(disable_warnings=True, fold_value_biases=False)
    with hf_head_removed(hf, O_PROJ, 1, 3, D_HEAD):
        expected = _evaluate(_hflm(hf, tokenizer), manager)
    _assert_same(_evaluate(HookedLM(bridge, heads="L1H3"), manager), expected, "bridge")


@pytest.mark.parametrize("heads", [[(0, 1)], [(0, 3), (1, 2)]], ids=["L0H1", "L0H3+L1H2"])
def test_zero_ablation_equals_hugging_face_with_the_heads_columns_zeroed(trio, manager, heads):
    hooked, hf, tokenizer = trio
    clean = _evaluate(_hflm(hf, tokenizer), manager)
    with hf_head_removed(hf, O_PROJ, *heads[0], D_HEAD):
        if len(heads) > 1:
            with hf_head_removed(hf, O_PROJ, *heads[1], D_HEAD):
                expected = _evaluate(_hflm(hf, tokenizer), manager)
        else:
            expected = _evaluate(_hflm(hf, tokenizer), manager)
    got = _evaluate(HookedLM(hooked, heads=heads), manager)
    _assert_same(got, expected, f"zero ablation of {heads}")
    change = max(abs(a - b) for a, b in zip(expected["ll"], clean["ll"], strict=True))
    assert change > 0.05  # the heads matter: 5000x the tolerance


def test_mean_ablation_equals_hugging_face_with_the_heads_mean_output(trio, manager):
    hooked, hf, tokenizer = trio
    tokens = torch.tensor([[0, 3, 5, 7, 9, 11], [0, 4, 6, 8, 10, 12]])
    means = compute_head_means(hooked, tokens)
    with hf_head_removed(hf, O_PROJ, 1, 0, D_HEAD, means.averaged[1, 0]):
        expected = _evaluate(_hflm(hf, tokenizer), manager)
    got = _evaluate(HookedLM(hooked, heads="L1H0", kind="mean", means=means), manager)
    _assert_same(got, expected, "mean ablation of L1H0")
    zero = _evaluate(HookedLM(hooked, heads="L1H0"), manager)
    assert max(abs(a - b) for a, b in zip(got["ll"], zero["ll"], strict=True)) > 0.05


def _requests(kind: str, args: list[tuple]) -> list[Instance]:
    return [Instance(request_type=kind, doc={}, arguments=a, idx=i) for i, a in enumerate(args)]


def test_rolling_and_empty_context_loglikelihoods_equal_hflm(trio):
    """Texts longer than the model's 32 positions are scored in lm-eval's rolling windows; an
    empty context stands for the prefix token (BOS)."""
    hooked, hf, tokenizer = trio
    texts = [("w1 w2 w3",), (" ".join(f"w{i % 20}" for i in range(70)),), ("w5",)]
    lm = HookedLM(hooked, heads="L0H2")
    got = lm.loglikelihood_rolling(_requests("loglikelihood_rolling", texts))
    with hf_head_removed(hf, O_PROJ, 0, 2, D_HEAD):
        reference = _hflm(hf, tokenizer)
        expected = reference.loglikelihood_rolling(_requests("loglikelihood_rolling", texts))
    assert lm.max_length == reference.max_length == 32  # 70 tokens: three windows
    assert_close(got, expected)
    pairs = [("", "w3 w4"), ("w1 w2 ", "w7"), ("w1", " w2 w9 w9")]
    expected = _hflm(hf, tokenizer).loglikelihood(_requests("loglikelihood", pairs))
    got = HookedLM(hooked).loglikelihood(_requests("loglikelihood", pairs))
    assert_close([g[0] for g in got], [e[0] for e in expected])
    assert [g[1] for g in got] == [e[1] for e in expected]


def test_resample_ablation_and_bad_heads_are_refused_in_one_line(trio):
    """(Sampling in `generate_until`: tests/lm_eval/test_generate.py.)"""
    hooked, _, _ = trio
    assert "resample" in refusal(lambda: HookedLM(hooked, heads="L0H0", kind="resample"))
    assert "means" in refusal(lambda: HookedLM(hooked, heads="L0H0", kind="mean"))
    assert "out of range" in refusal(lambda: HookedLM(hooked, heads="L5H0"))


@pytest.mark.slow
def test_smollm2_scores_equal_lm_evals_hugging_face_model(tmp_path):
    """SmolLM2-135M (transformers' reading of the shipped GGUF file vs `load_model`'s) on the
    shipped ARC-style task, clean and without L3H1: equal counts; each choice's summed
    log-likelihood within the bound of SmolLM2's teacher-forced sequence log-prob against
    transformers (`hub_sequence`, 3e-4: the same quantity, measured over CPU kernel paths;
    tests/tolerances.py, docs/tolerances.md)."""
    from tests.helpers import hf_reading, workbench_reading
    from tests.tolerances import bound

    atol = bound("smollm2-135m", "hub_sequence")

    hf, tokenizer = hf_reading("smollm2-135m")
    hooked = workbench_reading("smollm2-135m", (hf, tokenizer))
    arc_style(tmp_path)
    manager = TaskManager(include_path=str(tmp_path), include_defaults=False)
    expected = _evaluate(_hflm(hf, tokenizer), manager, "arc_style")
    got = _evaluate(HookedLM(hooked), manager, "arc_style")
    assert (got["acc"], got["acc_norm"]) == (expected["acc"], expected["acc_norm"])
    assert_close(got["ll"], expected["ll"], atol=atol, rtol=0)
    d_head = hooked.cfg.d_head
    with hf_head_removed(hf, "model.layers.{l}.self_attn.o_proj", 3, 1, d_head):
        removed = _evaluate(_hflm(hf, tokenizer), manager, "arc_style")
    got = _evaluate(HookedLM(hooked, heads="L3H1"), manager, "arc_style")
    assert (got["acc"], got["acc_norm"]) == (removed["acc"], removed["acc_norm"])
    assert_close(got["ll"], removed["ll"], atol=atol, rtol=0)
    assert max(abs(a - b) for a, b in zip(removed["ll"], expected["ll"], strict=True)) > 3e-3


@pytest.mark.slow
def test_rescore_gives_lm_evals_scores_clean_and_ablated(trio, tmp_path):
    """`rescore` is `simple_evaluate` on `HookedLM` twice; both against `HFLM` directly."""
    from lm_eval.tasks import TaskManager as Manager

    from workbench.lm_eval.rescore import rescore

    hooked, hf, tokenizer = trio
    path = word_task(tmp_path)
    scores = rescore(hooked, str(path), heads="L0H1")
    manager = Manager(include_path=str(tmp_path), include_defaults=False)
    clean = _evaluate(_hflm(hf, tokenizer), manager)
    with hf_head_removed(hf, O_PROJ, 0, 1, D_HEAD):
        ablated = _evaluate(_hflm(hf, tokenizer), manager)
    for label, expected in (("clean", clean), ("ablated", ablated)):
        got = scores[label]
        assert round(got["acc"] * 30) == expected["acc"], label
        assert round(got["acc_norm"] * 30) == expected["acc_norm"], label
    assert scores["clean"] != scores["ablated"]
    mean = rescore(hooked, str(path), heads="L0H1", kind="mean")
    assert mean["clean"] == scores["clean"]
