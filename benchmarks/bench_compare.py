"""``h3bench compare`` end to end: against ffmpeg's ssim and psnr runs, and its peak RSS with LPIPS.

Run as ``.venv/bin/python benchmarks/bench_compare.py [--rounds N] [--workdir DIR] [--keep]``.

The pair is the 15 s workload's shape, made by ffmpeg: 1344x768, 24 FPS,
362 frames, H.264 crf 18 yuv420p, with a stereo 32 kHz AAC track of 15.075 s
(REFERENCE §3's 800·round(40·362/24) samples). The baseline is lavfi
``testsrc2`` and two sines; the candidate adds temporal noise to the video
and a little uniform noise to the audio. The pair is cached in ``--workdir``
(a given directory is reused and kept; the default fresh temporary one is
removed at the end unless ``--keep``).

1. **Wall time against upstream** (issue 2, target ≤ 1.00x): the CLI
   ``h3bench compare A B --no-lpips --json`` in a fresh interpreter, beside
   what upstream's accuracy test runs, ``ffmpeg -i A -i B -lavfi
   "[0:v][1:v]ssim" -f null -`` and then the same with ``psnr``. Each side
   runs once untimed (page cache, cached JIT), then ``--rounds`` rounds
   interleave them, alternating which side goes first. Medians are
   reported; CPU seconds of the children too, since wall time on a shared
   2-core machine is noisy. The SSIM ``All:`` and PSNR ``average:`` that
   ffmpeg prints must agree with the CLI's JSON (|ΔSSIM| ≤ 1e-4,
   |ΔPSNR| ≤ 0.01 dB); the script exits 1 if they do not.
2. **Peak RSS of a full compare** (target ≤ 1.5 GB): ``h3bench compare A B
   --json --lpips-dir DIR`` with ``$H3BENCH_LPIPS_PINS`` set, in a fresh
   interpreter that reports its own VmHWM. The real AlexNet backbone is not
   available offline, so a seeded random torchvision AlexNet with the same
   keys and shapes stands in, pinned in a pins file beside it (memory and
   time do not depend on the weight values); the heads are the lpips
   wheel's ``alex.pth`` under the repository's pin.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import imageio_ffmpeg
import torch
import torchvision

from h3bench.metrics import lpips as h3lpips

FRAMES = 362
AUDIO_SECONDS = 800 * round(40 * FRAMES / 24) / 32_000  # 15.075 s
VIDEO = "testsrc2=size=1344x768:rate=24"
AUDIO = "aevalsrc=0.5*sin(2*PI*440*t){noise0}|0.5*sin(2*PI*660*t){noise1}:s=32000:d={seconds}"
CANDIDATE_VIDEO = ",noise=alls=3:allf=t"
CANDIDATE_AUDIO = {"noise0": "+0.01*(2*random(0)-1)", "noise1": "+0.01*(2*random(1)-1)"}
SSIM_TOLERANCE, PSNR_TOLERANCE_DB = 1e-4, 0.01
RSS_TARGET_MIB = 1.5 * 1024

# The child reports its own high-water mark: VmHWM belongs to the post-exec address space,
# while RUSAGE_CHILDREN's ru_maxrss would also count the parent's pages held before exec.
PEAK_RSS_CHILD = """
import sys
from h3bench.cli import main
code = main(sys.argv[1:])
sys.stdout.flush()
with open("/proc/self/status") as status:
    hwm_kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print(f"VmHWM {hwm_kib}", file=sys.stderr)
