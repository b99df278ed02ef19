"""GGUF files (llama.cpp's format): read by transformers, converted like a local folder, cached.

transformers 5 reads a GGUF with the `gguf` package (`from_pretrained(folder, gguf_file=name)`),
dequantises every tensor to float32 and builds the Hugging Face model and tokenizer the file
describes. From that in-memory model the conversion is the one local Hugging Face folders get
(`hf_folder.convert_config_and_weights` and `build_hooked`), so any GGUF that transformers can read
and TransformerLens 3.9 can convert loads.

Reading and converting takes about a minute for a 135M-parameter model on a CPU, mostly in
parsing the file's metadata, so the result is cached on disk, keyed by the file's SHA-256:
`$WORKBENCH_CACHE/gguf/<sha256>/` (`WORKBENCH_CACHE` defaults to `~/.cache/cel-workbench`)
holds the TransformerLens config and the processed float32 state dict (`model.safetensors`),
the tokenizer saved with `save_pretrained` (`tokenizer/`), and `entry.json`, which records
the SHA-256 of every file and the versions of transformers, TransformerLens and gguf that
made it. An entry is written in a temporary folder and renamed into place, so an interrupted
conversion leaves no entry; one whose files do not match their recorded hashes (truncated,
overwritten, half-deleted), or that other library versions made, is rebuilt with a warning,
never used.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import shutil
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from tqdm.auto import tqdm
from transformer_lens import HookedTransformer, HookedTransformerConfig

from workbench.errors import WorkbenchError
from workbench.loading.gguf_file import (
    MAGIC,
    read_architecture,
    read_header,
    refuse_unconvertible,
)
from workbench.loading.hf_folder import build_hooked, convert_config_and_weights, tokenizer_adds_bos
from workbench.loading.shipped import REAL_MODELS, cache_root
from workbench.loading.sources import is_gguf_file
from workbench.results.fingerprint import file_digest

ENTRY_FILE = "entry.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_DIR = "tokenizer"
_FORMAT = "workbench-gguf-cache"
# Bump when the conversion changes what an entry holds; older entries are then rebuilt.
_VERSION = 1
# Config fields that depend on the loading call (device, dtype) or are set again on loading.
_CALL_FIELDS = {"device", "n_devices", "dtype", "tokenizer_name", "tokenizer_prepends_bos"}
GGUF_PIP = "pip install gguf  (or pip install 'cel-workbench[real]')"
# The libraries whose code makes an entry: another version of one may convert differently.
_CONVERTERS = ("transformers", "transformer_lens", "gguf")


def cache_dir() -> Path:
    """The folder holding one converted entry per GGUF file (`<sha256>/`)."""
    return cache_root() / "gguf"


def require_gguf_package() -> None:
    """Raise one clear `WorkbenchError` when the `gguf` package transformers needs is missing."""
    if importlib.util.find_spec("gguf") is None:
        raise WorkbenchError(
            f"reading a GGUF file needs the 'gguf' package, which is not installed; {GGUF_PIP}"
        )


def load_gguf(
    path: Path, device: torch.device, dtype: torch.dtype | None, name: str | None = None
) -> HookedTransformer:
    """The model in the GGUF file `path` as a `HookedTransformer` on `device`, converted once
    and then loaded from the cache. `name` (default: the file's stem) becomes
    `cfg.model_name`."""
    model = _load_entry(cache_entry(path), device, dtype)
    model.cfg.model_name = name or Path(path).stem
    return model


def cache_entry(path: Path, read: tuple | None = None) -> Path:
    """The cache folder of the GGUF file `path`, converting the file into it first unless a
    sound entry is there.

    Args:
        path: a GGUF file.
        read: `read_gguf(path)`'s `(hf_model, tokenizer)` when the caller holds them already
            (the tests compare against that same Hugging Face model); else the file is read.
    """
    path = Path(path)
    if not is_gguf_file(path):
        raise WorkbenchError(
            f"{str(path)!r} is not a GGUF file (it does not start with the bytes {MAGIC!r})"
        )
    require_gguf_package()
    # From the header's first key, before hashing or reading anything else.
    refuse_unconvertible(path, read_architecture(path) or read_header(path).architecture)
    root = cache_dir()
    sha = file_digest(path)
    entry = root / sha
    problem = _entry_problem(entry, sha)
    if problem is not None:
        read_header(path)  # a truncated or corrupt file: one line, before transformers reads it
        if entry.exists():
            warnings.warn(
                f"the cached conversion of {path.name} in {str(entry)!r} is unusable ({problem}); "
                "converting the GGUF file again",
                stacklevel=4,
            )
        _build_entry(path, sha, entry, read)
    return entry


def read_gguf(path: Path):
    """transformers' own reading of a GGUF file: `(hf_model, tokenizer)`, float32, eval mode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    require_gguf_package()
    folder, file = str(path.parent), path.name
    try:
        with _one_reader():
            hf_model = AutoModelForCausalLM.from_pretrained(
                folder, gguf_file=file, dtype=torch.float32, local_files_only=True
            )
            tokenizer = AutoTokenizer.from_pretrained(
                folder, gguf_file=file, local_files_only=True
            )
    except Exception as e:  # any failure of the third-party reader on this file means the same
        first = (str(e).strip().splitlines() or [""])[0]
        raise WorkbenchError(
            f"transformers could not read the GGUF file {str(path)!r}: "
            f"{type(e).__name__}: {first[:300]}"
        ) from None
    for name, p in hf_model.named_parameters():
        if not torch.isfinite(p).all():
            raise WorkbenchError(
                f"the GGUF file {str(path)!r} is corrupt: its tensor for {name} holds NaN or "
                "infinite values after dequantisation; copy or download it again"
            )
    return hf_model.eval(), tokenizer


@contextmanager
def _one_reader():
    """transformers builds gguf's `GGUFReader` of the file once for the config, once for the
    weights and once for the tokenizer, about 20 s each for a 262k vocabulary; inside this
    block the first reader of a file is reused (the reader is read-only)."""
    import gguf

    real = gguf.GGUFReader
    readers: dict = {}

    def reader(path, mode="r"):
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = real(path, mode)
        return readers[key]

    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.GGUFReader = real


def _build_entry(path: Path, sha: str, entry: Path, read: tuple | None) -> None:
    steps = tqdm(total=3, desc=f"converting {path.name} (once; cached)", leave=False)
    steps.set_postfix_str("reading the GGUF file")
    hf_model, tokenizer = read if read is not None else read_gguf(path)
    steps.update()
    steps.set_postfix_str("converting to TransformerLens")
    cpu = torch.device("cpu")
    cfg, state_dict = convert_config_and_weights(hf_model, path.stem, cpu, torch.float32)
    del hf_model
    cfg.default_prepend_bos = tokenizer_adds_bos(tokenizer)
    model = build_hooked(cfg, state_dict, None, cpu)
    del state_dict
    steps.update()
    steps.set_postfix_str(f"writing {str(entry)!r}")
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{sha[:16]}-", dir=entry.parent))
    try:
        state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
        save_file(state, str(tmp / WEIGHTS_FILE))
        tokenizer.save_pretrained(tmp / TOKENIZER_DIR)
        problem = tokenizer_round_trip_problem(tokenizer, tmp / TOKENIZER_DIR)
        if problem is not None:
            raise WorkbenchError(
                f"the tokenizer transformers builds from {path.name} does not survive "
                f"save_pretrained and reloading ({problem}), so the conversion cannot be cached "
                "without changing the token ids"
            )
        record = {
            "format": _FORMAT,
            "version": _VERSION,
            "gguf_sha256": sha,
            "source": path.name,
            "cfg": _cfg_to_json(model.cfg),
            "converted_with": _converter_versions(),
            "files": _file_hashes(tmp),
        }
        (tmp / ENTRY_FILE).write_text(json.dumps(record, indent=1, sort_keys=True))
        if entry.exists():
            shutil.rmtree(entry)
        try:
            tmp.rename(entry)
        except OSError:  # another process renamed its own entry into place first
            if _entry_problem(entry, sha) is not None:
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
        steps.update()
        steps.close()


# Text that exercises spaces, digits, non-ASCII and a lone character.
_PROBES = ("The capital of France is", "  two  spaces\n", "1732 émigré", "x")


def tokenizer_round_trip_problem(tokenizer, folder: Path) -> str | None:
    """Why the tokenizer saved in `folder` would tokenize differently from `tokenizer`, or
    None when it gives the same ids (and the same BOS behaviour) on a few probe texts."""
    from transformers import AutoTokenizer

    try:
        reloaded = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        for text in _PROBES:
            ids, again = tokenizer(text)["input_ids"], reloaded(text)["input_ids"]
            if ids != again:
                return f"{text!r} gives {again} instead of {ids}"
    except Exception as e:  # any failure of a third-party round trip means the same here
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return None


def _load_entry(entry: Path, device: torch.device, dtype: torch.dtype | None) -> HookedTransformer:
    from transformers import AutoTokenizer

    record = json.loads((entry / ENTRY_FILE).read_text(encoding="utf-8"))
    fields = {**record["cfg"], "device": str(device), "dtype": dtype or torch.float32}
    fields["init_weights"] = False  # every weight comes from the file below
    cfg = HookedTransformerConfig(**fields)
    tokenizer = AutoTokenizer.from_pretrained(entry / TOKENIZER_DIR, local_files_only=True)
    model = HookedTransformer(cfg, tokenizer=tokenizer, move_to_device=False,
                              default_padding_side="right")
    try:
        # One tensor at a time, each copied out of the file's memory map (a later rebuild of
        # the entry must not change a loaded model), then assigned as the parameters: one copy
        # of the weights in memory, not two.
        with safe_open(str(entry / WEIGHTS_FILE), framework="pt") as f:
            state = {
                k: (t.to(cfg.dtype, copy=True) if t.is_floating_point() else t.clone())
                for k in f.keys()
                for t in [f.get_tensor(k)]
            }
        model.load_state_dict(state, strict=True, assign=True)
    except (SafetensorError, RuntimeError) as e:
        raise WorkbenchError(
            f"the cached conversion in {str(entry)!r} does not fit its config ({e}); delete the "
            "folder to convert the GGUF file again"
        ) from None
    model.to(device)
    model.eval()
    return model


def _entry_problem(entry: Path, sha: str) -> str | None:
    """Why the cache entry cannot be used, or None when every file matches its hash."""
    if not (entry / ENTRY_FILE).is_file():
        return f"no {ENTRY_FILE}"
    try:
        record = json.loads((entry / ENTRY_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return f"{ENTRY_FILE} is not valid JSON: {e}"
    if (record.get("format"), record.get("version")) != (_FORMAT, _VERSION):
        found = f"{record.get('format')!r} version {record.get('version')!r}"
        return f"written in another format ({found}; expected {_FORMAT!r} version {_VERSION})"
    if record.get("gguf_sha256") != sha or not isinstance(record.get("cfg"), dict):
        return f"{ENTRY_FILE} describes another file"
    if record.get("converted_with") != _converter_versions():
        return f"converted with {record.get('converted_with')}, now {_converter_versions()}"
    expected = record.get("files")
    if not isinstance(expected, dict) or WEIGHTS_FILE not in expected:
        return f"{ENTRY_FILE} records no file hashes"
    found = _file_hashes(entry)
    for rel, digest in expected.items():
        if found.get(rel) != digest:
            return f"{rel} is missing" if rel not in found else f"{rel} does not match its hash"
    return None


def _converter_versions() -> dict[str, str]:
    return {name: importlib.metadata.version(name) for name in _CONVERTERS}


def _file_hashes(folder: Path) -> dict[str, str]:
    """`{relative path: sha256}` of every file under `folder` except the entry record."""
    return {
        p.relative_to(folder).as_posix(): file_digest(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != ENTRY_FILE
    }


def _cfg_to_json(cfg: HookedTransformerConfig) -> dict:
    """The config's constructor fields as JSON, all of them: a field that cannot be written is
    an error here rather than a silently different model on loading."""
    out = {}
    for f in dataclasses.fields(cfg):
        if not f.init or f.name in _CALL_FIELDS:
            continue
        value = getattr(cfg, f.name)
        try:
            out[f.name] = json.loads(json.dumps(value))
        except TypeError:
            raise WorkbenchError(
                f"cannot cache the converted config: field {f.name!r} holds {value!r}"
            ) from None
    return out


def load_real(name: str, device: torch.device, dtype) -> HookedTransformer:
    """A model of `REAL_MODELS`, through the GGUF cache."""
    path = REAL_MODELS[name].path()
    require_gguf_package()
    return load_gguf(path, device, dtype, name=name)
