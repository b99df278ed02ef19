"""Fingerprints of a model's weights: a hash of every parameter's exact bytes.

A results folder records which model made it so that a resumed run cannot silently mix two
models. Hashing the raw bytes (with each parameter's name, shape and dtype) is exact: any
change to any weight changes the fingerprint, the same weights always give the same one, and
no arithmetic is done on the values, so it works on every device and dtype (MPS has no
float64, bfloat16 has no numpy type; bytes have neither problem).
"""

from __future__ import annotations

import hashlib

import torch

FINGERPRINT_LENGTH = 16


def _tensor_bytes(t: torch.Tensor) -> bytes:
    """The raw bytes of a tensor, copied to the CPU once, in C order."""
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes()


def model_fingerprint(model) -> str:
    """A hex digest (16 characters) of the model's shape and every parameter's bytes.

    Parameters are visited in `named_parameters()` order; each contributes its name, shape,
    dtype and raw bytes, so two models differing in one weight, one dtype or one parameter
    name get different fingerprints.

    Example:
        >>> model_fingerprint(model)
        '3f9c0a1be2d47765'
    """
    digest = hashlib.sha256()
    cfg = getattr(model, "cfg", None)
    for field in ("n_layers", "n_heads", "d_model", "d_head", "d_vocab"):
        digest.update(f"{field}={getattr(cfg, field, None)};".encode())
    for name, p in model.named_parameters():
        digest.update(f"{name}|{tuple(p.shape)}|{p.dtype};".encode())
        digest.update(_tensor_bytes(p))
    return digest.hexdigest()[:FINGERPRINT_LENGTH]
