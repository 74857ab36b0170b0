"""Evidence bundles: atomic write-once files, append-only JSONL, outputs by hash, verify."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import h3bench
from h3bench.errors import EvidenceError
from h3bench.evidence import SAMPLE_KINDS, Bundle, verify
from h3bench.evidence.manifest import Manifest
from h3bench.host.environment import environment

SPEC_ID = hashlib.sha256(b"a frozen spec").hexdigest()
SPEC = {"name": "sim", "workload": {"durations": [5, 15], "seed": 0}}
INPUTS = {"reference_video": {"path": "ref.mp4", "sha256": "ab" * 32}}
SOURCE = {"engine_commit": "0123abc", "image_digest": "sha256:" + "cd" * 32}
MODEL = {"path": "/models/h3", "content_sha256": "ef" * 32}


def new_bundle(root: Path, **overrides) -> Bundle:
    kwargs = dict(spec_id=SPEC_ID, spec=SPEC, inputs=INPUTS, source=SOURCE, model=MODEL,
                  environment=environment()) | overrides
    return Bundle.create(root, Manifest.new(**kwargs))


def tmp_names(directory: Path) -> list[str]:
    return [p.name for p in directory.rglob(".tmp-*")]


@pytest.fixture
def bundle(tmp_path: Path) -> Bundle:
    return new_bundle(tmp_path / "evidence")


@pytest.fixture
def closed_bundle(tmp_path: Path) -> Bundle:
    """A finished run: samples, lifecycle, an output, a log, a verdict and a quality result."""
    b = new_bundle(tmp_path / "evidence")
    b.append_sample({"kind": "warmup", "e2e_s": 3.1})
    b.append_sample({"kind": "measured", "e2e_s": 1.2})
    b.append_lifecycle({"pid": 1234, "exit_code": 0})
    mp4 = tmp_path / "out.mp4"
    mp4.write_bytes(b"not really an mp4, but bytes are bytes")
    b.store_output(mp4)
    log = tmp_path / "server.log"
    log.write_text("ready\n")
    b.store_log(log, "baseline-5s-block0.log")
    b.write_verdict({"outcome": "PASS"})
    b.write_quality("1.0.0", {"ssim": 0.99})
    b.close()
    return b


# --------------------------------------------------------------------------- manifest


def test_manifest_records_spec_version_environment_and_identities(bundle: Bundle) -> None:
    manifest = json.loads((bundle.path / "manifest.json").read_text())
    assert manifest["spec_id"] == SPEC_ID and bundle.spec_id == SPEC_ID
    assert manifest["spec"] == SPEC
    assert manifest["h3bench_version"] == h3bench.__version__
    assert (manifest["inputs"], manifest["source"], manifest["model"]) == (INPUTS, SOURCE, MODEL)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", manifest["started_at"])
    env = manifest["environment"]
    assert env["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert env["packages"]["pytest"] == importlib.metadata.version("pytest")
    assert env["hostname"] == socket.gethostname()
    assert env["cpu_count"] == os.cpu_count()
    assert env["cpu_model"] and env["platform"]
    assert re.fullmatch(rf"\d{{8}}T\d{{6}}Z-sim-{SPEC_ID[:12]}", bundle.path.name)


def test_bundles_of_one_spec_in_the_same_second_get_distinct_directories(tmp_path: Path) -> None:
    paths = {new_bundle(tmp_path).path for _ in range(3)}
    assert len(paths) == 3


def test_default_root_is_under_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    b = Bundle.create(None, Manifest.new(spec_id=SPEC_ID, spec=SPEC, inputs=INPUTS, source=SOURCE, model=MODEL),
                      name="A/B run")
    assert b.path.parent == tmp_path / "h3bench-evidence"
    assert b.path.name.endswith(f"-A_B_run-{SPEC_ID[:12]}")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"spec_id": "not-a-hash"}, "not a SHA-256"),
        ({"spec": {"name": "sim", "margin": float("nan")}}, r"\['margin'\] is nan"),
        ({"inputs": {"video": {1: "x"}}}, "keys must be strings"),
        ({"model": {"loaded": object()}}, "is a object, not a JSON value"),
    ],
)
def test_bad_manifest_input_is_refused_before_anything_is_created(tmp_path: Path, overrides, message) -> None:
    with pytest.raises(EvidenceError, match=message):
        new_bundle(tmp_path / "evidence", **overrides)
    assert not (tmp_path / "evidence").exists()


# --------------------------------------------------------------------------- samples (JSONL)


def test_samples_are_one_json_line_each_and_warmups_are_flagged(bundle: Bundle) -> None:
    bundle.append_sample({"kind": "warmup", "e2e_s": 9.5, "note": "compiles\non first call"})
    for i in range(3):
        bundle.append_sample({"kind": "measured", "e2e_s": 1.0 + i})
    bundle.append_sample({"kind": "audit", "seed": 1})
    lines = (bundle.path / "samples.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 6
    records = [json.loads(line) for line in lines[:-1]]
    assert [r["kind"] for r in records] == ["warmup", "measured", "measured", "measured", "audit"]
    assert list(bundle.samples()) == records
    assert [r["e2e_s"] for r in bundle.samples(kind="measured")] == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("sample", [{"e2e_s": 1.0}, {"kind": "warm", "e2e_s": 1.0}, {"warmup": True}, [1, 2]])
def test_a_sample_without_a_valid_kind_is_refused(bundle: Bundle, sample) -> None:
    with pytest.raises(EvidenceError, match="kind"):
        bundle.append_sample(sample)
    assert not (bundle.path / "samples.jsonl").exists()


def test_a_non_json_sample_leaves_the_file_unchanged(bundle: Bundle) -> None:
    bundle.append_sample({"kind": "measured", "e2e_s": 1.0})
    before = (bundle.path / "samples.jsonl").read_bytes()
    with pytest.raises(EvidenceError, match=r"samples.jsonl: \$\['e2e_s'\] is inf"):
        bundle.append_sample({"kind": "measured", "e2e_s": float("inf")})
    assert (bundle.path / "samples.jsonl").read_bytes() == before


_json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
_json_values = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
_samples = st.builds(
    lambda kind, extra: {**extra, "kind": kind},
    st.sampled_from(SAMPLE_KINDS),
    st.dictionaries(st.text(), _json_values, max_size=4),
)


@settings(max_examples=25, deadline=None)
@given(records=st.lists(_samples, max_size=6))
def test_any_sequence_of_samples_reads_back_identically(tmp_path_factory: pytest.TempPathFactory, records) -> None:
    b = new_bundle(tmp_path_factory.mktemp("prop"))
    for record in records:
        b.append_sample(record)
    b.close()
    assert list(Bundle.open(b.path).samples()) == records
    assert verify(b.path).ok


def test_a_failed_append_leaves_only_complete_lines(bundle: Bundle, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that dies halfway (disk full) is cut back, so the file still ends on a whole line."""
    bundle.append_sample({"kind": "measured", "e2e_s": 1.0})
    real_write = os.write

    def half_then_fail(fd: int, data) -> int:
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_fail)
    with pytest.raises(EvidenceError, match="append failed"):
        bundle.append_sample({"kind": "measured", "e2e_s": 2.0, "pad": "x" * 100})
    monkeypatch.undo()
    bundle.append_sample({"kind": "measured", "e2e_s": 3.0})
    assert [r["e2e_s"] for r in bundle.samples()] == [1.0, 3.0]
    bundle.close()
    assert verify(bundle.path).ok


