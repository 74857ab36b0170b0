"""A bundle is one campaign whatever its path: the ledger, history and verify know it by its content (issue 27).

Bundles here are real, written by the evidence writer without servers
(:mod:`tests_unit.bundlesim`): a campaign interrupted after some blocks and
sealed as ``interrupted``, then resumed into ``resume-1/`` as ``--resume``
does, and sealed as completed.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pytest

from h3bench import evidence
from h3bench.cli import main
from h3bench.ledger.append import add_bundle
from h3bench.ledger.chain import read_ledger, replaces
from h3bench.ledger.history import read_history
from h3bench.ledger.verify import verify_ledger
from h3bench.runspec import parse_runspec
from h3bench.verdict import assemble
from tests_unit.bundlesim import npu_spec, resume_bundle, write_bundle

CAMPAIGNS = 6


def latency(seed: int, speeds: dict[str, float] | None = None):
    rng = random.Random(seed)
    speeds = speeds or {"baseline": 100.0, "clean": 88.0}
    return lambda block, index: speeds[block.arm] * block.duration / 5 * (1 + rng.gauss(0, 0.004))


def lines_of(ledger: Path) -> list[dict]:
    return [json.loads(line) for line in ledger.read_text().splitlines()]


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def interrupted(tmp_path) -> Path:
    """A campaign sealed as interrupted after 6 of its 20 blocks (as Ctrl-C leaves it)."""
    return write_bundle(tmp_path / "evidence", npu_spec(clean={}), latency(1), started_at="2026-11-20T10:00:00.000Z",
                        stop_after=6)


# -- the ledger ----------------------------------------------------------------------------------------------


def test_the_writer_supersedes_what_the_chain_says_an_entry_replaces(interrupted, tmp_path):
    """The writer asks the chain (:func:`h3bench.ledger.chain.replaces`): no second account of the rule."""
    ledger = tmp_path / "ledger.jsonl"
    add_bundle(interrupted, ledger)
    resume_bundle(interrupted, npu_spec(clean={}), latency(2))
    add_bundle(interrupted, ledger)

    found = read_ledger(ledger)
    assert not found.problems
    for line in found.lines:
        assert line.entry is not None and line.record is not None
        allowed = [old.seq for old in found.lines[: line.seq]
                   if old.entry is not None and replaces(line.entry, old.entry) is not None]
        assert line.record.get("supersedes", []) == allowed
    assert found.superseded_by == {0: 2, 1: 3}


def test_a_bundle_entered_interrupted_and_again_completed_is_one_history(interrupted, tmp_path, capsys):
    """Issue 27: ``ledger verify`` failed for good with "final.json changed" once the bundle was resumed."""
    ledger = tmp_path / "ledger.jsonl"
    early_copy = shutil.copytree(interrupted, tmp_path / "copies" / interrupted.name)
    code, out, _ = cli(capsys, "ledger", "add", str(interrupted), "--ledger", str(ledger))
    assert code == 0 and out.count(": line ") == 2
    assert {e["bundle"]["outcome"] for e in lines_of(ledger)} == {"interrupted"}

    resume_bundle(interrupted, npu_spec(clean={}), latency(2))
    code, out, _ = cli(capsys, "ledger", "add", str(interrupted), "--ledger", str(ledger))

    assert code == 0, out
    assert "line 3: clean 5 s accepted (supersedes line 1)" in out
    assert "line 4: clean 15 s accepted (supersedes line 2)" in out
    entries = lines_of(ledger)
    assert [e.get("supersedes") for e in entries] == [None, None, [0], [1]]
    seals = [sha for _, sha in evidence.Bundle.open(interrupted).seals()]
    assert entries[2]["bundle"]["seals"] == seals and entries[0]["bundle"]["final_sha256"] == seals[0]
    code, out, _ = cli(capsys, "ledger", "verify", "--ledger", str(ledger))
    assert code == 0 and "OK (4 entries, 2 bundles checked" in out, out
    code, out, _ = cli(capsys, "ledger", "show", "--ledger", str(ledger))
    assert code == 0 and out.count("superseded by #") == 2 and "! superseded by #2 (a later state" in out
    # The interrupted state again, from a copy made before the resume: the same campaign, already entered.
    code, _, err = cli(capsys, "ledger", "add", str(early_copy), "--ledger", str(ledger))
    assert code == 2 and "already in the ledger (lines 1, 2" in err


def test_an_earlier_state_after_the_later_one_is_refused(interrupted, tmp_path, capsys):
    ledger = tmp_path / "ledger.jsonl"
    early_copy = shutil.copytree(interrupted, tmp_path / "copies" / interrupted.name)
    resume_bundle(interrupted, npu_spec(clean={}), latency(2))
    add_bundle(interrupted, ledger)
    before = ledger.read_bytes()

    code, _, err = cli(capsys, "ledger", "add", str(early_copy), "--ledger", str(ledger))

    assert code == 2 and "an earlier state of a bundle whose later state is in the ledger (lines 1, 2)" in err
    assert ledger.read_bytes() == before


def test_a_forged_supersession_breaks_the_line(interrupted, tmp_path):
    from h3bench.ledger.chain import entry_hash

    ledger = tmp_path / "ledger.jsonl"
    other = write_bundle(tmp_path / "other", npu_spec(clean={}), latency(3), started_at="2026-11-21T10:00:00.000Z")
    add_bundle(interrupted, ledger)
    add_bundle(other, ledger)
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    lines[2]["supersedes"] = [0]  # the other campaign claims to replace this one's entry
    prev = lines[1]["hash"]
    for line in lines[2:]:
        line["prev"] = prev
        line["hash"] = prev = entry_hash(line)
    ledger.write_text("".join(json.dumps(line) + "\n" for line in lines))

    assert "line 3: supersedes line 1, which is not an earlier state of the same bundle's clean at 5 s, nor of a " \
        "campaign it pools" in verify_ledger(ledger).problems


def test_a_rewritten_earlier_seal_of_a_resumed_bundle_is_caught(interrupted):
    """The last final.json pins every segment: resume-1/resume.json holds the earlier seal's SHA-256."""
    resume_bundle(interrupted, npu_spec(clean={}), latency(2))
    assert evidence.verify(interrupted).ok
    first = interrupted / "final.json"
    document = json.loads(first.read_text())
    document["outcome"] = "completed"  # the interrupted run rewritten as if it had completed
    first.unlink()
    first.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")

    problems = evidence.verify(interrupted).problems

    assert len(problems) == 1 and problems[0].startswith("final.json: sha256 ")
    assert "but resume-1/resume.json recorded" in problems[0]


