"""SSIM and PSNR against the oracle: ffmpeg's own ``ssim`` and ``psnr`` filters.

Expected values are never written down here: each test runs the static ffmpeg
from imageio-ffmpeg (fixture ``ffmpeg_exe``) on the same files, as upstream does
(``ffmpeg -i A -i B -lavfi "[0:v][1:v]ssim" -f null -``, then ``psnr``), and
parses the ``All:`` / ``average:`` summaries and the per-frame ``stats_file``.
ffmpeg prints SSIM and the PSNR summary with 6 decimals and the per-frame PSNR
and MSE with 2, which sets the tolerances below (far inside the 1e-4 / 0.01 dB
that the gates need).
"""

from __future__ import annotations

import math
import re
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h3bench.errors import MediaDecodeError, MediaShapeError
from h3bench.media import YuvFrame
from h3bench.metrics import ssim_psnr
from h3bench.metrics.ssim_psnr import VideoMetrics, compare_video
from tests_unit.conftest import run_ffmpeg

SSIM_TOL = 2e-6  # 6 printed decimals; per-window math is the same float32 as ffmpeg's
PSNR_TOL = 2e-5  # 6 printed decimals
STATS_TOL = 0.0051  # per-frame PSNR and MSE are printed with 2 decimals


def ssim_planes(a: YuvFrame, b: YuvFrame) -> tuple[float, float, float]:
    """SSIM of one frame's Y, U and V planes, as ffmpeg's ``ssim`` filter prints per frame (the library's kernel)."""
    ssim_psnr._check_pair(a, b)
    y, u, v = ssim_psnr._frame_stats(a, b)[0]
    return y, u, v


def psnr_planes(a: YuvFrame, b: YuvFrame) -> tuple[float, float, float]:
    """PSNR in dB of one frame's Y, U and V planes (``psnr_y/u/v`` of ffmpeg's stats file); equal planes give inf."""
    ssim_psnr._check_pair(a, b)
    _, sse = ssim_psnr._frame_stats(a, b)
    counts = np.array([plane.size for plane in (a.y, a.u, a.v)], dtype=np.float64)
    y, u, v = ssim_psnr._psnr(np.array(sse, dtype=np.float64) / counts).tolist()
    return y, u, v


def ffmpeg_metrics(ffmpeg: str, baseline: Path, candidate: Path, workdir: Path) -> dict[str, object]:
    """Run ffmpeg's ssim and psnr filters as upstream does; parse summaries and per-frame stats."""
    out: dict[str, object] = {}
    for name in ("ssim", "psnr"):
        stats = workdir / f"{name}-stats.log"
        log = run_ffmpeg(
            ffmpeg, "-i", str(baseline), "-i", str(candidate),
            "-lavfi", f"[0:v][1:v]{name}=stats_file={stats}", "-f", "null", "-",
        )  # fmt: skip
        summary = re.search(r"All:(\S+)", log) if name == "ssim" else re.search(r"average:(\S+)", log)
        out[name] = float(summary.group(1))
        out[f"{name}_frames"] = [dict(re.findall(r"(\w+):(\S+)", line)) for line in stats.read_text().splitlines()]
    return out


def assert_matches_ffmpeg(metrics: VideoMetrics, oracle: dict[str, object]) -> None:
    ssim_frames, psnr_frames = oracle["ssim_frames"], oracle["psnr_frames"]
    assert metrics.frames == len(ssim_frames) == len(psnr_frames)
    assert metrics.ssim == pytest.approx(oracle["ssim"], abs=SSIM_TOL)
    assert metrics.psnr_db == pytest.approx(oracle["psnr"], abs=PSNR_TOL)
    want_ssim = np.array([[float(f[k]) for k in ("Y", "U", "V", "All")] for f in ssim_frames])
    want_psnr = np.array([[float(f[k]) for k in ("psnr_y", "psnr_u", "psnr_v", "psnr_avg")] for f in psnr_frames])
    want_mse = np.array([[float(f[k]) for k in ("mse_y", "mse_u", "mse_v")] for f in psnr_frames])
    np.testing.assert_allclose(metrics.ssim_per_frame, want_ssim, rtol=0, atol=SSIM_TOL)
    np.testing.assert_allclose(metrics.psnr_per_frame, want_psnr, rtol=0, atol=STATS_TOL)
    np.testing.assert_allclose(metrics.mse_per_frame, want_mse, rtol=0, atol=STATS_TOL)


def write_y4m(path: Path, frames: list[YuvFrame], fps: int = 24) -> Path:
    """Raw yuv420p in a YUV4MPEG2 file: odd sizes that H.264 refuses, read by PyAV and ffmpeg alike."""
    height, width = frames[0].y.shape
    with path.open("wb") as fh:
        fh.write(f"YUV4MPEG2 W{width} H{height} F{fps}:1 Ip A1:1 C420jpeg\n".encode())
        for frame in frames:
            fh.write(b"FRAME\n")
            for plane in (frame.y, frame.u, frame.v):
                fh.write(np.ascontiguousarray(plane).tobytes())
    return path