def test_an_unterminated_last_line_is_ignored_by_readers_and_reported_by_verify(bundle: Bundle) -> None:
    bundle.append_sample({"kind": "measured", "e2e_s": 1.0})
    with open(bundle.path / "samples.jsonl", "ab") as f:  # what a crash mid-append leaves
        f.write(b'{"kind":"meas')
    assert [r["e2e_s"] for r in bundle.samples()] == [1.0]
    assert any("samples.jsonl: unterminated last line" in p for p in verify(bundle.path).problems)


def test_lifecycle_records_read_back(bundle: Bundle) -> None:
    events = [{"pid": 10, "arm": "baseline", "exit_code": 0}, {"pid": 11, "arm": "candidate", "exit_code": -15}]
    for event in events:
        bundle.append_lifecycle(event)
    assert list(bundle.lifecycle()) == events


# --------------------------------------------------------------------------- atomic write-once files


def test_a_crash_between_staging_and_naming_leaves_no_target(bundle: Bundle, monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(src, dst) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "link", crash)
    with pytest.raises(EvidenceError, match="verdict.json: write failed, nothing written"):
        bundle.write_verdict({"outcome": "PASS"})
    assert not (bundle.path / "verdict.json").exists()
    assert tmp_names(bundle.path) == []
    monkeypatch.undo()
    bundle.write_verdict({"outcome": "FAIL"})  # the name was never taken
    assert bundle.read_verdict() == {"outcome": "FAIL"}