def test_a_resumed_bundle_that_moved_is_found_by_any_of_its_seals(interrupted, tmp_path, capsys):
    ledger = tmp_path / "ledger.jsonl"
    add_bundle(interrupted, ledger)
    resume_bundle(interrupted, npu_spec(clean={}), latency(2))
    add_bundle(interrupted, ledger)
    archive = tmp_path / "archive"
    shutil.move(str(tmp_path / "evidence"), archive)

    code, out, _ = cli(capsys, "ledger", "verify", "--ledger", str(ledger), "--bundles", str(archive))

    assert code == 0 and "OK (4 entries, 2 bundles checked, 0 entries' bundles not found)" in out, out


# -- history ---------------------------------------------------------------------------------------------------


def series_of(root: Path, *, seed: int, spec=None, engine: bool = False) -> list[Path]:
    """CAMPAIGNS campaigns of one spec, one a day, each at its own level (2 % noise per campaign)."""
    rng = random.Random(seed)
    spec = spec or npu_spec()
    bundles = []
    for number in range(CAMPAIGNS):
        level = 100.0 * rng.lognormvariate(0, 0.02)
        noise = random.Random(seed * 100 + number)
        this = spec
        if engine:  # every campaign on a new engine commit: a new spec id, only its source differs
            data = spec.model_dump(mode="json")
            data["source"]["engine_commit"] = f"{number:02x}" * 20
            this = parse_runspec(data, source="test")
        bundles.append(write_bundle(root, this, lambda block, i, level=level, noise=noise:
                                    level * block.duration / 5 * noise.gauss(1, 0.003),
                                    started_at=f"2026-10-{number + 1:02d}T08:00:00.000Z"))
    return bundles


def test_a_directory_named_twice_or_copied_is_counted_once(tmp_path, capsys, monkeypatch):
    """Issue 27: the same directories named relatively and absolutely were two campaigns each, and flagged a step."""
    bundles = series_of(tmp_path / "evidence", seed=11)
    copy = shutil.copytree(bundles[2], tmp_path / "elsewhere" / bundles[2].name)
    monkeypatch.chdir(tmp_path)

    code, out, _ = cli(capsys, "history", "evidence", str(tmp_path / "evidence"), "elsewhere")

    assert code == 0 and "REGRESSION" not in out
    assert out.count(f"no step flagged over {CAMPAIGNS} campaign(s)") == 2
    (skipped,) = [line for line in out.splitlines() if line.startswith("skipped ")]
    assert {skipped.split()[1].rstrip(":"), skipped.split()[6]} == {str(copy), str(bundles[2])}
    assert skipped.endswith("(a copy): counted once")
    assert [len(s.campaigns) for s in read_history([Path("evidence"), tmp_path / "evidence"]).series] == [CAMPAIGNS] * 2


