"""LPIPS (alex, v0.1) between two videos, from authenticated weights.

This reproduces the LPIPS gate of vLLM-Omni's quantization quality test
(``compute_lpips_video`` in vLLM-Omni's
``benchmarks/diffusion/quantization_quality.py``): the ``lpips`` package's ``LPIPS(net="alex",
version="0.1")`` applied per frame at full resolution to RGB scaled to
[-1, 1], then the plain mean over frames.

The weights are authenticated first (:mod:`h3bench.metrics.lpips_weights`).

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
import itertools
import os
from collections.abc import Generator
from dataclasses import dataclass

import numpy as np
import torch
import torchvision

from h3bench import media
from h3bench.errors import MediaShapeError, UsageError
from h3bench.metrics.lpips_weights import (
    DEFAULT_PINS,
    DIR_ENV,
    PINS_ENV,
    TAPS,
    LpipsWeights,
    authenticate_weights,
)
from h3bench.prefetch import prefetch

__all__ = [
    "DEFAULT_PINS",
    "DIR_ENV",
    "PINS_ENV",
    "LpipsResult",
    "LpipsWeights",
    "authenticate_weights",
    "lpips_video",
]

# lpips.ScalingLayer (v0.1), applied to the [-1, 1] input.
_SHIFT = (-0.030, -0.088, -0.188)
_SCALE = (0.458, 0.448, 0.450)
_NORM_EPS = 1e-10  # lpips.normalize_tensor
_PREFETCH_BATCHES = 2

_PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class LpipsResult:
    """Mean LPIPS over frames, the per-frame values (read-only) and provenance."""

    mean: float
    per_frame: np.ndarray
    frames: int
    device: str
    backbone_sha256: str


@dataclass(frozen=True)
class _Batch:
    """Frame pairs ready for the network: the differing pairs stacked
    ``[2n, H, W, 3]`` (baselines first), and which pairs were byte-identical."""

    frames: np.ndarray | None
    identical: np.ndarray


# --- network -----------------------------------------------------------------


class _AlexLpips:
    """LPIPS v0.1 over AlexNet, evaluated on pairs of frames.

    Per tap k: unit-normalise the features over channels (eps 1e-10), take the
    squared difference, apply the 1x1 linear head and average over space;
    LPIPS is the sum over the five taps.
    """

    def __init__(self, weights: LpipsWeights, device: torch.device) -> None:
        with torch.device("meta"):
            features = torchvision.models.alexnet(weights=None).features[: TAPS[-1] + 1]
        features.load_state_dict(weights.features, strict=True, assign=True)
        # Channels-last is the fast layout for oneDNN and cuDNN; torch_npu picks its own formats.
        self.layout = torch.contiguous_format if device.type == "npu" else torch.channels_last
        self.features = features.eval().to(device=device, memory_format=self.layout)
        self.heads = [weights.heads[f"lin{k}.model.1.weight"].reshape(-1).to(device) for k in range(len(TAPS))]
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
            if index in TAPS:
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
    batches = prefetch(_batches(_frame_pairs(baseline, candidate), pairs_per_batch), _PREFETCH_BATCHES)
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
            differing = [pair for pair, same in zip(chunk, identical, strict=True) if not same]
            frames = np.stack([a for a, _ in differing] + [b for _, b in differing]) if differing else None
            yield _Batch(frames=frames, identical=identical)
