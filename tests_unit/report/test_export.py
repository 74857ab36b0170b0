"""What dashboards read: ``h3bench export`` in three formats, the shipped JSON Schemas, the job summary's cut.

The bundles are real and sealed (:mod:`tests_unit.bundlesim`: the project's own writer and verdict), so each
export is what a campaign's would be; the schemas are checked against the records they describe, both ways:
real records validate, and a record with a missing or mistyped field does not.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from pathlib import Path

import jsonschema
import pytest

from h3bench.cli import main
from h3bench.cli.export import FORMAT_NAMES
from h3bench.cli.schemas import SCHEMAS, derived, shipped
from h3bench.course.shards import ShardHost, ShardRun
from h3bench.evidence import BundleReader
from h3bench.evidence.verify import final_sha256
from h3bench.ledger.append import add_bundle
from h3bench.report.export import FORMATS, Provenance, export_of, write
from h3bench.report.markdown import STEP_SUMMARY_BYTES, fit_summary
from h3bench.runspec import load_runspec
from h3bench.verdict.verdicts import VerdictDocument
from tests_unit.bundlesim import FIXTURES, write_bundle

# Its module fixtures run once: every test of the module on one xdist worker.
pytestmark = pytest.mark.xdist_group("export")

# Bencher's published JSON Schema of its metric format (https://bencher.dev/bmf.json, draft-07), as published; the
# format's page (https://bencher.dev/docs/reference/bencher-metric-format) shows it: numbers only, "value" required.
BMF_SCHEMA = {
    "$id": "https://bencher.dev/bmf.json",
    "$schema": "http://json-schema.org/draft-07/schema",
    "type": "object",
    "patternProperties": {".+": {"type": "object", "patternProperties": {".+": {
        "type": "object",
        "properties": {"value": {"type": "number"}, "lower_value": {"type": "number"}, "upper_value": {"type": "number"}},
        "required": ["value"]}}}},
}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """A sealed bundle of sim.toml whose candidate is 10 % faster at both durations."""
    spec = load_runspec(FIXTURES / "sim.toml")
    return write_bundle(tmp_path_factory.mktemp("export"), spec,
                        lambda block, index: (0.9 if block.letter == "B" else 1.0) * (1 + 0.01 * index) * block.duration,
                        started_at="2026-12-01T00:00:00Z")


def _export(bundle: Path, fmt: str, capsys) -> object:
    assert main(["export", str(bundle), "--format", fmt]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_command_offers_every_format_there_is():
    assert set(FORMAT_NAMES) == set(FORMATS)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_the_shipped_schemas_are_what_the_records_derive(name):
    # The files are derived from the dataclasses that write the records: a field added to a record without the
    # schema written again (python -m h3bench.cli.schemas) fails here.
    assert shipped(name) == derived(name)
    jsonschema.Draft202012Validator.check_schema(shipped(name))


def test_a_real_verdict_json_validates_and_a_broken_one_does_not(bundle):
    validator = jsonschema.Draft202012Validator(shipped("verdict.schema.json"))
    document = json.loads((bundle / "verdict.json").read_text())
    assert list(validator.iter_errors(document)) == []
    duration = document["candidates"]["clean"]["durations"]["5s"]
    for broken in ({**duration, "speed": "FASTER"}, {k: v for k, v in duration.items() if k != "quality_pairs"},
                   {**duration, "estimate": {**duration["estimate"], "k": "four"}}, {**duration, "surprise": 1}):
        changed = copy.deepcopy(document)
        changed["candidates"]["clean"]["durations"]["5s"] = broken
        assert list(validator.iter_errors(changed)), broken


def test_a_real_ledger_line_validates(bundle, tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    add_bundle(bundle, ledger)
    validator = jsonschema.Draft202012Validator(shipped("ledger-record.schema.json"))
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert len(lines) == 2  # one per candidate and duration
    for line in lines:
        assert list(validator.iter_errors(line)) == []
    assert list(validator.iter_errors({**lines[0], "hash": "not a hash"}))


def test_the_json_export_carries_the_seal_and_spec_id_in_every_record_and_validates(bundle, capsys):
    exported = _export(bundle, "json", capsys)
    jsonschema.Draft202012Validator(shipped("export.schema.json")).validate(exported)
    seal, spec_id = final_sha256(bundle), json.loads((bundle / "manifest.json").read_text())["spec_id"]
    assert exported["provenance"]["final_sha256"] == seal and exported["provenance"]["spec_id"] == spec_id
    assert sorted((r["candidate"], r["duration"]) for r in exported["records"]) == [("clean", "15s"), ("clean", "5s")]
    verdict = json.loads((bundle / "verdict.json").read_text())
    for record in exported["records"]:
        assert (record["final_sha256"], record["spec_id"]) == (seal, spec_id)
        written = verdict["candidates"]["clean"]["durations"][record["duration"]]
        assert record["ratio"] == written["estimate"]["geomean"] and record["verdict"] == written["outcome"]
        assert (record["ratio_lower"], record["ratio_upper"]) == (written["estimate"]["ci_low"],
                                                                  written["estimate"]["ci_high"])


def test_bmf_is_bencher_metric_format_and_reads_back_as_the_verdicts_numbers(bundle, capsys):
    bmf = _export(bundle, "bmf", capsys)
    jsonschema.Draft7Validator(BMF_SCHEMA).validate(bmf)
    # Read back as Bencher's reader takes a metric (JsonNewMetric: value, lower_value, upper_value; other keys
    # are ignored): the ratio and its bounds are the verdict's.
    verdict = json.loads((bundle / "verdict.json").read_text())
    seal = final_sha256(bundle)
    for key, marker in (("5s", "ref2va_5s"), ("15s", "ref2va_15s")):
        (name,) = [n for n in bmf if n.endswith(f"/{marker}/clean")]
        ratio = bmf[name]["ratio"]
        estimate = verdict["candidates"]["clean"]["durations"][key]["estimate"]
        assert (ratio["value"], ratio["lower_value"], ratio["upper_value"]) == (
            estimate["geomean"], estimate["ci_low"], estimate["ci_high"])
        assert name.startswith(f"sim@{verdict['spec_id'][:12]}/")
        latency = bmf[f"{name}/baseline"]["latency"]["value"]
        assert latency == pytest.approx(verdict["candidates"]["clean"]["durations"][key]["arms"][0]["median_e2e_s"] * 1e9)
    assert all(metric["h3bench_final_sha256"] == seal for measures in bmf.values() for metric in measures.values())


def test_github_benchmark_is_custom_smaller_is_better_with_the_provenance_in_extra(bundle, capsys):
    entries = _export(bundle, "github-benchmark", capsys)
    assert isinstance(entries, list) and entries
    seal = final_sha256(bundle)
    for entry in entries:
        assert set(entry) <= {"name", "unit", "value", "range", "extra"} and {"name", "unit", "value"} <= set(entry)
        assert isinstance(entry["value"], float) and seal in entry["extra"]
    assert len({e["name"] for e in entries}) == len(entries)
    ratios = [e for e in entries if e["name"].endswith(" ratio")]
    assert len(ratios) == 2 and all(e["value"] < 1 for e in ratios)


def test_export_refuses_a_bundle_that_does_not_verify(bundle, tmp_path, capsys):
    import shutil

    copy_ = Path(shutil.copytree(bundle, tmp_path / "changed"))
    samples = copy_ / "samples.jsonl"
    samples.write_text(samples.read_text().replace('"e2e_s":', '"e2e_s":1', 1))
    assert main(["export", str(copy_), "--format", "bmf"]) != 0
    err = capsys.readouterr().err
    assert "samples.jsonl" in err and "Traceback" not in err


def test_export_out_writes_the_file_whole(bundle, tmp_path, capsys):
    out = tmp_path / "bmf.json"
    assert main(["export", str(bundle), "--format", "bmf", "--out", str(out)]) == 0
    assert json.loads(out.read_text()) and "final.json SHA-256" in capsys.readouterr().err


def test_a_job_summary_is_cut_at_a_line_to_fit_githubs_limit_and_names_the_artifact():
    text = "".join(f"| row {i} | {'é' * 50} |\n" for i in range(40_000))  # about 4 MB, multi-byte characters
    cut = fit_summary(text, STEP_SUMMARY_BYTES, "https://example.invalid/run#artifacts")
    data = cut.encode("utf-8")
    assert len(data) <= STEP_SUMMARY_BYTES < len(text.encode("utf-8"))
    kept, note = cut.rsplit("\n> ", 1)
    assert text.startswith(kept) and kept.endswith("|\n")  # whole lines only
    assert "Cut" in note and "https://example.invalid/run#artifacts" in note and str(len(text.encode())) in note
    assert fit_summary("short\n", STEP_SUMMARY_BYTES, "x") == "short\n"  # what fits is left alone


def _unbounded(bundle: Path) -> tuple[VerdictDocument, Provenance]:
    """The bundle's verdict with the 5 s ratio's upper bound unbounded, as a stopped candidate's or an incomplete
    pool's can be (too few pairs for a bound on that side)."""
    document = VerdictDocument.read(BundleReader.open(bundle))
    assert document is not None
    verdict = document.candidates["clean"]
    d = verdict.durations["5s"]
    assert d.estimate is not None
    d = dataclasses.replace(d, estimate=dataclasses.replace(d.estimate, ci_high=math.inf))
    document = dataclasses.replace(document, candidates={"clean": dataclasses.replace(
        verdict, durations={**verdict.durations, "5s": d})})
    return document, Provenance(bundle.name, final_sha256(bundle) or "", document.spec_id, document.spec_name,
                                "sim", "2026-12-01T00:00:00Z", "0.1.0", "FORMAL", None)


