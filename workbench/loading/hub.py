"""TransformerLens official model names (`"gpt2"`, `"pythia-70m"`, ...), from the hub.

`HookedTransformer.from_pretrained` with `fold_value_biases=False`. Folding moves each head's
value bias `b_V` into the shared output bias `b_O`; zeroing `hook_z` would then leave the
head's bias contribution in place, which is not removing the head.
"""

from __future__ import annotations

import torch
from transformer_lens import HookedTransformer

from workbench.errors import WorkbenchError
from workbench.loading.names import OFFLINE_HINT, check_hub
from workbench.loading.shipped import shipped_names


def load_official(name: str, device: torch.device, dtype, **kwargs) -> HookedTransformer:
    """A TransformerLens official model from the hub, with value biases left unfolded."""
    from transformer_lens.loading_from_pretrained import get_official_model_name

    try:
        official = get_official_model_name(name)
    except ValueError:
        raise WorkbenchError(
            f"{name!r} is neither a local folder nor a TransformerLens model name. Use an "
            "official name such as 'gpt2', 'pythia-70m' or 'Qwen/Qwen2.5-0.5B', the path of a "
            "local Hugging Face folder, workbench checkpoint or .gguf file, or a shipped model: "
            f"{', '.join(shipped_names())}."
        ) from None
    kwargs.setdefault("fold_value_biases", False)
    if kwargs["fold_value_biases"]:
        raise WorkbenchError(
            "fold_value_biases=True moves each head's value bias into b_O, so ablating hook_z "
            "would not remove the head; load_model always uses fold_value_biases=False"
        )
    check_hub(official)  # one line at once when the hub cannot be reached
    try:
        model = HookedTransformer.from_pretrained(
            official, device=str(device), dtype=dtype or torch.float32, **kwargs
        )
    except OSError as e:  # offline hub, missing files, no permission
        raise WorkbenchError(
            f"could not fetch {official!r} from the Hugging Face hub ({type(e).__name__}: "
            f"{str(e).splitlines()[0][:200]}). {OFFLINE_HINT}."
        ) from None
    model.eval()
    return model