def test_a_killed_process_never_leaves_a_half_written_file(bundle: Bundle, tmp_path: Path) -> None:
    """A real crash: the writer process exits hard after staging, before the name is given."""
    script = textwrap.dedent(
        f"""
        import os
        from h3bench.evidence import Bundle
        os.link = lambda src, dst: os._exit(9)
        Bundle.open({str(bundle.path)!r}).write_verdict({{"outcome": "PASS", "pad": "x" * 100000}})
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 9, proc.stderr
    assert not (bundle.path / "verdict.json").exists()
    assert len(tmp_names(bundle.path)) == 1  # the staged file stays behind ...
    report = verify(bundle.path)
    assert any("leftover temporary file" in p for p in report.problems)  # ... and verify names it


def test_write_once_files_refuse_a_second_write_and_keep_their_bytes(bundle: Bundle, tmp_path: Path) -> None:
    bundle.write_verdict({"outcome": "PASS"})
    bundle.write_quality("1.0.0", {"ssim": 0.99})
    log = tmp_path / "server.log"
    log.write_text("ready\n")
    bundle.store_log(log, "baseline-5s-block0.log")
    files = ["verdict.json", "quality/1.0.0.json", "logs/baseline-5s-block0.log", "manifest.json"]
    before = {name: (bundle.path / name).read_bytes() for name in files}
    with pytest.raises(EvidenceError, match="verdict.json: already written") as info:
        bundle.write_verdict({"outcome": "FAIL"})
    assert info.value.path == str(bundle.path / "verdict.json")
    with pytest.raises(EvidenceError, match=r"quality/1\.0\.0\.json: already written"):
        bundle.write_quality("1.0.0", {"ssim": 0.5})
    with pytest.raises(EvidenceError, match="baseline-5s-block0.log: already written"):
        bundle.store_log(log, "baseline-5s-block0.log")
    assert {name: (bundle.path / name).read_bytes() for name in files} == before


@pytest.mark.parametrize("name", ["../escape.log", ".hidden", "a/b.log", ""])
def test_unsafe_names_are_refused(bundle: Bundle, tmp_path: Path, name: str) -> None:
    log = tmp_path / "server.log"
    log.write_text("x")
    with pytest.raises(EvidenceError, match="not a safe file name"):
        bundle.store_log(log, name)
    with pytest.raises(EvidenceError, match="not a safe file name"):
        bundle.write_quality(name, {})


def test_a_missing_log_is_a_clear_error(bundle: Bundle, tmp_path: Path) -> None:
    with pytest.raises(EvidenceError, match="no such log file"):
        bundle.store_log(tmp_path / "absent.log", "baseline-5s-block0.log")


# --------------------------------------------------------------------------- outputs


def test_outputs_are_named_by_hash_and_stored_once(bundle: Bundle, make_mp4, tmp_path: Path) -> None:
    mp4 = make_mp4()
    expected = hashlib.sha256(mp4.read_bytes()).hexdigest()
    assert bundle.store_output(mp4) == (expected, f"outputs/{expected}.mp4")
    copy = tmp_path / "again.mp4"
    copy.write_bytes(mp4.read_bytes())
    assert bundle.store_output(copy, move=True) == (expected, f"outputs/{expected}.mp4")
    assert not copy.exists() and mp4.exists()
    other = make_mp4("other.mp4", seed=1)
    other_sha, _ = bundle.store_output(other)
    assert bundle.outputs() == tuple(sorted([expected, other_sha]))
    assert bundle.output_path(expected).read_bytes() == mp4.read_bytes()
    assert tmp_names(bundle.path) == []
    bundle.close()
    assert verify(bundle.path).ok


def test_storing_a_missing_output_is_a_clear_error(bundle: Bundle, tmp_path: Path) -> None:
    with pytest.raises(EvidenceError, match="cannot store"):
        bundle.store_output(tmp_path / "absent.mp4")
    assert tmp_names(bundle.path) == [] and bundle.outputs() == ()
    with pytest.raises(EvidenceError, match="no stored output"):
        bundle.output_path("0" * 64)


# --------------------------------------------------------------------------- lifecycle


def test_close_is_idempotent_and_seals_the_run(closed_bundle: Bundle, tmp_path: Path) -> None:
    final = (closed_bundle.path / "final.json").read_bytes()
    closed_bundle.close()
    assert (closed_bundle.path / "final.json").read_bytes() == final
    assert json.loads(final)["outcome"] == "completed"
    with pytest.raises(EvidenceError, match="samples.jsonl: the bundle is sealed"):
        closed_bundle.append_sample({"kind": "measured"})
    with pytest.raises(EvidenceError, match="lifecycle.jsonl: the bundle is sealed"):
        Bundle.open(closed_bundle.path).append_lifecycle({"pid": 1})
    with pytest.raises(EvidenceError, match="sealed"):
        closed_bundle.store_output(tmp_path / "out.mp4")


def test_an_exception_in_the_run_still_seals_what_was_written(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="server died"):
        with new_bundle(tmp_path) as b:
            b.append_sample({"kind": "warmup", "e2e_s": 2.0})
            raise RuntimeError("server died")
    final = json.loads((b.path / "final.json").read_text())
    assert final["outcome"] == "aborted" and final["error"] == "RuntimeError: server died"
    assert set(final["files"]) == {"manifest.json", "samples.jsonl"}
    assert list(b.samples()) == [{"kind": "warmup", "e2e_s": 2.0}]
    report = verify(b.path)
    assert report.ok and report.complete and report.outcome == "aborted"


def test_open_reads_a_bundle_back(closed_bundle: Bundle) -> None:
    b = Bundle.open(closed_bundle.path)
    assert b.spec_id == SPEC_ID and b.manifest.spec == SPEC and b.is_complete
    assert [s["kind"] for s in b.samples()] == ["warmup", "measured"]
    assert b.read_verdict() == {"outcome": "PASS"}
    assert b.quality_versions() == ("1.0.0",) and b.read_quality("1.0.0") == {"ssim": 0.99}
    assert len(b.outputs()) == 1


def test_open_refuses_a_directory_that_is_not_a_bundle(tmp_path: Path) -> None:
    with pytest.raises(EvidenceError, match="not an evidence bundle"):
        Bundle.open(tmp_path)


# --------------------------------------------------------------------------- re-validation


def test_revalidation_writes_a_second_result_and_leaves_the_first_byte_identical(closed_bundle: Bundle) -> None:
    first = (closed_bundle.path / "quality/1.0.0.json").read_bytes()
    reopened = Bundle.open(closed_bundle.path)
    assert reopened.write_quality("1.1.0", {"ssim": 0.985}) == "quality/1.1.0.json"
    assert (closed_bundle.path / "quality/1.0.0.json").read_bytes() == first
    assert reopened.quality_versions() == ("1.0.0", "1.1.0")
    assert json.loads((closed_bundle.path / "quality/1.1.0.json").read_text())["validator_version"] == "1.1.0"
    addenda = [json.loads(line) for line in (closed_bundle.path / "addenda.jsonl").read_text().splitlines()]
    assert [a["path"] for a in addenda] == ["quality/1.1.0.json"]
    assert verify(closed_bundle.path).ok
    (closed_bundle.path / "quality/1.1.0.json").write_text("{}")
    assert verify(closed_bundle.path).problems[0].startswith("quality/1.1.0.json: changed")


# --------------------------------------------------------------------------- verify


def test_verify_passes_an_untouched_bundle(closed_bundle: Bundle) -> None:
    report = verify(closed_bundle.path)
    assert report.ok and report.complete and report.problems == ()
    assert report.files_checked == 7  # manifest, samples, lifecycle, output, log, verdict, quality
    assert report.to_dict()["ok"] is True


def _append_byte(path: Path) -> None:
    with open(path, "ab") as f:
        f.write(b"\n")


def _flip_first_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[0] ^= 1
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("tamper", "expected"),
    [
        (lambda p: _append_byte(p / "samples.jsonl"), "samples.jsonl: changed"),
        (lambda p: _flip_first_byte(p / "verdict.json"), "verdict.json: changed"),
        (lambda p: (p / "logs/baseline-5s-block0.log").unlink(), "logs/baseline-5s-block0.log: missing"),
        (lambda p: (p / "logs/extra.log").write_text("x"), "logs/extra.log: not listed"),
        (lambda p: _flip_first_byte(next((p / "outputs").glob("*.mp4"))), r"outputs/[0-9a-f]{64}\.mp4: changed"),
        (lambda p: (p / "final.json").write_text("{"), "final.json: .*not valid JSON"),
    ],
    ids=["changed-jsonl", "changed-json", "missing", "extra", "changed-output", "corrupt-final"],
)
def test_verify_names_each_altered_file(closed_bundle: Bundle, tamper, expected: str) -> None:
    tamper(closed_bundle.path)
    report = verify(closed_bundle.path)
    assert not report.ok
    assert any(re.match(expected, p) for p in report.problems), report.problems


def test_verify_reports_an_interrupted_run_as_incomplete_and_still_checks_outputs(
    bundle: Bundle, tmp_path: Path
) -> None:
    bundle.append_sample({"kind": "measured", "e2e_s": 1.0})
    good, bad = tmp_path / "good.mp4", tmp_path / "bad.mp4"
    good.write_bytes(b"good")
    bad.write_bytes(b"bad")
    bundle.store_output(good)
    _, bad_rel = bundle.store_output(bad)
    # No close(): the run was interrupted.
    report = verify(bundle.path)
    assert not report.ok and not report.complete and report.outcome is None
    assert report.problems[0].startswith("incomplete: no final.json")
    assert len(report.problems) == 1
    _flip_first_byte(bundle.path / bad_rel)
    actual = hashlib.sha256((bundle.path / bad_rel).read_bytes()).hexdigest()
    assert verify(bundle.path).problems[1:] == (f"{bad_rel}: changed (content sha256 {actual} differs from its name)",)


def test_verify_of_a_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(EvidenceError, match="no such bundle directory"):
        verify(tmp_path / "nope")


@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_verify_catches_any_flipped_byte_in_any_file(tmp_path_factory: pytest.TempPathFactory, data) -> None:
    root = tmp_path_factory.mktemp("flip")
    b = new_bundle(root)
    b.append_sample({"kind": "measured", "e2e_s": 1.0})
    (root / "out.mp4").write_bytes(b"\x00\x01 output bytes")
    b.store_output(root / "out.mp4")
    b.close()
    files = sorted(p for p in b.path.rglob("*") if p.is_file() and p.name != "final.json")
    victim = data.draw(st.sampled_from(files))
    offset = data.draw(st.integers(0, victim.stat().st_size - 1))
    content = bytearray(victim.read_bytes())
    content[offset] ^= data.draw(st.integers(1, 255))
    victim.write_bytes(bytes(content))
    relpath = victim.relative_to(b.path).as_posix()
    assert any(p.startswith(f"{relpath}: changed") for p in verify(b.path).problems)
