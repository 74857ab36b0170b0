"""The manifest as one typed record (:class:`h3bench.evidence.manifest.Manifest`): written and read through the codec.

A bundle that an earlier h3bench wrote keeps reading and verifying: ``fixtures/bundles/`` holds one written
before the manifest was typed (``fixtures/bundles/make_bundles.py`` says how). A missing or malformed field is one
:class:`~h3bench.errors.EvidenceError`, naming the file and the field, wherever the manifest is read.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from h3bench.cli.schemas import shipped
from h3bench.errors import EvidenceError
from h3bench.evidence import Bundle, BundleReader, verify
from h3bench.evidence.manifest import ArmLaunch, Manifest, RunKind
from h3bench.session.stored import open_verified

FIXTURE = next((Path(__file__).resolve().parents[2] / "fixtures" / "bundles").glob("*-sim-manifest-*"))


@pytest.fixture
def older(tmp_path: Path) -> Path:
    """A copy of the bundle written before the typed manifest."""
    return Path(shutil.copytree(FIXTURE, tmp_path / FIXTURE.name))


def _without_nulls(value: Any) -> Any:
    """A JSON value without its null members: an absent optional key and a null one say the same."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def test_a_bundle_written_before_the_typed_manifest_verifies_and_reads_as_the_record(older: Path) -> None:
    assert verify(older).ok
    stored = open_verified(older)
    manifest = BundleReader.open(older).manifest
    raw = json.loads((older / "manifest.json").read_text())

    assert stored.manifest == manifest and manifest.spec_id == raw["spec_id"] == stored.spec_id
    assert manifest.run == RunKind("FORMAL") and not manifest.diagnostic and not stored.diagnostic
    assert manifest.arms["baseline"] == ArmLaunch(tuple(raw["arms"]["baseline"]["argv"]),
                                                  raw["arms"]["baseline"]["env"])
    assert (manifest.session, manifest.lpips_weights, manifest.environment) == (
        raw["session"], raw["lpips_weights"], raw["environment"])
    assert manifest.shard is None and manifest.pool is None
    # Written again, the record gives the keys and values it was read from (no key lost, none renamed).
    assert _without_nulls(manifest.to_record(older / "manifest.json")) == _without_nulls(raw)
    # What the ledger knows a campaign by is unchanged: its baseline's launch, as the manifest recorded it.
    launch = {key: raw["arms"]["baseline"][key] for key in ("argv", "env")}
    assert stored.baseline_command() == json.dumps(launch, sort_keys=True, separators=(",", ":"))
    assert stored.started_at == raw["started_at"] and stored.harness()["h3bench_version"] == raw["h3bench_version"]
    assert stored.document() is not None and stored.runspec().spec_id == raw["spec_id"]
    jsonschema.Draft202012Validator(shipped("manifest.schema.json")).validate(raw)  # the schema takes older bundles


def test_the_ledger_reads_a_bundle_written_before_the_typed_manifest(older: Path) -> None:
    from h3bench.ledger.entries import entries_of

    entries = entries_of(open_verified(older))
    assert [(e.candidate, e.duration) for e in entries] == [("clean", "5")]
    assert all(e.bundle.shard is None and e.bundle.pooled == () for e in entries)


def test_a_record_written_reads_back_as_itself(tmp_path: Path) -> None:
    manifest = Manifest.new(spec_id="ab" * 32, spec={"name": "t"}, session="s1", run=RunKind("DIAGNOSTIC", ("why",)),
                            arms={"baseline": ArmLaunch(("python", "-m", "x"), {"A": "1"}, "vllm-omni 0.1")})
    with Bundle.create(tmp_path, manifest) as bundle:
        assert bundle.manifest == manifest
    assert BundleReader.open(bundle.path).manifest == manifest and verify(bundle.path).ok
    jsonschema.Draft202012Validator(shipped("manifest.schema.json")).validate(
        json.loads((bundle.path / "manifest.json").read_text()))
    assert manifest.diagnostic and manifest.diagnostic_reasons() == ("why",)


BROKEN = [
    (lambda m: m.pop("spec_id"), "spec_id: missing"),
    (lambda m: m.update(started_at=5), "started_at: expected str, found 5"),
    (lambda m: m["arms"]["baseline"].pop("argv"), "arms.baseline.argv: missing"),
    (lambda m: m.update(run={"kind": ["FORMAL"]}), "run.kind: expected str, found ['FORMAL']"),
]


@pytest.mark.parametrize(("breaks", "named"), BROKEN, ids=["spec_id", "started_at", "arm argv", "run kind"])
def test_a_missing_or_malformed_field_is_one_named_error_wherever_it_is_read(older: Path, breaks, named) -> None:
    path = older / "manifest.json"
    data = json.loads(path.read_text())
    breaks(data)
    path.write_text(json.dumps(data))
    expected = f"{path}: {named}"

    for read in (BundleReader.open, Bundle.open, Manifest.read):
        with pytest.raises(EvidenceError, match="^" + expected.replace("[", r"\[").replace("]", r"\]") + "$") as exc:
            read(older)
        assert exc.value.path == str(path)
    assert f"manifest.json: {expected}" in verify(older).problems
    with pytest.raises(EvidenceError, match=named.replace("[", r"\[").replace("]", r"\]")):
        open_verified(older)
