"""``h3bench plan --from-bundle B``: every server start priced as a stored bundle measured it, phase by phase."""

from __future__ import annotations

from pathlib import Path

import pytest

from h3bench.cli import main
from h3bench.course.cases import Block
from h3bench.errors import UsageError
from h3bench.evidence.codec import to_json
from h3bench.plan.estimate import make_plan, measured_start_up
from h3bench.runspec import load_runspec
from h3bench.server.startup import CompileWhere, StartupPhases
from tests_unit.bundlesim import FIXTURES, write_bundle

SPEC = load_runspec(FIXTURES / "sim.toml")
# The 950PR recipe's start from network storage: 31 min 50 s of weights.
RECIPE = StartupPhases(ready_s=1960.0, spawn_s=4.0, device_init_s=12.0, weight_load_s=1910.0, model_load_s=1918.0,
                       compile=CompileWhere.NONE)


def stored(root: Path, phases: StartupPhases | None) -> Path:
    def lifecycle(block: Block) -> dict[str, object]:
        return {"startup_phases": to_json(phases)} if phases is not None else {}

    return write_bundle(root, SPEC, lambda block, index: block.duration, started_at="2026-12-01T00:00:00Z",
                        lifecycle=lifecycle)


def test_a_stored_bundles_measured_starts_price_every_start_and_the_plan_says_so(tmp_path: Path) -> None:
    bundle = stored(tmp_path, RECIPE)
    assert measured_start_up(bundle) == RECIPE
    hinted = make_plan(SPEC)
    priced = make_plan(SPEC, startup_bundle=bundle)
    assert hinted.seconds is not None and priced.seconds is not None
    modelled_start = hinted.seconds - priced.seconds + len(priced.blocks) * 1960.0
    assert modelled_start == pytest.approx(len(hinted.blocks) * 1.5, rel=0.5)  # the simulator's own short start
    assert f"every server start as bundle {bundle.name} measured it (ready 1960.0 s" in priced.source
    assert "weights 1910.0" in priced.source and "compile: none" in priced.source
    assert "measured it" not in hinted.source
    # The device time of the design is priced from the same starts.
    assert priced.device[0].design.wall_h[0] > hinted.device[0].design.wall_h[0] + 1


def test_a_bundle_without_phases_is_refused_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundle = stored(tmp_path, None)
    with pytest.raises(UsageError, match="records no server start by phase"):
        measured_start_up(bundle)
    code = main(["plan", "--runspec", str(FIXTURES / "sim.toml"), "--from-bundle", str(bundle),
                 "--evidence-dir", str(tmp_path / "ev")])
    assert code == 2 and "records no server start by phase" in capsys.readouterr().err
