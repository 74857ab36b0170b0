"""LPIPS throughput against the plain per-frame ``lpips`` loop, and peak RSS of a full pass.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_lpips.py [--frames 24] [--repeats 2] [--rss-frames 362]

Both sides decode the same 1344x768 H.264 pair with ``h3bench.media.iter_rgb_frames``
and hold the same weights. The reference is what vLLM-Omni's gate runs: ``lpips.LPIPS(net="alex")``
called frame by frame under ``torch.no_grad`` on ``lpips.im2tensor`` of each frame. Runs
alternate (reference, ours, reference, ours, ...) and the best of each is compared.

Weights come from ``$H3BENCH_LPIPS_DIR`` (checked against fixtures/lpips_pins.toml) when it
is set; otherwise a seeded random AlexNet with the real file's keys and shapes stands in (the
cost does not depend on the weight values). The peak-RSS pass runs in a fresh subprocess over
``--rss-frames`` frames (362 = the 15 s workload) and includes weight authentication.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import lpips
import numpy as np
import torch
import torchvision

# Run as a script, the repository root is not on sys.path; the frame generator lives there.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from h3bench import media
from h3bench.metrics import lpips as h3lpips
from tests_unit import mediagen

WIDTH, HEIGHT = 1344, 768
UNIQUE_FRAMES = 24  # longer clips cycle these; LPIPS cost does not depend on content

# The child reports its own high-water mark. VmHWM belongs to the post-exec address space;
# ru_maxrss would also count the parent's pages that a vfork-ed child held before exec.
RSS_CHILD = """
import sys
from h3bench.metrics import lpips as h3lpips
weights = h3lpips.authenticate_weights(sys.argv[1], pins=sys.argv[2])
result = h3lpips.lpips_video(sys.argv[3], sys.argv[4], weights=weights)
with open("/proc/self/status") as status:
    hwm_kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print(hwm_kib, result.frames, result.mean)
"""


def stand_in_weights(root: Path) -> tuple[Path, Path]:
    """A seeded random backbone shaped like alexnet-owt, the wheel's heads, and their pins."""
    torch.manual_seed(0)
    backbone = root / "alexnet-owt-7be5be79.pth"
    torch.save(torchvision.models.alexnet(weights=None).state_dict(), backbone)
    heads = root / "alex.pth"
    shutil.copyfile(Path(lpips.__file__).parent / "weights" / "v0.1" / "alex.pth", heads)
    pins = root / "pins.toml"
    pins.write_text(
        "".join(
            f'[{role}]\nfile = "{path.name}"\nsha256 = "{hashlib.sha256(path.read_bytes()).hexdigest()}"\n'
            f"size = {path.stat().st_size}\n"
            for role, path in (("backbone", backbone), ("heads", heads))
        ),
        encoding="utf-8",
    )
    return root, pins


def write_pair(root: Path, frames: int) -> tuple[Path, Path]:
    clean = list(mediagen.textured_frames(UNIQUE_FRAMES, WIDTH, HEIGHT, seed=0))
    noisy = list(mediagen.textured_frames(UNIQUE_FRAMES, WIDTH, HEIGHT, seed=0, noise=6.0))
    baseline = media.write_mp4(root / f"base{frames}.mp4", itertools.islice(itertools.cycle(clean), frames), None)
    candidate = media.write_mp4(root / f"cand{frames}.mp4", itertools.islice(itertools.cycle(noisy), frames), None)
    return baseline, candidate


def reference_model(weights: h3lpips.LpipsWeights) -> lpips.LPIPS:
    """lpips's LPIPS holding the same authenticated weights (nothing downloaded)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torchvision: `pretrained` is deprecated
        model = lpips.LPIPS(pretrained=False, net="alex", version="0.1", pnet_rand=True, verbose=False)
    state = model.state_dict()
    state.update(weights.heads)
    state.update(
        {
            f"net.{name}.{key}": weights.features[key]
            for name, block in model.net.named_children()
            for key in block.state_dict()
        }
    )
    model.load_state_dict(state, strict=True)
    return model.eval()


def reference_loop(model: lpips.LPIPS, baseline: Path, candidate: Path) -> np.ndarray:
    scores = []
    for a, b in zip(media.iter_rgb_frames(baseline), media.iter_rgb_frames(candidate), strict=True):
        with torch.no_grad():
            scores.append(model(lpips.im2tensor(a), lpips.im2tensor(b)).item())
    return np.array(scores)


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def peak_rss_mib(weight_dir: Path, pins: Path, baseline: Path, candidate: Path) -> tuple[float, str]:
    """Peak RSS of a fresh process that authenticates the weights and scores the pair."""
    proc = subprocess.run(
        [sys.executable, "-c", RSS_CHILD, str(weight_dir), str(pins), str(baseline), str(candidate)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    hwm_kib, frames, mean = proc.stdout.split()
    return int(hwm_kib) / 1024, f"{frames} frames, mean LPIPS {float(mean):.6f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=24, help="frames in the throughput pair")
    parser.add_argument("--repeats", type=int, default=2, help="alternating runs per side")
    parser.add_argument("--rss-frames", type=int, default=362, help="frames in the peak-RSS pass (0 skips it)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench_lpips_") as tmp:
        root = Path(tmp)
        if os.environ.get(h3lpips.DIR_ENV):
            weight_dir, pins, origin = Path(os.environ[h3lpips.DIR_ENV]), h3lpips.DEFAULT_PINS, "real (pinned)"
        else:
            (root / "weights").mkdir()
            weight_dir, pins = stand_in_weights(root / "weights")
            origin = "seeded random stand-in"
        weights = h3lpips.authenticate_weights(weight_dir, pins=pins)
        baseline, candidate = write_pair(root, args.frames)
        model = reference_model(weights)

        ref_times, our_times = [], []
        for _ in range(args.repeats):
            seconds, expected = timed(lambda: reference_loop(model, baseline, candidate))
            ref_times.append(seconds)
            seconds, result = timed(lambda: h3lpips.lpips_video(baseline, candidate, weights=weights))
            our_times.append(seconds)
        ref_best, our_best = min(ref_times), min(our_times)
        deviation = float(np.max(np.abs(result.per_frame - expected)))

        print(f"LPIPS alex v0.1, {WIDTH}x{HEIGHT}, {args.frames} frames, weights: {origin}, "
              f"torch threads {torch.get_num_threads()}, best of {args.repeats}, decode included")
        print(f"{'':28}{'lpips loop':>12}{'h3bench':>12}")
        print(f"{'seconds':28}{ref_best:12.2f}{our_best:12.2f}")
        print(f"{'ms / frame pair':28}{1e3 * ref_best / args.frames:12.1f}{1e3 * our_best / args.frames:12.1f}")
        print(f"{'mean LPIPS':28}{expected.mean():12.6f}{result.mean:12.6f}")
        print(f"speed-up {ref_best / our_best:.2f}x; max |per-frame difference| {deviation:.2e}")

        if args.rss_frames:
            rss_base, rss_cand = write_pair(root, args.rss_frames)
            seconds, (rss, out) = timed(lambda: peak_rss_mib(weight_dir, pins, rss_base, rss_cand))
            print(f"full pass in a fresh process (import and authentication included): "
                  f"peak RSS {rss:.0f} MiB, {seconds:.0f} s, {out}")


if __name__ == "__main__":
    main()