def smooth_plane(rng: np.random.Generator, height: int, width: int, offset: float = 128, contrast: float = 1) -> np.ndarray:
    """Blocky low-frequency content with a little texture, as float (not yet rounded)."""
    coarse = offset + contrast * rng.uniform(-100, 100, size=(height // 4 + 2, width // 4 + 2))
    return np.kron(coarse, np.ones((4, 4)))[:height, :width] + contrast * rng.normal(0, 10, size=(height, width))


def to_frame(planes: list[np.ndarray]) -> YuvFrame:
    y, u, v = (np.clip(np.rint(p), 0, 255).astype(np.uint8) for p in planes)
    return YuvFrame(y=y, u=u, v=v)


def plane_shapes(height: int, width: int) -> list[tuple[int, int]]:
    chroma = ((height + 1) // 2, (width + 1) // 2)
    return [(height, width), chroma, chroma]


def random_frame_pair(
    seed: int, height: int, width: int, noise: float, offset: float = 128, contrast: float = 1
) -> tuple[YuvFrame, YuvFrame]:
    rng = np.random.default_rng(seed)
    planes = [smooth_plane(rng, *shape, offset=offset, contrast=contrast) for shape in plane_shapes(height, width)]
    noisy = [p + rng.normal(0, noise, size=p.shape) for p in planes]
    return to_frame(planes), to_frame(noisy)


@pytest.mark.parametrize(
    ("width", "height", "frames", "seed", "noise"),
    [(256, 160, 24, 0, 4.0), (250, 142, 16, 1, 12.0), (128, 96, 12, 2, 40.0)],
    ids=["256x160-noise4", "250x142-noise12", "128x96-noise40"],
)
def test_h264_pairs_match_ffmpeg(make_mp4, ffmpeg_exe, tmp_path, width, height, frames, seed, noise):
    kw = dict(frames=frames, width=width, height=height, seed=seed, audio_samples=None)
    baseline = make_mp4("baseline.mp4", **kw)
    candidate = make_mp4("candidate.mp4", noise=noise, **kw)

    metrics = compare_video(baseline, candidate)

    assert_matches_ffmpeg(metrics, ffmpeg_metrics(ffmpeg_exe, baseline, candidate, tmp_path))
    assert 0 < metrics.ssim < 1 and math.isfinite(metrics.psnr_db)
    assert metrics.ssim_per_frame.shape == (frames, 4) and metrics.psnr_per_frame.shape == (frames, 4)
    assert metrics.mse_per_frame.shape == (frames, 3)
    for array in (metrics.ssim_per_frame, metrics.psnr_per_frame, metrics.mse_per_frame):
        with pytest.raises(ValueError, match="read-only"):
            array[0, 0] = 0


@pytest.mark.parametrize(
    ("width", "height", "offset", "contrast"),
    [(251, 143, 128, 1.0), (253, 141, 128, 1.0), (17, 16, 128, 1.0), (64, 48, 0, 0.0)],
    ids=["251x143", "253x141", "17x16", "black-64x48"],
)
def test_raw_frames_match_ffmpeg(ffmpeg_exe, tmp_path, width, height, offset, contrast):
    """Odd sizes exercise ffmpeg's edges: ceil-sized chroma, and rows/columns past the last 4x4 block.

    A black baseline (zero mean and variance in every window) makes the
    stabilising constants C1 and C2 dominate the score.
    """
    pairs = [random_frame_pair(seed, height, width, 2.0 * (seed + 1), offset, contrast) for seed in range(5)]
    baseline = write_y4m(tmp_path / "baseline.y4m", [a for a, _ in pairs])
    candidate = write_y4m(tmp_path / "candidate.y4m", [b for _, b in pairs])

    metrics = compare_video(baseline, candidate)

    assert_matches_ffmpeg(metrics, ffmpeg_metrics(ffmpeg_exe, baseline, candidate, tmp_path))
    for index, (a, b) in enumerate(pairs):
        assert ssim_planes(a, b) == tuple(metrics.ssim_per_frame[index, :3])
        assert psnr_planes(a, b) == tuple(metrics.psnr_per_frame[index, :3])


def test_identical_inputs_are_perfect(make_mp4, ffmpeg_exe, tmp_path):
    video = make_mp4("same.mp4", frames=12, audio_samples=None)

    metrics = compare_video(video, video)

    oracle = ffmpeg_metrics(ffmpeg_exe, video, video, tmp_path)
    assert oracle["ssim"] == 1.0 and oracle["psnr"] == math.inf  # ffmpeg prints All:1.000000, average:inf
    assert metrics.ssim == 1.0
    assert metrics.psnr_db == math.inf
    assert np.all(metrics.ssim_per_frame == 1.0)
    assert np.all(metrics.psnr_per_frame == math.inf)
    assert np.all(metrics.mse_per_frame == 0.0)


def test_frame_sizes_must_match(make_mp4):
    baseline = make_mp4("baseline.mp4", frames=4, width=256, height=160, audio_samples=None)
    candidate = make_mp4("candidate.mp4", frames=4, width=250, height=142, audio_samples=None)

    threads = threading.active_count()
    with pytest.raises(MediaShapeError, match=r"256x160.*250x142") as info:
        compare_video(baseline, candidate)
    assert str(baseline) in str(info.value) and str(candidate) in str(info.value)
    assert info.value.path == str(candidate)
    assert threading.active_count() == threads, "a decoding thread outlived compare_video"


@pytest.mark.parametrize(("base_frames", "cand_frames"), [(12, 10), (10, 12)])
def test_frame_counts_must_match(make_mp4, base_frames, cand_frames):
    baseline = make_mp4("baseline.mp4", frames=base_frames, audio_samples=None)
    candidate = make_mp4("candidate.mp4", frames=cand_frames, audio_samples=None)

    with pytest.raises(MediaShapeError) as info:
        compare_video(baseline, candidate)
    message = str(info.value)
    assert f"{baseline} has {base_frames} frames" in message
    assert f"{candidate} has {cand_frames}" in message


def test_decode_errors_propagate(make_mp4, tmp_path):
    video = make_mp4("ok.mp4", frames=4, audio_samples=None)
    garbage = tmp_path / "garbage.mp4"
    garbage.write_bytes(b"\x00not an mp4" * 100)

    threads = threading.active_count()
    with pytest.raises(MediaDecodeError) as info:
        compare_video(video, garbage)
    assert info.value.path == str(garbage)
    with pytest.raises(MediaDecodeError):
        compare_video(tmp_path / "missing.mp4", video)
    assert threading.active_count() == threads, "a decoding thread outlived compare_video"


def test_frame_helpers_refuse_planes_ffmpeg_would_not_score():
    a, b = random_frame_pair(0, 32, 32, noise=5.0)
    small, _ = random_frame_pair(0, 14, 32, noise=0.0)  # 7-row chroma planes hold no 8x8 window
    with pytest.raises(MediaShapeError, match=r"plane Y shapes differ"):
        ssim_planes(a, YuvFrame(y=b.y[:, :30], u=b.u, v=b.v))
    with pytest.raises(MediaShapeError, match=r"plane U is 16x7"):
        psnr_planes(small, small)
    with pytest.raises(MediaShapeError, match=r"2-D uint8"):
        ssim_planes(a, YuvFrame(y=b.y.astype(np.uint16), u=b.u, v=b.v))


frame_sizes = st.tuples(st.integers(16, 48), st.integers(16, 48))


@settings(max_examples=15, deadline=None)
@given(size=frame_sizes, seed=st.integers(0, 2**32 - 1), noise=st.floats(0.0, 60.0))
def test_identical_planes_score_perfectly_and_order_does_not_matter(size, seed, noise):
    a, b = random_frame_pair(seed, *size, noise=noise)
    assert ssim_planes(a, a) == (1.0, 1.0, 1.0)
    assert psnr_planes(a, a) == (math.inf, math.inf, math.inf)
    assert ssim_planes(a, b) == ssim_planes(b, a)
    assert psnr_planes(a, b) == psnr_planes(b, a)


@settings(max_examples=20, deadline=None)
@given(
    size=frame_sizes,
    seed=st.integers(0, 2**32 - 1),
    offset=st.sampled_from([0.0, 20.0, 128.0, 235.0, 255.0]),
    contrast=st.sampled_from([0.0, 0.1, 1.0]),
    sigma=st.floats(1.0, 30.0),
    factor=st.floats(2.0, 4.0),
)
def test_more_noise_scores_worse(size, seed, offset, contrast, sigma, factor):
    """The same noise pattern, scaled up, lowers every plane's SSIM and PSNR (clipping included)."""
    rng = np.random.default_rng(seed)
    shapes = plane_shapes(*size)
    clean = [smooth_plane(rng, *shape, offset=offset, contrast=contrast) for shape in shapes]
    pattern = [rng.standard_normal(shape) for shape in shapes]
    a = to_frame(clean)
    planes = [p.astype(np.float64) for p in (a.y, a.u, a.v)]
    b_small = to_frame([p + sigma * n for p, n in zip(planes, pattern, strict=True)])
    b_large = to_frame([p + factor * sigma * n for p, n in zip(planes, pattern, strict=True)])

    ssim_small, ssim_large = ssim_planes(a, b_small), ssim_planes(a, b_large)
    psnr_small, psnr_large = psnr_planes(a, b_small), psnr_planes(a, b_large)
    assert all(s > big for s, big in zip(ssim_small, ssim_large, strict=True)), (ssim_small, ssim_large)
    assert all(s > big for s, big in zip(psnr_small, psnr_large, strict=True)), (psnr_small, psnr_large)
