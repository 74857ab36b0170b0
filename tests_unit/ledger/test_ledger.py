"""The ledger: entries from real sealed bundles (written by the evidence writer, no servers), the chain, the rules.

The research campaign below has the shape of the research-protocol spec: two
individual candidates (``dlo``, configuration reuse; ``cfg``, new code), and
their combination ``both``, the spec's final arm; ``final.json`` carries
held-out verdicts and the acceptance, as that protocol's writer puts them.
``dlo`` is faster but fails held-out at 5 s, ``cfg`` is no faster, ``both``
passes everything and is accepted.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import h3bench.quality
from h3bench.cli import main
from h3bench.errors import EvidenceError, UsageError
from h3bench.ledger.append import add_bundle
from h3bench.ledger.chain import read_ledger
from h3bench.ledger.verify import verify_ledger
from h3bench.outcome import Outcome
from h3bench.verdict.verdicts import Acceptance, CandidateAcceptance, HeldoutVerdict
from tests_unit.bundlesim import ATTRIBUTION, npu_spec, write_bundle

SPEEDS = {"baseline": 100.0, "dlo": 90.0, "cfg": 100.5, "both": 85.0}
HELDOUT = {"dlo": {"5s": HeldoutVerdict(Outcome.FAIL, ("seed 3: PSNR 21.4 dB below 30 dB",)),
                   "15s": HeldoutVerdict(Outcome.PASS, ())},
           "both": {"5s": HeldoutVerdict(Outcome.PASS, ()), "15s": HeldoutVerdict(Outcome.PASS, ())}}
ACCEPTED = Acceptance("both", True, ("both passed at 5 s and 15 s against baseline",),
                      {"dlo": CandidateAcceptance(False, ("held-out FAIL at 5 s",)),
                       "cfg": CandidateAcceptance(False, ("speed INCONCLUSIVE at 5 s and 15 s",)),
                       "both": CandidateAcceptance(True, ())})
RESEARCH = {"arms.dlo.hypothesis": "Rank-local DLO removes one all-gather per step.",
            "arms.dlo.source": {"kind": "configuration", "ref": "--dlo-rank-local (vllm_omni/diffusion/dlo.py)"},
            "arms.cfg.hypothesis": "Fusing the CFG branches halves the DiT passes.",
            "arms.cfg.source": {"kind": "code", "ref": "commit 1a2b3c4"},
            "arms.both.hypothesis": "The two changes are independent and combine.",
            "arms.both.source": {"kind": "code", "ref": "commit 1a2b3c4 with --dlo-rank-local"},
            "arms.both.combination_of": ["dlo", "cfg"], "final": "both", "original_baseline": "baseline"}


def latency(seed: int):
    rng = random.Random(seed)
    return lambda block, index: SPEEDS.get(block.arm, 100.0) * block.duration / 5 * (1 + rng.gauss(0, 0.004))


def research_bundle(root: Path, started_at: str = "2026-11-20T10:00:00.000Z", **kwargs) -> Path:
    spec = npu_spec("910b1", 8, dlo={}, cfg={}, both={})
    return write_bundle(root, spec, latency(1), started_at=started_at, parts={"cfg": {"speed": Outcome.INCONCLUSIVE}},
                        heldout=HELDOUT, accepted=ACCEPTED, spec_extra=RESEARCH, **kwargs)


def plain_bundle(root: Path, kind: str = "910b1", devices: int = 8, started_at: str = "2026-11-21T10:00:00.000Z",
                 **kwargs) -> Path:
    spec = npu_spec(kind, devices, clean={})
    return write_bundle(root, spec, latency(2), started_at=started_at, **kwargs)


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def ledger(tmp_path) -> Path:
    return tmp_path / "ledger.jsonl"


def test_the_research_campaign_shows_one_accepted_and_rejected_candidates_with_reasons(tmp_path, ledger, capsys):
    bundle = research_bundle(tmp_path / "evidence")

    code, out, err = cli(capsys, "ledger", "add", str(bundle), "--ledger", str(ledger))
    assert (code, err) == (0, "")
    entries = read_ledger(ledger).entries
    verdicts = {(e["candidate"], e["duration"]): e["verdict"] for e in entries}
    assert verdicts == {("both", "5"): "PASS", ("both", "15"): "PASS", ("cfg", "5"): "INCONCLUSIVE",
                        ("cfg", "15"): "INCONCLUSIVE", ("dlo", "5"): "FAIL", ("dlo", "15"): "FAIL"}
    dlo5 = next(e for e in entries if (e["candidate"], e["duration"]) == ("dlo", "5"))
    assert "seed 3: PSNR 21.4 dB below 30 dB" in dlo5["reasons"]
    assert dlo5["hypothesis"] == RESEARCH["arms.dlo.hypothesis"]
    assert dlo5["source"] == {"kind": "configuration", "ref": "--dlo-rank-local (vllm_omni/diffusion/dlo.py)"}
    assert 0.88 < dlo5["effect"]["ratio"] < 0.92 and dlo5["effect"]["ci_high"] < 1
    both = [e for e in entries if e["candidate"] == "both"]
    assert all(e["final_combination"] and e["combination_of"] == ["dlo", "cfg"] for e in both)

    code, out, _ = cli(capsys, "ledger", "show", "--ledger", str(ledger))
    assert code == 0
    print(out)  # the table of the report
    assert out.splitlines()[0] == "== hardware 8x910b1: 6 entries"
    assert "both (final)" in out and "- not accepted: held-out FAIL at 5 s" in out


def test_a_part_that_did_not_run_is_recorded_as_not_run(tmp_path, ledger):
    (entry, *_) = add_bundle(plain_bundle(tmp_path / "evidence"), ledger).entries
    assert entry["heldout"] is None and entry["campaign"] is None and entry["lossless"] is None
    # A formal spec attributes every candidate; the entry has the spec's own (no research fields beyond that).
    assert (entry["hypothesis"], entry["source"]) == (ATTRIBUTION["hypothesis"], ATTRIBUTION["source"])


def test_show_keeps_each_hardware_kind_in_its_own_table(tmp_path, ledger, capsys):
    add_bundle(plain_bundle(tmp_path / "a", "910b1", 8), ledger)
    add_bundle(plain_bundle(tmp_path / "b", "910c", 4), ledger)

    out = cli(capsys, "ledger", "show", "--ledger", str(ledger))[1]

    sections = out.split("== hardware ")[1:]
    assert [s.splitlines()[0] for s in sections] == ["4x910c: 2 entries", "8x910b1: 2 entries"]
    rows = [[line.split()[0] for line in s.splitlines()[2:] if line[:1].isdigit()] for s in sections]
    # Entries 2 and 3 (0-based) came from the 4x910C bundle: they are in its table only.
    assert rows == [["2", "3"], ["0", "1"]]


def test_the_same_bundle_twice_is_refused_and_the_ledger_is_unchanged(tmp_path, ledger, capsys):
    bundle = plain_bundle(tmp_path / "evidence")
    add_bundle(bundle, ledger)
    before = ledger.read_bytes()
    copy = shutil.copytree(bundle, tmp_path / "copy" / bundle.name)

    for again in (bundle, copy):
        code, _, err = cli(capsys, "ledger", "add", str(again), "--ledger", str(ledger))
        assert code == 2 and "already in the ledger (lines 1, 2" in err
    assert ledger.read_bytes() == before
    add_bundle(plain_bundle(tmp_path / "evidence", started_at="2026-11-22T10:00:00.000Z"), ledger)
    assert len(read_ledger(ledger).entries) == 4


@pytest.mark.parametrize("how", ["run-kind", "spec-flag"])
def test_a_diagnostic_bundle_is_refused_with_a_clear_message(tmp_path, ledger, capsys, how):
    kwargs = {"run_kind": "DIAGNOSTIC"} if how == "run-kind" else {"spec_extra": {"diagnostic": True}}
    bundle = plain_bundle(tmp_path / "evidence", **kwargs)

    code, _, err = cli(capsys, "ledger", "add", str(bundle), "--ledger", str(ledger))

    assert code == 2 and "DIAGNOSTIC run (not a campaign result) cannot be entered" in err
    assert not ledger.exists()


def test_a_bundle_that_does_not_verify_is_refused_naming_the_file(tmp_path, ledger, capsys):
    bundle = plain_bundle(tmp_path / "evidence")
    with (bundle / "samples.jsonl").open("a") as f:
        f.write('{"kind": "measured"}\n')

    code, _, err = cli(capsys, "ledger", "add", str(bundle), "--ledger", str(ledger))

    assert code == 1 and "does not verify, so it is not read: samples.jsonl: changed" in err
    assert not ledger.exists()


def test_the_validator_version_is_recorded_apart_from_the_engine(tmp_path, ledger, monkeypatch):
    current = h3bench.quality.VALIDATOR_VERSION
    first = add_bundle(plain_bundle(tmp_path / "a", engine_commit="a" * 40), ledger).entries[0]
    monkeypatch.setattr(h3bench.quality, "VALIDATOR_VERSION", f"{current}-newer")
    second = add_bundle(plain_bundle(tmp_path / "b", engine_commit="a" * 40), ledger).entries[0]

    assert first["harness"]["validator_versions"] == [current]
    assert second["harness"]["validator_versions"] == [f"{current}-newer"]
    assert first["engine"] == second["engine"] and first["engine"]["engine_commit"] == "a" * 40
    assert "engine_commit" not in first["harness"] and "validator_versions" not in first["engine"]


# --- verify -----------------------------------------------------------------------------------


@pytest.fixture
def two_bundles(tmp_path, ledger) -> list[Path]:
    bundles = [research_bundle(tmp_path / "evidence"), plain_bundle(tmp_path / "evidence")]
    for bundle in bundles:
        add_bundle(bundle, ledger)
    return bundles


def _rewrite(ledger: Path, number: int, change, rehash: bool) -> None:
    from h3bench.ledger.chain import entry_hash

    lines = ledger.read_text().splitlines()
    entry = json.loads(lines[number])
    change(entry)
    if rehash:
        entry["hash"] = entry_hash(entry)
    lines[number] = json.dumps(entry, separators=(",", ":"))
    ledger.write_text("\n".join(lines) + "\n")


def test_verify_passes_an_untouched_ledger(two_bundles, ledger, capsys):
    code, out, _ = cli(capsys, "ledger", "verify", "--ledger", str(ledger))
    assert code == 0 and out.startswith(f"{ledger}: OK (8 entries, 2 bundles checked, 0 entries' bundles not found)")


@pytest.mark.parametrize(("number", "rehash", "expected"), [
    (4, False, "line 5: hash does not match its content"),
    (4, True, "line 6: prev does not match the hash of the line before"),
    (7, True, "line 8: differs from what its bundle says: verdict"),
], ids=["line-changed", "line-changed-and-rehashed", "last-line-rewritten-whole"])
def test_verify_catches_a_tampered_line(two_bundles, ledger, capsys, number, rehash, expected):
    def reject_to_accept(entry):
        entry["verdict"] = "PASS" if entry["verdict"] != "PASS" else "FAIL"

    _rewrite(ledger, number, reject_to_accept, rehash)

    code, out, _ = cli(capsys, "ledger", "verify", "--ledger", str(ledger))

    assert code == 1 and expected in out, out


def test_verify_catches_a_removed_line(two_bundles, ledger):
    lines = ledger.read_text().splitlines(keepends=True)
    ledger.write_text("".join(lines[:2] + lines[3:]))

    problems = verify_ledger(ledger).problems

    assert "line 3: seq is 3, expected 2" in problems


def test_verify_catches_a_tampered_bundle(two_bundles, ledger, capsys):
    research, _ = two_bundles
    log = research / "samples.jsonl"
    log.write_text(log.read_text().replace('"e2e_s":9', '"e2e_s":8', 1))

    code, out, _ = cli(capsys, "ledger", "verify", "--ledger", str(ledger))

    assert code == 1 and "line 1: " in out and "samples.jsonl: changed" in out


def test_verify_catches_a_changed_final_json(two_bundles, ledger):
    _, plain = two_bundles
    final = plain / "final.json"
    final.write_text(final.read_text().replace('"completed"', '"completed" '))

    problems = verify_ledger(ledger).problems

    assert any(p.startswith("line 7: ") and "final.json changed" in p for p in problems), problems


def test_a_moved_bundle_is_found_with_bundles_dir(two_bundles, ledger, tmp_path, capsys):
    """Issue 37: with every bundle moved away, verify said OK and exited 0."""
    moved = tmp_path / "archive" / "renamed"
    moved.parent.mkdir()
    shutil.move(str(tmp_path / "evidence"), moved)

    code, out, _ = cli(capsys, "ledger", "verify", "--ledger", str(ledger))
    assert code == 1 and out.startswith(f"{ledger}: NOT VERIFIED: 8 of 8 entries are unverified, their bundles not "
                                        "found (8 entries, 0 bundles checked, 8 entries' bundles not found)"), out
    assert "  unverified: line 1: " in out and "--allow-missing" in out
    code, out, err = cli(capsys, "ledger", "show", "--ledger", str(ledger))
    assert code == 0 and out.count("! UNVERIFIED: its bundle is not at ") == 8 and "8 of 8 entries UNVERIFIED" in err

    # Found by content under --bundles, whatever the directories are called now.
    code, out, _ = cli(capsys, "ledger", "verify", "--ledger", str(ledger), "--bundles", str(moved.parent))
    assert code == 0 and out.startswith(f"{ledger}: OK (8 entries, 2 bundles checked, 0 entries' bundles not found)")
    code, out, err = cli(capsys, "ledger", "show", "--ledger", str(ledger), "--bundles", str(moved.parent))
    assert code == 0 and "UNVERIFIED" not in out + err


def _append_forged(ledger: Path, entry: dict) -> None:
    """Append ``entry`` with a self-consistent chain: the next seq, the last line's hash as prev, its own hash."""
    from h3bench.ledger.chain import entry_hash

    last = json.loads(ledger.read_text().splitlines()[-1])
    entry = {**entry, "seq": last["seq"] + 1, "prev": last["hash"]}
    entry["hash"] = entry_hash(entry)
    with ledger.open("a") as f:
        f.write(json.dumps(entry, separators=(",", ":")) + "\n")


