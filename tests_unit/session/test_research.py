"""The campaign as research: attributed candidates, the final combination, held-out seeds, diagnostics, profiling."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from h3bench.course.cases import Block
from h3bench.course.design import series_of
from h3bench.course.preflight import DIAGNOSTIC, FORMAL, preflight
from h3bench.course.schedule import Schedule
from h3bench.errors import EvidenceError, RunSpecError
from h3bench.evidence import Bundle, verify
from h3bench.evidence.codec import to_json
from h3bench.evidence.manifest import Manifest
from h3bench.report.terminal import summary_lines
from h3bench.run.client import VideoClient
from h3bench.run.profiling import profiled_request
from h3bench.runspec import load_runspec, parse_runspec
from h3bench.server.ports import LOCALHOST, find_free_port
from h3bench.server.process import ServerProcess
from h3bench.session.results import Results
from h3bench.session.revalidation import load_quality
from h3bench.session.settings import Settings
from h3bench.sim.profiler import Profiler, parse_profiler_config
from h3bench.verdict.acceptance import acceptance
from h3bench.verdict.assemble import candidate_verdicts
from h3bench.verdict.verdicts import VerdictDocument
from tests_unit.campaign_project import bundle_of, run_campaign, write_campaign

SPECS = Path(__file__).resolve().parents[2] / "fixtures" / "runspecs"


def _data(name: str) -> dict[str, Any]:
    return tomllib.loads((SPECS / name).read_text())


def _parse(data: dict[str, Any]) -> Any:
    return parse_runspec(data, source="test", spec_dir=SPECS)


# -- the spec's rules -----------------------------------------------------------


def test_the_research_fixture_loads_with_its_direct_final_series() -> None:
    spec = load_runspec(SPECS / "sim-research.toml")
    assert spec.candidates == ("resident", "fused", "combined")  # the original baseline is no candidate
    names = [(s.name, s.arm, s.control) for s in series_of(spec)]
    assert names[-1] == ("combined-vs-original", "combined", "original")
    schedule = Schedule(spec)
    direct = [b for b in schedule.blocks if b.candidate == "combined-vs-original"]
    assert {b.arm for b in direct if b.letter == "A"} == {"original"}
    assert schedule.partner(next(b for b in direct if b.letter == "B")).arm == "original"


def test_without_original_baseline_there_is_no_extra_series() -> None:
    data = _data("sim-research.toml")
    del data["original_baseline"], data["arms"]["original"]
    spec = _parse(data)
    assert [s.name for s in series_of(spec)] == ["resident", "fused", "combined"]
    assert spec.final_control == "baseline"


@pytest.mark.parametrize(("change", "field", "message"), [
    (lambda d: d["arms"]["combined"].update(combination_of=["resident", "nope"]),
     "arms.combined.combination_of.1", "not an arm of this spec"),
    (lambda d: d["arms"]["combined"].update(combination_of=["combined"]),
     "arms.combined.combination_of.0", "combination of itself"),
    (lambda d: d["arms"]["combined"].update(combination_of=["baseline"]),
     "arms.combined.combination_of.0", "a baseline is a control"),
    (lambda d: d["arms"]["baseline"].update(hypothesis="the control is fast"),
     "arms.baseline.hypothesis", "the baseline is the control"),
    (lambda d: d.update(final="nope"), "final", "not an arm"),
    (lambda d: d.update(final="baseline"), "final", "must be a candidate"),
    (lambda d: d.pop("final"), "original_baseline", "give final as well"),
    (lambda d: d["heldout"].update(seeds=[0, 3]), "heldout.seeds", "formal seed 0 is not held out"),
    (lambda d: d["heldout"].update(seeds=[]), "heldout", "needs seeds or inputs"),
    (lambda d: d["arms"]["fused"].update(source={"kind": "kernel", "ref": "x"}), "arms.fused.source.kind", "kind"),
    (lambda d: d["arms"]["fused"]["argv"].extend(["--profiler-config", "{}"]), "arms.fused",
     "protocol.profile gives every server its own --profiler-config"),
])
def test_research_rules_refuse_with_the_field(change: Any, field: str, message: str) -> None:
    data = _data("sim-research.toml")
    change(data)
    with pytest.raises(RunSpecError, match=message) as info:
        _parse(data)
    assert field in str(info.value)


def test_a_vllm_arm_keeps_its_torch_profiler_directory_only_without_protocol_profile() -> None:
    data = _data("910b1-x8.toml")
    data["arms"]["dlo_rank_local"]["profiler"] = {"pipeline": True, "torch_dir": "/traces"}
    assert "--profiler-config" in parse_runspec(data, source="test", spec_dir=SPECS).arms["dlo_rank_local"].argv
    data["protocol"]["profile"] = True
    with pytest.raises(RunSpecError, match="leave the arm's profiler directory out") as info:
        parse_runspec(data, source="test", spec_dir=SPECS)
    assert info.value.field_path == "arms.dlo_rank_local"


def test_a_formal_npu_spec_needs_hypothesis_and_source_for_every_candidate() -> None:
    data = _data("910b1-x8.toml")
    assert parse_runspec(data, source="test", spec_dir=SPECS).arms["dlo_rank_local"].source is not None
    del data["arms"]["dlo_rank_local"]["hypothesis"]
    with pytest.raises(RunSpecError, match="needs every candidate's hypothesis") as info:
        parse_runspec(data, source="test", spec_dir=SPECS)
    assert info.value.field_path == "arms.dlo_rank_local.hypothesis"
    data["diagnostic"] = True  # a diagnostic spec may explore without attribution
    assert parse_runspec(data, source="test", spec_dir=SPECS).diagnostic_reasons


def test_diagnostic_specs_make_diagnostic_runs() -> None:
    formal = load_runspec(SPECS / "sim-research.toml")
    assert formal.diagnostic_reasons == ()
    assert preflight(formal, spec_file=None, allow_unpinned=False).kind == FORMAL
    data = _data("sim-research.toml")
    data["workload"]["steps"] = 8
    short = _parse(data)
    run = to_json(preflight(short, spec_file=None, allow_unpinned=False).run_kind())
    assert run["kind"] == DIAGNOSTIC and "workload.steps = 8" in run["reasons"][0]

    def manifest(**more: object) -> Manifest:  # read as a bundle's manifest.json is
        return Manifest.from_record({"spec_id": "ab" * 32, "spec": {}, "started_at": "", "h3bench_version": "",
                                     **more}, Path("manifest.json"))

    assert manifest(run=run).diagnostic and not manifest(run={"kind": FORMAL}).diagnostic
    assert not manifest().diagnostic
    data["workload"]["steps"], data["diagnostic"] = 50, True
    assert preflight(_parse(data), spec_file=None, allow_unpinned=False).reasons == ("the spec says diagnostic = true",)
    document = VerdictDocument("ab" * 32, "x", "0.1.0", DIAGNOSTIC, None, {}, run_notes=("DIAGNOSTIC run: why",))
    lines = summary_lines(_parse(data), document, bundle=None)
    assert len(lines) > 3 and all(line.startswith("DIAGNOSTIC ") for line in lines), lines
    assert lines.count("DIAGNOSTIC run: why") == 1


def test_a_diagnostic_bundle_is_never_baseline_evidence(tmp_path: Path) -> None:
    data = _data("sim-research.toml")
    data["diagnostic"] = True
    spec = _parse(data)
    checked = preflight(spec, spec_file=None, allow_unpinned=False)
    bundle = Bundle.create(tmp_path, Manifest.new(spec_id=spec.spec_id, spec=spec.model_dump(mode="json"),
                                                  source={"kind": "simulator"}, run=checked.run_kind(),
                                                  host=checked.host))
    bundle.close()
    results = Results(spec, Settings(None, arm="candidate"))
    with pytest.raises(EvidenceError, match="DIAGNOSTIC run .*can never be --baseline-evidence"):
        results.attach_baseline(bundle.path)


# -- profiling ----------------------------------------------------------------------


def test_the_simulated_profiler_writes_a_chrome_trace(tmp_path: Path) -> None:
    assert parse_profiler_config(json.dumps({"profiler": "torch", "torch_profiler_dir": str(tmp_path)})) == tmp_path
    with pytest.raises(ValueError, match="torch_profiler_dir must be set"):
        parse_profiler_config('{"profiler": "torch"}')
    profiler = Profiler(tmp_path)
    assert profiler.stop() is None  # nothing running: ignored, as upstream's wrapper does
    profiler.record("ignored", 1.0, {"MiniMaxH3Pipeline.encode_prompt": 0.5})  # not profiling: dropped
    profiler.start()
    profiler.start()  # already running: ignored, the session goes on
    profiler.record("r1", 100.0, {"MiniMaxH3Pipeline.encode_prompt": 0.5, "MiniMaxH3Pipeline.diffuse": 2.0})
    written = profiler.stop()
    assert written is not None
    trace = json.loads(written.read_text())
    events = trace["traceEvents"]
    assert [(e["name"], e["ph"], e["ts"], e["dur"]) for e in events] == [
        ("encode_prompt", "X", 100e6, 0.5e6), ("diffuse", "X", 100.5e6, 2.0e6)]


def test_a_server_without_profiling_is_noted_and_no_request_is_sent(tmp_path: Path) -> None:
    import sys

    port = find_free_port(LOCALHOST)
    server = ServerProcess([sys.executable, "-m", "h3bench.sim", "--host", LOCALHOST, "--port", str(port),
                            "--time-scale", "0"], port=port, host=LOCALHOST, log_path=tmp_path / "log",
                           startup_budget_s=60, stop_budget_s=10)
    sent = []
    with server, VideoClient(server.base_url) as client:
        info = profiled_request(client, lambda: sent.append(1), bundle=None,  # type: ignore[arg-type]
                                directory=tmp_path / "none", block=Block(5.0, "c", "c", 1, "B"))
    assert sent == [] and info["profiler"]["supported"] is False and "404" in info["profiler"]["note"]


# -- a whole research campaign ----------------------------------------------------------------


@pytest.mark.slow
def test_held_out_seeds_catch_a_fault_that_the_formal_seed_cannot(pytester: pytest.Pytester) -> None:
    """Both candidates pass at seed 0; only ``faulty`` degrades at seed 3, and only the held-out phase sees it."""
    # Twice as fast, with requests long enough (about a second) that a loaded machine's noise cannot hide it.
    fast = {"time_scale": 0.0006}
    spec = write_campaign(pytester.path, baseline={"time_scale": 0.0012},
                          candidates={"clean": fast, "faulty": {**fast, "degrade_seeds": [3]}},
                          protocol={"order": "ABBAABBA", "audit": False, "profile": True})
    text = spec.read_text().replace('name = "plugin-test"\n', 'name = "plugin-test"\nfinal = "clean"\n')
    spec.write_text(text + '\n[heldout]\nseeds = [2, 3]\n')
    result = run_campaign(pytester, spec, "--benchmark-disable", "-p", "no:xdist", "-v")
    path = bundle_of(pytester)
    written = json.loads((path / "verdict.json").read_text())
    summary = result.stdout.str()
    assert written["heldout"]["clean"]["5s"]["outcome"] == "PASS", summary
    faulty = written["heldout"]["faulty"]["5s"]
    assert faulty["outcome"] == "FAIL" and "seed 3: failed quality gates" in faulty["reasons"][0], summary
    assert "seed 2" not in " ".join(faulty["reasons"])
    accepted = written["accepted"]
    verdicts = written["candidates"]
    assert accepted["candidates"]["faulty"]["accepted"] is False and accepted["final"] == "clean"
    result.stdout.fnmatch_lines(["*held-out faulty 5s: FAIL: seed 3: failed quality gates*"])
    # Acceptance also needs the formal speed PASS, which a heavily loaded machine can make INCONCLUSIVE.
    if verdicts["clean"]["verdict"] == "PASS":
        assert accepted["candidates"]["clean"]["accepted"] and accepted["accepted"]
        result.stdout.fnmatch_lines(["*campaign acceptance (final clean): ACCEPTED*"])
    else:
        assert not accepted["accepted"] and "formal verdict INCONCLUSIVE" in accepted["reasons"][0]
    if verdicts["faulty"]["verdict"] == "PASS":
        assert "held-out" in accepted["candidates"]["faulty"]["reasons"][0]
    samples = [json.loads(line) for line in (path / "samples.jsonl").read_text().splitlines()]
    phases = {s["phase"] for s in samples}
    assert phases == {"formal", "heldout", "profile"}
    assert all("-heldout-" in s["block_id"] for s in samples if s["phase"] == "heldout")
    profiles = [s for s in samples if s["phase"] == "profile"]
    assert {s["arm"] for s in profiles} == {"baseline", "clean", "faulty"} and all(s["ok"] for s in profiles)
    for record in profiles:
        (trace,) = record["traces"]
        stored = path / trace["path"]
        assert stored.stat().st_size == trace["size"]
        assert {e["ph"] for e in json.loads(stored.read_text())["traceEvents"]} == {"X"}
    assert verify(path).ok
    # The same verdicts, judged again from the stored bundle; a diagnostic reading of them accepts nothing.
    results = Results.from_bundle(path, Settings(None))
    assert load_quality(results) is not None
    document = VerdictDocument.read(results.bundle)
    assert document is not None and candidate_verdicts(results) == document.candidates
    assert acceptance(results.spec, document.candidates, document.heldout, diagnostic=False) == document.accepted
    assert acceptance(results.spec, document.candidates, document.heldout, diagnostic=True).accepted is False


def test_a_shard_alone_is_neither_accepted_nor_rejected(tmp_path: Path) -> None:
    """Issue 37: one shard's summary ended "candidate clean: rejected: formal verdict INCONCLUSIVE"."""
    from dataclasses import replace

    from h3bench.course.shards import Shard
    from tests_unit.bundlesim import npu_spec, write_bundle

    spec = npu_spec(clean={})
    path = write_bundle(tmp_path, spec, lambda block, index: 100.0 if block.arm == "baseline" else 99.9,
                        started_at="2026-11-20T10:00:00.000Z")
    document = VerdictDocument.read(Bundle.open(path))
    assert document is not None and document.candidates["clean"].outcome.value == "INCONCLUSIVE"
    whole = acceptance(spec, document.candidates, {}, diagnostic=False)
    alone = acceptance(spec, document.candidates, {}, diagnostic=False, shard=Shard(1, 2))

    lines = summary_lines(spec, replace(document, accepted=alone), bundle=path)

    assert "candidate clean: not judged alone: shard 1 of 2; pool the shards with h3bench pool" in lines
    assert not any("rejected" in line for line in lines)
    assert not alone.candidates["clean"].accepted and alone.reasons == alone.candidates["clean"].reasons
    # The campaign itself, judged whole on the same figures, rejects it.
    assert "candidate clean: rejected: formal verdict INCONCLUSIVE" in summary_lines(
        spec, replace(document, accepted=whole), bundle=path)
