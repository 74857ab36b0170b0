"""Which stage moved, in real simulator campaigns: per-part paired effects, /metrics deltas, reconciliation, contract.

One campaign runs two candidates against the same baseline, each changing
one stage of the simulator's latency model only: ``vae_faster`` decodes 30 %
faster (``decode_s`` x 0.7), ``dit_faster`` runs each DiT step 10 % faster
(``step_s`` x 0.9). A second, smaller campaign has a candidate whose
profiler under-reports its decode (``underreport_stage``). Everything is read
from what the runs wrote: verdict.json, samples.jsonl, the raw scrapes and
the contract files in the bundle, the summary and the report.

What a per-part interval can promise: in an A/A comparison an unchanged
part's two-sided 95 % interval excludes 1 in about 5 % of campaigns, and with
a dozen parts at least one does in about 46 % (tests_unit/test_stage_effects.py
simulates both through the same functions). So the test does not assert that
every unchanged part's interval includes 1; it asserts what holds in every
campaign short of a broken simulator: the changed stage's interval excludes 1
and its ratio is the designed one (within 0.04), and no unchanged stage shows
a change of the designed ones' size (its ratio within 8 % of 1, where an
unchanged part's ratio over three pairs spreads by about 1.5 %: 1 % jitter
per request and the sleeps' lateness). Which unchanged parts excluded 1 by
chance is printed.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from h3bench.cli import main
from h3bench.evidence import Bundle, verify
from h3bench.h3 import DIFFUSION_EXEC_S, DIFFUSION_FORWARD_S
from h3bench.ledger.append import add_bundle
from h3bench.ledger.chain import read_ledger
from h3bench.ledger.verify import verify_ledger
from h3bench.run.server_metrics import RequestMetrics
from h3bench.verdict.stage_effects import DIT_PER_FORWARD
from h3bench.verdict.verdicts import VerdictDocument
from tests_unit import browser
from tests_unit.campaign_project import child_campaign, write_campaign

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("stage-campaign")]

# Modelled seconds x 0.0002 (one worker): diffuse 0.15 s, decode 0.15 s, media encode 0.1 s per 5 s request.
# A stage's wall time also carries the lateness of the sleep before it (milliseconds on a busy machine), so the
# stages asserted on are made long enough for that to stay near the 1 % jitter.
BASE = {"time_scale": 0.0002, "workers": 1, "compile_s": 0.0, "decode_s": [750.0, 1500.0],
        "media_encode_s": [500.0, 1000.0], "block_seed": 11}
VAE, DIT = "vae_faster", "dit_faster"
CANDIDATES = {VAE: {**BASE, "decode_s": [525.0, 1050.0]},
              DIT: {**BASE, "step_s": [14.9 * 0.9, 119.33 * 0.9]}}
DESIGN = {VAE: ("profiler:decode", 0.7), DIT: (DIT_PER_FORWARD, 0.9)}
# Stages long enough to be measured to a few percent: what the other candidate changes, and the media encode.
UNCHANGED = {VAE: ("profiler:_encode_local_media", "profiler:diffuse", DIT_PER_FORWARD, DIFFUSION_FORWARD_S),
             DIT: ("profiler:_encode_local_media", "profiler:decode", "profiler:video_vae.decode_latent")}
HINTS = '\n[hints]\nsource = "a test recipe"\ndit_step_s.baseline = { "5" = 14.90 }\n'
# The under-reporting server: decode 0.5 s, of which its profiler reports a fifth (the sim tolerance is 0.25 s).
BIG_DECODE = {**BASE, "decode_s": [2500.0, 5000.0]}
UNDER = "underreports"


@dataclass(frozen=True)
class Ran:
    output: str
    bundle: Path
    verdict: dict[str, Any]
    document: VerdictDocument

    def duration(self, candidate: str) -> dict[str, Any]:
        return self.verdict["candidates"][candidate]["durations"]["5s"]

    def parts(self, candidate: str) -> dict[str, dict[str, Any]]:
        return {p["part"]: p for p in self.duration(candidate)["stages"]["parts"]}

    def lines(self, name: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (self.bundle / name).read_text().splitlines()]


def _run(project: Path, spec: Path, *args: str) -> Ran:
    code, output, bundle = child_campaign(project, spec, "tests_perf", "--benchmark-disable", "-p", "no:randomly",
                                          *args, verbose=True, report=True)  # the stage lines are -v's
    assert code == 0 and bundle is not None, output[-8000:]
    return Ran(output, bundle, json.loads((bundle / "verdict.json").read_text()),
               VerdictDocument.read(Bundle.open(bundle)))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    project = tmp_path_factory.mktemp("stages")
    spec = write_campaign(project, baseline=BASE, candidates=CANDIDATES, protocol={"order": "ABBAAB", "audit": False})
    spec.write_text(spec.read_text() + HINTS)
    return _run(project, spec)


@pytest.fixture(scope="module")
def under(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    project = tmp_path_factory.mktemp("underreport")
    spec = write_campaign(project, baseline=BIG_DECODE, protocol={"order": "ABBA", "audit": False},
                          candidates={UNDER: {**BIG_DECODE, "underreport_stage": "decode", "underreport_factor": 0.2}})
    return _run(project, spec, "--allow-underpowered")


@pytest.mark.parametrize("candidate", [VAE, DIT])
def test_the_changed_stage_moves_and_no_unchanged_stage_shows_a_change_of_its_size(ran: Ran, candidate: str) -> None:
    parts = ran.parts(candidate)
    changed, ratio = DESIGN[candidate]
    moved = parts[changed]
    assert moved["moved"] is True and moved["ratio_high"] < 1.0, moved
    assert moved["ratio"] == pytest.approx(ratio, abs=0.04), moved
    excluded = []
    for name in UNCHANGED[candidate]:
        part = parts[name]
        assert part["ratio"] == pytest.approx(1.0, abs=0.08), part
        if part["moved"]:
            excluded.append(name)
    # Chance alone excludes 1 for an unchanged part in about 5 % of campaigns (see the module docstring).
    print(f"{candidate}: unchanged parts whose interval excludes 1 by chance: {excluded or 'none'}")
    stages = ran.duration(candidate)["stages"]
    assert stages["level"] == 0.025 and stages["statement"].startswith("attribution, not a verdict")
    # The e2e part is the speed estimate's ratio, unless the first-request rule left first requests out of that.
    if not ran.duration(candidate)["looks"]["first_requests_left_out"]:
        assert parts["e2e"]["ratio"] == pytest.approx(ran.duration(candidate)["estimate"]["geomean"], rel=1e-9)


def test_the_per_step_time_and_real_time_factor_per_arm_stand_beside_the_recipe(ran: Ran) -> None:
    d = ran.duration(DIT)
    step = ran.parts(DIT)[DIT_PER_FORWARD]
    # 49 DiT forwards of 14.9 modelled seconds x 0.0002 each, 10 % less for the candidate.
    assert step["baseline_median_s"] == pytest.approx(14.9 * 0.0002, rel=0.1)
    assert step["candidate_median_s"] == pytest.approx(14.9 * 0.0002 * 0.9, rel=0.1)
    assert d["recipe_steps"] == [{"arm": "baseline", "seconds": 14.9, "source": "a test recipe"}]
    rtf = {r["arm"]: r for r in d["stages"]["rtf"]}
    assert set(rtf) == {"A", "B"}
    for role, arm in (("A", "baseline"), ("B", DIT)):
        # E2E per second of the 124-frame video: the arm's median E2E over 124 / 24 s.
        median = next(a["median_e2e_s"] for a in d["arms"] if a["arm"] == arm)
        assert rtf[role]["rtf_e2e"] == pytest.approx(median / (124 / 24), rel=1e-9)
        assert 0 < rtf[role]["rtf_server"] < rtf[role]["rtf_e2e"]
    assert "  DiT per step (profiler's diffuse / DiT forwards): baseline " in ran.output
    assert "  recipe's DiT per step: baseline 14.9 s (a test recipe)" in ran.output
    assert "  real-time factor (E2E per second of video): baseline " in ran.output


def test_every_request_carries_its_metrics_delta_and_phases_and_the_raw_scrapes_are_in_the_bundle(ran: Ran) -> None:
    samples = [s for s in ran.lines("samples.jsonl")]
    assert samples and all(s["ok"] for s in samples)
    for sample in samples:
        metrics = RequestMetrics.from_dict(sample["server_metrics"])
        assert metrics.available, sample["server_metrics"]
        assert metrics.observations(DIFFUSION_EXEC_S) == 1
        assert sample["phases"]["upload_s"] > 0 and sample["phases"]["download_s"] > 0
        before, after = (ran.bundle / sample["scrapes"]["before"]), (ran.bundle / sample["scrapes"]["after"])
        assert before.parent == after.parent == ran.bundle / "metrics" / sample["block_id"]
        assert "vllm_omni:diffusion_exec_s_count" in after.read_text()
    # One scrape at ready, then one per request; every file is listed in final.json.
    blocks = {s["block_id"] for s in samples}
    assert len(list((ran.bundle / "metrics").glob("*/*.prom"))) == len(samples) + len(blocks)
    for block in ran.verdict["candidates"][VAE]["durations"]["5s"]["blocks"]:
        assert block["server_metrics"] == "available"
    assert verify(ran.bundle).ok, verify(ran.bundle).problems


def test_an_under_reporting_profiler_is_named_in_its_blocks_records_and_an_honest_one_is_not(under: Ran,
                                                                                             ran: Ran) -> None:
    blocks = {b["id"]: b for b in under.duration(UNDER)["blocks"]}
    for block_id, block in blocks.items():
        findings = " | ".join(block["reconciliation"])
        if block_id.endswith(UNDER):
            assert "VAE inside decode: in 3 of 3 request(s)" in findings and "decode is under-reported" in findings
            assert "profiler covers the engine: in 3 of 3 request(s)" in findings, findings
        else:
            assert "VAE inside decode" not in findings and "profiler covers the engine" not in findings, findings
    assert under.duration(UNDER)["reconciliation_tolerance"] == "max(0.25 s, 1.00% of the reference)"
    assert f"reconciliation 5s-{UNDER}-2B-{UNDER}: VAE inside decode: in 3 of 3 request(s)" in under.output
    for candidate in (VAE, DIT):  # honest servers throughout
        for block in ran.duration(candidate)["blocks"]:
            assert not any(f.startswith(("VAE inside decode", "profiler covers the engine", "forward is diffuse",
                                         "DiT steps", "one observation")) for f in block["reconciliation"]), block


def test_each_server_start_records_the_engines_openapi_in_the_bundle(ran: Ran) -> None:
    events = ran.lines("lifecycle.jsonl")
    shas = set()
    for event in events:
        contract = event["contract"]
        assert contract["help"] is None, "a simulator arm is not a vllm arm"
        openapi = contract["openapi"]
        path = ran.bundle / openapi["relpath"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == openapi["sha256"]
        assert "/v1/videos" in json.loads(path.read_text())["paths"]
        shas.add(openapi["sha256"])
    assert len(shas) == 1, "every server of the same simulator serves the same contract"
    assert len(list((ran.bundle / "contracts").iterdir())) == 1, "stored once"


def test_the_summary_and_the_report_show_which_stage_moved(ran: Ran) -> None:
    assert "  stages (attribution, not a verdict: two-sided 95% per part over k = 3 AB/BA pairs" in ran.output
    assert "      interval excludes 1: " in ran.output
    report = ran.bundle.parent / "reports" / ran.bundle.name
    html = (report / "report.html").read_text()
    for candidate in (VAE, DIT):
        assert f'id="fig-stage-ratios-5s-{candidate}" data-figure="stage-ratios"' in html
    summary = (report / "summary.md").read_text()
    assert f"- {VAE} stages (attribution, not a verdict; two-sided 95% per part): interval excludes 1: " in summary
    assert re.search(r"interval excludes 1: .*profiler:decode 0\.[67]\d\d \[", summary), summary
    # The typed document reads verdict.json back: the same parts, and 'moved' as the JSON says.
    typed = ran.document.candidates[VAE].durations["5s"].stages
    assert typed is not None
    assert [p.moved for p in typed.parts] == [p["moved"] for p in ran.duration(VAE)["stages"]["parts"]]
    if browser.find_chromium() is not None:  # .ci/run installs it
        page = browser.load(report / "report.html")
        assert page.problems == [] and page.figures[f"fig-stage-ratios-5s-{VAE}"], page.problems


def test_the_ledger_shows_which_stage_moved_beside_the_verdict_and_says_it_is_not_one(
        ran: Ran, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = tmp_path / "ledger.jsonl"
    add_bundle(ran.bundle, ledger)
    assert main(["ledger", "show", "--ledger", str(ledger)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    for candidate, (changed, _) in DESIGN.items():
        row = next(i for i, line in enumerate(lines) if f" {candidate} " in line and " 5s " in line)
        note = next(line for line in lines[row + 1:] if "stages (attribution, not the verdict)" in line)
        assert re.search(rf"interval excludes 1: .*{re.escape(changed)} 0\.\d+ \[", note), note
    entries = read_ledger(ledger).entries
    assert all(e["stages"]["statement"].startswith("attribution, not a verdict") for e in entries)
    assert verify_ledger(ledger).ok, verify_ledger(ledger).problems
