"""``h3bench history`` over series of real sealed bundles (the evidence writer, no servers).

Each simulated campaign draws its own level (2 % noise per campaign, as
fresh servers on another day give) and small request noise around it; the
step series multiplies the baseline's latency by 1.08 from campaign 10 on.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from h3bench.cli import main
from h3bench.ledger.history import read_history
from tests_unit.bundlesim import npu_spec, write_bundle

CAMPAIGNS, STEP_AT = 16, 10


def campaign_series(root: Path, *, step: float | None, seed: int, kind: str = "910b1", devices: int = 8,
                    argv_tail: tuple[str, ...] = ()) -> list[Path]:
    rng = random.Random(seed)
    spec = npu_spec(kind, devices)
    if argv_tail:
        data = spec.model_dump(mode="json")
        data["arms"]["baseline"]["extra_args"] = [*data["arms"]["baseline"]["extra_args"], *argv_tail]
        spec = type(spec).model_validate(data)
    bundles = []
    for number in range(CAMPAIGNS):
        level = 105.0 * rng.lognormvariate(0, 0.02) * (step if step and number >= STEP_AT else 1.0)
        noise = random.Random(seed * 1000 + number)
        def latency(block, index, level=level, noise=noise):
            return level * block.duration / 5 * noise.gauss(1, 0.003)

        bundles.append(write_bundle(root, spec, latency,
                                    started_at=f"2026-10-{number + 1:02d}T08:00:00.000Z",
                                    engine_commit=f"{number:02x}" * 20))
    return bundles


def test_an_8_percent_step_is_found_with_its_index_and_persistence(tmp_path, capsys):
    campaign_series(tmp_path / "evidence", step=1.08, seed=5)
    page = tmp_path / "history.html"

    code = main(["history", str(tmp_path / "evidence"), "--html", str(page)])
    out = capsys.readouterr().out

    print(out)  # the history output of the report
    assert code == 1  # a regression is ongoing
    history = read_history([tmp_path / "evidence"])
    assert [(s.hardware, s.duration) for s in history.series] == [("8x910b1", "15"), ("8x910b1", "5")]
    for series in history.series:
        (step,) = series.steps.flagged
        assert (step.index, step.persisted, step.ongoing) == (STEP_AT, CAMPAIGNS - STEP_AT, True)
        assert 1.04 < step.ratio < 1.12 and step.ci_low is not None and step.ci_low > 1
    assert out.count(f"REGRESSION at #{STEP_AT} (2026-10-11, engine 0a0a0a0a0a)") == 2
    assert f"persisted {CAMPAIGNS - STEP_AT} consecutive campaign(s), ongoing" in out
    text = page.read_text()
    assert text.count("<svg") == 2 and text.count("6 campaigns (ongoing)") == 2
    assert "<script" not in text and "<link" not in text and "src=" not in text  # nothing to fetch


def test_pure_noise_is_not_flagged(tmp_path, capsys):
    campaign_series(tmp_path / "evidence", step=None, seed=6)

    code = main(["history", str(tmp_path / "evidence")])
    out = capsys.readouterr().out

    assert code == 0 and "REGRESSION" not in out and "IMPROVEMENT" not in out
    assert out.count(f"no step flagged over {CAMPAIGNS} campaign(s)") == 2


@pytest.mark.slow
def test_series_keep_hardware_kinds_and_baseline_commands_apart(tmp_path):
    campaign_series(tmp_path / "a", step=None, seed=1)
    campaign_series(tmp_path / "b", step=None, seed=2, kind="910c", devices=4)
    campaign_series(tmp_path / "c", step=None, seed=3, argv_tail=("--enforce-eager",))

    history = read_history([tmp_path / "a", tmp_path / "b", tmp_path / "c"])

    keys = sorted((s.hardware, s.duration, "--enforce-eager" in s.command, len(s.campaigns)) for s in history.series)
    assert keys == [("4x910c", "15", False, 16), ("4x910c", "5", False, 16), ("8x910b1", "15", False, 16),
                    ("8x910b1", "15", True, 16), ("8x910b1", "5", False, 16), ("8x910b1", "5", True, 16)]


def test_campaigns_are_ordered_by_date_not_by_where_they_are(tmp_path):
    bundles = campaign_series(tmp_path / "evidence", step=1.08, seed=5)
    # The later campaigns moved to a directory that sorts first: the order and the step stay.
    (tmp_path / "0-moved").mkdir()
    for bundle in bundles[STEP_AT:]:
        shutil.move(str(bundle), tmp_path / "0-moved" / bundle.name)

    history = read_history([tmp_path])

    series = history.series[0]
    assert [c.started_at[:10] for c in series.campaigns] == sorted(c.started_at[:10] for c in series.campaigns)
    assert [s.index for s in series.steps.flagged] == [STEP_AT]


@pytest.mark.parametrize("damage", ["tampered", "diagnostic"])
def test_a_bundle_that_does_not_verify_or_is_diagnostic_is_skipped_and_named(tmp_path, capsys, damage):
    bundles = campaign_series(tmp_path / "evidence", step=None, seed=4)
    if damage == "tampered":
        samples = bundles[3] / "samples.jsonl"
        samples.write_text(samples.read_text().replace('"e2e_s":1', '"e2e_s":2', 1))
        expected = f"skipped {bundles[3]}: {bundles[3]} does not verify, so it is not read: samples.jsonl: changed"
    else:
        write_bundle(tmp_path / "evidence", npu_spec(), lambda block, i: 50.0, started_at="2026-10-30T08:00:00.000Z",
                     run_kind="DIAGNOSTIC")
        expected = "DIAGNOSTIC run (not a campaign result)"

    main(["history", str(tmp_path / "evidence")])
    out = capsys.readouterr().out

    assert expected in out
    counted = CAMPAIGNS - 1 if damage == "tampered" else CAMPAIGNS
    assert out.count(f"no step flagged over {counted} campaign(s)") == 2


def test_history_of_a_missing_directory_is_a_usage_error(tmp_path, capsys):
    assert main(["history", str(tmp_path / "none")]) == 2
    assert "not a directory" in capsys.readouterr().err
