"""Fingerprints: short hashes that say which model, task and inputs made a result.

A resumed CEL run may reuse a stage file only when it was made from the same inputs, so
every input gets a content hash: the model's configuration and the exact bytes of every
parameter and buffer (so changing one weight, or the dtype, changes it; no float64 is
needed, which MPS lacks), a task's header and every field of every example, and any JSON-able
object. Hashes are hex SHA-256 prefixes, stable across machines and runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import torch

DIGITS = 16


def digest(obj) -> str:
    """A stable hash of a JSON-able object (keys sorted; other objects by `str`)."""
    text = json.dumps(obj, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:DIGITS]


def file_digest(path) -> str:
    """The SHA-256 of a file's bytes (full length, hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def model_fingerprint(model: torch.nn.Module) -> str:
    """A hash of a model's config and the raw bytes of its state dict.

    Tensors are copied to the CPU one at a time and hashed as bytes, so the hash is exact
    (one changed weight changes it) and works for every dtype and device.
    """
    h = hashlib.sha256()
    cfg = getattr(model, "cfg", None)
    shape = [getattr(cfg, k, None) for k in ("n_layers", "n_heads", "d_model", "d_head", "d_vocab")]
    h.update(json.dumps(shape).encode())
    for name, tensor in model.state_dict().items():
        t = tensor.detach()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:DIGITS]


def task_fingerprint(task) -> str:
    """A hash of everything in a `Task`: its header (metric, answer scope, candidates,
    `prepend_bos`, extra keys) and every field of every example; not the path of the file it
    was read from (`Task.file`), so a moved or copied task file keeps its fingerprint."""
    fields = dataclasses.asdict(task)
    fields.pop("file", None)
    # multiple-choice and generation fields count only where set, so other tasks keep their
    # fingerprints
    for key in ("target_delimiter", "generation"):
        if fields.get(key) is None:
            fields.pop(key, None)
    for ex in fields["examples"]:
        for key in ("choices", "gold", "target"):
            if ex.get(key) is None:
                ex.pop(key, None)
    return digest(fields)
