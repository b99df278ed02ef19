"""`workbench.hooked.HookedModel`: each kind of TransformerLens model the workbench runs on
has what the protocol names (checked with `isinstance`, as `runtime_checkable` allows: the
members exist), and its config has the fields `ModelConfig` names; an object without them
does not pass."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import save_tiny_gpt2, tiny_encoder
from workbench.hooked import HookedModel, ModelConfig


def _check(model) -> None:
    assert isinstance(model, HookedModel), type(model).__name__
    assert isinstance(model.cfg, ModelConfig), type(model.cfg).__name__
    for name in ("n_layers", "n_heads", "d_head", "d_model", "d_vocab"):
        assert isinstance(getattr(model.cfg, name), int), name


def test_a_hooked_transformer_is_a_hooked_model(gpt2_like_model):
    _check(gpt2_like_model)


def test_a_hooked_encoder_is_a_hooked_model():
    _check(tiny_encoder())


def test_a_transformer_bridge_is_a_hooked_model(tmp_path):
    from transformer_lens.model_bridge import TransformerBridge

    bridge = TransformerBridge.boot_transformers(str(save_tiny_gpt2(tmp_path)), device="cpu")
    bridge.enable_compatibility_mode(disable_warnings=True, fold_value_biases=False)
    _check(bridge)


def test_an_object_without_hooks_is_not_one(gpt2_like_model):
    class Plain:
        cfg = gpt2_like_model.cfg
        tokenizer = None

        def __call__(self, x):
            return x

    assert not isinstance(Plain(), HookedModel)
    assert not isinstance(object(), ModelConfig)


def test_the_protocol_module_imports_no_torch():
    code = "import sys, workbench.hooked; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
