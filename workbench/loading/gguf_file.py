"""The GGUF container read directly: its header, its architecture, and whether its bytes are whole.

transformers reads a GGUF file with gguf's `GGUFReader`, which first builds numpy views of every
metadata value (about 20 s for Gemma-3's 262,144-token vocabulary), and on a damaged file fails
deep inside its own code: a 100-byte file with a `struct.error`, a truncated one with "cannot
reshape array", a flipped byte in a string with "config file ... is not a valid JSON file".
Before any of that the workbench walks the header itself (GGUF v2 and v3, as llama.cpp's
`docs/gguf.md` describes it: magic, version, counts, key/value pairs, tensor infos, alignment),
in well under a second for a 262k vocabulary, and refuses with one `WorkbenchError` line:

- a file that ends inside its header, holds an unknown type code, an impossible length or text
  that is not UTF-8, or whose tensors reach past its end (truncated);
- an architecture the workbench cannot convert (`CONVERTIBLE`), named from
  `general.architecture`, the header's first key, without reading the rest of the file.

A flipped byte inside the tensor data leaves the header intact; `gguf.read_gguf` checks that
every dequantised weight is finite.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

from workbench.errors import WorkbenchError

MAGIC = b"GGUF"
# GGUF architectures (`general.architecture`) that transformers reads and TransformerLens 3.9
# converts, each tested with a tiny random file (tests/test_gguf.py). llama.cpp writes Mistral
# models as "llama"; transformers tells them apart by `general.name`.
CONVERTIBLE = ("bloom", "gemma2", "gemma3", "gpt2", "llama", "phi3", "qwen2", "qwen3")
# Read by transformers and converted by TransformerLens (GptOssForCausalLM, a mixture of
# experts in MXFP4), but never tested here: refused rather than trusted.
_UNTESTED = ("gpt-oss", "gpt_oss")
_DEFAULT_ALIGNMENT = 32
_MAX_DIMS = 4  # GGML_MAX_DIMS
# GGUF value types: struct format of the scalars; 8 is a string, 9 an array.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
            12: "d"}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class Tensor:
    """One tensor info of the header: GGML type, shape (GGUF order, fastest first), offset
    from the start of the data section."""

    ggml_type: int
    shape: tuple[int, ...]
    offset: int


@dataclass(frozen=True)
class Header:
    """A GGUF file's header.

    Attributes:
        version: the format version (2 or 3).
        metadata: every scalar and string value by key; an array as its length.
        tensors: tensor infos by name.
        data_start: the byte where the tensor data begins (aligned).
        size: the file's size in bytes.
    """

    version: int
    metadata: dict[str, object]
    tensors: dict[str, Tensor]
    data_start: int
    size: int

    @property
    def architecture(self) -> str | None:
        value = self.metadata.get("general.architecture")
        return value if isinstance(value, str) else None


class _Damaged(Exception):
    """The header cannot be what it claims: the message says where and why."""


class _Cursor:
    """Reads little-endian GGUF values from a buffer, refusing to step past its end."""

    def __init__(self, buf) -> None:
        self.buf, self.pos = buf, 0

    def take(self, n: int, what: str) -> int:
        start = self.pos
        if n < 0 or start + n > len(self.buf):
            raise _Damaged(
                f"{what} at byte {start} needs {n} bytes, but the file ends at byte "
                f"{len(self.buf)}"
            )
        self.pos += n
        return start

    def scalar(self, fmt: str, what: str):
        start = self.take(struct.calcsize("<" + fmt), what)
        return struct.unpack_from("<" + fmt, self.buf, start)[0]

    def string(self, what: str) -> str:
        n = self.scalar("Q", f"the length of {what}")
        start = self.take(n, what)
        try:
            return bytes(self.buf[start : start + n]).decode("utf-8")
        except UnicodeDecodeError as e:
            raise _Damaged(f"{what} at byte {start} is not UTF-8 text ({e.reason})") from None

    def value(self, kind: int, what: str):
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind], what)
        if kind == _STRING:
            return self.string(what)
        if kind != _ARRAY:
            raise _Damaged(f"{what} has the unknown value type {kind}")
        inner = self.scalar("I", f"the element type of {what}")
        count = self.scalar("Q", f"the length of {what}")
        if inner in _SCALARS:
            self.take(count * struct.calcsize("<" + _SCALARS[inner]), what)
        elif inner == _STRING:
            if count * 8 > len(self.buf) - self.pos:
                raise _Damaged(f"{what} claims {count} strings, more than the file can hold")
            for i in range(count):
                self.string(f"{what}[{i}]")
        else:
            raise _Damaged(f"{what} has the unknown element type {inner}")
        return count


def _damaged(path: Path, problem: str) -> WorkbenchError:
    return WorkbenchError(
        f"the GGUF file {str(path)!r} is truncated or corrupt: {problem}; copy or download it "
        "again"
    )


def _start(cur: _Cursor) -> tuple[int, int, int]:
    """Magic, version and the two counts: `(version, n_tensors, n_kv)`."""
    start = cur.take(4, "the magic bytes")
    if bytes(cur.buf[start : start + 4]) != MAGIC:
        raise _Damaged(f"it does not start with {MAGIC!r}")
    version = cur.scalar("I", "the version")
    if version not in (2, 3):
        raise _Damaged(f"version {version} is not a GGUF version transformers reads (2 or 3)")
    n_tensors = cur.scalar("Q", "the tensor count")
    n_kv = cur.scalar("Q", "the metadata count")
    # a key/value pair takes at least 12 bytes, a tensor info at least 28
    if 12 * n_kv + 28 * n_tensors > len(cur.buf):
        raise _Damaged(f"it claims {n_kv} metadata keys and {n_tensors} tensors, more than its "
                       f"{len(cur.buf)} bytes can hold")
    return version, n_tensors, n_kv


def _open(path: Path):
    with open(path, "rb") as f:
        if f.seek(0, 2) == 0:
            raise _Damaged("it is empty")
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def read_architecture(path: Path) -> str | None:
    """`general.architecture` from the header's first keys (llama.cpp writes it first),
    without reading the rest of the file; None when the first keys do not hold it."""
    try:
        buf = _open(path)
    except _Damaged as e:
        raise _damaged(path, str(e)) from None
    with buf:
        cur = _Cursor(buf)
        try:
            _, _, n_kv = _start(cur)
            for i in range(min(n_kv, 4)):
                key = cur.string(f"metadata key {i}")
                value = cur.value(cur.scalar("I", f"the type of {key!r}"), repr(key))
                if key == "general.architecture":
                    return value if isinstance(value, str) else None
        except _Damaged as e:
            raise _damaged(path, str(e)) from None
    return None


def read_header(path: Path) -> Header:
    """The whole header of the GGUF file `path`, checked: every length and type code valid,
    every string UTF-8, every tensor of a known GGML type and inside the file."""
    try:
        buf = _open(path)
    except _Damaged as e:
        raise _damaged(path, str(e)) from None
    with buf:
        try:
            return _parse(_Cursor(buf))
        except _Damaged as e:
            raise _damaged(path, str(e)) from None


def _parse(cur: _Cursor) -> Header:
    from gguf import GGML_QUANT_SIZES

    version, n_tensors, n_kv = _start(cur)
    metadata: dict[str, object] = {}
    for i in range(n_kv):
        key = cur.string(f"metadata key {i}")
        metadata[key] = cur.value(cur.scalar("I", f"the type of {key!r}"), repr(key))
    tensors: dict[str, Tensor] = {}
    for i in range(n_tensors):
        name = cur.string(f"the name of tensor {i}")
        n_dims = cur.scalar("I", f"the rank of {name!r}")
        if not 1 <= n_dims <= _MAX_DIMS:
            raise _Damaged(f"tensor {name!r} claims {n_dims} dimensions (1 to {_MAX_DIMS})")
        shape = tuple(cur.scalar("Q", f"the shape of {name!r}") for _ in range(n_dims))
        kind = cur.scalar("I", f"the type of {name!r}")
        tensors[name] = Tensor(kind, shape, cur.scalar("Q", f"the offset of {name!r}"))
    alignment = metadata.get("general.alignment", _DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment % 8:
        raise _Damaged(f"general.alignment is {alignment!r} (a positive multiple of 8)")
    data_start = -(-cur.pos // alignment) * alignment
    size = len(cur.buf)
    for name, t in tensors.items():
        if t.ggml_type not in GGML_QUANT_SIZES:
            raise _Damaged(f"tensor {name!r} has the unknown GGML type {t.ggml_type}")
        block, block_bytes = GGML_QUANT_SIZES[t.ggml_type]
        count = 1
        for d in t.shape:
            count *= d
        if count % block or t.offset % alignment:
            raise _Damaged(f"tensor {name!r} (shape {t.shape}, offset {t.offset}) does not fit "
                           f"its type's {block}-value blocks or the {alignment}-byte alignment")
        end = data_start + t.offset + count // block * block_bytes
        if end > size:
            raise _Damaged(f"tensor {name!r} ends at byte {end}, but the file has {size} bytes")
    return Header(version, metadata, tensors, data_start, size)


def refuse_unconvertible(path: Path, architecture: str | None) -> None:
    """One `WorkbenchError` when the file's architecture is not one of `CONVERTIBLE`, saying
    which step cannot take it: transformers' reader or TransformerLens's conversion."""
    if architecture in CONVERTIBLE:
        return
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    if architecture in _UNTESTED:
        why = "TransformerLens 3.9 converts its Hugging Face class, but no test here loads one"
    elif architecture in GGUF_SUPPORTED_ARCHITECTURES:
        why = "transformers reads it, but TransformerLens 3.9 has no conversion for it"
    else:
        why = "transformers cannot read it"
    raise WorkbenchError(
        f"the GGUF file {str(path)!r} holds a {architecture!r} model, which the workbench cannot "
        f"convert ({why}); GGUF architectures that load: {', '.join(CONVERTIBLE)}"
    )
