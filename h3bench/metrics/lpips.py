"""LPIPS (alex, v0.1) between two images or two videos, from authenticated weights.

This reproduces the LPIPS gate of vLLM-Omni's quantization quality test
(``compute_lpips_video`` in vLLM-Omni's
``benchmarks/diffusion/quantization_quality.py``): the ``lpips`` package's ``LPIPS(net="alex",
version="0.1")`` applied per frame at full resolution to RGB scaled to
[-1, 1], then the plain mean over frames. :func:`lpips_distance` is the same
network on two arrays, as scikit-image's metrics take them.

The weights are authenticated first (:mod:`h3bench.metrics.lpips_weights`).

The network (:class:`LpipsNetwork`) is assembled here from torchvision's
AlexNet ``features`` (its twelve layers written out, :func:`alexnet_trunk`,
built on the meta device, so nothing is initialised or fetched) and the
five 1x1 linear heads, with ``lpips``'s scaling constants.
It is split where LPIPS splits: :meth:`LpipsNetwork.features` turns frames
into their five unit-normalised feature maps, and
:meth:`LpipsNetwork.distances` scores pairs of them with the heads. So a frame
that appears in several pairs goes through AlexNet once (the quality engine,
:mod:`h3bench.quality.engine`, relies on that), many pairs of a few frames
are scored by one weighted Gram matrix per tap, frames go through AlexNet
as one batch in channels-last layout under ``torch.inference_mode``, and a
pair of byte-identical frames scores exactly 0 without the heads (as ``lpips``
does: identical features give a zero difference).

References
----------
R. Zhang, P. Isola, A. A. Efros, E. Shechtman, O. Wang, "The Unreasonable
Effectiveness of Deep Features as a Perceptual Metric", CVPR 2018.
https://github.com/richzhang/PerceptualSimilarity (``lpips`` 0.1.4).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
from collections.abc import Generator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from h3bench import media
from h3bench.errors import MediaShapeError, UsageError
from h3bench.media.pairs import paired_frames
from h3bench.metrics.lpips_sdist import CACHE_ENV
from h3bench.metrics.lpips_weights import (
    CONVOLUTIONS,
    DEFAULT_PINS,
    DIR_ENV,
    PINS_ENV,
    TAPS,
    LpipsWeights,
    WeightSource,
    authenticate_weights,
    locate_weights,
)

__all__ = [
    "DEFAULT_PINS",
    "DIR_ENV",
    "MIN_SIZE",
    "PINS_ENV",
    "FeatureBatch",
    "LpipsNetwork",
    "LpipsResult",
    "LpipsWeights",
    "WeightSource",
    "alexnet_trunk",
    "authenticate_weights",
    "default_weights",
    "frames_per_pass",
    "locate_weights",
    "lpips_distance",
    "lpips_video",
    "network",
]

# lpips.ScalingLayer (v0.1), applied to the [-1, 1] input.
_SHIFT = (-0.030, -0.088, -0.188)
_SCALE = (0.458, 0.448, 0.450)
_NORM_EPS = 1e-10  # lpips.normalize_tensor
_PREFETCH = 4  # decoded frames held ahead per file
BATCH_PIXELS = 8 * 1344 * 768  # pixels per AlexNet pass: eight frames at H3's full size
#: The smallest side AlexNet's five taps accept (11x11/4 conv and two 3/2 max-pools before the last three).
MIN_SIZE = 31

_PathLike = str | os.PathLike[str]

# Feature values per step of the heads on the CPU (256 kB of float32): a step's difference is squared and
# weighted while it is still in cache, so each pair costs one read of its two frames' features.
_HEAD_STEP_VALUES = 1 << 16


@dataclass(frozen=True, eq=False)
class FeatureBatch:
    """The five unit-normalised AlexNet feature maps of a batch of frames, each ``[N, h, w, C]``."""

    taps: tuple[torch.Tensor, ...]

    def __len__(self) -> int:
        return int(self.taps[0].shape[0])

    @classmethod
    def concat(cls, batches: Sequence[FeatureBatch]) -> FeatureBatch:
        if len(batches) == 1:
            return batches[0]
        return cls(tuple(torch.cat(taps) for taps in zip(*(b.taps for b in batches), strict=True)))


@dataclass(frozen=True)
class LpipsResult:
    """Mean LPIPS over frames, the per-frame values (read-only) and provenance."""

    mean: float
    per_frame: np.ndarray
    frames: int
    device: str
    weights: WeightSource

    @property
    def backbone_sha256(self) -> str:
        return self.weights.files[0].sha256


# --- network -----------------------------------------------------------------


class LpipsNetwork:
    """LPIPS v0.1 over AlexNet, in two steps: features of frames, then distances of pairs.

    Per tap k: unit-normalise the features over channels (eps 1e-10), take the
    squared difference, apply the 1x1 linear head and average over space;
    LPIPS is the sum over the five taps.
    """

    def __init__(self, weights: LpipsWeights, device: str = "cpu") -> None:
        self.device = _resolve_device(device)
        with torch.device("meta"):
            trunk = alexnet_trunk()
        trunk.load_state_dict(weights.features, strict=True, assign=True)
        # Channels-last is the fast layout for oneDNN and cuDNN; torch_npu picks its own formats.
        self.layout = torch.contiguous_format if self.device.type == "npu" else torch.channels_last
        # Module.to takes memory_format, which torch's overloads do not declare.
        self.trunk = trunk.eval().to(device=self.device, memory_format=self.layout)  # type: ignore[call-overload]
        self.heads = [weights.heads[f"lin{k}.model.1.weight"].reshape(-1).to(self.device) for k in range(len(TAPS))]
        self.shift = torch.tensor(_SHIFT, device=self.device)
        self.scale = torch.tensor(_SCALE, device=self.device)
        self.weights = weights

    @torch.inference_mode()
    def features(self, frames: np.ndarray) -> FeatureBatch:
        """The five unit-normalised feature maps of uint8 RGB frames ``[N, H, W, 3]``."""
        x = torch.from_numpy(np.ascontiguousarray(frames)).to(self.device)
        # lpips's input scaling and ScalingLayer, in place, on the [N, H, W, 3] layout; seen as
        # [N, 3, H, W] that memory is already channels-last, so `contiguous` copies only on NPU.
        x = x.float().div_(127.5).sub_(1.0).sub_(self.shift).div_(self.scale)
        h = x.permute(0, 3, 1, 2).contiguous(memory_format=self.layout)
        taps = []
        for index, layer in enumerate(self.trunk):
            h = layer(h)
            if index in TAPS:
                f = h.permute(0, 2, 3, 1)  # [N, H, W, C]: with channels-last, reductions over C are contiguous
                taps.append(f / (torch.linalg.vector_norm(f, dim=-1, keepdim=True) + _NORM_EPS))
        return FeatureBatch(tuple(taps))

    @torch.inference_mode()
    def distances(self, batch: FeatureBatch, first: Sequence[int], second: Sequence[int]) -> np.ndarray:
        """LPIPS of the frame pairs ``(first[i], second[i])`` of ``batch`` (baseline, candidate), as float64.

        When the pairs cover most pairs of the frames they name (the quality
        engine's lossless comparisons: every process against every other),
        one weighted Gram matrix per tap scores them all (:meth:`_gram_distances`).
        Otherwise each pair's difference is taken a cache-sized step of
        positions at a time (``_HEAD_STEP_VALUES``) on the CPU, then squared
        and weighted in place, so no pair's differences are ever whole in
        memory; on an accelerator each tap is one step.
        """
        frames = sorted(set(first) | set(second))
        if len(frames) ** 2 <= 4 * len(first):
            return self._gram_distances(batch, frames, first, second)
        taps = [tap.reshape(len(batch), -1, tap.shape[-1]) for tap in batch.taps]  # [N, positions, C] views
        cpu = self.device.type == "cpu"
        steps = [min(tap.shape[1], max(1, _HEAD_STEP_VALUES // tap.shape[2])) if cpu else tap.shape[1] for tap in taps]
        scratch = torch.empty(max(rows * tap.shape[2] for rows, tap in zip(steps, taps, strict=True)), device=self.device)
        scores = torch.zeros(len(first), device=self.device)
        for i, (a, b) in enumerate(zip(first, second, strict=True)):
            for tap, head, rows in zip(taps, self.heads, steps, strict=True):
                positions, channels = tap.shape[1], tap.shape[2]
                weighted = torch.empty(positions, device=self.device)  # sum of w_c (a_c - b_c)^2 at each position
                for start in range(0, positions, rows):
                    stop = min(start + rows, positions)
                    diff = scratch[:(stop - start) * channels].view(stop - start, channels)
                    torch.sub(tap[a, start:stop], tap[b, start:stop], out=diff).square_()
                    torch.mv(diff, head, out=weighted[start:stop])
                scores[i] += weighted.mean()
        return scores.cpu().numpy().astype(np.float64)

    def _gram_distances(self, batch: FeatureBatch, frames: Sequence[int], first: Sequence[int],
                        second: Sequence[int]) -> np.ndarray:
        """Every pair at once: per tap, ``Σ_c w_c (a_c - b_c)²`` summed over positions is ``G_aa + G_bb - 2 G_ab``.

        ``G = X diag(w) Xᵀ`` over the frames' flattened features (one matrix
        product for all pairs, where the stepped heads read two frames' maps
        per pair). The products are in float64: a near-identical pair's
        distance is a small difference of large sums, which float32 would
        round away.
        """
        row = {frame: i for i, frame in enumerate(frames)}
        a = torch.tensor([row[f] for f in first], device=self.device)
        b = torch.tensor([row[f] for f in second], device=self.device)
        every = list(frames) == list(range(len(batch)))
        index = torch.tensor(list(frames), device=self.device)
        scores = torch.zeros(len(first), dtype=torch.float64, device=self.device)
        for tap, head in zip(batch.taps, self.heads, strict=True):
            x = (tap if every else tap.index_select(0, index)).reshape(len(frames), -1, tap.shape[-1])
            # w_c·x rounded once in float32 serves both G_aa and G_ab, so the rounding cancels to first order.
            gram = (x * head).flatten(1).double() @ x.flatten(1).double().T
            own = torch.diagonal(gram)
            scores += (own[a] + own[b] - gram[a, b] - gram[b, a]) / x.shape[1]  # symmetric in a and b, bit for bit
        return scores.cpu().numpy()


def alexnet_trunk() -> torch.nn.Sequential:
    """torchvision's ``AlexNet().features`` up to the last tap, with its layer indexes (so its state dict's keys).

    Built here from :data:`~h3bench.metrics.lpips_weights.CONVOLUTIONS`: importing torchvision costs more CPU
    than a whole short comparison, and LPIPS needs only these twelve layers.
    """
    layers: list[torch.nn.Module] = []
    for index in range(TAPS[-1] + 1):
        if index in CONVOLUTIONS:
            out, inp, kernel, padding, stride = CONVOLUTIONS[index]
            layers.append(torch.nn.Conv2d(inp, out, kernel, stride=stride, padding=padding))
        elif index - 1 in CONVOLUTIONS:
            layers.append(torch.nn.ReLU(inplace=True))
        else:
            layers.append(torch.nn.MaxPool2d(kernel_size=3, stride=2))
    return torch.nn.Sequential(*layers)


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


def default_weights() -> LpipsWeights:
    """The weights :func:`authenticate_weights` finds by default, authenticated once per process for each setting of
    the variables that name them: a changed setting is never answered from the cache."""
    return _weights_named_by(tuple(os.environ.get(name) for name in (DIR_ENV, PINS_ENV, CACHE_ENV)))


@functools.cache
def _weights_named_by(setting: tuple[str | None, ...]) -> LpipsWeights:
    return authenticate_weights()


@functools.lru_cache(maxsize=4)
def network(weights: LpipsWeights, device: str = "cpu") -> LpipsNetwork:
    """One :class:`LpipsNetwork` per weights and device, built once per process."""
    return LpipsNetwork(weights, device)


# --- arrays --------------------------------------------------------------------


def lpips_distance(
    rgb_a: np.ndarray, rgb_b: np.ndarray, *, weights: LpipsWeights | None = None, device: str = "cpu"
) -> float:
    """LPIPS (alex, v0.1) between two RGB images, at full resolution.

    Parameters
    ----------
    rgb_a, rgb_b
        ``[H, W, 3]`` uint8 RGB arrays of the same shape, each side at least
        :data:`MIN_SIZE` pixels.
    weights
        Authenticated weights; by default those :func:`default_weights` finds.
    device
        ``"cpu"``, ``"cuda"`` or ``"npu"`` (optionally with ``:index``).

    Returns
    -------
    float
        The distance, 0 for identical images.

    Raises
    ------
    MediaShapeError
        The arrays are not uint8 ``[H, W, 3]``, differ in shape, or are too small.
    WeightIntegrityError
        No weights could be authenticated.

    Notes
    -----
    Equal to ``lpips.LPIPS(net="alex", version="0.1")(x0, x1)`` with
    ``x = rgb / 127.5 - 1`` (``lpips.im2tensor``) to about 1e-7: the difference
    is float32 rounding from layout and batching.
    """
    for name, rgb in (("rgb_a", rgb_a), ("rgb_b", rgb_b)):
        if not isinstance(rgb, np.ndarray) or rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
            got = f"{rgb.dtype} {rgb.shape}" if isinstance(rgb, np.ndarray) else type(rgb).__name__
            raise MediaShapeError(f"{name} must be an [H, W, 3] uint8 RGB array, got {got}")
    if rgb_a.shape != rgb_b.shape:
        raise MediaShapeError(f"image shapes differ: rgb_a {rgb_a.shape}, rgb_b {rgb_b.shape}")
    if min(rgb_a.shape[:2]) < MIN_SIZE:
        raise MediaShapeError(f"images of {rgb_a.shape[1]}x{rgb_a.shape[0]} are too small for AlexNet's "
                              f"five taps: each side needs at least {MIN_SIZE} pixels")
    if np.array_equal(rgb_a, rgb_b):
        return 0.0
    net = network(weights or default_weights(), device)
    return float(net.distances(net.features(np.stack([rgb_a, rgb_b])), [0], [1])[0])


# --- videos --------------------------------------------------------------------


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
        Video files with the same frame count and size. Both are decoded once,
        in parallel, a few frames ahead of the network.
    weights
        From :func:`authenticate_weights`.
    device
        ``"cpu"``, ``"cuda"`` or ``"npu"`` (optionally with ``:index``).
    batch_size
        Frame pairs per forward pass; by default as many as :func:`frames_per_pass` allows (a pass per pair
        costs several times the CPU: the network's fixed cost and its threads' hand-offs repeat for each).

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
    """
    if batch_size is not None and batch_size < 1:
        raise UsageError(f"LPIPS batch_size must be at least 1, got {batch_size}")
    net = network(weights, device)
    pairs = _frame_pairs(baseline, candidate)
    first = next(pairs, None)
    scores = []
    if first is not None:
        size = batch_size or max(1, frames_per_pass(*first[0].shape[:2]) // 2)
        for chunk in _chunks(_after(first, pairs), size):
            scores.append(score_pairs(net, chunk))
    if not scores:
        raise MediaShapeError(f"no video frames to compare in {os.fspath(baseline)} and {os.fspath(candidate)}",
                              path=os.fspath(candidate))
    return result_of(np.concatenate(scores), net)


def score_pairs(net: LpipsNetwork, pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """LPIPS of RGB frame pairs through one batch; byte-identical pairs score 0 without the network."""
    differing = [i for i, (a, b) in enumerate(pairs) if not np.array_equal(a, b)]
    scores = np.zeros(len(pairs))
    if differing:
        n = len(differing)
        features = net.features(np.stack([pairs[i][0] for i in differing] + [pairs[i][1] for i in differing]))
        scores[differing] = net.distances(features, range(n), range(n, 2 * n))
    return scores


def result_of(per_frame: np.ndarray, net: LpipsNetwork) -> LpipsResult:
    per_frame.setflags(write=False)
    return LpipsResult(mean=float(per_frame.mean()), per_frame=per_frame, frames=int(per_frame.size),
                       device=str(net.device), weights=net.weights.source)


def _frame_pairs(baseline: _PathLike, candidate: _PathLike) -> Generator[tuple[np.ndarray, np.ndarray], None, None]:
    """Yield matching RGB frames of both videos; MediaShapeError if they cannot be paired."""
    pairs = paired_frames(baseline, candidate, media.iter_rgb_frames, ahead=_PREFETCH)
    with contextlib.closing(pairs):  # the decoders stop with the consumer
        for index, first, second in pairs:
            if first.shape != second.shape:
                raise MediaShapeError(
                    f"frame sizes differ at frame {index}: baseline {os.fspath(baseline)} is "
                    f"{first.shape[1]}x{first.shape[0]}, candidate {os.fspath(candidate)} is "
                    f"{second.shape[1]}x{second.shape[0]}",
                    path=os.fspath(candidate),
                )
            yield first, second


def frames_per_pass(height: int, width: int) -> int:
    """Frames of ``height`` x ``width`` per AlexNet pass: eight at H3's full size, more when smaller."""
    return max(1, BATCH_PIXELS // (height * width))


def _after(
    first: tuple[np.ndarray, np.ndarray], rest: Generator[tuple[np.ndarray, np.ndarray], None, None]
) -> Generator[tuple[np.ndarray, np.ndarray], None, None]:
    try:
        yield first
        yield from rest
    finally:
        rest.close()


def _chunks(
    pairs: Generator[tuple[np.ndarray, np.ndarray], None, None], size: int
) -> Generator[list[tuple[np.ndarray, np.ndarray]], None, None]:
    with contextlib.closing(pairs):
        while chunk := list(itertools.islice(pairs, size)):
            yield chunk
