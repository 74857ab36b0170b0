"""LPIPS (alex, v0.1) between two videos, from authenticated weights.

This reproduces the LPIPS gate of vLLM-Omni's quantization quality test
(REFERENCE §7; ``compute_lpips_video`` in benchmarks/diffusion/
quantization_quality.py): the ``lpips`` package's ``LPIPS(net="alex",
version="0.1")`` applied per frame at full resolution to RGB scaled to
[-1, 1], then the plain mean over frames.

Weights are never downloaded. Two files are read from one directory (an
argument, else ``$H3BENCH_LPIPS_DIR``), under the names in the pins file:
the AlexNet backbone ``alexnet-owt-7be5be79.pth`` and the linear heads
``alex.pth`` (the latter may also come from the installed ``lpips`` wheel).
Each file is hashed and compared with its SHA-256 pin before anything is
unpickled, then loaded with ``torch.load(weights_only=True)`` from the same
open handle, and its key set and shapes must match exactly (``lpips`` itself
loads with ``strict=False``, which silently ignores missing keys).

The network is assembled here from torchvision's AlexNet ``features`` (built
on the meta device, so nothing is initialised or fetched) and the five 1x1
linear heads, with ``lpips``'s scaling constants. Speed comes only from how
that definition is evaluated: the two frames of a pair go through AlexNet as
one batch in channels-last layout under ``torch.inference_mode``, decoding
runs in a background thread so it overlaps the network, and a pair of
byte-identical frames scores exactly 0 without running the network (as
``lpips`` does: identical features give a zero difference).

References
----------
R. Zhang, P. Isola, A. A. Efros, E. Shechtman, O. Wang, "The Unreasonable
Effectiveness of Deep Features as a Perceptual Metric", CVPR 2018.
https://github.com/richzhang/PerceptualSimilarity (``lpips`` 0.1.4).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import itertools
import os
import queue
import re
import threading
import tomllib
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

import numpy as np
import torch
import torchvision

from h3bench import media
from h3bench.errors import MediaShapeError, UsageError, WeightIntegrityError

__all__ = [
    "DEFAULT_PINS",
    "DIR_ENV",
    "PINS_ENV",
    "LpipsResult",
    "LpipsWeights",
    "authenticate_weights",
    "lpips_video",
]

DIR_ENV = "H3BENCH_LPIPS_DIR"
PINS_ENV = "H3BENCH_LPIPS_PINS"
# h3bench is installed editable, so the repository's fixtures sit beside the package.
DEFAULT_PINS = Path(__file__).resolve().parents[2] / "fixtures" / "lpips_pins.toml"

# lpips.pretrained_networks.alexnet taps torchvision's AlexNet.features after
# these ReLUs (relu1..relu5); the final max-pool (index 12) is never used.
_TAPS = (1, 4, 7, 9, 11)
_CHANNELS = (64, 192, 384, 256, 256)
# lpips.ScalingLayer (v0.1), applied to the [-1, 1] input.
_SHIFT = (-0.030, -0.088, -0.188)
_SCALE = (0.458, 0.448, 0.450)
_NORM_EPS = 1e-10  # lpips.normalize_tensor
_HASH_CHUNK = 1 << 20
_PREFETCH_BATCHES = 2

_PathLike = str | os.PathLike[str]
_T = TypeVar("_T")


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
class LpipsResult:
    """Mean LPIPS over frames, the per-frame values (read-only) and provenance."""

    mean: float
    per_frame: np.ndarray
    frames: int
    device: str
    backbone_sha256: str


@dataclass(frozen=True)
class _Pin:
    role: str  # "backbone" or "heads"
    file: str
    sha256: str
    size: int


@dataclass(frozen=True)
class _Batch:
    """Frame pairs ready for the network: the differing pairs stacked
    ``[2n, H, W, 3]`` (baselines first), and which pairs were byte-identical."""

    frames: np.ndarray | None
    identical: np.ndarray


# --- weights -----------------------------------------------------------------


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
    heads_shapes = {f"lin{k}.model.1.weight": (1, c, 1, 1) for k, c in enumerate(_CHANNELS)}

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
    path = Path(pins if pins is not None else os.environ.get(PINS_ENV) or DEFAULT_PINS)
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
        digest = hashlib.sha256()
        size = 0
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
            size += len(chunk)
        actual = digest.hexdigest()
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


# --- network -----------------------------------------------------------------


class _AlexLpips:
    """LPIPS v0.1 over AlexNet, evaluated on pairs of frames.

    Per tap k: unit-normalise the features over channels (eps 1e-10), take the
    squared difference, apply the 1x1 linear head and average over space;
    LPIPS is the sum over the five taps.
    """

    def __init__(self, weights: LpipsWeights, device: torch.device) -> None:
        with torch.device("meta"):
            features = torchvision.models.alexnet(weights=None).features[: _TAPS[-1] + 1]
        features.load_state_dict(weights.features, strict=True, assign=True)
        # Channels-last is the fast layout for oneDNN and cuDNN; torch_npu picks its own formats.
        self.layout = torch.contiguous_format if device.type == "npu" else torch.channels_last
        self.features = features.eval().to(device=device, memory_format=self.layout)
        self.heads = [weights.heads[f"lin{k}.model.1.weight"].reshape(-1).to(device) for k in range(len(_TAPS))]
        self.shift = torch.tensor(_SHIFT, device=device)
        self.scale = torch.tensor(_SCALE, device=device)
        self.device = device

    def __call__(self, frames: torch.Tensor) -> torch.Tensor:
        """LPIPS of each pair in uint8 ``[2n, H, W, 3]`` (baselines first) → ``[n]``."""
        pairs = frames.shape[0] // 2
        # lpips's input scaling and ScalingLayer, in place, on the [N, H, W, 3] layout; seen as
        # [N, 3, H, W] that memory is already channels-last, so `contiguous` copies only on NPU.
        x = frames.float().div_(127.5).sub_(1.0).sub_(self.shift).div_(self.scale)
        h = x.permute(0, 3, 1, 2).contiguous(memory_format=self.layout)
        total = torch.zeros(pairs, device=self.device)
        heads = iter(self.heads)
        for index, layer in enumerate(self.features):
            h = layer(h)
            if index in _TAPS:
                f = h.permute(0, 2, 3, 1)  # [N, H, W, C]: with channels-last, reductions over C are contiguous
                unit = f / (torch.linalg.vector_norm(f, dim=-1, keepdim=True) + _NORM_EPS)
                diff = unit[:pairs].sub_(unit[pairs:]).square_()
                total += (diff @ next(heads)).mean(dim=(1, 2))
        return total

    def score(self, batch: _Batch) -> np.ndarray:
        scores = np.zeros(batch.identical.size)
        if batch.frames is not None:
            frames = torch.from_numpy(batch.frames).to(self.device)
            scores[~batch.identical] = self(frames).cpu().numpy()
        return scores


def _resolve_device(device: str) -> torch.device:
    if device.split(":", 1)[0] == "npu":
        try:
            import torch_npu  # noqa: F401  (registers the "npu" device type with torch)
        except ImportError as exc:
            raise UsageError(f"LPIPS device {device!r} needs torch_npu, which does not import here ({exc})") from exc
    try:
        target = torch.device(device)
    except RuntimeError as exc:
        raise UsageError(f"unknown LPIPS device {device!r}: use cpu, cuda or npu") from exc
    if target.type not in ("cpu", "cuda", "npu"):
        raise UsageError(f"unsupported LPIPS device {device!r}: use cpu, cuda or npu")
    if target.type != "cpu" and not getattr(torch, target.type).is_available():
        raise UsageError(f"LPIPS device {device!r} is not available on this machine")
    return target


# --- frames ------------------------------------------------------------------


def lpips_video(
    baseline: _PathLike,
    candidate: _PathLike,
    *,
    weights: LpipsWeights,
    device: str = "cpu",
    batch_size: int | None = None,
) -> LpipsResult:
    """Mean per-frame LPIPS (alex, v0.1) between two videos.

    Parameters
    ----------
    baseline, candidate
        Video files with the same frame count and size. Frames are streamed
        with :func:`h3bench.media.iter_rgb_frames`; at most a few batches are
        in memory at once.
    weights
        From :func:`authenticate_weights`.
    device
        ``"cpu"``, ``"cuda"`` or ``"npu"`` (optionally with ``:index``).
    batch_size
        Frame pairs per forward pass; default 1 on CPU (measured fastest
        there), 8 elsewhere.

    Returns
    -------
    LpipsResult
        ``mean`` is the float64 mean of ``per_frame``, as upstream's
        ``np.mean`` over per-frame ``.item()`` values.

    Raises
    ------
    MediaShapeError
        The frame counts or sizes differ, or there are no frames.
    UsageError
        The device is unknown or unavailable, or ``batch_size`` < 1.

    Notes
    -----
    Equal to a per-frame loop over ``lpips.LPIPS(net="alex")(x0, x1)`` with
    ``x = rgb / 127.5 - 1`` to about 1e-6; the difference is float32
    rounding from batching and layout.
    """
    target = _resolve_device(device)
    pairs_per_batch = batch_size if batch_size is not None else (1 if target.type == "cpu" else 8)
    if pairs_per_batch < 1:
        raise UsageError(f"LPIPS batch_size must be at least 1, got {batch_size}")
    network = _AlexLpips(weights, target)
    batches = _prefetch(_batches(_frame_pairs(baseline, candidate), pairs_per_batch), _PREFETCH_BATCHES)
    with contextlib.closing(batches), torch.inference_mode():
        per_frame = np.concatenate([network.score(batch) for batch in batches])
    per_frame.setflags(write=False)
    return LpipsResult(
        mean=float(per_frame.mean()),
        per_frame=per_frame,
        frames=int(per_frame.size),
        device=str(target),
        backbone_sha256=weights.backbone_sha256,
    )


def _frame_pairs(baseline: _PathLike, candidate: _PathLike) -> Generator[tuple[np.ndarray, np.ndarray], None, None]:
    """Yield matching RGB frames of both videos; MediaShapeError if they cannot be paired."""
    left, right = media.iter_rgb_frames(baseline), media.iter_rgb_frames(candidate)
    with contextlib.closing(left), contextlib.closing(right):
        pairs = itertools.zip_longest(left, right)
        count = 0
        for first, second in pairs:
            if first is None or second is None:
                # Count the rest (one frame at a time) so the message gives both totals.
                counts = [count, count]
                for a, b in itertools.chain([(first, second)], pairs):
                    counts[0] += a is not None
                    counts[1] += b is not None
                raise MediaShapeError(
                    f"frame counts differ: baseline {os.fspath(baseline)} has {counts[0]}, "
                    f"candidate {os.fspath(candidate)} has {counts[1]}",
                    path=os.fspath(candidate),
                )
            if first.shape != second.shape:
                raise MediaShapeError(
                    f"frame sizes differ at frame {count}: baseline {os.fspath(baseline)} is "
                    f"{first.shape[1]}x{first.shape[0]}, candidate {os.fspath(candidate)} is "
                    f"{second.shape[1]}x{second.shape[0]}",
                    path=os.fspath(candidate),
                )
            count += 1
            yield first, second
        if count == 0:
            raise MediaShapeError(
                f"no video frames to compare in {os.fspath(baseline)} and {os.fspath(candidate)}",
                path=os.fspath(candidate),
            )


def _batches(
    pairs: Generator[tuple[np.ndarray, np.ndarray], None, None], size: int
) -> Generator[_Batch, None, None]:
    """Group ``size`` pairs at a time; byte-identical pairs are only marked (they score 0)."""
    with contextlib.closing(pairs):
        while chunk := list(itertools.islice(pairs, size)):
            identical = np.array([np.array_equal(a, b) for a, b in chunk])
            differing = [pair for pair, same in zip(chunk, identical) if not same]
            frames = np.stack([a for a, _ in differing] + [b for _, b in differing]) if differing else None
            yield _Batch(frames=frames, identical=identical)


def _prefetch(items: Generator[_T, None, None], depth: int) -> Generator[_T, None, None]:
    """Run ``items`` in a background thread up to ``depth`` ahead of the consumer.

    Decoding (PyAV) and stacking release the GIL for most of their time, so
    they overlap the network. Errors are re-raised in the consumer; closing
    the consumer stops the thread and closes ``items`` (and its files).
    """
    buffer: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(done: bool, payload: Any) -> bool:
        while not stop.is_set():
            try:
                buffer.put((done, payload), timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(False, item):
                    return
        except BaseException as exc:  # handed to the consumer, which re-raises it
            put(True, exc)
            return
        finally:
            items.close()
        put(True, None)

    thread = threading.Thread(target=produce, name="h3bench-lpips-decode", daemon=True)
    thread.start()
    try:
        while True:
            done, payload = buffer.get()
            if done:
                if payload is not None:
                    raise payload
                return
            yield payload
    finally:
        stop.set()
        thread.join()