def test_an_unbounded_side_is_left_out_of_bmf_and_named_so_bencher_s_schema_takes_it(bundle):
    """Issue 43: the BMF export wrote ``"upper_value": "inf"`` (a string), which Bencher's schema rejects."""
    document, provenance = _unbounded(bundle)

    bmf = json.loads(write(export_of(document, provenance), "bmf"))

    jsonschema.Draft7Validator(BMF_SCHEMA).validate(bmf)
    (name,) = [n for n in bmf if n.endswith("/ref2va_5s/clean")]
    ratio = bmf[name]["ratio"]
    assert "upper_value" not in ratio and ratio["h3bench_unbounded"] == ["upper_value"]
    assert ratio["lower_value"] == document.candidates["clean"].durations["5s"].estimate.ci_low
    (other,) = [n for n in bmf if n.endswith("/ref2va_15s/clean")]
    assert "h3bench_unbounded" not in bmf[other]["ratio"] and "upper_value" in bmf[other]["ratio"]
    github = json.loads(write(export_of(document, provenance), "github-benchmark"))
    assert all(isinstance(entry["value"], float) for entry in github)


@pytest.fixture(scope="module")
def shard(tmp_path_factory) -> Path:
    """A sealed bundle of sim.toml marked as shard 1/2 of a campaign over two hosts (its shard record)."""
    spec = load_runspec(FIXTURES / "sim.toml")
    return write_bundle(tmp_path_factory.mktemp("shard"), spec, lambda block, index: block.duration,
                        started_at="2026-12-01T00:00:00Z",
                        manifest_extra={"shard": ShardRun(1, 2, ShardHost("host-1")).to_dict()})


def test_a_shard_s_export_says_it_is_a_shard_and_is_never_named_like_the_campaign(shard, bundle, capsys):
    """Issue 43: one shard's export was named as the whole campaign's would be, and did not say it was a shard."""
    own = _export(shard, "json", capsys)
    assert own["provenance"]["shard"] == "shard 1/2" and _export(bundle, "json", capsys)["provenance"]["shard"] is None

    bmf, campaign = _export(shard, "bmf", capsys), _export(bundle, "bmf", capsys)

    jsonschema.Draft7Validator(BMF_SCHEMA).validate(bmf)
    assert bmf and all("/shard-1-of-2/" in name for name in bmf)
    assert not any("shard" in name for name in campaign) and not set(bmf) & set(campaign)
    github = _export(shard, "github-benchmark", capsys)
    assert github and all(e["extra"].startswith("shard 1/2 of a campaign over several hosts, not its verdict; ")
                          and "/shard-1-of-2/" in e["name"] for e in github)
