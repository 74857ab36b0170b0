"""Checkpoint hashing: :func:`h3bench.host.checkpoint.content_identity` against ``sha256sum`` over the same files.

Run as ``.venv/bin/python benchmarks/bench_checkpoint.py [--files 8] [--mib 256] [--rounds 3] [--workdir DIR]``.

The files are random bytes in the shape of a sharded checkpoint (``--files``
shards of ``--mib`` MiB each), written once and read from the page cache by
both sides, so the comparison is of hashing, not of the disk. Each round
runs ``sha256sum`` over every file and ``content_identity`` with an empty
cache, alternating which goes first; the medians give the throughput ratio
(target ≥ 0.8x sha256sum). Both sides' hashes must agree. Then a repeat run
with the cache filled shows what a second campaign on the same checkpoint pays.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from h3bench.host.checkpoint import content_identity

TARGET = 0.8


def make_files(root: Path, files: int, mib: int) -> list[Path]:
    paths = []
    for i in range(files):
        path = root / f"model-{i + 1:05d}-of-{files:05d}.safetensors"
        if not path.exists() or path.stat().st_size != mib << 20:
            with path.open("wb") as handle:
                for _ in range(mib):
                    handle.write(os.urandom(1 << 20))
        paths.append(path)
    return paths


def sha256sum(paths: list[Path]) -> tuple[float, dict[str, str]]:
    t0 = time.perf_counter()
    out = subprocess.run(["sha256sum", *map(str, paths)], capture_output=True, text=True, check=True).stdout
    seconds = time.perf_counter() - t0
    return seconds, {Path(line.split(None, 1)[1]).name: line.split()[0] for line in out.splitlines()}


def ours(root: Path, cache: Path) -> tuple[float, dict[str, str]]:
    cache.unlink(missing_ok=True)
    t0 = time.perf_counter()
    identity = content_identity(root, cache=cache, progress=None)
    return time.perf_counter() - t0, {f.name: f.sha256 for f in identity.files}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="h3bench-bench-checkpoint-"))
    model = work / "model"
    model.mkdir(parents=True, exist_ok=True)
    paths = make_files(model, args.files, args.mib)
    total = sum(p.stat().st_size for p in paths)
    cache = work / "hash-cache.json"
    print(f"{len(paths)} files, {total / 2**30:.2f} GiB; load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs")
    sha256sum(paths)  # warm the page cache
    theirs_s, ours_s = [], []
    for round_ in range(args.rounds):
        sides = [("sha256sum", lambda: sha256sum(paths)), ("h3bench", lambda: ours(model, cache))]
        for name, run in sides if round_ % 2 == 0 else sides[::-1]:
            seconds, hashes = run()
            (theirs_s if name == "sha256sum" else ours_s).append(seconds)
            if name == "sha256sum":
                reference = hashes
            elif hashes != reference:
                print("the hashes disagree with sha256sum", file=sys.stderr)
                return 1
    theirs, mine = statistics.median(theirs_s), statistics.median(ours_s)
    ratio = theirs / mine  # throughput ratio: ours over sha256sum's
    print(f"sha256sum        median {theirs:7.3f} s  {total / theirs / 2**30:6.2f} GiB/s")
    print(f"content_identity median {mine:7.3f} s  {total / mine / 2**30:6.2f} GiB/s")
    print(f"throughput ratio {ratio:.2f}x sha256sum (target >= {TARGET}x): {'OK' if ratio >= TARGET else 'BELOW TARGET'}")
    t0 = time.perf_counter()
    again = content_identity(model, cache=cache, progress=None)
    print(f"repeat run with the cache: {time.perf_counter() - t0:.4f} s, {again.hashed_bytes} bytes read")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if args.workdir is None:
        shutil.rmtree(work)
    return 0 if ratio >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
