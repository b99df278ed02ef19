"""Models the project ships: the embedded family (`workbench.zoo.EMBEDDED_FAMILY`).

Each name loads the workbench checkpoint at `workbench.zoo.embedded_path(name)`.
"""

from __future__ import annotations

import torch
from transformer_lens import HookedTransformer

from workbench.checkpoint import is_checkpoint, load_checkpoint
from workbench.errors import WorkbenchError
from workbench.zoo import embedded_path

EMBEDDED_NAME = "embedded"


def _load_embedded(name: str, device: torch.device, dtype) -> HookedTransformer:
    path = embedded_path(name)
    if not is_checkpoint(path):
        raise WorkbenchError(
            f"the embedded model {name!r} is not on disk ({str(path)!r}); train it with "
            f"python -m workbench.zoo.train --arch {name}"
        )
    return load_checkpoint(path, device=device, dtype=dtype)
