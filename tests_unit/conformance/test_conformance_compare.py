"""The probe comparison and the deliberate-differences file (conformance/answers.py, compare.py).

No upstream environment is needed: answers are built from real httpx
responses and a real MP4 rendered by the simulator's content code.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.answers import Answer, flatten, normalize_json, normalize_response
from conformance.compare import (
    DELIBERATE_PATH,
    ENGINE_MODES,
    Deliberate,
    compare,
    load_deliberate,
    parse_deliberate,
    render_table,
)
from conformance.probes import METRICS_PROBE, PROBES, _metric_families, probe_names
from h3bench.errors import UsageError
from h3bench.h3 import audio_sample_count
from h3bench.sim.content import ContentSpec, content_key, render

JOB = {
    "id": "video_gen_" + "a" * 32, "object": "video", "status": "completed", "created_at": 1796292890,
    "completed_at": 1796292891, "inference_time_s": 0.42, "file_name": "video_gen_" + "a" * 32 + ".mp4",
    "stage_durations": {"MiniMaxH3Pipeline.diffuse": 0.3}, "num_frames": 107, "metrics": None, "error": None,
}


def json_answer(body: object, status: int = 200) -> Answer:
    return normalize_response(httpx.Response(status, json=body))


# -- normalising -------------------------------------------------------------------


def test_volatile_values_are_masked_and_the_contract_is_kept() -> None:
    masked = normalize_json(JOB)
    assert masked["id"] == "video_gen_<hex32>" and masked["file_name"] == "video_gen_<hex32>.mp4"
    assert masked["created_at"] == masked["completed_at"] == masked["inference_time_s"] == "<number>"
    assert masked["stage_durations"] == {"MiniMaxH3Pipeline.diffuse": "<number>"}  # the key stays
    assert masked["num_frames"] == 107 and masked["metrics"] is None and masked["status"] == "completed"


def test_an_id_of_another_length_is_a_difference() -> None:
    """vLLM's sync ids have 16 hex digits; the simulator once used 32, and the comparison must see that."""
    assert normalize_json("video_sync-" + "b" * 16) == "video_sync-<hex16>"
    assert normalize_json("video_sync-" + "b" * 32) == "video_sync-<hex32>"


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda children: st.lists(children, max_size=3)
                    | st.dictionaries(st.text("abcxyz", min_size=1, max_size=4), children, max_size=3), max_leaves=12))
def test_normalising_keeps_the_shape(value: object) -> None:
    """Masking replaces leaves only: the same keys at the same paths, and masking twice changes nothing."""
    once = normalize_json(value)
    assert flatten(once, "body").keys() == flatten(value, "body").keys()
    assert normalize_json(once) == once


def test_flatten_names_every_leaf_and_keeps_empty_containers() -> None:
    assert flatten({"a": {"b": [1, {"c": None}]}, "d": {}, "e": []}, "body") == {
        "body.a.b.0": 1, "body.a.b.1.c": None, "body.d": {}, "body.e": []}


def test_an_mp4_answer_is_what_it_holds(tmp_path: Path) -> None:
    frames = 107
    spec = ContentSpec(64, 32, frames, audio_sample_count(frames),
                       content_key(seed=0, prompt="p", reference_digests=(), width=64, height=32, frames=frames))
    info = render(tmp_path / "clip.mp4", spec)
    response = httpx.Response(200, content=info.path.read_bytes(), headers={
        "content-type": "video/mp4", "x-request-id": "video_sync-" + "c" * 16, "x-inference-time-s": "0.123",
        "x-stage-durations": json.dumps({"MiniMaxH3Pipeline.diffuse": 0.1}), "date": "today"})
    answer = normalize_response(response)
    assert answer.kind == "mp4"
    assert answer.body["video"] == {"codec": "h264", "width": 64, "height": 32, "pix_fmt": "yuv420p",
                                    "frames": frames, "fps": "24"}
    assert answer.body["audio"]["sample_rate"] == 32_000 and answer.body["audio"]["channels"] == 2
    assert answer.headers == {"content-type": "video/mp4", "x-request-id": "video_sync-<hex16>",
                              "x-inference-time-s": "<number>",
                              "x-stage-durations": {"MiniMaxH3Pipeline.diffuse": "<number>"}}
    broken = normalize_response(httpx.Response(200, content=b"not an mp4", headers={"content-type": "video/mp4"}))
    assert "undecodable" in broken.body


