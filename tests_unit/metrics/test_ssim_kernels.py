"""The two SSIM and PSNR kernels: the compiled one that installs build, and numba's for installs without a compiler.

Both must give the same bits on any plane, so a result never depends on how
h3bench was installed; test_ssim_psnr.py holds the active kernel to ffmpeg,
and one test here holds numba's to ffmpeg too.
"""

from __future__ import annotations

import builtins
import shutil
import sysconfig

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h3bench.metrics import ssim_numba, ssim_psnr
from tests_unit.metrics.test_ssim_psnr import assert_matches_ffmpeg, ffmpeg_metrics

try:
    from h3bench.metrics import _ssim_kernel as compiled
except ImportError:  # an install without a C compiler; the test below says whether that is expected
    compiled = None

needs_compiled = pytest.mark.skipif(compiled is None, reason="this install has no compiled kernel")


def planes(draw, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Two uint8 planes: random, flat at either extreme, or the second a noisy copy; often strided views."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(["random", "noisy", "black", "white", "equal"]))
    pad = draw(st.sampled_from([0, 0, 3, 64]))  # decoded planes are views into rows padded to line_size
    a = rng.integers(0, 256, (height, width + pad), dtype=np.uint8)[:, :width]
    if kind == "random":
        b = rng.integers(0, 256, (height, width + pad), dtype=np.uint8)[:, :width]
    elif kind == "noisy":
        b = np.clip(a + rng.normal(0, draw(st.floats(0.5, 80.0)), a.shape), 0, 255).astype(np.uint8)
    elif kind in ("black", "white"):
        a = np.full((height, width), 0 if kind == "black" else 255, np.uint8)
        b = a.copy()
        b[rng.integers(0, height), rng.integers(0, width)] ^= 0xFF
    else:
        b = a.copy()
    return a, b


@st.composite
def plane_pairs(draw) -> tuple[np.ndarray, np.ndarray]:
    return planes(draw, draw(st.integers(8, 70)), draw(st.integers(8, 90)))


@needs_compiled
@settings(max_examples=120, deadline=None)
@given(pair=plane_pairs())
def test_both_kernels_give_the_same_bits(pair):
    a, b = pair
    assert compiled.plane_stats(a, b) == ssim_numba.plane_stats(a, b)


@needs_compiled
def test_both_kernels_give_the_same_bits_on_a_full_size_frame():
    rng = np.random.default_rng(7)
    for height, width in ((768, 1344), (384, 672)):  # H3's Y and chroma planes
        a = rng.integers(0, 256, (height, width), dtype=np.uint8)
        b = np.clip(a + rng.normal(0, 6, a.shape), 0, 255).astype(np.uint8)
        ssim, sse = compiled.plane_stats(a, b)
        assert (ssim, sse) == ssim_numba.plane_stats(a, b)
        assert sse == int(np.sum((a.astype(np.int64) - b) ** 2))
        assert 0.0 < ssim < 1.0


@needs_compiled
def test_the_compiled_kernel_refuses_what_it_cannot_score():
    a = np.zeros((16, 16), np.uint8)
    with pytest.raises(ValueError, match="differ in shape"):
        compiled.plane_stats(a, np.zeros((16, 17), np.uint8))
    with pytest.raises(ValueError, match="8x8 window"):
        compiled.plane_stats(a[:7], a[:7])
    with pytest.raises(ValueError, match="2-D uint8"):
        compiled.plane_stats(a.astype(np.uint16), a.astype(np.uint16))
    with pytest.raises(ValueError, match="contiguous rows"):
        compiled.plane_stats(a[:, ::2], a[:, ::2])
    with pytest.raises(TypeError):
        compiled.plane_stats("not a plane", a)


def test_an_install_built_with_a_compiler_scores_with_the_compiled_kernel():
    # The install (./dev, pip) builds the extension wherever a C compiler is found; only then is it required.
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}) on this host: numba's kernel is the expected one")
    assert ssim_psnr.KERNEL == "compiled"


def test_without_the_compiled_kernel_numbas_is_chosen(monkeypatch):
    real_import = builtins.__import__

    def no_extension(name, globals=None, locals=None, fromlist=(), level=0):
        if name.endswith("_ssim_kernel"):
            raise ImportError(f"No module named {name!r} (built without a C compiler)")
        return real_import(name, globals, locals, fromlist, level)

    monkeypatch.setattr(builtins, "__import__", no_extension)
    name, kernel = ssim_psnr._kernel()
    assert name == "numba" and kernel is ssim_numba.plane_stats


def test_numbas_kernel_matches_ffmpeg_too(make_mp4, ffmpeg_exe, tmp_path, monkeypatch):
    kw = dict(frames=8, width=250, height=142, seed=3, audio_samples=None)
    baseline, candidate = make_mp4("baseline.mp4", **kw), make_mp4("candidate.mp4", noise=9.0, **kw)
    monkeypatch.setattr(ssim_psnr, "_plane_stats", ssim_numba.plane_stats)
    assert_matches_ffmpeg(ssim_psnr.compare_video(baseline, candidate),
                          ffmpeg_metrics(ffmpeg_exe, baseline, candidate, tmp_path))