sys.exit(code)
"""
# compare's verdicts (0 PASS, 1 FAIL, 3 INCONCLUSIVE) are all a completed run; 2 is a usage error.
VERDICT_EXITS = (0, 1, 3)


@dataclass(frozen=True)
class Run:
    """One timed child process: wall seconds, CPU seconds (user + system) and its output."""

    wall_s: float
    cpu_s: float
    stdout: str
    stderr: str


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_timed(argv: list[str], *, ok: tuple[int, ...] = (0,), env: dict[str, str] | None = None) -> Run:
    """Run ``argv`` to completion; a return code outside ``ok`` stops the benchmark with its log."""
    start, cpu = time.perf_counter(), children_cpu()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    wall, cpu = time.perf_counter() - start, children_cpu() - cpu
    if proc.returncode not in ok:
        sys.exit(f"{' '.join(argv)}\nexited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return Run(wall, cpu, proc.stdout, proc.stderr)


def make_pair(ffmpeg: str, workdir: Path) -> tuple[Path, Path]:
    """Encode the baseline and candidate once; a reused ``workdir`` keeps them."""
    pair = []
    for name, video, audio in (
        ("baseline", VIDEO, AUDIO.format(noise0="", noise1="", seconds=AUDIO_SECONDS)),
        ("candidate", VIDEO + CANDIDATE_VIDEO, AUDIO.format(**CANDIDATE_AUDIO, seconds=AUDIO_SECONDS)),
    ):
        path = workdir / f"{name}-1344x768-{FRAMES}f.mp4"
        if not path.exists():
            partial = path.with_suffix(".partial.mp4")
            run_timed(
                [ffmpeg, "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i", video,
                 "-f", "lavfi", "-i", audio, "-frames:v", str(FRAMES),
                 "-c:v", "libx264", "-crf", "18", "-pix_fmt", "yuv420p",
                 "-c:a", "aac", "-ac", "2", "-ar", "32000", "-b:a", "128k", str(partial)]
            )  # fmt: skip
            partial.rename(path)
        pair.append(path)
    return pair[0], pair[1]


def stand_in_weights(directory: Path) -> Path:
    """A seeded random AlexNet backbone under the real file name, and a pins file for it.

    As in tests_unit/conftest.py's ``lpips_test_weights``: the backbone is
    pinned by its own hash, the heads keep the repository's real pin (they
    are found in the lpips wheel). Returns the pins file.
    """
    real = tomllib.loads(h3lpips.DEFAULT_PINS.read_text(encoding="utf-8"))
    backbone = directory / real["backbone"]["file"]
    if not backbone.exists():
        torch.manual_seed(0)
        torch.save(torchvision.models.alexnet(weights=None).state_dict(), backbone)
    data = backbone.read_bytes()
    heads = real["heads"]
    pins = directory / "pins.toml"
    pins.write_text(
        f'[backbone]\nfile = "{backbone.name}"\nsha256 = "{hashlib.sha256(data).hexdigest()}"\nsize = {len(data)}\n'
        f'[heads]\nfile = "{heads["file"]}"\nsha256 = "{heads["sha256"]}"\nsize = {heads["size"]}\n',
        encoding="utf-8",
    )
    return pins


def ffmpeg_value(log: str, pattern: str) -> float:
    return float(re.search(pattern, log).group(1))


def target(value: float, limit: float, shown: str) -> str:
    return f"<= {shown} {'met' if value <= limit else 'MISSED'}"


def spread(values: list[float]) -> str:
    return ", ".join(f"{x:.2f}" for x in values)


def load_text() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min)"


def ffmpeg_runs(ffmpeg: str, pair: list[str]) -> list[Run]:
    """Upstream's accuracy test: one ffmpeg run with the ssim filter, then one with psnr."""
    return [
        run_timed([ffmpeg, "-hide_banner", "-nostats", "-i", pair[0], "-i", pair[1],
                   "-lavfi", f"[0:v][1:v]{name}", "-f", "null", "-"])
        for name in ("ssim", "psnr")
    ]


def peak_rss_run(pair: list[str], workdir: Path, env: dict[str, str]) -> tuple[Run, float, dict]:
    """A full compare (LPIPS included) in a fresh process: the run, its VmHWM in MiB, its JSON."""
    weights = workdir / "lpips-weights"
    weights.mkdir(exist_ok=True)
    pins = stand_in_weights(weights)
    run = run_timed(
        [sys.executable, "-c", PEAK_RSS_CHILD, "compare", *pair, "--json", "--lpips-dir", str(weights)],
        ok=VERDICT_EXITS,
        env={**env, h3lpips.PINS_ENV: str(pins)},
    )
    peak_mib = int(re.search(r"^VmHWM (\d+)$", run.stderr, re.MULTILINE).group(1)) / 1024
    return run, peak_mib, json.loads(run.stdout)


