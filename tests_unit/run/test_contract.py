"""The engine's contract in every bundle: recorded, compared across bundles, and a changed one named or refused.

The contract documents come from real processes: the fake ``vllm``
(tests_unit/fakes/vllm) answers ``--help`` the way vLLM's parser does, a
plain HTTP server stands for a server without ``/openapi.json``. Bundles are
written with the project's own writer (tests_unit/bundlesim.py); the
campaign-level recording is in tests_unit/test_stage_campaign.py (the
simulator's ``/openapi.json``) and tests_unit/test_npu_path.py (a vllm arm's
help through the fake).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from h3bench.cli import main
from h3bench.course.schedule import Schedule
from h3bench.errors import EvidenceError
from h3bench.evidence import Bundle, verify
from h3bench.evidence.codec import to_json
from h3bench.evidence.manifest import Manifest
from h3bench.ledger.append import add_bundle
from h3bench.ledger.chain import entry_hash, read_ledger
from h3bench.ledger.history import history_json, read_history
from h3bench.ledger.verify import verify_ledger
from h3bench.outcome import Outcome
from h3bench.pool.fanin import contract_notes
from h3bench.run import contract
from h3bench.run.contract import (
    ArmContract,
    Contract,
    ContractPart,
    ServerContract,
    contract_changes,
    engine_help,
    help_text,
    record_openapi,
)
from h3bench.run.records import BlockResult, Lifecycle
from h3bench.runspec import RunSpec, load_runspec
from h3bench.session.results import Results
from h3bench.session.settings import Settings
from h3bench.session.stored import open_verified
from tests_unit.bundlesim import npu_spec, write_bundle
from tests_unit.campaign_project import child_campaign, write_campaign

FAKES = Path(__file__).parents[1] / "fakes"
OPENAPI = b'{"openapi": "3.1.0", "paths": {"/v1/videos": {}}}'
OPENAPI_NEWER = b'{"openapi": "3.1.0", "paths": {"/v1/videos": {}, "/v1/videos/{id}/remix": {}}}'


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake ``vllm`` first on PATH, and no help remembered from an earlier test."""
    monkeypatch.setenv("PATH", os.pathsep.join([str(FAKES), str(Path(sys.executable).parent), os.environ["PATH"]]))
    monkeypatch.setattr(contract, "_HELP_CACHE", {})


