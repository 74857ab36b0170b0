"""The search's course from its log alone: what runs next, when it stops, a failed confirm, invalid probes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from h3bench.bisect import segments
from h3bench.bisect.observe import Observation
from h3bench.bisect.runner import Bisection, Options
from h3bench.bisect.segments import is_top_up
from h3bench.bisect.summary import open_lines, segment_lines, summary_lines
from h3bench.errors import UsageError
from h3bench.outcome import Outcome
from h3bench.runspec import load_runspec

SPEC = Path(__file__).resolve().parents[2] / "fixtures" / "runspecs" / "sim-bisect.toml"
STEP = [0.11, 0.12, 0.105]


def bisection(tmp_path: Path, on: str | None = None) -> Bisection:
    made = Bisection(load_runspec(SPEC), SPEC, tmp_path / "b", Options(on=on), say=lambda line: None)
    made.log.append("start", spec_id=made.spec.spec_id)
    return made


def measured(b: Bisection, event: str, position: int, x: list[float], **more: object) -> None:
    b.log.append(event, position=position, status="measured", reason="", log_ratios=x, device_s=10.0,
                 final_sha256=f"{event}{position}{len(b.log.read())}", log_lr=0.0, **more)


def probe_until_confirm(b: Bisection) -> list:
    """Give every probe the search chooses pairs at its level (the step from s11 on), until it asks for more."""
    while (steps := b.next_round())[0][0] == "probe":
        _, position, number = steps[0]
        level = 0.11 if position >= 11 else 0.0
        measured(b, "probe", position, [level + 0.004, level - 0.003], number=number)
    return steps


def test_it_verifies_first_then_probes_the_middle_then_stops_and_confirms(tmp_path):
    b = bisection(tmp_path)
    assert b.next_round() == [("verify", 17, 0)]
    assert b.next_round() == [("verify", 17, 0)], "chosen until taken"
    measured(b, "verify", 17, STEP, reproduced=True)
    # Three hosts: the median first, then the probes that add most to it, about the quartiles.
    assert b.next_round(3) == [("probe", 8, 1), ("probe", 11, 2), ("probe", 5, 3)]
    for position, level in ((8, 0.0), (11, 0.11), (5, 0.0)):
        measured(b, "probe", position, [level + 0.003, level - 0.002], number=len(b.records("probe")) + 1)
    assert probe_until_confirm(b) == [("confirm", 11, 1)]  # the pairs say: the culprit is s11
    (stop,) = b.records("stop")
    assert stop["named"] == [11, 11] and stop["mass"] >= 0.95 and stop["top"][0]["commit"] == "s11"
    assert b.records("confirming")[0]["parent"] == 10
    # The confirm does not confirm: the search goes on at posterior 0.99, then confirms again.
    b.log.append("confirm", position=11, number=1, status="measured", claim=False, final_sha256="c1",
                 device_s=10.0)
    assert probe_until_confirm(b) == [("confirm", 11, 2)] and b.records("stop")[-1]["posterior"] == pytest.approx(0.99)
    b.log.append("confirm", position=11, number=2, status="measured", claim=False, final_sha256="c2",
                 device_s=10.0)
    assert b.next_round() == [] and b.outcome() == "not confirmed" and b.claimed() == []


def test_not_reproduced_ends_the_search(tmp_path):
    b = bisection(tmp_path)
    measured(b, "verify", 17, [0.001, -0.002], reproduced=False)
    assert b.next_round() == [] and b.outcome() == "not reproduced"


def test_a_skipped_commit_adds_nothing_and_two_invalid_probes_skip_a_commit(tmp_path):
    b = bisection(tmp_path)
    measured(b, "verify", 17, STEP, reproduced=True)
    before = b.state().probs
    b.log.append("probe", position=8, number=1, status="skipped", reason="server did not start", log_ratios=[],
                 device_s=5.0, final_sha256="s")
    state = b.state()
    assert np.allclose(state.probs, before) and state.skipped == {7: "skipped: server did not start"}
    for number in (2, 3):
        b.log.append("probe", position=4, number=number, status="invalid", reason="5s-x-1A-baseline: request failed",
                     log_ratios=[], device_s=5.0, final_sha256=f"i{number}")
        assert (3 in b.state().skipped) == (number == 3)
    assert b.state().spent_device_s == pytest.approx(10 + 5 + 5 + 5)


def test_a_quality_bisection_adds_up_the_gates_ratios(tmp_path):
    b = bisection(tmp_path, on="quality")
    b.log.append("verify", position=17, status="broken", reason="", log_ratios=[], device_s=1.0, reproduced=True,
                 failing=2, matched=2, log_lr=0.0, final_sha256="v")
    b.log.append("probe", position=9, number=1, status="measured", reason="", log_ratios=[], device_s=1.0,
                 log_lr=-5.0, final_sha256="p")
    probs = b.state().probs
    assert probs[:9].sum() < 0.01 and probs[9:].sum() > 0.99  # no change at s09: the culprit comes after it


def test_a_level_between_says_which_part_of_the_range_holds_another_change_and_its_size():
    spec = load_runspec(SPEC)
    records = [
        {"event": "verify", "position": 17, "log_ratios": STEP, "step": {"ratio": 1.116}},
        {"event": "probe", "position": 11, "commit": "s11", "log_ratios": [0.11, 0.113], "pairs": 2, "between": False},
        {"event": "stop", "named": [11, 11]},
        {"event": "probe", "position": 14, "commit": "s14", "log_ratios": [0.055, 0.05, 0.052], "pairs": 3,
         "between": True},
        {"event": "probe", "position": 5, "commit": "s05", "log_ratios": [0.03, 0.031], "pairs": 2, "between": True},
        {"event": "probe", "position": 3, "commit": "s03", "log_ratios": [0.0, 0.001], "pairs": 2, "between": False},
    ]
    stop = {"event": "stop", "reason": "posterior", "top": [], "skipped": {}, "named": [11, 11]}
    lines = summary_lines(spec, spec.bisect, SPEC.parent, [stop], "culprit confirmed")
    assert any(line.startswith("  looked for 1 change(s), one per segment searched") for line in lines)
    assert not any("looked for" in line for line in summary_lines(spec, spec.bisect, SPEC.parent, [], "unfinished"))
    after, before = open_lines(spec, records)
    # After the culprit the level fell from s11's (ratio 1.118) to 1.054: a change of about -5.7 % after s11.
    assert after.startswith("a level between no change and the step at s14 (ratio 1.0537, 3 pair(s))")
    assert "another change of about -5.7% lies after s11 up to s14" in after
    assert "another change of about +3.1% lies after good up to s05" in before
    records[1]["log_ratios"] = []  # the culprit not probed: the level after it is the verify's step
    assert "about -5.6% lies after s11" in open_lines(spec, records)[0]
    # Once a claim lies in the part of the range a hint names, the change it showed was found: no hint.
    claimed = [{"event": "confirm", "claim": True}, {"event": "segments", "claim": 1, "segments": []},
               {"event": "stop", "named": [5, 5]}, {"event": "confirm", "claim": True}]
    (after,) = open_lines(spec, records[:3] + claimed + records[3:])
    assert after.startswith("a level between no change and the step at s14")


def run_course(b: Bisection, level: Callable[[int], float]) -> None:
    """Answer every step the search asks for: each probe at ``level(position)``, each confirm by the change there."""
    while steps := b.next_round():
        kind, position, number = steps[0]
        if kind == "probe":
            measured(b, "probe", position, [level(position) + 0.004, level(position) - 0.003], number=number)
            continue
        parent = b._parent(number)
        change = level(position) - level(parent)
        seen = Observation(Path("b"), f"c{number}", "sid", "measured", "", (), 0, 0,
                           "slower" if change > 0 else "faster", Outcome.FAIL, None, None, 10.0)
        b._take_confirm(seen, {"position": position, "commit": f"s{position:02d}", "number": number,
                               "status": "measured",
            "final_sha256": f"c{number}", "device_s": 10.0, "bundle": f"b{number}"})


def test_after_a_claim_it_searches_the_segments_whose_ends_differ_and_names_every_change(tmp_path):
    b = bisection(tmp_path)
    # +5 % at s05, +5 % more at s11: the verify sees both.
    measured(b, "verify", 17, [0.1, 0.102, 0.098], reproduced=True, step={"ratio": 1.105})
    run_course(b, lambda p: 0.05 * (p >= 5) + 0.05 * (p >= 11))
    assert sorted(b.claims()) == [["s05"], ["s11"]] and b.outcome() == "2 changes confirmed"
    lines = segment_lines(b.spec, b.log.read())
    assert lines[0].startswith("looked for 2 change(s)") and lines[0].endswith(": 2 confirmed")
    segments = [g for r in b.records("segments") for g in r["segments"]]
    assert [s["searched"] for s in segments].count(True) == 1, "one segment held the other change"
    assert all(abs(s["difference"]) < 0.01 for s in segments if not s["searched"])


def test_a_step_half_undone_later_names_the_undo_as_a_change_that_is_faster(tmp_path):
    b = bisection(tmp_path)
    measured(b, "verify", 17, [0.05, 0.052, 0.048], reproduced=True, step={"ratio": 1.051})
    run_course(b, lambda p: 0.1 * (p >= 4) - 0.05 * (p >= 13))
    assert sorted(b.claims()) == [["s04"], ["s13"]]
    undo = [g for r in b.records("segments") for g in r["segments"] if g["searched"]]
    assert undo and undo[0]["direction"] == -1


def test_one_step_opens_no_other_segment(tmp_path):
    b = bisection(tmp_path)
    measured(b, "verify", 17, STEP, reproduced=True, step={"ratio": 1.116})
    run_course(b, lambda p: 0.11 * (p >= 11))
    assert b.claims() == [["s11"]] and b.outcome() == "culprit confirmed"
    segments = [g for r in b.records("segments") for g in r["segments"]]
    assert segments and not any(g["searched"] for g in segments)


def test_a_segment_not_searched_says_what_it_leaves_open_and_what_more_would_cost():
    spec = load_runspec(SPEC)
    segment = {"lo": 10, "hi": 16, "searched": False, "difference": 0.02, "size": 0.05, "direction": 1,
               "open_to": 0.06}
    records = [{"event": "stop", "named": [11, 11], "spent_device_s": 7200.0},
               {"event": "segments", "claim": 1, "segments": [segment]}]
    (_, line) = segment_lines(spec, records)
    assert line.startswith("after s11 up to bad: not searched; its ends differ by +2.0%")
    assert "a change up to 6.2% is left open there: looking for it would cost about 2.0 device-h" in line
    segment["open_to"] = 0.04  # two standard errors exclude the size asked: nothing left open
    assert "left open" not in segment_lines(spec, records)[1]


def test_ends_too_loosely_measured_get_a_probe_of_max_pairs_before_a_segment_is_decided(tmp_path):
    b = bisection(tmp_path)
    measured(b, "verify", 17, [0.15, 0.07, 0.11], reproduced=True, step={"ratio": 1.116})
    while (steps := b.next_round())[0][0] == "probe":
        level = 0.11 * (steps[0][1] >= 11)
        measured(b, "probe", steps[0][1], [level + 0.03, level - 0.03], number=steps[0][2])
    run_course(b, lambda p: 0.11 * (p >= 11))  # the confirm; then the top-ups, pairs as tight as before
    (top_up,) = [r for r in b.records("round") if r.get("top_up")]
    assert top_up["top_up"] == 1 and {p["position"] for p in top_up["probes"]} <= {10, 11}
    assert all(is_top_up(b.log.read(), p["number"]) for p in top_up["probes"]) and not is_top_up(b.log.read(), 1)
    # Each top-up stops once two standard errors exclude the size asked between its segment's ends: pairs as
    # tight as the others' at the end's level settle it, pairs that scatter do not (it runs on to max_pairs).
    records, size = b.log.read(), segments.size_of(b.table, b.log.read())
    before = Bisection(b.spec, SPEC, tmp_path / "before", b.options)  # the log as it was when the round was chosen
    before.log.path.parent.mkdir(parents=True)
    before.log.path.write_text("".join(line + "\n" for line in b.log.path.read_text().splitlines()[: top_up["seq"]]))
    evidence = before.state().evidence
    for probe, (lo, hi) in zip(top_up["probes"], top_up["segments"], strict=True):
        assert probe["position"] - 1 in (lo, hi)
        level = 0.11 * (probe["position"] >= 11)
        tight = evidence.add(probe["position"] - 1, np.array([level + 0.004, level - 0.003] * (b.table.max_pairs // 2)))
        loose = evidence.add(probe["position"] - 1, np.array([level + 0.09, level - 0.09]))
        assert segments.top_up_settled(records, probe["number"], tight, size)
        assert not segments.top_up_settled(records, probe["number"], loose, size)
    older = [{k: v for k, v in r.items() if k != "segments"} for r in records]  # a round that named no segment
    assert not segments.top_up_settled(older, top_up["probes"][0]["number"], tight, size), "runs to max_pairs"
    (decided,) = b.records("segments")
    assert decided["seq"] > top_up["seq"] and b.claims() == [["s11"]]


def test_the_size_asked_is_fixed_at_the_start_and_decides_which_changes_the_search_looks_for(tmp_path):
    # +5 % at s05 and +5 % more at s11. Asked for 12 %, the segment left after the first claim (its ends 5 %
    # apart, under half of 12 %) is not searched; asked for 5 % (--size), it is, and both changes are named.
    found = {}
    for size in (1.12, 1.05):
        b = Bisection.open(SPEC, Options(evidence_root=tmp_path / f"{size}", size=size), say=lambda line: None)
        start = b.records("start")[0]
        assert (start["size"], start["size_from"]) == (size, "--size")
        measured(b, "verify", 17, [0.1, 0.102, 0.098], reproduced=True, step={"ratio": 1.105})
        run_course(b, lambda p: 0.05 * (p >= 5) + 0.05 * (p >= 11))
        found[size] = sorted(b.claims())
        lines = summary_lines(b.spec, b.table, b.directory, b.records("start"), b.outcome())
        assert f"  the change to find: {size - 1:.1%} or more, either way (--size)" in lines
    assert len(found[1.12]) == 1 and found[1.05] == [["s05"], ["s11"]]


def test_a_bisection_without_a_size_asked_looks_for_half_its_verified_step(tmp_path):
    b = Bisection.open(SPEC, Options(evidence_root=tmp_path), say=lambda line: None)
    assert b.records("start")[0]["size_from"] == "half the verified step"
    assert not any("the change to find" in line for line in summary_lines(b.spec, b.table, b.directory,
                                                                          b.log.read(), b.outcome()))
    measured(b, "verify", 17, STEP, reproduced=True, step={"ratio": 1.116}, commit="bad", why="slower",
             pairs=3)
    lines = summary_lines(b.spec, b.table, b.directory, b.log.read(), b.outcome())
    assert "  the change to find: 5.6% or more, either way (half the verified step)" in lines


def test_a_resume_keeps_the_size_the_bisection_started_with(tmp_path):
    b = Bisection.open(SPEC, Options(evidence_root=tmp_path, size=1.05), say=lambda line: None)
    for size in (None, 1.05):  # resumed without --size, or with the same one
        again = Bisection.open(SPEC, Options(resume=b.directory, size=size), say=lambda line: None)
        assert again.records("start") == b.records("start")
    with pytest.raises(UsageError, match=r"looks for a change of 1.05 \(--size\); --size 1.08 asks for another"):
        Bisection.open(SPEC, Options(resume=b.directory, size=1.08))
    plain = Bisection.open(SPEC, Options(evidence_root=tmp_path / "plain"), say=lambda line: None)
    with pytest.raises(UsageError, match="looks for half the step its verify measures; --size 1.05"):
        Bisection.open(SPEC, Options(resume=plain.directory, size=1.05))


def take_verify(b: Bisection, x: list[float], speed: str) -> dict:
    """The verify record of a bundle whose pairs are ``x`` and whose own look said ``speed``."""
    seen = Observation(Path("v"), f"v{len(x)}{x[0]}", "sid", "measured", "", tuple(x), 0, 0, speed,
                       Outcome.INCONCLUSIVE, None, None, 10.0)
    return b._take_verify(seen, {"position": 17, "commit": "bad", "status": "measured", "reason": "",
                                 "device_s": 10.0, "pairs": len(x), "bundle": "v", "log_ratios": x,
                                 "final_sha256": seen.final_sha256, "spec_id": "sid", "failing": 0, "matched": 0})


def test_a_verify_that_cannot_reach_the_size_asked_stops_inconclusive_and_says_why(tmp_path):
    flat = [0.004, -0.003, 0.002, -0.001, 0.003, -0.002]  # tight pairs about no change
    asked = Bisection.open(SPEC, Options(evidence_root=tmp_path / "a", size=1.05), say=lambda line: None)
    assert asked._futility(flat[:1]) == "", "one pair gives no bound"
    record = take_verify(asked, flat, "continue")
    assert record["futile"] and not record["reproduced"]
    assert record["why"].startswith("INCONCLUSIVE: futility at 3 pairs: the bad engine is at most 1.04")
    assert "below the size asked (1.05, --size)" in record["why"]
    assert asked.next_round() == [] and asked.outcome() == record["why"] and asked.finish() == 3
    # A step of the size asked is within reach: no futility; nor without a size asked (half the verified step).
    assert asked._futility([0.05 + v for v in flat]) == ""
    plain = Bisection.open(SPEC, Options(evidence_root=tmp_path / "p"), say=lambda line: None)
    record = take_verify(plain, flat, "last look")
    assert not record["futile"] and plain.outcome() == "not reproduced"
    assert record["why"] == "the step does not reproduce at the campaign's own levels (last look)"
