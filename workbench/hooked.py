"""What the workbench uses of a model: the `HookedModel` protocol (imports no torch).

Every stage takes a TransformerLens model: a `HookedTransformer`, a `HookedEncoder`, or a
`TransformerBridge` in compatibility mode. They share no base class, so the public functions
type their `model` by this structural protocol instead: a config with the shape of the heads,
hooks attached for one block of code (`hooks`) or one forward (`run_with_hooks`), a cached
forward (`run_with_cache`), the tokenizer and a plain forward. Ablation hooks go on
`blocks.{l}.attn.hook_z` (`workbench.ablation`). `isinstance(model, HookedModel)` checks that
the members exist (not their signatures); `tests/test_hooked.py` checks it of each kind.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class ModelConfig(Protocol):
    """The fields of a TransformerLens config (`HookedTransformerConfig`) the workbench reads."""

    n_layers: int  # blocks, each with `n_heads` attention heads
    n_heads: int
    d_head: int  # the size of a head's `z` (its value vectors)
    d_model: int  # the residual stream
    d_vocab: int
    device: Any  # where the first block's weights live (a `torch.device` or a string)
    dtype: Any  # the weights' `torch.dtype`


@runtime_checkable
class HookedModel(Protocol):
    """A TransformerLens model whose heads the workbench can remove (module docstring)."""

    cfg: ModelConfig
    tokenizer: Any  # a Hugging Face tokenizer (None for a model built without one)

    def __call__(self, input: Any, *args: Any, **kwargs: Any) -> Any:
        """A forward pass: logits by default (`return_type`)."""
        ...

    def hooks(self, fwd_hooks: Any = (), bwd_hooks: Any = (), reset_hooks_end: bool = True,
              clear_contexts: bool = False) -> AbstractContextManager:
        """`(hook_name, hook_fn)` pairs attached for the body of a `with` block."""
        ...

    def run_with_hooks(self, *model_args: Any, fwd_hooks: Any = (), bwd_hooks: Any = (),
                       reset_hooks_end: bool = True, clear_contexts: bool = False,
                       **model_kwargs: Any) -> Any:
        """One forward with hooks attached, removed afterwards."""
        ...

    def run_with_cache(self, *model_args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """One forward that also returns the activations (`names_filter` picks them)."""
        ...

    def to_tokens(self, input: Any, *args: Any, **kwargs: Any) -> Any:
        """Text to a `[batch, pos]` token tensor."""
        ...