def test_empty_and_text_bodies() -> None:
    assert normalize_response(httpx.Response(200)).kind == "empty"
    text = normalize_response(httpx.Response(500, text="boom video_gen_" + "d" * 32))
    assert text.kind == "text" and text.body == "boom video_gen_<hex32>"


# -- comparing ---------------------------------------------------------------------


def test_equal_answers_are_the_same() -> None:
    answers = {("health", "get"): json_answer({"status": "healthy"})}
    comparison = compare(answers, dict(answers), [])
    assert comparison.ok and [row.verdict for row in comparison.rows] == ["same"]


def test_a_difference_fails_unless_it_is_listed_with_a_reason() -> None:
    upstream = {("health", "get"): json_answer({"status": "healthy"})}
    sim = {("health", "get"): normalize_response(httpx.Response(200))}
    failing = compare(upstream, sim, [])
    assert not failing.ok
    paths = {d.path for d in failing.rows[0].unexplained}
    assert paths == {"kind", "body", "body.status", "headers.content-type"}
    listed = Deliberate("health", "get", ("kind", "body*", "headers.*"), "on purpose")
    passing = compare(upstream, sim, [listed])
    assert passing.ok and passing.rows[0].verdict == "deliberate"
    partly = compare(upstream, sim, [Deliberate("health", "get", ("body*",), "on purpose")])
    assert not partly.ok and {d.path for d in partly.rows[0].unexplained} == {"kind", "headers.content-type"}


def test_an_entry_for_another_probe_or_step_does_not_excuse() -> None:
    upstream = {("a", "x"): json_answer({"v": 1})}
    sim = {("a", "x"): json_answer({"v": 2})}
    for entry in (Deliberate("b", "x", ("*",), "r"), Deliberate("a", "y", ("*",), "r")):
        comparison = compare(upstream, sim, [entry])
        assert not comparison.ok and comparison.stale == (entry,)
    assert compare(upstream, sim, [Deliberate("a", "*", ("body.v",), "r")]).ok


def test_a_stale_entry_fails_the_comparison() -> None:
    """A deliberate difference that has gone must be removed from the file, or the step fails."""
    answers = {("a", "x"): json_answer({"v": 1})}
    entry = Deliberate("a", "x", ("body.v",), "it used to differ")
    comparison = compare(answers, dict(answers), [entry])
    assert not comparison.ok and comparison.stale == (entry,)
    assert "STALE deliberate entry a / x" in render_table(comparison)


def test_a_step_only_one_side_reached_differs() -> None:
    comparison = compare({("a", "x"): json_answer({})}, {}, [])
    assert not comparison.ok
    assert [d.describe() for d in comparison.rows[0].unexplained] == ['step: upstream "answered" | sim <absent>']


def test_the_table_shows_every_step_both_answers_and_the_reasons() -> None:
    upstream = {("health", "get"): json_answer({"status": "healthy"}),
                ("oom", "post"): json_answer({"error": {"message": "out of\nmemory", "type": "X", "code": 500}}, 500)}
    sim = {("health", "get"): json_answer({"status": "healthy"}),
           ("oom", "post"): json_answer({"error": {"message": "injected", "type": "X", "code": 500}}, 500)}
    entry = Deliberate("oom", "post", ("body.error.message",), "each engine's own text")
    table = render_table(compare(upstream, sim, [entry], order=[("oom", "post"), ("health", "get")]))
    lines = table.splitlines()
    assert lines[2].startswith("oom / post") and "500 json X: out of memory" in lines[2]  # one line per step
    assert lines[3].startswith("health / get") and lines[3].endswith("same")
    assert "why: each engine's own text" in table
    assert "2 steps: 1 same, 1 with deliberate differences only, 0 with unexplained differences" in table


# -- the deliberate-differences file ------------------------------------------------


@pytest.mark.parametrize("engine", ENGINE_MODES)
def test_the_shipped_file_is_valid_and_names_real_probes(engine: str) -> None:
    entries = load_deliberate(DELIBERATE_PATH, probes=probe_names(), engine=engine)
    assert entries, f"the file lists the simulator's deliberate differences for the {engine} lane"
    assert all(len(entry.why) > 40 for entry in entries)  # a reason, not a placeholder