def vllm(*args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([str(FAKES / "vllm"), *args], capture_output=True, text=True, check=True,
                          env={**os.environ, **(env or {})})
    return done.stdout


# -- the fake answers --help as vLLM's parser does ---------------------------------------------------


def test_the_fake_vllm_answers_help_in_vllms_forms() -> None:
    groups = vllm("serve", "--omni", "--help")
    assert groups.splitlines()[1] == "usage: vllm serve [model_tag] --omni [options]"
    assert "Config Groups:" in groups and "  OmniConfig              Configuration for vLLM-Omni" in groups
    assert "--task-type" not in groups, "plain --help lists the groups, not the flags"
    assert "For full list:            vllm serve --help=all" in groups
    every = vllm("serve", "--omni", "--help=all")
    assert "OmniConfig:" in every and "--task-type TASK_TYPE" in every and "--dlo-resident-layers" in every
    assert "When passing JSON CLI arguments" in every
    section = vllm("serve", "--omni", "--help=omniconfig")
    assert section.splitlines()[1] == "OmniConfig:" and "--port" not in section
    flag = vllm("serve", "--omni", "--help=dlo_resident")
    assert "Arguments matching 'dlo-resident':" in flag and "--dlo-resident-layers" in flag
    assert "No group or arguments matching 'nothing'." in vllm("serve", "--omni", "--help=nothing")


# -- what is recorded --------------------------------------------------------------------------------


def test_the_help_contract_leaves_out_the_engines_timestamped_log_lines() -> None:
    text, note = help_text("INFO 12-03 12:53:33 [importing.py:74] Triton ...\nusage: vllm serve\n\nflags\n")
    assert text == "usage: vllm serve\n\nflags\n" and note == "1 log line(s) before 'usage:' left out"
    assert help_text("usage: x\n") == ("usage: x\n", "")
    assert help_text("no usage here\n") == ("no usage here\n", "no 'usage:' line: the whole output is kept")


@pytest.mark.usefixtures("fake_vllm")
def test_the_same_engine_gives_the_same_help_contract_and_a_newer_one_another() -> None:
    first, note = engine_help(["vllm"], {})
    assert first is not None and first.startswith(b"usage: vllm serve") and note.startswith("1 log line")
    contract._HELP_CACHE.clear()  # a second run of the same engine, a second later: the log line's time differs
    again, _ = engine_help(["vllm"], {})
    assert again == first
    newer, _ = engine_help(["vllm"], {"FAKE_VLLM_NEW_FLAG": "enable-remix"})
    assert newer is not None and b"--enable-remix" in newer and newer != first


@pytest.mark.usefixtures("fake_vllm")
def test_an_engine_whose_help_cannot_be_had_is_noted_not_failed(tmp_path: Path) -> None:
    assert engine_help(["no-such-vllm-here"], {}) == (None, "not recorded: no-such-vllm-here not found "
                                                            "(no-such-vllm-here serve --omni --help=all)")
    data, note = engine_help([sys.executable, "-c", "import sys; sys.exit('engine broken')"], {})
    assert data is None and note.endswith("exited 1 (engine broken)"), note


@pytest.fixture
def no_openapi() -> Iterator[str]:
    """A server that answers 404 to everything, as one started with --disable-fastapi-docs does to /openapi.json."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(404)
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_server_without_openapi_is_noted_and_the_contract_files_are_stored_once(tmp_path: Path,
                                                                                  no_openapi: str) -> None:
    bundle = Bundle.create(tmp_path, Manifest.new(spec_id="ab" * 32, spec={"name": "t"}))
    assert record_openapi(no_openapi, bundle) == ContractPart(None, None, "not recorded: /openapi.json answered "
                                                                          "HTTP 404")
    refused = record_openapi("http://127.0.0.1:9", bundle)
    assert refused.sha256 is None and refused.note.startswith("not recorded: /openapi.json failed (ConnectError")
    first = bundle.store_contract(OPENAPI, "json")
    assert first == (hashlib.sha256(OPENAPI).hexdigest(), f"contracts/{hashlib.sha256(OPENAPI).hexdigest()}.json")
    assert bundle.store_contract(OPENAPI, "json") == first  # the next server's identical answer is not written again
    bundle.close()
    assert verify(bundle.path).ok and len(list((bundle.path / "contracts").iterdir())) == 1


def test_a_change_of_contract_is_named_per_arm_and_document_and_a_missing_side_is_none() -> None:
    records = [{"arm": "baseline", "contract": to_json(ServerContract(ContractPart("a" * 64, "x"),
                                                                      ContractPart("b" * 64, "y")))},
               {"arm": "baseline", "contract": None}, {"arm": "fast"}]
    before = Contract.of(records)
    assert before == Contract({"baseline": ArmContract(("a" * 64,), ("b" * 64,))})
    same = Contract.of_server("baseline", ServerContract(ContractPart("a" * 64, "x"), ContractPart("b" * 64, "y")))
    assert contract_changes(before, same) == ()
    newer = Contract({"baseline": ArmContract(("c" * 64,), ("b" * 64,)), "fast": ArmContract(("d" * 64,))})
    assert contract_changes(before, newer) == (f"baseline: /openapi.json changed (sha256 {'a' * 12} → {'c' * 12})",)
    # What one side did not record is no change: an older bundle, a server without /openapi.json.
    assert contract_changes(Contract(), newer) == ()
    assert contract_changes(before, Contract({"baseline": ArmContract((), ("e" * 64,))})) == (
        f"baseline: vllm serve --help=all changed (sha256 {'b' * 12} → {'e' * 12})",)


# -- across bundles: history, ledger, --baseline-evidence ---------------------------------------------


def _spec() -> RunSpec:
    """The 8x910B1 spec with one candidate (a bundle of fewer blocks is written faster)."""
    return npu_spec(rank_local={"description": "rank-local DLO", "offload": {"dlo": {"transfer": "rank-local"}}})


def _bundles(root: Path, *contracts: bytes, help_: bytes | None = None) -> list[Path]:
    """One sealed 8x910B1 bundle per /openapi.json given, in that order, a day apart."""
    spec = _spec()
    return [write_bundle(root, spec, lambda block, index: 100.0 * block.duration / 5,
                         started_at=f"2026-10-{day + 1:02d}T08:00:00.000Z",
                         contract={arm: (openapi, help_) for arm in spec.arms})
            for day, openapi in enumerate(contracts)]


def test_history_names_a_change_of_the_baselines_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _bundles(tmp_path / "evidence", OPENAPI, OPENAPI, OPENAPI_NEWER)

    main(["history", str(tmp_path / "evidence")])
    out = capsys.readouterr().out

    change = (f"CONTRACT CHANGED at #2 (since #1): baseline: /openapi.json changed (sha256 "
              f"{hashlib.sha256(OPENAPI).hexdigest()[:12]} → {hashlib.sha256(OPENAPI_NEWER).hexdigest()[:12]})")
    assert out.count(change) == 2, out  # both durations' series
    assert "CONTRACT CHANGED at #1" not in out
    found = history_json(read_history([tmp_path / "evidence"]))["series"][0]
    assert len(found["contract_changes"]) == 1
    assert found["campaigns"][0]["contract"]["arms"]["baseline"]["openapi"] == [hashlib.sha256(OPENAPI).hexdigest()]


def test_history_is_silent_when_the_contract_stayed_or_was_never_recorded(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    _bundles(tmp_path / "same", OPENAPI, OPENAPI)
    spec = _spec()
    for day in (1, 2):  # bundles written before contracts were recorded
        write_bundle(tmp_path / "old", spec, lambda block, index: 100.0, started_at=f"2026-09-0{day}T08:00:00.000Z")
    main(["history", str(tmp_path / "same"), str(tmp_path / "old")])
    assert "CONTRACT CHANGED" not in capsys.readouterr().out


def test_the_ledger_names_a_change_of_contract_and_its_entries_verify(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    ledger = tmp_path / "ledger.jsonl"
    first, second = _bundles(tmp_path / "evidence", OPENAPI, OPENAPI_NEWER)
    add_bundle(first, ledger)
    add_bundle(second, ledger)

    assert main(["ledger", "show", "--ledger", str(ledger)]) == 0
    out = capsys.readouterr().out

    entries = read_ledger(ledger).entries
    lines = len(entries) // 2
    assert entries[0]["contract"]["arms"]["baseline"]["openapi"] == [hashlib.sha256(OPENAPI).hexdigest()]
    changed = f"contract changed since line {lines}: baseline: /openapi.json changed"
    assert out.count(changed) == lines, out  # every entry of the second bundle, none of the first
    assert verify_ledger(ledger).ok, verify_ledger(ledger).problems


def test_a_ledger_entry_written_before_a_field_existed_still_verifies_and_a_changed_one_does_not(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    (bundle,) = _bundles(tmp_path / "evidence", OPENAPI)
    add_bundle(bundle, ledger)
    entries = read_ledger(ledger).entries

    def rewrite(change: dict) -> None:
        prev = "0" * 64
        with ledger.open("w") as f:
            for entry in entries:
                entry = {k: v for k, v in {**entry, **change}.items() if v is not ...}
                entry["prev"] = prev
                entry["hash"] = prev = entry_hash(entry)
                f.write(json.dumps(entry) + "\n")

    rewrite({"stages": ..., "recipe_steps": ..., "contract": ...})  # as an older h3bench wrote them
    assert verify_ledger(ledger).ok, verify_ledger(ledger).problems
    rewrite({"contract": None})  # present, but not what the bundle says
    assert any("differs from what its bundle says: contract" in p for p in verify_ledger(ledger).problems)


def _stored_and_today(tmp_path: Path, stored_help: bytes | None) -> tuple[Path, Results]:
    spec = _spec()
    (stored,) = [write_bundle(tmp_path, spec, lambda block, index: 100.0, started_at="2026-10-01T08:00:00.000Z",
                              contract={arm: (OPENAPI, stored_help) for arm in spec.arms})]
    # A live run's results (it supplies blocks by running them); a reader does not ask the engine.
    return stored, Results(spec, Settings(None, arm="candidate", baseline_evidence=stored), supply=lambda block: None)


@pytest.mark.usefixtures("fake_vllm")
def test_baseline_evidence_of_another_engine_is_refused_before_any_server_starts(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    today, _ = engine_help(["vllm"], _spec().arms["baseline"].launch_env())
    assert today is not None
    monkeypatch.setenv("FAKE_VLLM_NEW_FLAG", "enable-remix")  # the stored run's engine had one more flag
    contract._HELP_CACHE.clear()
    older, _ = engine_help(["vllm"], _spec().arms["baseline"].launch_env())
    assert older is not None and older != today
    monkeypatch.delenv("FAKE_VLLM_NEW_FLAG")
    contract._HELP_CACHE.clear()

    stored, results = _stored_and_today(tmp_path / "older", older)
    with pytest.raises(EvidenceError, match=r"the engine's contract differs from today's \(baseline: vllm serve "
                                            r"--help=all changed .*refused as --baseline-evidence"):
        results.attach_baseline(stored)

    stored, results = _stored_and_today(tmp_path / "same", today)
    results.attach_baseline(stored)
    assert results.stored_baseline is not None
    reader = Results(_spec(), Settings(None, arm="candidate", baseline_evidence=stored))
    contract._HELP_CACHE.clear()
    monkeypatch.setattr(contract, "_run_help", None)  # an xdist worker never runs the engine
    reader.attach_baseline(stored)


@pytest.mark.usefixtures("fake_vllm")
def test_baseline_evidence_is_refused_once_todays_server_serves_another_openapi(tmp_path: Path) -> None:
    today, _ = engine_help(["vllm"], _spec().arms["baseline"].launch_env())
    stored, results = _stored_and_today(tmp_path, today)
    results.attach_baseline(stored)
    anchor = next(b for b in results.schedule.blocks if b.letter == "A")

    def block(openapi: bytes) -> BlockResult:
        recorded = ServerContract(ContractPart(hashlib.sha256(openapi).hexdigest(), "x"),
                                  ContractPart(hashlib.sha256(today or b"").hexdigest(), "y"))
        life = Lifecycle(anchor.id, anchor.arm, anchor.duration, anchor.position, contract=recorded)
        return BlockResult(anchor, 1, (), life, None)

    results.take(block(OPENAPI))
    assert all(results.stopped(c) is None for c in results.spec.candidates)
    results.take(block(OPENAPI_NEWER))
    stop = results.stopped(anchor.candidate)
    assert stop is not None and stop.outcome is Outcome.INCONCLUSIVE
    assert stop.reason.startswith(f"--baseline-evidence {stored} refused: the engine's contract differs from "
                                  f"today's (baseline: /openapi.json changed")
    assert f"seen at {anchor.id}'s start" in stop.reason
    assert {results.stopped(c) for c in results.spec.candidates} == {stop}, "no candidate is compared with it"


def test_a_pool_names_a_shard_whose_engine_differs_and_is_silent_when_they_agree(tmp_path: Path) -> None:
    """The fan-in compares each shard's contract, as its bundle recorded it, with the first shard's."""
    first, same, newer = _bundles(tmp_path, OPENAPI, OPENAPI, OPENAPI_NEWER, help_=b"usage: vllm serve\n")
    found = [(f"shard {i}/3 of round 1 (host host-{i})", open_verified(path).contract())
             for i, path in enumerate((first, same, newer), start=1)]
    assert set(found[0][1].arms) == set(_spec().arms)
    assert found[0][1].arms["baseline"] == ArmContract((hashlib.sha256(OPENAPI).hexdigest(),),
                                                       (hashlib.sha256(b"usage: vllm serve\n").hexdigest(),))
    notes = contract_notes(found)
    old, new = hashlib.sha256(OPENAPI).hexdigest()[:12], hashlib.sha256(OPENAPI_NEWER).hexdigest()[:12]
    assert notes == tuple(f"contract changed between shards: shard 3/3 of round 1 (host host-3) against shard 1/3 of "
                          f"round 1 (host host-1): {arm}: /openapi.json changed (sha256 {old} → {new}): these hosts "
                          "ran another engine under the same spec" for arm in _spec().arms)
    assert contract_notes(found[:2]) == () and contract_notes([]) == ()
    assert len(Schedule(_spec()).blocks) == sum(1 for _ in Bundle.open(first).lifecycle())


@pytest.mark.slow
def test_a_candidate_only_campaign_stops_at_its_first_server_when_the_stored_baseline_served_another_openapi(
        tmp_path: Path) -> None:
    """Live: the simulator's /openapi.json against a stored baseline whose servers served another one."""
    project = tmp_path / "project"
    project.mkdir()
    spec_path = write_campaign(project, protocol={"audit": False})
    spec = load_runspec(spec_path)
    stored = write_bundle(tmp_path / "stored", spec, lambda block, index: 0.5, started_at="2026-10-01T08:00:00.000Z",
                          contract={arm: (OPENAPI, None) for arm in spec.arms})

    code, output, bundle = child_campaign(project, spec_path, "tests_perf", "--benchmark-disable", "-p", "no:randomly",
                                          "--arm", "candidate", "--baseline-evidence", str(stored), verbose=True)

    assert bundle is not None and "Traceback" not in output and "INTERNALERROR" not in output, output[-6000:]
    first = json.loads((bundle / "lifecycle.jsonl").read_text().splitlines()[0])
    found = first["contract"]["openapi"]["sha256"]
    reason = (f"--baseline-evidence {stored} refused: the engine's contract differs from today's ({first['arm']}: "
              f"/openapi.json changed (sha256 {hashlib.sha256(OPENAPI).hexdigest()[:12]} → {found[:12]}), seen at "
              f"{first['block']}'s start): its baseline was measured on another engine")
    assert reason in output, output[-6000:]
    verdict = json.loads((bundle / "verdict.json").read_text())
    assert {c["verdict"] for c in verdict["candidates"].values()} == {"INCONCLUSIVE"}, verdict["candidates"]
    # No block runs after the refusal: the rest of the schedule is skipped, not measured against another engine.
    assert len((bundle / "lifecycle.jsonl").read_text().splitlines()) == 1, code
