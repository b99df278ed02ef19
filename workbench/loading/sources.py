"""Where a model can come from: one `ModelSource` record per source, the single list that both
`load_model` and the command line's name check read.

A source says which names or paths are its own (`claims`, checked without torch), how to load
one (`load`, a `"module:function"` string, imported only then), what to call it in an error
message, and the names it knows (for "did you mean"). `load_model` asks the sources in order
and loads with the first that claims the name; `workbench.loading.sources.check_model_name`
refuses a name that no source claims, before torch is imported. So a new source, or a new
shipped model (an entry of `workbench.loading.shipped.REAL_MODELS`), is added in one place.

The built-in sources, in order: the embedded family, the shipped real models, GGUF files,
workbench checkpoint folders, Hugging Face folders, and TransformerLens's official names on
the hub. A name no source claims still goes to the hub loader, which says what it could not
find (TransformerLens's list of names is read without importing it, and may be absent).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.loading.gguf_file import MAGIC
from workbench.loading.names import official_names
from workbench.loading.shipped import EMBEDDED_NAME, REAL_MODELS
from workbench.options import did_you_mean
from workbench.plugins import resolve
from workbench.tasks.names import EMBEDDED_FAMILY, task_names

CHECKPOINT_CONFIG = "workbench_config.json"  # = workbench.loading.checkpoint.CONFIG_FILE


@dataclass(frozen=True)
class ModelSource:
    """One place models load from (module docstring).

    Attributes:
        name: the source's name.
        description: how an error message names it, e.g. "a GGUF file (.gguf)".
        claims: whether a name or path given to `load_model` is this source's (no torch).
        load: `"module:function"`, called as `function(name, device, dtype)`, or with the
            expanded `Path` for a source of `paths`, and with `load_model`'s extra keyword
            arguments for one that `takes_kwargs`.
        names: the names this source knows (none for paths).
    """

    name: str
    description: str
    claims: Callable[[str], bool]
    load: str
    names: Callable[[], Iterable[str]] = field(default=lambda: ())
    paths: bool = False
    takes_kwargs: bool = False

    def open(self, name: str, device, dtype, **kwargs):
        """Load `name` with this source (`load`'s calling convention)."""
        target = _path(name) if self.paths else name
        return self.loader()(target, device, dtype, **(kwargs if self.takes_kwargs else {}))

    def loader(self) -> Callable:
        """The load function (imported now: `workbench.plugins.resolve`)."""
        return resolve(self.load)


def _path(name: str) -> Path:
    return Path(name).expanduser()


def is_gguf_file(path: str | Path) -> bool:
    """True when `path` is a file that starts with the GGUF magic bytes."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == MAGIC
    except OSError:
        return False


def is_checkpoint_folder(path: str | Path) -> bool:
    """True when `path` is a folder holding a workbench checkpoint."""
    return (Path(path) / CHECKPOINT_CONFIG).is_file()


def _official_names() -> list[str]:
    return list(official_names().values())


def _is_official(name: str) -> bool:
    return name.lower() in official_names()


SOURCES: list[ModelSource] = [
    ModelSource("embedded", f"an embedded model ({', '.join(EMBEDDED_FAMILY)})",
                lambda name: name in EMBEDDED_FAMILY, "workbench.loading.checkpoint:load_embedded",
                lambda: EMBEDDED_FAMILY),
    ModelSource("shipped", f"a shipped model ({', '.join(REAL_MODELS)})",
                lambda name: name in REAL_MODELS, "workbench.loading.gguf:load_real",
                lambda: tuple(REAL_MODELS)),
    # a file named .gguf that is not one is this source's too: its header check says why
    ModelSource("gguf", "a GGUF file (.gguf)",
                lambda name: _path(name).is_file() and (
                    is_gguf_file(_path(name)) or name.lower().endswith(".gguf")),
                "workbench.loading.gguf:load_gguf", paths=True),
    ModelSource("checkpoint", "a workbench checkpoint folder",
                lambda name: is_checkpoint_folder(_path(name)),
                "workbench.loading.checkpoint:load_checkpoint", paths=True),
    ModelSource("hf_folder", "a Hugging Face folder (config.json and weights)",
                lambda name: (_path(name) / "config.json").is_file(),
                "workbench.loading.hf_folder:load_hf_folder", paths=True),
    ModelSource("hub", "a TransformerLens model name such as 'gpt2' (from the hub)",
                _is_official, "workbench.loading.hub:load_official", _official_names,
                takes_kwargs=True),
]
HUB = SOURCES[-1]


def register_source(source: ModelSource, before: str = "hub") -> ModelSource:
    """Add a source, asked before the source named `before` (default: before the hub, so a
    new local source is tried first)."""
    if any(s.name == source.name for s in SOURCES):
        raise WorkbenchError(f"a model source named {source.name!r} is already registered")
    at = next((i for i, s in enumerate(SOURCES) if s.name == before), len(SOURCES))
    SOURCES.insert(at, source)
    return source


def find_source(name: str) -> ModelSource | None:
    """The first source that claims `name`, else None."""
    return next((s for s in SOURCES if s.claims(name)), None)


def refusal(name: str) -> str | None:
    """Why a name no source claims cannot be a model, when that is clear without the hub
    (a file that is not GGUF, a folder with neither model, a missing .gguf file, an unknown
    embedded name); None otherwise."""
    path = _path(name)
    if path.is_file():
        return (f"{str(path)!r} is a file but not a GGUF file; expected a .gguf file, a "
                "workbench checkpoint folder or a Hugging Face folder")
    if path.exists():
        return (f"{str(path)!r} exists but holds neither a workbench checkpoint "
                "(workbench_config.json) nor a Hugging Face model (config.json)")
    if name.lower().endswith(".gguf"):
        return f"GGUF file {str(path)!r} does not exist"
    if name.startswith(EMBEDDED_NAME):
        return (f"unknown embedded model {name!r}; expected one of {list(EMBEDDED_FAMILY)} "
                "(or the path of a workbench checkpoint folder)")
    return None


def known_names() -> list[str]:
    """Every name some source knows, for "did you mean" (sources in order)."""
    return [n for s in SOURCES for n in s.names()]


def descriptions() -> str:
    """The sources as one phrase: "an embedded model (...), ..., or a TransformerLens ..."."""
    parts = [s.description for s in SOURCES]
    return ", ".join(parts[:-1]) + f" or {parts[-1]}"


def check_model_name(name: str) -> None:
    """Raise `WorkbenchError` unless some source claims `name` or it is a path on disk
    (`load_model` then tells what it holds), checked without importing torch. Without
    TransformerLens's list of names, `load_model` decides."""
    if find_source(name) is not None or _path(name).exists() or not official_names():
        return
    if name in task_names():
        raise WorkbenchError(f"{name!r} is a task, not a model; did you mean --task {name}?")
    hint = did_you_mean(name, known_names())
    what = ": no such file or folder" if os.sep in name or name.startswith((".", "~")) else ""
    raise WorkbenchError(f"unknown model {name!r}{what}{hint or ';'} expected {descriptions()}")