def benchmark(workdir: Path, rounds: int) -> int:
    load_before = load_text()
    ffmpeg = imageio_ffmpeg.get_ffmpeg_exe()
    baseline, candidate = make_pair(ffmpeg, workdir)
    pair = [str(baseline), str(candidate)]
    # Only the arguments given below choose the weights, never the caller's environment.
    env = {k: v for k, v in os.environ.items() if k not in (h3lpips.DIR_ENV, h3lpips.PINS_ENV)}
    ours = [sys.executable, "-m", "h3bench.cli", "compare", *pair, "--no-lpips", "--json"]

    # Untimed: fill the page cache and any cached JIT, so every timed round starts alike.
    ffmpeg_runs(ffmpeg, pair)
    run_timed(ours, ok=VERDICT_EXITS, env=env)
    wall: dict[str, list[float]] = {"ffmpeg": [], "h3bench": []}
    cpu: dict[str, list[float]] = {"ffmpeg": [], "h3bench": []}
    for index in range(rounds):
        # Alternate the order so drift in the machine's load does not favour one side.
        for side in ("ffmpeg", "h3bench") if index % 2 == 0 else ("h3bench", "ffmpeg"):
            if side == "ffmpeg":
                ssim_run, psnr_run = ffmpeg_runs(ffmpeg, pair)
                wall[side].append(ssim_run.wall_s + psnr_run.wall_s)
                cpu[side].append(ssim_run.cpu_s + psnr_run.cpu_s)
            else:
                our_run = run_timed(ours, ok=VERDICT_EXITS, env=env)
                wall[side].append(our_run.wall_s)
                cpu[side].append(our_run.cpu_s)
    ff_ssim = ffmpeg_value(ssim_run.stderr, r"All:(\S+)")
    ff_psnr = ffmpeg_value(psnr_run.stderr, r"average:(\S+)")
    report = json.loads(our_run.stdout)
    our_ssim, our_psnr = float(report["ssim"]), float(report["psnr_db"])

    lpips_run, peak_mib, full = peak_rss_run(pair, workdir, env)
    lpips_check = next(check for check in full["checks"] if check["name"] == "lpips")
    if lpips_check["status"] == "not_measured":
        sys.exit(f"LPIPS was not measured, so the peak RSS is not a full compare's: {lpips_check['detail']}")
    load_after = load_text()

    med = {side: statistics.median(values) for side, values in wall.items()}
    med_cpu = {side: statistics.median(values) for side, values in cpu.items()}
    ratio = med["h3bench"] / med["ffmpeg"]
    d_ssim, d_psnr = abs(ff_ssim - our_ssim), abs(ff_psnr - our_psnr)
    agree = d_ssim <= SSIM_TOLERANCE and d_psnr <= PSNR_TOLERANCE_DB

    rows = [
        ("", "h3bench", "ffmpeg", "h3bench/ffmpeg", "target"),
        ("compare --no-lpips, wall s", f"{med['h3bench']:.2f}", f"{med['ffmpeg']:.2f}", f"{ratio:.2f}x",
         target(ratio, 1.0, "1.00x")),
        ("compare --no-lpips, CPU s", f"{med_cpu['h3bench']:.2f}", f"{med_cpu['ffmpeg']:.2f}",
         f"{med_cpu['h3bench'] / med_cpu['ffmpeg']:.2f}x", ""),
        ("SSIM", f"{our_ssim:.6f}", f"{ff_ssim:.6f}", f"|d| {d_ssim:.1e}", target(d_ssim, SSIM_TOLERANCE, "1e-4")),
        ("PSNR dB", f"{our_psnr:.6f}", f"{ff_psnr:.6f}", f"|d| {d_psnr:.1e}",
         target(d_psnr, PSNR_TOLERANCE_DB, "0.01 dB")),
        ("compare with LPIPS, peak RSS MiB", f"{peak_mib:.0f}", "", "",
         target(peak_mib, RSS_TARGET_MIB, "1536 MiB (1.5 GiB)")),
        ("compare with LPIPS, wall s", f"{lpips_run.wall_s:.1f}", "", "", ""),
        ("compare with LPIPS, CPU s", f"{lpips_run.cpu_s:.1f}", "", "", ""),
    ]  # fmt: skip
    print(f"pair: {baseline.name} vs {candidate.name} in {workdir}")
    print(f"      1344x768, 24 FPS, {FRAMES} frames, H.264 crf 18; stereo 32 kHz AAC, {AUDIO_SECONDS} s")
    print(f"machine: {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}; "
          f"{load_before} before, {load_after} after")  # fmt: skip
    print(f"--no-lpips: medians of {rounds} interleaved rounds after an untimed warm-up; ffmpeg = ssim run + psnr run")
    print(f"      wall per round: h3bench {spread(wall['h3bench'])}; ffmpeg {spread(wall['ffmpeg'])}")
    print(f"LPIPS run: seeded random stand-in backbone; lpips {lpips_check['value']}, verdict {full['verdict']}\n")
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        # Labels and targets read left to right; numbers line up on the right.
        cells = [cell.ljust(w) if i in (0, 4) else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))]
        print("  ".join(cells))
    print(f"\nSSIM/PSNR values {'agree with ffmpeg' if agree else 'DISAGREE WITH FFMPEG'}")
    return 0 if agree else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (default 3)")
    parser.add_argument("--workdir", type=Path, help="cache for the pair and weights (default: a fresh temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the default temporary workdir")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_compare_"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        return benchmark(workdir, args.rounds)
    finally:
        if args.workdir is None and not args.keep:
            shutil.rmtree(workdir)
        else:
            print(f"workdir kept: {workdir}")


if __name__ == "__main__":
    sys.exit(main())
