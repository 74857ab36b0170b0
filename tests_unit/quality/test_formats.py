"""Format checks a decoder cannot see: pixel format, bit depth, display matrix, aspect, colour tags, audio layout.

Each pair is made by the ffmpeg of the imageio-ffmpeg wheel from the same
synthetic source, differing only in the property under test (8 frames of
96x64 video, 0.34 s of a 440 Hz tone). A rotated file is the unrotated file
remuxed with a display matrix, so its decoded planes are the same bytes.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from h3bench import media, quality
from h3bench.media.tags import tag_name
from h3bench.outcome import Outcome
from h3bench.quality import Status

VIDEO_METRICS = ["ssim", "psnr_db", "lpips"]
AUDIO_METRICS = ["audio_spectral_cosine", "audio_rms_ratio"]
ROTATED = ["rotate"]  # not an ffmpeg option: remux with -display_rotation 90
BT601 = ["-vf", "setparams=colorspace=smpte170m:color_primaries=smpte170m:color_trc=smpte170m"]  # range tv


def _tags(change: str) -> list[str]:
    """The BT.601 tags with one changed (a file with any colour tag has range tv, so the pairs start tagged)."""
    return [BT601[0], f"{BT601[1]}:{change}"]


CASES = {
    # the check: (baseline options, candidate options, words of the failure)
    "pixel_format": ([], ["-pix_fmt", "yuv444p"], "pixel formats differ: baseline yuv420p, candidate yuv444p"),
    "bit_depth": ([], ["-pix_fmt", "yuv420p10le"], "bit depths differ: baseline 8, candidate 10"),
    "display_matrix": ([], ROTATED, "display matrices differ: baseline none, candidate rotated 90 degrees"),
    "sample_aspect_ratio": ([], ["-vf", "setsar=2"], "sample aspect ratios differ: baseline 1/1, candidate 2/1"),
    "color_range": (BT601, _tags("range=pc"), "colour ranges differ: baseline tv, candidate pc"),
    "color_space": (BT601, _tags("colorspace=bt709"), "colour matrices differ: baseline smpte170m, candidate bt709"),
    "color_primaries": (BT601, _tags("color_primaries=bt709"),
                        "colour primaries differ: baseline smpte170m, candidate bt709"),
    "color_transfer": (BT601, _tags("color_trc=bt709"),
                       "colour transfer characteristics differ: baseline smpte170m, candidate bt709"),
    "audio_sample_format": ([], ["-c:a", "alac"], "decoded audio sample formats differ: baseline fltp, candidate s16p"),
    "audio_channel_layout": (["-af", "pan=3.0|c0=c0|c1=c0|c2=c0"], ["-af", "pan=2.1|c0=c0|c1=c0|c2=c0"],
                             "audio channel layouts differ: baseline 3.0, candidate 2.1"),
}  # fmt: skip
ALSO_FAILING = {  # yuv420p10le; full range decodes as yuvj420p; ALAC has no AAC priming and padding
    "bit_depth": ["pixel_format"], "color_range": ["pixel_format"], "audio_sample_format": ["audio_samples"]}
UPSTREAM_NOTE = "the baseline is not what upstream's muxer writes"
NOT_UPSTREAM = {"pixel_format": "(yuv420p)", "bit_depth": "(8)", "display_matrix": "(none)",
                "audio_sample_format": "(fltp)", "audio_channel_layout": "(stereo)"}  # fmt: skip


@pytest.fixture(scope="module")
def clip(tmp_path_factory, ffmpeg_exe):
    """Build (once per module) an MP4 with ffmpeg's output options ``options``; returns its path."""
    folder = tmp_path_factory.mktemp("formats")
    built: dict[tuple[str, ...], Path] = {}

    def make(options: list[str]) -> Path:
        key = tuple(options)
        if key not in built:
            source = make([]) if options == ROTATED else None
            path = folder / f"clip{len(built)}.mp4"
            stereo = [] if "-af" in options else ["-ac", "2"]  # the tone is mono; a chosen layout replaces stereo
            if source is not None:
                _ffmpeg(ffmpeg_exe, "-display_rotation", "90", "-i", str(source), "-c", "copy", str(path))
            else:
                _ffmpeg(ffmpeg_exe, "-f", "lavfi", "-i", "testsrc2=size=96x64:rate=24:duration=0.34",
                        "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=32000:duration=0.34",
                        "-c:v", "libx264", "-c:a", "aac", *stereo, *options, str(path))  # fmt: skip
            built[key] = path
        return built[key]

    return make


