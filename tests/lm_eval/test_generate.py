"""`HookedLM.generate_until` against lm-eval's own Hugging Face model (`HFLM`) on the same
weights, and `lm_eval.simple_evaluate` on a local `generate_until` task.

The tiny GPT-2 of `tests/lm_eval/test_model.py` (absolute positions, word-level tokenizer whose
EOS is `<bos>`, 32 positions) is read by `load_model` and by transformers. A `generate_until`
YAML over local JSON (contexts of 2-6 words, `generation_kwargs` with a two-word stop
sequence and `max_gen_toks`, a regex `filter_list` that keeps the first word `w1x`,
`exact_match`) runs through `simple_evaluate(model=HookedLM(...))`: each document's response
must be `greedy_generate`'s text under the same hooks, its filtered response the regex's
first match, its `exact_match` that match against the target; and `HookedLM.generate_until`
must return exactly what `HFLM.generate_until` returns, clean and with heads removed (their
`c_proj` input columns zeroed), so lm-eval's `exact_match` is the same number for both.
"""

from __future__ import annotations

import json
import re
from contextlib import ExitStack

import pytest
import torch

from tests.helpers import hf_head_removed, refusal, save_tiny_gpt2

lm_eval = pytest.importorskip("lm_eval", reason="lm-eval is the optional extra lm_eval")

from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.models.huggingface import HFLM  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from workbench import load_model  # noqa: E402
from workbench.ablation import ablation_hooks  # noqa: E402
from workbench.generation import greedy_generate  # noqa: E402
from workbench.lm_eval import HookedLM  # noqa: E402

O_PROJ = "transformer.h.{l}.attn.c_proj"
D_HEAD = 8
TASK = "tiny_gen"
UNTIL = ["w3 w4", "w0"]
MAX_GEN = 6
REGEX = r"(w1[0-9])"
HEAD_SETS = [[], [(0, 1)], [(0, 3), (1, 2)]]

YAML = """task: tiny_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
output_type: generate_until
test_split: test
doc_to_text: "{{{{context}}}}"
doc_to_target: "{{{{target}}}}"
generation_kwargs:
  until: {until}
  max_gen_toks: {max_gen}
  do_sample: false
filter_list:
  - name: first-w1x
    filter:
      - function: regex
        regex_pattern: "{regex}"
        group_select: 0
      - function: take_first
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


@pytest.fixture(scope="module")
def trio(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = save_tiny_gpt2(tmp_path_factory.mktemp("gpt2"))
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    return load_model(str(folder), device="cpu"), hf, AutoTokenizer.from_pretrained(folder)


def _contexts(n: int = 24) -> list[str]:
    g = torch.Generator().manual_seed(0)
    return [" ".join(f"w{int(i)}" for i in torch.randint(0, 20, (int(k),), generator=g))
            for k in torch.randint(2, 7, (n,), generator=g)]


def _texts(model, contexts, heads) -> list[str]:
    prompts = [torch.tensor(model.tokenizer(c)["input_ids"]) for c in contexts]
    with model.hooks(fwd_hooks=ablation_hooks(model, heads)):
        return greedy_generate(model, prompts, MAX_GEN, UNTIL).texts


def _first(text: str) -> str:
    match = re.findall(REGEX, text)
    return match[0] if match else "[invalid]"


@pytest.fixture(scope="module")
def manager(trio, tmp_path_factory):
    """The task: targets are the clean model's extracted answer on even documents (so the
    clean exact match is at least one half) and `w19` on odd ones."""
    model = trio[0]
    folder = tmp_path_factory.mktemp("gen_task")
    contexts = _contexts()
    clean = [_first(t) for t in _texts(model, contexts, [])]
    rows = [{"context": c, "target": clean[i] if i % 2 == 0 else "w19"}
            for i, c in enumerate(contexts)]
    data = folder / "tiny_gen.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "tiny_gen.yaml").write_text(YAML.format(
        data=data, until=json.dumps(UNTIL), max_gen=MAX_GEN, regex=REGEX.replace("\\", "\\\\")))
    return TaskManager(include_path=str(folder), include_defaults=False), rows


@pytest.mark.parametrize("heads", HEAD_SETS, ids=["clean", "L0H1", "L0H3+L1H2"])
def test_simple_evaluate_outputs_are_greedy_generates(trio, manager, heads):
    model = trio[0]
    tm, rows = manager
    out = lm_eval.simple_evaluate(model=HookedLM(model, heads=heads), tasks=[TASK],
                                  task_manager=tm, num_fewshot=0, log_samples=True)
    samples = sorted(out["samples"][TASK], key=lambda s: s["doc_id"])
    expected = _texts(model, [r["context"] for r in rows], heads)
    assert [s["resps"][0][0] for s in samples] == expected
    assert [s["filtered_resps"][0] for s in samples] == [_first(t) for t in expected]
    matches = [float(_first(t) == r["target"]) for t, r in zip(expected, rows, strict=True)]
    assert [s["exact_match"] for s in samples] == matches
    score = out["results"][TASK]["exact_match,first-w1x"]
    assert score == pytest.approx(sum(matches) / len(matches))
    if not heads:
        assert score >= 0.5
    assert any("w3" in r["context"] for r in rows)  # stop sequences can occur


def _requests(contexts, kwargs) -> list[Instance]:
    return [Instance(request_type="generate_until", doc={}, arguments=(c, dict(kwargs)), idx=i)
            for i, c in enumerate(contexts)]


@pytest.mark.parametrize("heads", HEAD_SETS, ids=["clean", "L0H1", "L0H3+L1H2"])
def test_generate_until_equals_hflm(trio, heads):
    """Word for word what lm-eval's HFLM (transformers' `generate`, batched with left padding)
    returns, with the same heads removed on the Hugging Face side; contexts longer than
    `max_length - max_gen_toks` are cut from the left as HFLM cuts them."""
    hooked, hf, tokenizer = trio
    contexts = _contexts() + [" ".join(f"w{i % 20}" for i in range(40))]
    kwargs = {"until": UNTIL, "max_gen_toks": MAX_GEN, "do_sample": False}
    with ExitStack() as stack:
        for layer, head in heads:
            stack.enter_context(hf_head_removed(hf, O_PROJ, layer, head, D_HEAD))
        expected = HFLM(pretrained=hf, tokenizer=tokenizer, device="cpu",
                        batch_size=4).generate_until(_requests(contexts, kwargs))
    got = HookedLM(hooked, heads=heads, batch_size=3).generate_until(_requests(contexts, kwargs))
    assert got == expected
    assert len(set(got)) > 5 and any(len(t.split()) < MAX_GEN for t in got)


def test_sampling_is_refused_in_one_line(trio):
    hooked = trio[0]
    for kwargs in ({"do_sample": True}, {"temperature": 0.7}):
        message = refusal(lambda k=kwargs: HookedLM(hooked).generate_until(
            _requests(["w1 w2"], {"until": ["w3"], **k})))
        assert "greedily" in message and "\n" not in message
    message = refusal(lambda: HookedLM(hooked).generate_until(
        _requests(["w1 w2"], {"until": ["w3"], "max_gen_toks": 40})))
    assert "max_gen_toks=40" in message