def test_a_fabricated_entry_is_never_ok(two_bundles, ledger, tmp_path, capsys):
    """Issue 37: an entry with an invented seal and a bundle path that does not exist passed verify, exit 0."""
    invented = json.loads(ledger.read_text().splitlines()[-1])
    invented["bundle"] = {**invented["bundle"], "path": str(tmp_path / "never-ran"), "final_sha256": "ab" * 32,
                          "seals": ["ab" * 32]}
    invented["verdict"] = "PASS"
    _append_forged(ledger, invented)

    code, out, _ = cli(capsys, "ledger", "verify", "--ledger", str(ledger))
    assert code == 1 and "NOT VERIFIED: 1 of 9 entries are unverified" in out
    assert f"  unverified: line 9: {tmp_path / 'never-ran'}" in out
    # Looking for it by content everywhere the real bundles are does not find it.
    code, out, _ = cli(capsys, "ledger", "verify", "--ledger", str(ledger), "--bundles", str(tmp_path))
    assert code == 1 and "NOT VERIFIED: 1 of 9 entries are unverified" in out
    code, out, _ = cli(capsys, "ledger", "verify", "--ledger", str(ledger), "--allow-missing")
    assert code == 0 and out.startswith(f"{ledger}: OK for what was checked, but 1 of 9 entries are UNVERIFIED")

    code, out, err = cli(capsys, "ledger", "show", "--ledger", str(ledger))
    marked = [line for line in out.splitlines() if line.startswith("      ! UNVERIFIED")]
    assert code == 0 and len(marked) == 1 and "1 of 9 entries UNVERIFIED" in err
    rows = out.splitlines()
    assert rows[rows.index(marked[0]) - 1].startswith("8!")  # the fabricated row, and only it