def _ffmpeg(exe: str, *args: str) -> None:
    subprocess.run([exe, "-hide_banner", "-loglevel", "error", "-y", *args], check=True, capture_output=True)


def _failing(report: quality.QualityReport) -> list[str]:
    return [check.name for check in report.failing()]


@pytest.mark.parametrize("name", CASES)
def test_a_candidate_differing_in_one_property_fails_its_check_and_blocks_its_metrics(clip, name):
    base_options, cand_options, reason = CASES[name]
    report = quality.compare(clip(base_options), clip(cand_options), measure_lpips=False)
    check = report.check(name)
    assert check.status is Status.FAIL
    assert reason in check.detail
    assert report.verdict is Outcome.FAIL
    assert sorted(_failing(report)) == sorted([name, *ALSO_FAILING.get(name, [])])
    for metric in AUDIO_METRICS if name.startswith("audio_") else VIDEO_METRICS:
        assert report.check(metric).status is Status.NOT_MEASURED
        assert reason in report.check(metric).detail


@pytest.mark.parametrize("name", CASES)
def test_a_candidate_equal_in_the_property_passes_its_check(clip, tmp_path, name):
    _, cand_options, _ = CASES[name]
    baseline = clip(cand_options)
    candidate = Path(shutil.copy(baseline, tmp_path / "copy.mp4"))
    report = quality.compare(baseline, candidate, measure_lpips=False)
    assert report.check(name).status is Status.PASS
    assert _failing(report) == []
    # A baseline that upstream's muxer would not have written is named as such, even when it matches.
    note = NOT_UPSTREAM.get(name)
    if note is not None:
        assert f"{UPSTREAM_NOTE} {note}" in report.check(name).detail


def test_a_baseline_as_upstream_writes_it_gets_no_note(make_mp4, tmp_path):
    baseline = make_mp4(frames=4, width=96, height=64, audio_samples=8_000)
    report = quality.compare(baseline, Path(shutil.copy(baseline, tmp_path / "copy.mp4")), measure_lpips=False)
    assert [check.name for check in report.checks if UPSTREAM_NOTE in check.detail] == []
    assert report.check("display_matrix").detail == "display matrices match: baseline none, candidate none"


def test_a_rotated_file_decodes_to_the_same_planes_so_only_its_display_matrix_tells(clip):
    plain, rotated = clip([]), clip(ROTATED)
    assert media.decoded_digest(plain) == media.decoded_digest(rotated)
    tags = media.probe(rotated).video.tags
    assert tags.display is not None and tags.display.rotation == 90
    assert _failing(quality.compare(plain, rotated, measure_lpips=False)) == ["display_matrix"]


def test_a_file_from_ffmpeg_and_one_from_pyav_have_the_same_square_pixels(clip, make_mp4):
    # ffmpeg writes a 1:1 pasp box, PyAV's muxer none: both mean square pixels.
    ffmpeg_made = media.probe(clip([])).video.tags
    pyav_made = media.probe(make_mp4(frames=2, width=96, height=64, audio_samples=None)).video.tags
    assert ffmpeg_made.sample_aspect_ratio == pyav_made.sample_aspect_ratio == 1


def test_a_colour_code_ffmpeg_has_no_name_for_is_shown_as_its_number():
    assert tag_name({1: "bt709"}, 1) == "bt709"
    assert tag_name({1: "bt709"}, 3) == "3"
    assert tag_name({1: "bt709"}, None) == "unknown"