def test_an_earlier_copy_of_a_resumed_bundle_is_the_same_campaign(interrupted, tmp_path):
    early_copy = shutil.copytree(interrupted, tmp_path / "copies" / interrupted.name)
    resume_bundle(interrupted, npu_spec(clean={}), latency(2))

    history = read_history([tmp_path / "evidence", tmp_path / "copies"])

    assert [len(s.campaigns) for s in history.series] == [1, 1]
    assert all(s.campaigns[0].bundle == str(interrupted) for s in history.series)
    assert history.skipped == ((str(early_copy), f"the same campaign as {interrupted} (an earlier state of it, "
                                "resumed since): counted once"),)


def test_bundles_of_different_spec_ids_are_never_one_series(tmp_path):
    """Issue 27: history put bundles of different spec ids in one series, against README."""
    data = npu_spec().model_dump(mode="json")
    data["protocol"]["warmups_per_block"] = 2  # a spec that measures differently: same hardware, workload, baseline
    other = parse_runspec(data, source="test")
    series_of(tmp_path / "a", seed=1)
    series_of(tmp_path / "b", seed=2, spec=other)

    history = read_history([tmp_path / "a", tmp_path / "b"])

    assert sorted(len(s.campaigns) for s in history.series) == [CAMPAIGNS] * 4
    assert len({s.spec for s in history.series}) == 2


def test_a_new_engine_commit_is_what_a_series_follows(tmp_path):
    """Specs that differ only in ``source`` (the engine under test) have different ids and one series."""
    bundles = series_of(tmp_path / "evidence", seed=3, engine=True)
    ids = {json.loads((b / "manifest.json").read_text())["spec_id"] for b in bundles}

    history = read_history([tmp_path / "evidence"])

    assert len(ids) == CAMPAIGNS
    assert [len(s.campaigns) for s in history.series] == [CAMPAIGNS] * 2
    assert [c.engine_commit for c in history.series[0].campaigns] == [f"{n:02x}" * 20 for n in range(CAMPAIGNS)]


def test_paths_are_resolved_but_links_do_not_double_count(tmp_path):
    bundles = series_of(tmp_path / "evidence", seed=4)
    os.symlink(tmp_path / "evidence", tmp_path / "link")

    history = read_history([tmp_path / "evidence", tmp_path / "link"])

    assert [len(s.campaigns) for s in history.series] == [len(bundles)] * 2


@pytest.mark.parametrize(("record", "expected"), [
    ({"shard": {"index": "one", "count": 2, "round": 1, "host": {"name": "host-1"}}},
     "shard.index: expected int, found 'one'"),
    ({"pool": {"shards": [{"index": 1, "count": 2}]}}, "pool.shards[0].round: missing"),
    ({"pool": {"shards": [{"index": 1, "count": 2, "round": 1, "host": {"name": "host-1"}, "bundle": "b"}]}},
     "pool.shards[0].final_sha256: missing"),
], ids=["shard", "pool", "pool-seal"])
def test_a_malformed_shard_or_pool_record_is_one_line_and_history_skips_it(tmp_path, capsys, monkeypatch, record,
                                                                           expected):
    """A campaign over several hosts is known by these records (issue 37): one that cannot be read is named, never a
    traceback. Issue 43: the field is named by the one codec, wherever the record is read."""
    with monkeypatch.context() as patched:  # the verdict reads the shard record too: a writer that did not check it
        patched.setattr(assemble, "run_notes", lambda records: ())
        bundle = write_bundle(tmp_path / "evidence", npu_spec(clean={}), latency(1),
                              started_at="2026-11-20T10:00:00.000Z", manifest_extra=record)
    ledger = tmp_path / "ledger.jsonl"

    code, _, err = cli(capsys, "ledger", "add", str(bundle), "--ledger", str(ledger))

    assert code == 1 and err == f"h3bench: error: {bundle}/manifest.json: {expected}\n"
    assert not ledger.exists()
    history = read_history([tmp_path / "evidence"])
    assert history.series == () and history.skipped == ((str(bundle), f"{bundle}/manifest.json: {expected}"),)
