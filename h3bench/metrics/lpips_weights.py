"""The LPIPS (alex, v0.1) weights, authenticated by SHA-256 before anything is loaded.

Weights are never downloaded. Two files are read from one directory (an
argument, else ``$H3BENCH_LPIPS_DIR``), under the names in the pins file
shipped with h3bench (``h3bench/data/lpips_pins.toml``): the AlexNet backbone
``alexnet-owt-7be5be79.pth`` and the linear heads ``alex.pth`` (the latter may
also come from the installed ``lpips`` wheel). Each file is hashed and
compared with its SHA-256 pin before anything is unpickled, then loaded with
``torch.load(weights_only=True)`` from the same open handle, and its key set
and shapes must match exactly (``lpips`` itself loads with ``strict=False``,
which silently ignores missing keys).
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import torch
import torchvision

from h3bench.errors import UsageError, WeightIntegrityError
from h3bench.hashing import sha256_stream
from h3bench.settings import LPIPS_DIR_ENV as DIR_ENV

__all__ = ["CHANNELS", "DEFAULT_PINS", "DIR_ENV", "PINS_ENV", "TAPS", "LpipsWeights", "authenticate_weights"]

PINS_ENV = "H3BENCH_LPIPS_PINS"
DEFAULT_PINS = importlib.resources.files("h3bench") / "data" / "lpips_pins.toml"

# lpips.pretrained_networks.alexnet taps torchvision's AlexNet.features after
# these ReLUs (relu1..relu5); the final max-pool (index 12) is never used.
TAPS = (1, 4, 7, 9, 11)
CHANNELS = (64, 192, 384, 256, 256)

_PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class LpipsWeights:
    """Authenticated, loaded LPIPS weights and where they came from.

    ``features`` holds the backbone's ``features.*`` tensors with that prefix
    removed (the classifier is checked, then dropped: LPIPS does not use it);
    ``heads`` holds the five ``lin{k}.model.1.weight`` tensors.
    """

    directory: Path
    backbone_sha256: str
    heads_sha256: str
    backbone_path: Path
    heads_path: Path
    features: Mapping[str, torch.Tensor] = field(repr=False, compare=False)
    heads: Mapping[str, torch.Tensor] = field(repr=False, compare=False)


@dataclass(frozen=True)
class _Pin:
    role: str  # "backbone" or "heads"
    file: str
    sha256: str
    size: int


def authenticate_weights(
    directory: _PathLike | None = None, *, pins: _PathLike | None = None
) -> LpipsWeights:
    """Hash-check, load and key-check the LPIPS alex v0.1 weights.

    Parameters
    ----------
    directory
        Holds the backbone and, optionally, the heads under the pinned file
        names. Defaults to ``$H3BENCH_LPIPS_DIR``. The heads fall back to the
        copy inside the installed ``lpips`` wheel; it is hash-checked too.
    pins
        A TOML file with ``[backbone]`` and ``[heads]`` tables of ``file``,
        ``sha256`` and ``size``. Defaults to ``$H3BENCH_LPIPS_PINS``, else the
        repository's ``fixtures/lpips_pins.toml``.

    Raises
    ------
    WeightIntegrityError
        A file is missing, its hash differs from the pin (tampered or
        truncated), it does not load as a weights-only state dict, or its keys
        or shapes are not exactly the expected ones.
    UsageError
        The pins file is missing or malformed.
    """
    table = _read_pins(pins)
    backbone_pin, heads_pin = table["backbone"], table["heads"]
    where = os.fspath(directory) if directory is not None else os.environ.get(DIR_ENV, "")
    if not where:
        raise WeightIntegrityError(
            f"no LPIPS weight directory given: pass one or set {DIR_ENV} to the directory that holds "
            f"{backbone_pin.file} (sha256 {backbone_pin.sha256}, {backbone_pin.size} bytes)",
            path=backbone_pin.file,
            expected_sha256=backbone_pin.sha256,
        )
    root = Path(where).resolve()
    backbone_path = root / backbone_pin.file
    heads_path = root / heads_pin.file
    if not heads_path.is_file():
        heads_path = _wheel_weights(heads_pin.file) or heads_path

    with torch.device("meta"):
        reference = torchvision.models.alexnet(weights=None)
    backbone_shapes = {key: tuple(value.shape) for key, value in reference.state_dict().items()}
    heads_shapes = {f"lin{k}.model.1.weight": (1, c, 1, 1) for k, c in enumerate(CHANNELS)}

    backbone_sha, backbone = _load_pinned(backbone_path, backbone_pin, backbone_shapes)
    heads_sha, heads = _load_pinned(heads_path, heads_pin, heads_shapes)
    features = {key.removeprefix("features."): value for key, value in backbone.items() if key.startswith("features.")}
    return LpipsWeights(
        directory=root,
        backbone_sha256=backbone_sha,
        heads_sha256=heads_sha,
        backbone_path=backbone_path,
        heads_path=heads_path,
        features=MappingProxyType(features),
        heads=MappingProxyType(dict(heads)),
    )


def _read_pins(pins: _PathLike | None) -> dict[str, _Pin]:
    chosen = pins if pins is not None else os.environ.get(PINS_ENV)
    path = Path(chosen) if chosen else DEFAULT_PINS
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"LPIPS weight pins {path}: cannot be read ({exc})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"LPIPS weight pins {path}: not valid TOML ({exc})") from exc
    result = {}
    for role in ("backbone", "heads"):
        try:
            entry = table[role]
            pin = _Pin(role, entry["file"], entry["sha256"].lower(), int(entry["size"]))
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise UsageError(
                f"LPIPS weight pins {path}: [{role}] needs a file name, a sha256 and a size ({exc!r})"
            ) from exc
        # A bare file name keeps every lookup inside the weight directory.
        bare_name = isinstance(pin.file, str) and Path(pin.file).name == pin.file
        if not bare_name or not re.fullmatch(r"[0-9a-f]{64}", pin.sha256):
            raise UsageError(
                f"LPIPS weight pins {path}: [{role}] needs a bare file name and a 64-digit hex sha256, "
                f"got file={pin.file!r}, sha256={pin.sha256!r}"
            )
        result[role] = pin
    return result


def _wheel_weights(name: str) -> Path | None:
    """``lpips/weights/v0.1/<name>`` inside the installed ``lpips`` wheel, if there."""
    spec = importlib.util.find_spec("lpips")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "weights" / "v0.1" / name
    return path if path.is_file() else None


def _load_pinned(
    path: Path, pin: _Pin, shapes: Mapping[str, tuple[int, ...]]
) -> tuple[str, dict[str, torch.Tensor]]:
    """Hash ``path`` against ``pin``, then load it weights-only and check ``shapes``."""
    where = (
        f"put the genuine {pin.file} (sha256 {pin.sha256}, {pin.size} bytes) "
        f"in the LPIPS weight directory ({DIR_ENV})"
    )
    if not path.is_file():
        raise WeightIntegrityError(
            f"LPIPS {pin.role} weights not found at {path}: {where}",
            path=str(path),
            expected_sha256=pin.sha256,
        )
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
                f"({detail}); {where}",
                path=str(path),
                expected_sha256=pin.sha256,
                actual_sha256=actual,
            )
        # Load from the handle that was hashed, so a file swapped in after the check is never read.
        handle.seek(0)
        try:
            state = torch.load(handle, map_location="cpu", weights_only=True)
        except Exception as exc:  # torch.load raises many types on malformed input
            raise WeightIntegrityError(
                f"LPIPS {pin.role} weights {path} match their pin but do not load as a weights-only "
                f"state dict ({type(exc).__name__}: {exc}); check the pins file",
                path=str(path),
                expected_sha256=pin.sha256,
                actual_sha256=actual,
            ) from exc
    problems = _state_dict_problems(state, shapes)
    if problems:
        raise WeightIntegrityError(
            f"LPIPS {pin.role} weights {path} match their pin but are not the expected state dict: "
            f"{problems}; check the pins file and {where}",
            path=str(path),
            expected_sha256=pin.sha256,
            actual_sha256=actual,
        )
    return actual, state


def _state_dict_problems(state: object, shapes: Mapping[str, tuple[int, ...]]) -> str:
    """Describe how ``state`` differs from the expected key → shape map ('' if not at all)."""
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
