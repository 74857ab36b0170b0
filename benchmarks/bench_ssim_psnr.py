"""compare_video against what upstream runs: ffmpeg's ssim filter, then its psnr filter.

Run as ``.venv/bin/python benchmarks/bench_ssim_psnr.py [--rounds N]``.

The pair is the 15 s workload's shape (1344x768, 24 FPS, 362 frames, H.264
crf 18 yuv420p), made by ffmpeg itself and cached under /tmp: the baseline is
lavfi ``testsrc2``, the candidate the same source slightly blurred with
temporal noise (SSIM ≈ 0.98, PSNR ≈ 39 dB, near the gates). Each round times,
back to back: the two ffmpeg runs, ``compare_video`` in this process, and
``compare_video`` in a fresh interpreter (imports and the kernel's load
included, like ffmpeg's own process start). Medians are reported, with the
values of both tools side by side. CPU seconds (all threads) are printed too:
on a shared 2-core machine they are steadier than wall time.
"""

from __future__ import annotations

import argparse
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import imageio_ffmpeg

from h3bench.metrics.ssim_psnr import compare_video

CACHE = Path("/tmp/h3bench-bench-ssim-psnr")
SOURCE = "testsrc2=size=1344x768:rate=24"
FRAMES = 362
CANDIDATE_FILTER = "gblur=sigma=0.6,noise=alls=2:allf=t"
FRESH_PROCESS = (
    "import sys; from h3bench.metrics.ssim_psnr import compare_video; "
    "m = compare_video(sys.argv[1], sys.argv[2]); print(m.ssim, m.psnr_db)"
)


def make_pair(ffmpeg: str) -> tuple[Path, Path]:
    """Encode the baseline and candidate once; later runs reuse them."""
    CACHE.mkdir(parents=True, exist_ok=True)
    pair = []
    for name, source in (("baseline", SOURCE), ("candidate", f"{SOURCE},{CANDIDATE_FILTER}")):
        path = CACHE / f"{name}-1344x768-{FRAMES}f-crf18.mp4"
        if not path.exists():
            partial = path.with_suffix(".partial.mp4")
            subprocess.run(
                [ffmpeg, "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i", source,
                 "-frames:v", str(FRAMES), "-c:v", "libx264", "-crf", "18", "-pix_fmt", "yuv420p", str(partial)],
                check=True,
            )  # fmt: skip
            partial.rename(path)
        pair.append(path)
    return pair[0], pair[1]


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_ffmpeg_filter(ffmpeg: str, baseline: Path, candidate: Path, name: str) -> tuple[float, float, str]:
    """Wall and CPU seconds of one upstream-style ffmpeg run, and its log."""
    start, cpu = time.perf_counter(), children_cpu()
    proc = subprocess.run(
        [ffmpeg, "-hide_banner", "-nostats", "-i", str(baseline), "-i", str(candidate),
         "-lavfi", f"[0:v][1:v]{name}", "-f", "null", "-"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return time.perf_counter() - start, children_cpu() - cpu, proc.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (default 3)")
    args = parser.parse_args()
    ffmpeg = imageio_ffmpeg.get_ffmpeg_exe()
    baseline, candidate = make_pair(ffmpeg)

    compare_video(baseline, candidate)  # compiles or loads the kernel, warms the page cache
    wall: dict[str, list[float]] = {"ffmpeg": [], "ours": [], "fresh": []}
    cpu: dict[str, list[float]] = {"ffmpeg": [], "ours": [], "fresh": []}
    for _ in range(args.rounds):
        ssim_s, ssim_cpu, ssim_log = run_ffmpeg_filter(ffmpeg, baseline, candidate, "ssim")
        psnr_s, psnr_cpu, psnr_log = run_ffmpeg_filter(ffmpeg, baseline, candidate, "psnr")
        wall["ffmpeg"].append(ssim_s + psnr_s)
        cpu["ffmpeg"].append(ssim_cpu + psnr_cpu)
        start, start_cpu = time.perf_counter(), time.process_time()
        metrics = compare_video(baseline, candidate)
        wall["ours"].append(time.perf_counter() - start)
        cpu["ours"].append(time.process_time() - start_cpu)
        start, start_cpu = time.perf_counter(), children_cpu()
        subprocess.run([sys.executable, "-c", FRESH_PROCESS, str(baseline), str(candidate)], check=True, capture_output=True)
        wall["fresh"].append(time.perf_counter() - start)
        cpu["fresh"].append(children_cpu() - start_cpu)

    ff_ssim = float(re.search(r"All:(\S+)", ssim_log).group(1))
    ff_psnr = float(re.search(r"average:(\S+)", psnr_log).group(1))
    med = {key: statistics.median(values) for key, values in wall.items()}
    med_cpu = {key: statistics.median(values) for key, values in cpu.items()}
    print(f"pair: {baseline.name} vs {candidate.name}, {metrics.frames} frames, {args.rounds} rounds, medians")
    labels = {
        "ffmpeg": "ffmpeg ssim run + psnr run",
        "ours": "compare_video (in process)",
        "fresh": "compare_video (fresh process)",
    }
    for key, label in labels.items():
        rounds = ", ".join(f"{x:.2f}" for x in wall[key])
        print(f"{label:31s} {med[key]:6.2f} s wall  {med_cpu[key]:6.2f} s CPU   (wall per round: {rounds})")
    for key in ("ours", "fresh"):
        print(
            f"ratio {labels[key]:31s} {med[key] / med['ffmpeg']:5.2f}x wall, "
            f"{med_cpu[key] / med_cpu['ffmpeg']:.2f}x CPU (target <= 1.00x wall)"
        )
    print(f"SSIM  ffmpeg {ff_ssim:.6f}  ours {metrics.ssim:.6f}  |diff| {abs(ff_ssim - metrics.ssim):.1e}")
    print(f"PSNR  ffmpeg {ff_psnr:.6f}  ours {metrics.psnr_db:.6f}  |diff| {abs(ff_psnr - metrics.psnr_db):.1e} dB")
    agree = abs(ff_ssim - metrics.ssim) <= 1e-6 and abs(ff_psnr - metrics.psnr_db) <= 1e-5
    print("values agree with ffmpeg to its printed precision" if agree else "VALUES DISAGREE WITH FFMPEG")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
