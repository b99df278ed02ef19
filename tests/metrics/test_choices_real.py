"""Multiple-choice scoring on the real models: each prompt run once on its key-value cache
against one pass over prompt + choice per choice, clean and with heads ablated (zero and
mean), on letter and full-text choices. SmolLM2 has rotary positions; Gemma-3 local and
global layers with their own rotary bases, so its cache path reads each layer's positions
from the attention mask.

The gap is float32 rounding of the same sums in another order (the prompt's keys computed in
a batch of prompts rather than beside each choice): measured 1.5e-5 on SmolLM2 and 1.5e-5 on
Gemma-3 (clean), 1.7e-5 and 1.5e-5 ablated, on the 2-core EPYC that runs this suite. They are
teacher-forced summed log-probabilities of a continuation, the quantity `hub_sequence`
bounds (3e-4 on both, set from the spread across CPU kernel paths), which this test reuses;
the choices' ranking, and so acc and acc_norm, must be identical."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import assert_close
from tests.tolerances import bound
from workbench.ablation import ablation_hooks, compute_head_means
from workbench.metrics.choices import can_share, choice_logliks
from workbench.tasks.encoding import encode_task
from workbench.tasks.task import Task

pytestmark = pytest.mark.slow

FACTS = [("France", "Paris"), ("Italy", "Rome"), ("Peru", "Lima"), ("Norway", "Oslo"),
         ("Spain", "Madrid"), ("Japan", "Tokyo")]


def capitals() -> Task:
    rows = []
    for i, (country, capital) in enumerate(FACTS):
        options = [capital, *[c for _, c in FACTS if c != capital][:3]]
        options = options[i % 4:] + options[: i % 4]
        gold = options.index(capital)
        listed = "".join(f"\n{'ABCD'[k]}. {o}" for k, o in enumerate(options))
        rows.append({"id": f"l{i}", "prompt": f"Question: What is the capital of {country}?"
                     f"{listed}\nAnswer:", "choices": list("ABCD"), "gold": gold})
        rows.append({"id": f"t{i}", "prompt": f"Question: What is the capital of {country}?"
                     "\nAnswer:", "choices": [f"The city of {o}" for o in options],
                     "gold": gold})
    return Task.from_records(rows, name="mc_capitals")


@pytest.mark.parametrize("name", ["smollm2-135m", "gemma-3-270m"])
def test_shared_context_matches_one_pass_per_choice_on_real_models(name):
    from workbench.loading.model import load_model

    try:
        model = load_model(name)
    except Exception as e:  # the model's wheel is not installed
        pytest.skip(f"{name} is not available ({e})")
    assert can_share(model)
    batch = encode_task(model, capitals())
    means = compute_head_means(model, batch.tokens, batch.lengths)
    heads = [(0, 1), (2, 0), (model.cfg.n_layers - 1, 2)]
    for hooks in ([], ablation_hooks(model, heads, "zero"),
                  ablation_hooks(model, heads, "mean", means)):
        with torch.no_grad(), model.hooks(fwd_hooks=hooks):
            shared = choice_logliks(model, batch, shared=True)
            naive = choice_logliks(model, batch, shared=False)
        assert_close(shared, naive, atol=bound(name, "hub_sequence"), rtol=0)
        assert torch.equal(shared.argmax(-1), naive.argmax(-1))
        chars = torch.tensor([[float(len(c)) for c in e.choices] for e in batch.task.examples])
        assert torch.equal((shared / chars).argmax(-1), (naive / chars).argmax(-1))