def test_a_complete_entry_without_its_newline_is_kept(tmp_path, ledger, capsys):
    """Issue 27: the last entry, complete and hash-valid but without its newline, was dropped by the next add."""
    first = plain_bundle(tmp_path / "evidence")
    add_bundle(first, ledger)
    ledger.write_bytes(ledger.read_bytes().rstrip(b"\n"))  # an append that stopped just before its newline
    before = ledger.read_bytes()

    code, out, _ = cli(capsys, "ledger", "show", "--ledger", str(ledger))
    assert code == 0 and "== hardware 8x910b1: 2 entries" in out
    code, out, _ = cli(capsys, "ledger", "add", str(plain_bundle(tmp_path / "more", started_at="2026-11-23T10:00:00"
                                                                  ".000Z")), "--ledger", str(ledger))

    assert code == 0 and "line 2 had no newline; it is kept" in out and "dropped" not in out
    assert ledger.read_bytes().startswith(before + b"\n"), "the first bundle's entries are kept byte for byte"
    entries = read_ledger(ledger).entries
    assert [e["bundle"]["path"] for e in entries][:2] == [str(first)] * 2 and len(entries) == 4
    assert verify_ledger(ledger).ok


def test_what_a_crash_left_of_an_append_is_reported_and_moved_never_dropped(two_bundles, ledger, tmp_path, capsys):
    fragment = b'{"seq": 8, "prev": "'
    with ledger.open("ab") as f:
        f.write(fragment)  # a crash in the middle of an append
    problems = verify_ledger(ledger).problems
    assert len(problems) == 1 and problems[0].startswith("line 9: not JSON") and "unfinished append" in problems[0]
    code, out, _ = cli(capsys, "ledger", "show", "--ledger", str(ledger))
    assert code == 1 and "#8! BROKEN, not an entry: line 9" in out and "8x910b1: 8 entries" in out

    added = add_bundle(plain_bundle(tmp_path / "more", started_at="2026-11-23T10:00:00.000Z"), ledger)

    store = ledger.with_name(ledger.name + ".fragments")
    assert added.notes == (f"{ledger}: line 9 was what a crash left of an unfinished append (20 bytes, not an entry); "
                           f"moved to {store}",)
    (kept,) = [json.loads(line) for line in store.read_text().splitlines()]
    assert kept["text"].encode() == fragment and kept["line"] == 9 and kept["size"] == len(fragment)
    assert verify_ledger(ledger).ok and len(read_ledger(ledger).entries) == 10


