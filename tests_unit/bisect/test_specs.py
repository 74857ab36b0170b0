"""The [bisect] table's rules, the campaigns derived from it, the range writer, and the plan."""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path

import pytest

from h3bench.bisect import plan, specs
from h3bench.cli import main
from h3bench.errors import RunSpecError, UsageError
from h3bench.runspec import load_runspec, parse_runspec

SPECS = Path(__file__).resolve().parents[2] / "fixtures" / "runspecs"
SIM = load_runspec(SPECS / "sim-bisect.toml")


def edited(**bisect: object) -> dict:
    data = SIM.model_dump(mode="json")
    data["bisect"] = {**data["bisect"], **bisect}
    for name in ("reference_video", "reference_audio"):
        data["inputs"][name]["path"] = str(SIM.input_files()[name])
    return data


def test_the_shipped_range_has_16_commits_one_slower_dit_and_one_that_does_not_start():
    table = SIM.bisect
    assert table is not None and len(table.commits) >= 16
    slower = [c.commit for c in table.range if c.sim and c.sim.get("step_s") == [16.688, 133.6496]]
    assert slower[0] == "s11" and 16.688 / 14.9 == pytest.approx(1.12)
    assert [c.commit for c in table.commits if c.sim and "startup_error" in c.sim] == ["s08"]


def test_the_shipped_range_with_two_changes_steps_at_s05_and_again_at_s11():
    two = load_runspec(SPECS / "sim-bisect-two.toml")
    assert two.bisect is not None
    # The DiT step's level at each commit (s08 does not start: it has none), and where it changes.
    levels = [(c.commit, (c.sim or {}).get("step_s", [14.9])[0] / 14.9) for c in two.bisect.commits
              if c.commit != "s08"]
    steps = [(name, round(b / a, 4)) for (_, a), (name, b) in zip([("good", 1.0), *levels], levels, strict=False)
             if b != a]
    assert steps == [("s05", 1.12), ("s11", 1.12)]
    assert two.arms["bad"].model_dump()["sim"]["step_s"][0] / 14.9 == pytest.approx(levels[-1][1])


@pytest.mark.parametrize(("change", "message"), [
    ({"commits": [{"commit": "s01"}, {"commit": "s01"}]}, "also commits.0"),
    ({"commits": [{"commit": "s01", "image_digest": "sha256:" + "0" * 64}]}, "simulator arms have no image"),
    ({"max_pairs": 1, "min_pairs": 2}, "at least min_pairs"),
    ({"launcher": ["docker", "run"]}, "must contain {image}"),
    ({"posterior": 0.4}, "greater than 0.5"),
])
def test_a_broken_table_is_refused_at_its_field(change, message):
    with pytest.raises(RunSpecError, match="bisect") as caught:
        parse_runspec(edited(**change), source="edited")
    assert message in str(caught.value)
    parse_runspec(edited(), source="unedited")  # the same spec, unedited, loads


def test_a_bisect_spec_has_one_bad_engine():
    data = edited()
    data["arms"]["other"] = data["arms"]["bad"]
    with pytest.raises(RunSpecError, match="one candidate"):
        parse_runspec(data, source="two bad arms")


def test_a_spec_without_the_table_keeps_its_id():
    spec = load_runspec(SPECS / "sim.toml")
    assert '"bisect"' not in spec.canonical_json() and spec.bisect is None
    assert parse_runspec(spec.model_dump(mode="json"), source="copy").spec_id == spec.spec_id


def test_the_verify_probe_and_confirm_campaigns():
    n = len(SIM.bisect.range)
    verify = specs.campaign_spec(SIM, "verify", 0, n)
    assert verify.protocol.design == "sequential" and not verify.protocol.futility
    assert verify.protocol.looks == (tuple(range(2, 17)),) and verify.workload.durations == (5.0,)
    assert verify.arms["c17_bad"].sim == SIM.arms["bad"].sim and verify.arms["baseline"].sim == SIM.arms["baseline"].sim
    first, second = (specs.campaign_spec(SIM, "probe", 0, 11, number=k) for k in (1, 2))
    assert first.protocol.order.startswith("ABBA") and second.protocol.order.startswith("BAAB")
    assert first.diagnostic and first.protocol.lossless_baseline_blocks == 0 and first.spec_id != second.spec_id
    assert first.arms["c11_s11"].sim["step_s"] == [16.688, 133.6496]
    confirm = specs.campaign_spec(SIM, "confirm", 10, 11)
    assert confirm.arms["baseline"].description.startswith("engine s10") and not confirm.diagnostic
    # The verify and the confirm call any slowdown they can show "slower", not only one beyond the ship margin.
    assert SIM.gates.speed_margin == 0.02 and verify.gates.speed_margin == confirm.gates.speed_margin == 0.0
    with pytest.raises(UsageError, match="not a pair"):
        specs.campaign_data(SIM, "probe", 5, 5)


