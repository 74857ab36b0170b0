"""``h3bench verify`` and ``h3bench validate`` on a real evidence bundle.

One small campaign (64x64, 5 s, ABBA, real simulator processes) runs once per
module in a pytest subprocess and leaves one bundle. Tests that write or
damage anything work on a copy, so the original stays as the campaign left it.

The campaign's candidate adds video noise (``video_noise = 12``), so its
verdict does not depend on timing: SSIM and PSNR fail on every matched pair,
and a quality FAIL decides the verdict whatever the speed comparison says.
With a clean candidate the verdict would hang on the speed interval of two
AB/BA pairs, which noise alone can push to FAIL.

A newer validator is simulated by patching ``VALIDATOR_VERSION`` in
``h3bench.quality``, where the campaign and the CLI read it when they use it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import h3bench.quality
from h3bench.cli import EXIT_CODES, main
from h3bench.outcome import Outcome
from tests_unit.campaign_project import noisy_campaign

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("bundle-cli")]

ORIGINAL = h3bench.quality.VALIDATOR_VERSION  # read before any test patches it
NEWER = f"h3bench-quality-{int(ORIGINAL.rsplit('-', 1)[1]) + 1}"
CANDIDATE = "noisy"
CONSOLE_SCRIPT = Path(sys.executable).with_name("h3bench")


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> tuple[Path, str]:
    """The bundle of one real campaign run, with the quality result its session wrote, and what pytest printed."""
    path, stdout = noisy_campaign(tmp_path_factory.mktemp("campaign"), CANDIDATE)
    assert sorted(p.name for p in (path / "quality").iterdir()) == [f"{ORIGINAL}.json"]
    return path, stdout


@pytest.fixture(scope="module")
def bundle(campaign) -> Path:
    return campaign[0]


@pytest.fixture
def copy(bundle, tmp_path) -> Path:
    return Path(shutil.copytree(bundle, tmp_path / "bundle"))


@pytest.fixture
def newer_validator(monkeypatch) -> str:
    monkeypatch.setattr(h3bench.quality, "VALIDATOR_VERSION", NEWER)
    return NEWER


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --- verify ---------------------------------------------------------------------------


def test_verify_passes_the_untouched_bundle(bundle):
    proc = subprocess.run([str(CONSOLE_SCRIPT), "verify", str(bundle)], capture_output=True, text=True, timeout=120)

    assert proc.returncode == 0, proc.stdout + proc.stderr
    files = len(snapshot(bundle))
    # Every file is hashed except final.json, which holds the hashes (the run listed everything, so no addenda).
    assert not (bundle / "addenda.jsonl").exists()
    assert proc.stdout == f"{bundle}: OK ({files - 1} files checked)\n"
    assert proc.stderr == ""


def _flip_output_byte(root: Path) -> str:
    output = sorted((root / "outputs").glob("*.mp4"))[0]
    data = bytearray(output.read_bytes())
    data[len(data) // 2] ^= 0x01
    output.write_bytes(bytes(data))
    return f"outputs/{output.name}: changed"


def _delete_samples(root: Path) -> str:
    (root / "samples.jsonl").unlink()
    return "samples.jsonl: missing"


def _add_stray_file(root: Path) -> str:
    (root / "logs" / "notes.txt").write_text("added after the run\n")
    return "logs/notes.txt: not listed in final.json or addenda.jsonl"

def test_the_run_prints_its_anchor_and_verify_expect_catches_a_forged_final_json(campaign, copy, capsys):
    bundle, stdout = campaign
    anchor = hashlib.sha256((bundle / "final.json").read_bytes()).hexdigest()
    assert f"final.json SHA-256 {anchor} (h3bench verify BUNDLE --expect {anchor})" in stdout
    machine_info = json.loads((bundle.parents[1] / "benchmark.json").read_text())["machine_info"]
    assert machine_info["h3bench"] == {"bundle": str(bundle), "final_json_sha256": anchor}
    assert run_cli(capsys, "verify", str(copy), "--expect", anchor)[0] == 0

    # A forger changes a sample and rewrites final.json with the new hash: the bundle verifies on its own ...
    samples = copy / "samples.jsonl"
    samples.chmod(0o644)
    samples.write_text(samples.read_text().replace('"ok": true', '"ok": true ', 1))
    final = json.loads((copy / "final.json").read_text())
    final["files"]["samples.jsonl"] = {"sha256": hashlib.sha256(samples.read_bytes()).hexdigest(),
                                       "size": samples.stat().st_size}
    (copy / "final.json").unlink()
    (copy / "final.json").write_text(json.dumps(final, indent=2, sort_keys=True))
    assert run_cli(capsys, "verify", str(copy))[0] == 0

    # ... but not against the anchor the run printed.
    code, out, _ = run_cli(capsys, "verify", str(copy), "--expect", anchor)
    assert code == 1 and f"but the run's anchor is {anchor} (final.json was rewritten)" in out
    assert run_cli(capsys, "verify", str(copy), "--expect", "not-a-hash")[0] == 2



@pytest.mark.parametrize("damage", [_flip_output_byte, _delete_samples, _add_stray_file],
                         ids=["output-byte-changed", "samples-deleted", "stray-file"])
def test_verify_names_the_one_file_that_changed(copy, capsys, damage):
    assert run_cli(capsys, "verify", str(copy))[0] == 0
    expected = damage(copy)

    code, out, err = run_cli(capsys, "verify", str(copy))

    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith(f"{copy}: PROBLEMS (")
    # Exactly one problem, and it names the damaged file.
    assert len(lines) == 2 and lines[1].strip().startswith(expected), out
    assert err == ""

    code, out, _ = run_cli(capsys, "verify", str(copy), "--json")

    assert code == 1
    report = json.loads(out)
    assert report["ok"] is False and report["complete"] is True and report["outcome"] == "completed"
    assert len(report["problems"]) == 1 and report["problems"][0].startswith(expected)


@pytest.mark.parametrize("command", ["verify", "validate"])
@pytest.mark.parametrize("target", ["manifest.json", "no-such-bundle"])
def test_a_path_that_is_not_a_bundle_directory_is_a_usage_error(bundle, tmp_path, capsys, command, target):
    path = bundle / target if target == "manifest.json" else tmp_path / target

    code, out, err = run_cli(capsys, command, str(path))

    assert code == 2
    assert out == ""
    assert err == f"h3bench: error: {path}: not an evidence bundle directory\n"


# --- validate -------------------------------------------------------------------------


def test_validate_with_the_recorded_version_is_refused_and_writes_nothing(bundle, capsys):
    before = snapshot(bundle)

    code, out, err = run_cli(capsys, "validate", str(bundle))

    assert code == 2
    assert out == ""
    assert f"is already validated with {ORIGINAL}; its result is frozen" in err
    assert "Traceback" not in err
    assert snapshot(bundle) == before


def test_validate_refuses_a_tampered_bundle_naming_the_files_and_writes_nothing(copy, capsys):
    """Quality results deleted and the candidate's E2E halved: nothing is re-judged, printed or appended."""
    for result in (copy / "quality").iterdir():
        result.unlink()
    samples = copy / "samples.jsonl"
    samples.chmod(0o644)
    records = [json.loads(line) for line in samples.read_text().splitlines()]
    for record in records:
        if record.get("arm") == CANDIDATE and record.get("e2e_s"):
            record["e2e_s"] /= 2
    samples.write_text("".join(json.dumps(r) + "\n" for r in records))
    before = snapshot(copy)

    code, out, err = run_cli(capsys, "validate", str(copy))

    assert code == 1 and out == ""
    assert "does not verify, so it is not read" in err
    assert "samples.jsonl: changed" in err and f"quality/{ORIGINAL}.json: missing" in err
    assert "ratio" not in err and "Traceback" not in err
    assert snapshot(copy) == before, "no quality result written, nothing appended to addenda.jsonl"


