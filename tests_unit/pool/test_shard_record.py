"""The shard record (issue 43): one typed record, written by the runner, read through the one codec everywhere.

A shard's manifest holds its ``shard`` record (:class:`h3bench.course.shards.ShardRun`) and a pool's manifest
names each shard it pooled (:class:`h3bench.pool.shards.PooledShard`). The resume, the pool, the ledger, the export
and the verdict read them through :mod:`h3bench.evidence.codec`, so a missing or malformed field is the same one-line
error wherever it is read. Records as the runner and the pool wrote them before they were typed still read.
The bundles here are real and sealed (:mod:`tests_unit.bundlesim`), no server runs.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from h3bench.cli import main
from h3bench.course.shards import Shard, ShardHost, ShardRun
from h3bench.errors import EvidenceError
from h3bench.evidence import BundleReader
from h3bench.evidence.codec import from_json, to_json
from h3bench.evidence.manifest import Manifest
from h3bench.ledger.campaigns import ShardMark, pooled_shards, shard_mark
from h3bench.pool.shards import PooledShard
from h3bench.run.resume import resumed_shard
from h3bench.session.results import Results
from h3bench.session.settings import Settings
from h3bench.verdict import assemble
from tests_unit.bundlesim import npu_spec, write_bundle

SEAL = "ab" * 32
# The shard record as session/runner.py wrote it before it was typed (h3bench 0.1.0): host_identity()'s keys.
UNTYPED = {"index": 1, "count": 2, "round": 1, "looks_sha256": None,
           "blocks": ["5s-clean-1A-baseline", "5s-clean-2B-clean", "5s-clean-3B-clean", "5s-clean-4A-baseline"],
           "host": {"name": "host-1", "hostname": "box-1", "machine_id": "0123abcd", "device_serials": ["S1"],
                    "bus_ids": ["0000:c1:00.0"], "driver": {"version": "24.1"}, "cann": None}}
# One shard as pool/fanin.py named it in a pool's manifest before it was typed: verdict.ShardRecord's fields, the
# shard's path and its host record.
UNTYPED_POOLED = {"index": 2, "count": 2, "round": 1, "host": UNTYPED["host"] | {"name": "host-2"},
                  "bundle": "20261120T100000Z-sim-0123456789ab", "final_sha256": SEAL, "blocks": 0,
                  "path": "/evidence/s2/20261120T100000Z-sim-0123456789ab"}


def _m(**fields: object) -> Manifest:
    """A manifest holding only ``fields`` besides what every manifest has."""
    return Manifest.new(spec_id="ab" * 32, spec={}, **fields)


def test_a_record_written_before_it_was_typed_reads_and_writes_back_the_same():
    run = ShardRun.of(_m(shard=UNTYPED))

    assert run is not None and run.shard == Shard(1, 2) and run.round == 1 and run.host.name == "host-1"
    assert run.host.device_serials == ("S1",) and run.blocks[0] == "5s-clean-1A-baseline"
    assert run.to_dict() == UNTYPED
    assert shard_mark(_m(shard=UNTYPED), SEAL) == ShardMark(1, 2, 1, "host-1", SEAL)
    assert ShardRun.of(_m()) is None and shard_mark(_m(), SEAL) is None


def test_a_pool_record_written_before_it_was_typed_reads_as_the_pool_and_the_verdict_name_it():
    (pooled,) = PooledShard.of(_m(pool={"shards": [UNTYPED_POOLED], "missing": []}))

    assert to_json(pooled) == {**UNTYPED_POOLED, "seals": []}  # a pool written before it named every state
    assert pooled_shards(_m(pool={"shards": [UNTYPED_POOLED]})) == (ShardMark(2, 2, 1, "host-2", SEAL),)
    assert pooled.record().host == "host-2" and pooled.record().final_sha256 == SEAL
    assert PooledShard.of(_m()) == ()


names = st.text("abcdefgh-0123456789", min_size=1, max_size=12)


@given(st.integers(1, 8).flatmap(lambda count: st.tuples(st.integers(1, count), st.just(count))),
       st.integers(1, 5), names, st.lists(names, max_size=3), st.none() | st.text("0123456789abcdef", min_size=64,
                                                                                 max_size=64))
def test_what_the_runner_writes_is_what_every_reader_reads(place, round_, host, serials, looks):
    index, count = place
    run = ShardRun(index, count, ShardHost(host, device_serials=tuple(serials)), round_, looks, (f"{index}",))

    assert ShardRun.of(_m(shard=run.to_dict())) == run
    assert from_json(ShardRun, to_json(run)) == run
    assert shard_mark(_m(shard=run.to_dict()), SEAL) == ShardMark(index, count, round_, host, SEAL)


BAD = [
    ("index", lambda r: r.pop("index"), "shard.index: missing"),
    ("round", lambda r: r.update(round="two"), "shard.round: expected int, found 'two'"),
    ("host", lambda r: r["host"].pop("name"), "shard.host.name: missing"),
    ("blocks", lambda r: r.update(blocks="5s-clean-1A-baseline"), "shard.blocks: expected tuple, found "
                                                                  "'5s-clean-1A-baseline'"),
]


@pytest.mark.parametrize(("spoil", "expected"), [(s, e) for _, s, e in BAD], ids=[i for i, _, _ in BAD])
def test_a_missing_or_malformed_field_is_one_named_error_from_the_record(spoil, expected):
    record = copy.deepcopy(UNTYPED)
    spoil(record)

    with pytest.raises(EvidenceError) as raised:
        ShardRun.of(_m(shard=record), where="B/manifest.json")
    assert str(raised.value) == f"B/manifest.json: {expected}"
    with pytest.raises(EvidenceError) as marked:
        shard_mark(_m(shard=record), SEAL, where="B/manifest.json")
    assert str(marked.value) == str(raised.value)


@pytest.fixture(scope="module")
def spoiled(tmp_path_factory) -> tuple[Path, str]:
    """A sealed bundle whose shard record has no round-trip: its index is missing (a writer that did not check)."""
    record = copy.deepcopy(UNTYPED)
    record.pop("index")
    with pytest.MonkeyPatch.context() as patched:  # the verdict reads the record too: the writer skips it here
        patched.setattr(assemble, "run_notes", lambda records: ())
        bundle = write_bundle(tmp_path_factory.mktemp("spoiled"), npu_spec(clean={}), lambda block, index: 1.0,
                              started_at="2026-11-20T10:00:00.000Z", stop_after=3, manifest_extra={"shard": record})
    return bundle, f"{bundle}/manifest.json: shard.index: missing"


@pytest.mark.parametrize("command", [["pool", "{b}", "--out", "{out}"], ["ledger", "add", "{b}", "--ledger", "{out}"],
                                     ["export", "{b}", "--format", "bmf"]], ids=["pool", "ledger", "export"])
def test_every_command_that_reads_the_record_names_the_same_field(spoiled, command, tmp_path, capsys):
    bundle, expected = spoiled

    code = main([part.format(b=bundle, out=tmp_path / "out") for part in command])

    assert (code, capsys.readouterr().err) == (1, f"h3bench: error: {expected}\n")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_the_resume_and_the_verdict_name_the_same_field(spoiled):
    bundle, expected = spoiled
    reader = BundleReader.open(bundle)

    with pytest.raises(EvidenceError, match="^" + expected.replace(".", r"\.") + "$"):
        resumed_shard(bundle, None, None)
    with pytest.raises(EvidenceError) as raised:
        assemble.run_notes(Results(npu_spec(clean={}), Settings(None), bundle=reader))
    assert str(raised.value) == expected