def test_probe_names_are_unique() -> None:
    names = probe_names()
    assert len(set(names)) == len(names) == len(PROBES) + 1
    assert METRICS_PROBE.name in names and METRICS_PROBE not in PROBES  # the real-engine lane's own probe


def test_each_lane_reads_only_its_own_entries() -> None:
    entry = {"probe": "health", "step": "get", "fields": ["*"], "why": "r"}
    data = {"difference": [entry, {**entry, "fields": ["status"], "engine": "real"},
                           {**entry, "fields": ["kind"], "engine": "standin"}]}
    standin = parse_deliberate(data, source="t", probes=probe_names())
    real = parse_deliberate(data, source="t", probes=probe_names(), engine="real")
    assert [e.fields for e in standin] == [("*",), ("kind",)]  # no engine: the stand-in lane's, as before
    assert [e.fields for e in real] == [("status",)]
    with pytest.raises(UsageError, match="engine must be one of"):
        parse_deliberate({"difference": [{**entry, "engine": "npu"}]}, source="t", probes=probe_names())


def test_an_entry_may_name_probes_by_pattern() -> None:
    entry = parse_deliberate({"difference": [{"probe": "engine-*-sync", "step": "post", "fields": ["status"],
                                              "why": "r"}]}, source="t", probes=probe_names())[0]
    assert entry.matches("engine-bad-duration-sync", "post", "status")
    assert not entry.matches("engine-bad-duration-async", "post", "status")
    with pytest.raises(UsageError, match="no probe named 'nothing-\\*'"):
        parse_deliberate({"difference": [{"probe": "nothing-*", "step": "*", "fields": ["*"], "why": "r"}]},
                         source="t", probes=probe_names())


def test_metric_families_keep_the_upstream_names_and_types_only() -> None:
    text = ("# HELP vllm_omni:diffusion_exec_s x\n# TYPE vllm_omni:diffusion_exec_s histogram\n"
            "vllm_omni:diffusion_exec_s_sum{model_name=\"m\"} 3.5\n# TYPE process_cpu_seconds_total counter\n"
            "# TYPE vllm_omni:requests_success_total counter\n")
    answer = _metric_families(httpx.Response(200, text=text))
    assert answer.body == {"families": {"vllm_omni:diffusion_exec_s": "histogram",
                                        "vllm_omni:requests_success_total": "counter"}}
    assert _metric_families(httpx.Response(404, json={"detail": "Not Found"})).status == 404


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"differences": []}, "unknown top-level key"),
        ({"difference": {"probe": "a"}}, "array of tables"),
        ({"difference": [{"probe": "health", "step": "get", "fields": ["*"]}]}, "missing \\['why'\\]"),
        ({"difference": [{"probe": "health", "step": "get", "fields": ["*"], "why": " ", }]}, "says why"),
        ({"difference": [{"probe": "health", "step": "get", "fields": [], "why": "r"}]}, "non-empty list"),
        ({"difference": [{"probe": "nope", "step": "get", "fields": ["*"], "why": "r"}]}, "no probe named 'nope'"),
        ({"difference": [{"probe": "health", "step": "", "fields": ["*"], "why": "r"}]}, "non-empty strings"),
        ({"difference": [{"probe": "health", "step": "get", "fields": ["*"], "why": "r", "extra": 1}]},
         "unknown \\['extra'\\]"),
    ],
)
def test_a_bad_entry_is_refused_with_its_reason(data: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_deliberate(data, source="test.toml", probes=probe_names())


def test_a_good_entry_parses_and_its_reason_is_one_line() -> None:
    data = {"difference": [{"probe": "health", "step": "get", "fields": ["body.*"], "why": "two\n  lines"}]}
    assert parse_deliberate(data, source="t", probes=probe_names()) == (
        Deliberate("health", "get", ("body.*",), "two lines"),)


def test_an_unreadable_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read"):
        load_deliberate(tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("[[difference]\n")
    with pytest.raises(UsageError, match="TOML syntax error"):
        load_deliberate(broken)