def test_newer_validator_writes_its_result_beside_the_frozen_one(copy, capsys, newer_validator):
    before = snapshot(copy)
    assert f"quality/{ORIGINAL}.json" in before

    code, out, err = run_cli(capsys, "validate", str(copy), "--json")

    assert err == ""
    data = json.loads(out)
    written = f"quality/{newer_validator}.json"
    assert data["written"] == written
    # The noisy candidate fails SSIM and PSNR on every matched pair; quality FAIL decides the verdict.
    assert data["verdict"] == "FAIL"
    assert code == EXIT_CODES[Outcome.FAIL] == 1
    assert data["candidates"][CANDIDATE]["durations"]["5s"]["quality"] == "FAIL"
    document = json.loads((copy / written).read_text())
    assert document["validator_version"] == document["result"]["validator_version"] == newer_validator
    pairs = document["result"]["pairs"]
    assert len(pairs) == 6
    for report in pairs.values():
        failing = {c["name"] for c in report["checks"] if c["status"] == "fail"}
        assert report["verdict"] == "FAIL" and failing == {"ssim", "psnr_db"}
    # Lossless mode was off: no lossless judgement in the result or the verdict.
    assert document["result"]["lossless"] == {}
    entry = data["candidates"][CANDIDATE]["durations"]["5s"]
    assert entry["lossless"] is None and not entry["lossless_enabled"]

    after = snapshot(copy)
    # One new file, and addenda.jsonl to list it (the run's own files are all in final.json); every old file
    # is byte-identical.
    assert set(after) - set(before) == {written, "addenda.jsonl"}
    assert {rel for rel in before if after[rel] != before[rel]} == set()
    (line,) = after["addenda.jsonl"].splitlines()
    addendum = json.loads(line)
    assert addendum["path"] == written
    assert addendum["sha256"] == hashlib.sha256(after[written]).hexdigest()
    assert run_cli(capsys, "verify", str(copy))[0] == 0

    # The new result is frozen too.
    code, _, err = run_cli(capsys, "validate", str(copy))
    assert code == 2 and f"already validated with {newer_validator}" in err
    assert snapshot(copy) == after


