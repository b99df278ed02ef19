"""The model and task names the workbench knows, checked before anything heavy is imported.

A typo in `--model` or `--task` should cost a second, not the ten it takes to import torch and
TransformerLens, and it should be reported first, with the name that was probably meant. This
module therefore imports neither: it knows the embedded model family (`workbench.zoo`), the
real models the workbench ships (`SHIPPED_REAL`), TransformerLens's official model names and
aliases (read from the source of `transformer_lens/supported_models.py`, a plain list with no
imports, without importing the package), and the task files in `tasks/`. Suggestions come from
`difflib.get_close_matches`.
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib.util
import os
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.zoo import EMBEDDED_FAMILY

# Real pretrained models `load_model` resolves by name without the hub: the names of
# `workbench.loading.shipped.REAL_MODELS`, repeated here because that module imports torch
# (tests/test_loading.py checks the two agree).
SHIPPED_REAL: tuple[str, ...] = ("smollm2-135m", "gemma-3-270m")
TASKS_DIR = Path(__file__).resolve().parent.parent / "tasks"


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
    if name in EMBEDDED_FAMILY or name in SHIPPED_REAL or Path(name).expanduser().exists():
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


def task_names() -> list[str]:
    """The names of the task files in `tasks/`."""
    return sorted(p.stem for p in TASKS_DIR.glob("*.jsonl")) if TASKS_DIR.is_dir() else []


def own_tasks(model: str) -> tuple[list[str], list[str] | None]:
    """The tasks a model is swept on when none are named, and their side tasks.

    The embedded model family has its own language: its default task (`workbench.zoo`) with the
    zoo's side tasks. Every other model (hub names, the shipped real models, local folders) gets
    the hub tasks, each with the others as side tasks (None: the sweep's other tasks).
    """
    from workbench.zoo import DEFAULT_TASK, SIDE_TASKS

    if model in EMBEDDED_FAMILY:
        return [DEFAULT_TASK], list(SIDE_TASKS)
    return hub_task_names(), None


def hub_task_names() -> list[str]:
    """The task files of `tasks/` written for pretrained language models (not the embedded
    model's language)."""
    from workbench.zoo import DEFAULT_TASK, SIDE_TASKS

    embedded = {DEFAULT_TASK, *SIDE_TASKS}
    return [t for t in task_names() if t not in embedded]


def did_you_mean(name: str, choices) -> str:
    """`"; did you mean 'x'?"` (or `'x' or 'y'`) for close matches of `name`, else `""`."""
    by_lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.6)
    if not close:
        return ""
    return "; did you mean " + " or ".join(repr(by_lower[c]) for c in close) + "?"


def check_model_name(name: str) -> None:
    """Raise `WorkbenchError` unless `name` is a folder or file on disk (a checkpoint, a
    Hugging Face folder, a GGUF file: `load_model` tells them apart), an embedded model, a
    shipped real model or a TransformerLens model name (checked without importing torch)."""
    if name in EMBEDDED_FAMILY or name in SHIPPED_REAL or Path(name).expanduser().exists():
        return
    official = official_names()
    if not official or name.lower() in official:
        return  # without TransformerLens's list, `load_model` decides
    if name in task_names():
        raise WorkbenchError(f"{name!r} is a task, not a model; did you mean --task {name}?")
    hint = did_you_mean(name, [*EMBEDDED_FAMILY, *SHIPPED_REAL, *official.values()])
    what = ": no such file or folder" if os.sep in name or name.startswith((".", "~")) else ""
    raise WorkbenchError(
        f"unknown model {name!r}{what}{hint or ';'} expected a GGUF file (.gguf), a workbench "
        "checkpoint or Hugging Face folder, an embedded model "
        f"({', '.join(EMBEDDED_FAMILY)}), a shipped model ({', '.join(SHIPPED_REAL)}) or a "
        "TransformerLens model name such as 'gpt2'"
    )


def check_task_name(name: str) -> None:
    """Raise `WorkbenchError` unless `name` is a task file or a task in `tasks/`."""
    if Path(name).expanduser().is_file() or (TASKS_DIR / f"{name}.jsonl").is_file():
        return
    known = task_names()
    hint = did_you_mean(name, known)
    raise WorkbenchError(
        f"task {name!r} is neither a file nor a task in {TASKS_DIR}{hint} (known tasks: "
        f"{', '.join(known)})"
    )


CHECKPOINT_CONFIG = "workbench_config.json"  # = workbench.checkpoint.CONFIG_FILE


def is_checkpoint_folder(path: str | Path) -> bool:
    """True when `path` is a folder holding a workbench checkpoint."""
    return (Path(path) / CHECKPOINT_CONFIG).is_file()
