"""A pooled campaign is one campaign (issue 37): its shards, their pool and a re-pool, in the ledger and the history.

One campaign over two simulated hosts, as tests_unit/pool/test_pool.py runs
them: ``h3bench run --shard 1/2`` on host-1 and ``--shard 2/2`` on host-2 at
once (real simulator servers, a 64x64 canvas, two requests and an audit a
block, one AB/BA unit per host), then pooled by the fan-in itself
(:func:`h3bench.pool.pool_bundles`): the complete pool, a pool of shard 1
alone (shard 2 missing), a second pool of both shards and a pool of shard 2 alone.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import jsonschema
import pytest

from h3bench.cli import main
from h3bench.errors import UsageError
from h3bench.ledger.append import add_bundle
from h3bench.ledger.chain import read_ledger
from h3bench.ledger.history import read_history
from h3bench.ledger.verify import verify_ledger
from h3bench.pool import pool_bundles
from tests_unit.campaign_project import write_campaign
from tests_unit.pool.test_pool import run_shards
from tests_unit.report.test_export import BMF_SCHEMA

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("pooled-campaign")]

SCALE = 0.0002  # the simulator's fast profile: a 5 s request in about 0.15 s
ALONE = "not judged alone: shard 1 of 2; pool the shards with h3bench pool"


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path | str]:
    """The two shards, what shard 1 printed, and four pools: both shards, shard 1 alone, both again, shard 2 alone."""
    project = tmp_path_factory.mktemp("pooled")
    spec = write_campaign(project, baseline={"time_scale": SCALE}, candidates={"clean": {"time_scale": SCALE * 0.9}},
                          protocol={"order": "ABBAABBA", "requests_per_block": 2, "audit_counts": True})
    printed: dict[str, str] = {}
    shards = run_shards(project, spec, [(1, "host-1", "1.0", "s1"), (2, "host-2", "1.0", "s2")], count=2,
                        outputs=printed)
    pools = {name: pool_bundles(paths, project / name).path
             for name, paths in (("pool", [shards["s1"], shards["s2"]]), ("part", [shards["s1"]]),
                                 ("again", [shards["s1"], shards["s2"]]), ("other", [shards["s2"]]))}
    return {**shards, **pools, "project": project, "printed": printed["s1"]}


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def live(ledger: Path) -> list[str]:
    """Where the bundle of every entry that no later entry supersedes is (the fixture's directory name)."""
    found = read_ledger(ledger)
    return [Path(line.entry.bundle.path).parent.name for line in found.lines
            if line.entry is not None and line.seq not in found.superseded_by]


# -- one shard alone ---------------------------------------------------------------------------------------------


def test_one_shard_alone_is_not_judged_alone_and_keeps_its_host_figures(campaign):
    """Issue 37: one shard ended "candidate clean: rejected: formal verdict INCONCLUSIVE"."""
    lines = str(campaign["printed"]).splitlines()

    assert any(line.startswith(f"verdict clean: {ALONE} (this host's pairs alone: ") for line in lines), lines
    assert lines[-1].startswith("evidence bundle: ")
    assert "rejected" not in "\n".join(lines)
    assert any(line.startswith("clean 5s vs baseline: ") and "over 2 AB/BA pairs" in line for line in lines)  # host-1's
    assert any(line.startswith("shard 1/2, round 1, on host host-1: this verdict covers this host's pairs only")
               for line in lines)


def test_a_shard_entry_is_marked_and_never_a_claim(campaign, tmp_path, capsys):
    ledger = tmp_path / "ledger.jsonl"

    code, out, _ = cli(capsys, "ledger", "add", str(campaign["s1"]), "--ledger", str(ledger))

    assert code == 0 and out.endswith("line 1: clean 5 s shard 1/2 (a shard: not judged alone)\n"), out
    (entry,) = read_ledger(ledger).entries
    assert entry["bundle"]["shard"] == {"index": 1, "count": 2, "round": 1, "host": "host-1",
                                        "final_sha256": entry["bundle"]["final_sha256"], "seals": []}
    assert entry["verdict"] == "INCONCLUSIVE" and entry["reasons"][0] == ALONE
    assert entry["effect"]["k"] == 2  # the host's own pairs stay in the entry
    code, out, _ = cli(capsys, "ledger", "show", "--ledger", str(ledger))
    assert code == 0 and out.splitlines()[2].split()[-3:-1] == ["shard", "1/2"] and f"- {ALONE}" in out


# -- history -----------------------------------------------------------------------------------------------------


def test_history_counts_the_shards_and_their_pool_once_as_the_pooled_point(campaign, capsys):
    """Issue 37: ``history <shard 1> <shard 2> <pool>`` printed three points, "no step flagged over 3 campaign(s)"."""
    dirs = [campaign["s1"].parent, campaign["s2"].parent, campaign["pool"].parent]

    code, out, _ = cli(capsys, "history", *map(str, dirs))

    (series,) = read_history(dirs).series
    (point,) = series.campaigns
    assert point.bundle == str(campaign["pool"]) and point.blocks == 4  # both hosts' baseline blocks
    assert point.folded == (f"{campaign['s1']} (shard 1/2, host host-1)", f"{campaign['s2']} (shard 2/2, host host-2)")
    assert code == 0 and "no step flagged over 1 campaign(s)" in out
    assert "#0 is one campaign over several hosts, pooled; it folds 2 bundle(s), counted once" in out


def test_history_of_a_re_pool_and_a_pool_with_a_shard_missing_is_still_one_campaign(campaign):
    dirs = [campaign[name].parent for name in ("s1", "s2", "pool", "part", "again")]

    (series,) = read_history(dirs).series

    (point,) = series.campaigns
    assert point.bundle == str(campaign["pool"])  # the first pool of both shards
    assert f"{campaign['again']} (a re-pool of the same shards)" in point.folded
    assert f"{campaign['part']} (a pool of 1 of its 2 shards)" in point.folded and len(point.folded) == 4


def test_history_never_counts_two_pools_of_complementary_shards_as_two_campaigns(campaign):
    """Issue 43: a pool of shard 1 and a pool of shard 2 of one campaign counted as two campaigns. Nothing in the
    shards' records tells one campaign's shares from two campaigns' (each host starts its own run), so neither counts,
    each named with the other; the complete pool beside them folds both."""
    dirs = [campaign["part"].parent, campaign["other"].parent]

    history = read_history(dirs)

    assert history.series == ()
    why = dict(history.skipped)
    assert why[str(campaign["part"])].startswith(f"a pool of shard 1/2 only, and {campaign['other']} (shard 2/2) "
                                                 "holds the shards it misses")
    assert why[str(campaign["other"])].startswith(f"a pool of shard 2/2 only, and {campaign['part']} (shard 1/2)")
    (series,) = read_history([*dirs, campaign["pool"].parent]).series
    (point,) = series.campaigns
    assert point.bundle == str(campaign["pool"]) and len(point.folded) == 2


def test_an_incomplete_pool_s_bmf_export_is_valid_bencher_metric_format(campaign, capsys):
    """Issue 43: the export of a pool with a shard missing wrote ``"upper_value": "inf"``."""
    assert main(["export", str(campaign["part"]), "--format", "bmf"]) == 0

    bmf = json.loads(capsys.readouterr().out)

    jsonschema.Draft7Validator(BMF_SCHEMA).validate(bmf)
    assert bmf and not any("shard" in name for name in bmf)  # a pool is the campaign's, however incomplete


def test_history_does_not_count_a_shard_without_its_pool(campaign):
    history = read_history([campaign["s1"].parent, campaign["s2"].parent])

    assert history.series == ()
    assert [why.split(":")[0] for _, why in history.skipped] == ["shard 1/2 (host host-1) alone is not judged, and "
                                                                 "not counted", "shard 2/2 (host host-2) alone is not "
                                                                 "judged, and not counted"]


# -- the ledger --------------------------------------------------------------------------------------------------

ORDERS = {
    "shards-then-pool": (["s1", "s2", "pool"], {}),
    "pool-then-shard": (["pool", "s2"], {"s2": "shard 2/2 of a campaign whose pool is in the ledger (line 1 holds"}),
    "incomplete-then-complete": (["part", "pool"], {}),
    "complete-then-incomplete": (["pool", "part"], {"part": "a pool of fewer shards of a campaign pooled over more of "
                                                            "them in the ledger (line 1 holds"}),
}


@pytest.mark.parametrize("order", ORDERS, ids=list(ORDERS))
def test_a_pool_supersedes_its_shards_and_a_smaller_pool_and_what_it_holds_is_refused(campaign, tmp_path, capsys,
                                                                                      order):
    """Issue 37: shard 1, a pool with shard 2 missing, the complete pool and shard 2 were four unmarked entries."""
    ledger = tmp_path / "ledger.jsonl"
    names, refused = ORDERS[order]

    for name in names:
        before = ledger.read_bytes() if ledger.exists() else b""
        code, out, err = cli(capsys, "ledger", "add", str(campaign[name]), "--ledger", str(ledger))
        if name in refused:
            assert code == 2 and refused[name] in err and "nothing appended" in err, err
            assert ledger.read_bytes() == before
        else:
            assert code == 0, err

    assert live(ledger) == ["pool"]  # the complete pool's entry, and nothing else, stands
    assert len(read_ledger(ledger).entries) == len(names) - len(refused)
    assert verify_ledger(ledger).ok, verify_ledger(ledger).problems
    code, out, _ = cli(capsys, "ledger", "show", "--ledger", str(ledger))
    assert code == 0 and out.count("! superseded by #") == len(names) - len(refused) - 1
    assert out.count("pool of shard 1/2 (host host-1, ") == sum(name in ("pool", "part") for name in names) - \
        ("part" in refused)


def test_the_issue_s_four_adds_leave_the_complete_pool_and_name_it(campaign, tmp_path, capsys):
    """The order the issue tried: shard 1, the pool with shard 2 missing, the complete pool, then shard 2."""
    ledger = tmp_path / "ledger.jsonl"
    for name in ("s1", "part", "pool"):
        assert cli(capsys, "ledger", "add", str(campaign[name]), "--ledger", str(ledger))[0] == 0

    code, _, err = cli(capsys, "ledger", "add", str(campaign["s2"]), "--ledger", str(ledger))

    assert code == 2 and "line 3 holds the campaign" in err
    entries = read_ledger(ledger).entries
    assert [e.get("supersedes") for e in entries] == [None, [0], [1]]
    assert live(ledger) == ["pool"]
    code, out, _ = cli(capsys, "ledger", "show", "--ledger", str(ledger))
    assert "! superseded by #1 (the pool of its shards)" in out
    assert "! superseded by #2 (a pool of more of its campaign's shards)" in out


def test_in_any_order_the_ledger_ends_with_the_complete_pool_alone(campaign, tmp_path):
    """Every order of the two shards and the two pools: one campaign, the complete pool standing, the chain intact."""
    for number, order in enumerate(itertools.permutations(("s1", "s2", "part", "pool"))):
        ledger = tmp_path / f"ledger-{number}.jsonl"
        for name in order:
            try:
                add_bundle(campaign[name], ledger)
            except UsageError as exc:
                assert "holds the campaign" in str(exc), (order, exc)
        assert live(ledger) == ["pool"], order
        assert not read_ledger(ledger).problems, order


def test_a_re_pool_of_the_same_shards_is_refused_naming_the_line(campaign, tmp_path, capsys):
    """Issue 37: pooling the same shards again wrote a new bundle that the ledger took as a second entry."""
    ledger = tmp_path / "ledger.jsonl"
    add_bundle(campaign["pool"], ledger)
    copy = shutil.copytree(campaign["again"], tmp_path / "moved" / campaign["again"].name)

    for again in (campaign["again"], copy):
        code, _, err = cli(capsys, "ledger", "add", str(again), "--ledger", str(ledger))
        assert code == 2 and "a second pool of the same shards as a pool in the ledger (line 1 holds the campaign" \
            in err, err
    assert len(read_ledger(ledger).entries) == 1


def test_a_forged_pool_record_in_an_entry_is_caught_by_verify(campaign, tmp_path):
    """The pooled shards are derived again from the bundle: an entry that claims other shards differs from it."""
    from h3bench.ledger.chain import entry_hash

    ledger = tmp_path / "ledger.jsonl"
    add_bundle(campaign["pool"], ledger)
    (entry,) = [json.loads(line) for line in ledger.read_text().splitlines()]
    entry["bundle"]["pooled"] = entry["bundle"]["pooled"][:1]
    entry["hash"] = entry_hash(entry)
    ledger.write_text(json.dumps(entry) + "\n")

    assert verify_ledger(ledger).problems == ("line 1: differs from what its bundle says: bundle.pooled",)


@pytest.mark.parametrize("name", ["pool", "s1"])
def test_a_line_written_before_shard_marks_named_every_seal_still_verifies_and_a_changed_seal_does_not(
        campaign, tmp_path, name):
    """Issue 43 added ``seals`` to the shard marks of an entry: a line written before it is checked on the fields it
    has, and a seal changed in it is still caught."""
    from h3bench.ledger.chain import entry_hash

    ledger = tmp_path / "ledger.jsonl"
    add_bundle(campaign[name], ledger)
    (entry,) = [json.loads(line) for line in ledger.read_text().splitlines()]
    marks = entry["bundle"]["pooled"] or [entry["bundle"]["shard"]]
    for mark in marks:
        del mark["seals"]
    entry["hash"] = entry_hash(entry)
    ledger.write_text(json.dumps(entry) + "\n")
    assert verify_ledger(ledger).ok, verify_ledger(ledger).problems

    marks[0]["final_sha256"] = "0" * 64
    entry["hash"] = entry_hash(entry)
    ledger.write_text(json.dumps(entry) + "\n")
    field = "pooled" if name == "pool" else "shard"
    assert verify_ledger(ledger).problems == (f"line 1: differs from what its bundle says: bundle.{field}",)