def test_validate_lossless_adds_the_lossless_judgement(copy, capsys, newer_validator):
    old = (copy / "quality" / f"{ORIGINAL}.json").read_bytes()

    code, out, err = run_cli(capsys, "validate", str(copy), "--lossless", "-v")

    assert err == ""
    written = f"quality/{newer_validator}.json"
    lines = out.splitlines()
    assert lines[0] == f"validated with {newer_validator}: {written}"
    # ABBA without control blocks: 2 baseline and 2 candidate processes, far too few for the relabelling test.
    (line,) = [line for line in lines if line.startswith("  lossless ")]
    assert line.startswith("  lossless INCONCLUSIVE: 2 baseline + 2 candidate server processes")
    assert "6 labelings, smallest p 0.167" in line and "6 more baseline block(s) per duration would be needed" in line
    assert f"verdict {CANDIDATE}: FAIL" in "\n".join(lines)
    assert code == 1
    result = json.loads((copy / written).read_text())["result"]
    verdict = result["lossless"][f"5s-{CANDIDATE}"]
    assert verdict["outcome"] == "INCONCLUSIVE"
    assert (verdict["baseline_processes"], verdict["candidate_processes"]) == (2, 2)
    assert verdict["feasibility"]["needed_baseline_blocks"] == 6
    metrics = {"ssim", "psnr_db", "audio_spectral_cosine", "audio_rms_ratio"}
    assert set(verdict["pair_deviations"]) == metrics and len(verdict["pair_deviations"]["ssim"]) == 4
    # Exact-equality diagnostics: decoded SHA-256 of every compared output, which is in the bundle.
    digests = result["decoded_digests"]
    assert digests and all((copy / "outputs" / f"{sha}.mp4").is_file() for sha in digests)
    assert all(set(d) == {"video_sha256", "pcm_sha256"} for d in digests.values())
    assert (copy / "quality" / f"{ORIGINAL}.json").read_bytes() == old
    assert run_cli(capsys, "verify", str(copy))[0] == 0


def test_validate_refuses_a_bundle_without_matched_outputs(tmp_path, capsys):
    from h3bench.evidence import Bundle
    from h3bench.evidence.manifest import Manifest
    from h3bench.runspec import load_runspec

    spec = load_runspec(Path(__file__).resolve().parents[2] / "fixtures" / "runspecs" / "sim.toml")
    with Bundle.create(tmp_path, Manifest.new(spec_id=spec.spec_id, spec=spec.model_dump(mode="json"))) as empty:
        path = empty.path

    code, out, err = run_cli(capsys, "validate", str(path))

    assert code == 2 and out == ""
    assert "holds no matched baseline and candidate outputs: nothing to validate" in err
    assert not any((path / "quality").iterdir())