def _forge(ledger: Path, number: int, change) -> None:
    """Change one line and recompute its hash and every later line's, as a forger who knows the chain would."""
    from h3bench.ledger.chain import entry_hash

    entries = [json.loads(line) for line in ledger.read_text().splitlines()]
    change(entries[number])
    prev = entries[number - 1]["hash"] if number else "0" * 64
    for entry in entries[number:]:
        entry["prev"] = prev
        entry["hash"] = prev = entry_hash(entry)
    ledger.write_text("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in entries))


@pytest.mark.parametrize(("change", "expected"), [
    (lambda e: e.pop("bundle"), "line 3: bundle: missing"),
    (lambda e: e.update(bundle="elsewhere"), "line 3: bundle: expected BundleRef, found 'elsewhere'"),
    (lambda e: e["bundle"].pop("final_sha256"), "line 3: bundle.final_sha256: missing"),
    (lambda e: e.update(verdict="MAYBE"), "line 3: verdict: expected Outcome, found 'MAYBE'"),
    (lambda e: e["effect"].update(k="four"), "line 3: effect.k: expected int, found 'four'"),
], ids=["no-bundle", "bundle-a-string", "no-final-sha", "unknown-verdict", "mistyped-effect"])
def test_a_forged_or_mistyped_entry_is_named_by_line_and_field(two_bundles, ledger, capsys, change, expected):
    """Issue 27: an entry without ``bundle`` (hash recomputed) passed verify; others gave KeyError/AttributeError."""
    _forge(ledger, 2, change)

    for action in ("verify", "show"):
        code, out, err = cli(capsys, "ledger", action, "--ledger", str(ledger))
        assert code == 1 and expected in out, (action, out, err)
        assert "Traceback" not in out + err
    assert "#2! BROKEN, not an entry: line 3" in cli(capsys, "ledger", "show", "--ledger", str(ledger))[1]


def test_show_checks_the_chain_and_marks_a_tampered_line(two_bundles, ledger, capsys):
    """Issue 27: ``ledger show`` printed a tampered verdict as evidence, exit 0."""
    _rewrite(ledger, 4, lambda entry: entry.update(verdict="PASS"), rehash=False)

    code, out, err = cli(capsys, "ledger", "show", "--ledger", str(ledger))

    assert code == 1 and "lines marked ! are not evidence" in err
    row = next(line for line in out.splitlines() if line.startswith("4!"))
    assert row.split()[-2] == "accepted"  # the tampered verdict is shown, marked
    assert "      ! BROKEN: line 5: hash does not match its content (the line was changed)" in out
    assert sum(line.split(" ")[0].endswith("!") for line in out.splitlines()) == 1, "only that line is marked"


def test_a_line_that_is_not_json_is_marked_and_the_rest_still_shown(two_bundles, ledger, capsys):
    lines = ledger.read_text().splitlines(keepends=True)
    ledger.write_text("".join([*lines[:3], "not json at all\n", *lines[4:]]))

    code, out, _ = cli(capsys, "ledger", "show", "--ledger", str(ledger))

    assert code == 1 and "#3! BROKEN, not an entry: line 4: not JSON" in out
    assert "== hardware 8x910b1: 7 entries" in out and "line 5: prev does not match" in out
    assert "line 4: not JSON" in " ".join(verify_ledger(ledger).problems)


@pytest.mark.parametrize("action", ["add", "show", "verify"])
def test_a_ledger_path_that_is_a_directory_is_one_line(tmp_path, capsys, action):
    """Issue 27: ``ledger add BUNDLE --ledger <a directory>`` raised IsADirectoryError."""
    extra = [str(plain_bundle(tmp_path / "evidence"))] if action == "add" else []

    code, _, err = cli(capsys, "ledger", action, *extra, "--ledger", str(tmp_path))

    assert code == 2 and err == f"h3bench: error: {tmp_path}: is a directory, not a ledger file (give the file with " \
                                 "--ledger FILE)\n"


def test_a_broken_chain_refuses_further_appends(two_bundles, ledger, tmp_path):
    _rewrite(ledger, 0, lambda entry: entry.update(verdict="FAIL"), rehash=False)
    before = ledger.read_bytes()

    with pytest.raises(EvidenceError, match="the ledger does not verify, nothing appended: line 1"):
        add_bundle(plain_bundle(tmp_path / "more", started_at="2026-11-23T10:00:00.000Z"), ledger)
    assert ledger.read_bytes() == before


_WRITER = """
import sys
from h3bench.ledger.append import add_bundle
for path in sys.argv[2:]:
    add_bundle(path, sys.argv[1])
"""


def test_two_writers_at_once_keep_one_intact_chain(tmp_path, ledger):
    bundles = [plain_bundle(tmp_path / "evidence", started_at=f"2026-11-{day:02d}T10:00:00.000Z")
               for day in range(1, 9)]
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(ledger), *map(str, bundles[i::2])])
               for i in range(2)]
    assert [w.wait(timeout=300) for w in writers] == [0, 0]

    report = verify_ledger(ledger)
    entries = read_ledger(ledger).entries
    assert report.ok, report.problems
    assert len(entries) == 16 and len({e["bundle"]["final_sha256"] for e in entries}) == 8


def test_show_and_verify_of_a_missing_ledger_say_so(tmp_path, capsys):
    for action in ("show", "verify"):
        code, _, err = cli(capsys, "ledger", action, "--ledger", str(tmp_path / "none.jsonl"))
        assert code == 2 and "no such ledger file" in err
    with pytest.raises(UsageError, match="does not exist"):
        add_bundle(plain_bundle(tmp_path / "evidence"), tmp_path / "no-dir" / "ledger.jsonl")
