"""TransformerLens's model names and the hub, known before anything heavy is imported.

A typo in `--model` should cost a second, not the ten it takes to import torch and
TransformerLens, and an unreachable hub should be said at once. This module imports neither:
it reads TransformerLens's official model names and aliases from the source of
`transformer_lens/supported_models.py` (a plain list with no imports, without importing the
package), and asks the hub once, without retries (`check_hub`). The model sources that read
it (`workbench.loading.sources`) decide which names are models.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.loading.shipped import REAL_MODELS
from workbench.tasks.names import EMBEDDED_FAMILY


@functools.cache
def _supported_models() -> dict:
    """`OFFICIAL_MODEL_NAMES` and `MODEL_ALIASES` of TransformerLens's
    `supported_models.py`, read as literals (empty when TransformerLens is not installed)."""
    try:
        spec = importlib.util.find_spec("transformer_lens")  # finds the package, imports nothing
    except (ImportError, ValueError):
        return {}
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = Path(spec.submodule_search_locations[0]) / "supported_models.py"
    if not path.is_file():
        return {}
    values = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:  # literals only, never run
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and t.id in ("OFFICIAL_MODEL_NAMES", "MODEL_ALIASES"):
                    values[t.id] = ast.literal_eval(node.value)
    return values


@functools.cache
def official_names() -> dict[str, str]:
    """TransformerLens's official model names and aliases: lower-case name -> name as written
    (empty when TransformerLens is not installed)."""
    values = _supported_models()
    names: dict[str, str] = {}
    for official in values.get("OFFICIAL_MODEL_NAMES", []):
        names[official.lower()] = official
        for alias in values.get("MODEL_ALIASES", {}).get(official, []):
            names[alias.lower()] = alias
    return names


def hub_repo(name: str) -> str | None:
    """The Hugging Face repository TransformerLens loads for an official name or alias
    (`"pythia-70m"` -> `"EleutherAI/pythia-70m"`), as its `get_official_model_name` does; None
    for a path on disk, an embedded or shipped model, or an unknown name."""
    if name in EMBEDDED_FAMILY or name in REAL_MODELS or Path(name).expanduser().exists():
        return None
    values = _supported_models()
    for official in values.get("OFFICIAL_MODEL_NAMES", []):
        aliases = values.get("MODEL_ALIASES", {}).get(official, [])
        if name.lower() in (official.lower(), *(a.lower() for a in aliases)):
            return official
    return None


OFFLINE_HINT = (
    "Without internet: set HF_HUB_OFFLINE=1 to load a model already in the local Hugging "
    "Face cache, or download it elsewhere and pass its folder: --model /path/to/folder "
    "(load_model('/path/to/folder'))"
)
HUB_PROBE_TIMEOUT_S = 5.0  # one HEAD request; huggingface_hub's own loads retry for ~25 s


def check_hub(repo_id: str) -> None:
    """Raise one clear `WorkbenchError` at once when `repo_id` cannot come from the hub,
    instead of the ~25 s of retry warnings TransformerLens's loading prints before failing.

    Under `HF_HUB_OFFLINE=1`: the repository's config.json must be in the local Hugging Face
    cache. Otherwise the hub is asked once for it, without retries: a request that gets no
    answer (no network, a refused proxy, DNS) is refused here; any answer of the hub (a gated
    or missing repository included) lets loading go on and report it. Imports no torch."""
    try:
        from huggingface_hub import (
            constants,
            get_hf_file_metadata,
            hf_hub_url,
            try_to_load_from_cache,
        )
        from huggingface_hub.errors import HfHubHTTPError
    except ImportError:  # loading will say what is missing
        return
    if constants.HF_HUB_OFFLINE:
        if isinstance(try_to_load_from_cache(repo_id, "config.json"), str):
            return
        raise WorkbenchError(
            f"{repo_id!r} is not in the local Hugging Face cache, and HF_HUB_OFFLINE=1 keeps "
            "the hub from being asked; download it where the hub is reachable, or pass its "
            "folder: --model /path/to/folder (load_model('/path/to/folder'))"
        )
    try:
        get_hf_file_metadata(hf_hub_url(repo_id, "config.json"), timeout=HUB_PROBE_TIMEOUT_S)
    except HfHubHTTPError:
        return  # the hub answered
    except Exception as e:  # noqa: BLE001 - only failures to get an answer are answered here
        if not _is_transport_error(e):
            raise
        why = str(e).splitlines()[0][:120] if str(e) else "no answer"
        raise WorkbenchError(
            f"the Hugging Face hub is unreachable for {repo_id!r} ({type(e).__name__}: {why}). "
            f"{OFFLINE_HINT}"
        ) from None


def _is_transport_error(error: Exception) -> bool:
    """A request that never got an answer: an `OSError` (sockets, `requests`) or an httpx
    transport error (huggingface_hub's clients: connection refused, timeouts, proxy errors)."""
    return isinstance(error, OSError) or any(
        cls.__name__ == "TransportError" for cls in type(error).__mro__)