def test_a_derived_spec_survives_its_toml_and_reloads_to_the_same_id(tmp_path):
    data = specs.campaign_data(SIM, "probe", 0, 8, number=3)
    path = specs.write_spec(tmp_path / "probe.toml", data, "a header\nof two lines")
    assert load_runspec(path).spec_id == parse_runspec(data, source="data").spec_id
    assert tomllib.loads(path.read_text())["arms"]["c08_s08"]["sim"]["startup_error"].startswith("HCCL")
    with pytest.raises(UsageError, match="another spec"):
        specs.write_spec(path, specs.campaign_data(SIM, "probe", 0, 9, number=3), "x")


def test_a_range_file_becomes_a_vllm_bisect_spec(tmp_path, capsys):
    lines = []
    for i in range(5):
        digest = hashlib.sha256(str(i).encode()).hexdigest()
        lines.append(f"{digest[:40]} sha256:{digest} commit number {i}")
    (tmp_path / "range.txt").write_text("# good first\n" + "\n".join(lines) + "\n")
    out = tmp_path / "bisect.toml"
    assert main(["bisect", "--runspec", str(SPECS / "950pr-x4.toml"), "--range", str(tmp_path / "range.txt"),
                 "--image", "quay.io/ascend/vllm-omni", "--write", str(out)]) == 0
    spec = load_runspec(out)
    assert spec.bisect is not None and len(spec.bisect.commits) == 3 and spec.bisect.commits[0].note == "commit number 1"
    probe = specs.campaign_spec(spec, "probe", 0, 2, number=1)
    arm = probe.arms[specs.label_of(spec, 2)]
    assert arm.launcher[-2:] == (f"quay.io/ascend/vllm-omni@sha256:{hashlib.sha256(b'2').hexdigest()}", "vllm")
    assert probe.source is not None and probe.source.engine_commit == spec.bisect.commits[1].commit
    (tmp_path / "short.txt").write_text(lines[0] + "\n")
    assert main(["bisect", "--runspec", str(SPECS / "950pr-x4.toml"), "--range", str(tmp_path / "short.txt"),
                 "--image", "x", "--write", str(out)]) == 2
    assert "needs the good engine, at least one commit and the bad engine" in capsys.readouterr().err


def test_the_plan_prices_the_search_at_the_hints():
    lines = plan.plan_lines(SIM, n=40)
    assert lines[0].startswith("bisection: 17 commits after good (the last bad)")
    assert sum("process noise:" in line and "device-min mean" in line for line in lines) == 3
    assert any(line.strip().startswith("4% process noise:") for line in lines)


def test_the_plan_says_when_the_size_asked_is_out_of_reach():
    # A 10 % step on the simulator's hints is within reach at 1 % process noise; a 1 % change is not, and the
    # plan says so before anything runs.
    lines = plan.plan_lines(SIM, n=40)
    assert not any("out of reach at 1%" in line for line in lines)
    small = parse_runspec(edited(size=1.01), source="a 1 % change asked")
    lines = plan.plan_lines(small, n=40)
    assert "a step of 1.010 (the size asked: [bisect] size)" in lines[2]
    assert "out of reach at 1%, 2%, 4% process noise" in lines[-1]


@pytest.mark.parametrize("size", ["1", "0.95", "5%", "4.5", "nan", "inf"])
def test_a_size_that_is_no_ratio_above_1_is_refused_with_the_value(tmp_path, capsys, size):
    assert main(["bisect", "--runspec", str(SPECS / "sim-bisect.toml"), "--evidence-dir", str(tmp_path),
                 "--size", size, "--next", "1"]) == 2
    assert f"invalid size {size!r}: the change to find as a ratio above 1 and at most 4" in capsys.readouterr().err
    assert not list(tmp_path.iterdir()), "nothing started"


def test_a_size_asked_on_the_command_line_is_the_bisections(tmp_path, capsys):
    assert main(["bisect", "--runspec", str(SPECS / "sim-bisect.toml"), "--evidence-dir", str(tmp_path),
                 "--size", "1.05", "--next", "1"]) == 0
    out = capsys.readouterr().out
    assert 'steps=["verify"]' in out
    (log,) = tmp_path.glob("bisect-*/bisect-log.jsonl")
    start = json.loads(log.read_text().splitlines()[0])
    assert (start["size"], start["size_from"]) == (1.05, "--size")
    assert main(["bisect", "--runspec", str(SPECS / "sim-bisect.toml"), "--resume", str(log.parent),
                 "--size", "1.1", "--next", "1"]) == 2
    assert "--size 1.1 asks for another" in capsys.readouterr().err
