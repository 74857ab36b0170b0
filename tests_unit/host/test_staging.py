"""h3bench.host.staging: the checkpoint staged once before the blocks, verified, refused where it does not fit."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from h3bench.errors import RunSpecError, UsageError, WeightIntegrityError
from h3bench.host import staging
from h3bench.host.checkpoint import content_identity
from h3bench.host.staging import STAGED_ENV, stage_checkpoint, staged_path
from h3bench.runspec import load_runspec, parse_runspec
from h3bench.server.ports import find_free_port
from h3bench.server.process import ServerProcess

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "runspecs"


@pytest.fixture
def checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    monkeypatch.setenv("H3BENCH_HASH_CACHE", str(tmp_path / "hashes.json"))
    root = tmp_path / "net" / "MiniMax-H3"
    (root / "transformer").mkdir(parents=True)
    (root / "transformer" / "diffusion_pytorch_model.safetensors").write_bytes(b"w" * 300_000)
    (root / "model_index.json").write_text('{"_class_name": "MiniMaxH3Pipeline"}')
    return root, content_identity(root, progress=None).identity


def test_a_copy_is_verified_and_the_servers_read_it(tmp_path: Path, checkpoint: tuple[Path, str]) -> None:
    root, identity = checkpoint
    staged = stage_checkpoint(str(root), identity, "copy", str(tmp_path / "local"))
    assert staged.path == staged_path(str(root), "copy", str(tmp_path / "local")) == str(tmp_path / "local" / root.name)
    assert content_identity(Path(staged.path), progress=None).identity == identity == staged.identity
    assert staged.bytes == 300_000 + len('{"_class_name": "MiniMaxH3Pipeline"}') and not staged.note
    again = stage_checkpoint(str(root), identity, "copy", str(tmp_path / "local"))  # a verified copy is kept
    assert again.note == "a verified copy was already there"


def test_a_target_without_the_space_is_refused_before_anything_is_written(
        tmp_path: Path, checkpoint: tuple[Path, str], monkeypatch: pytest.MonkeyPatch) -> None:
    root, identity = checkpoint
    real = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(staging.shutil, "disk_usage", lambda _: real._replace(free=100_000))
    with pytest.raises(UsageError, match=r"staging target .* has 0\.00 GB free, but the checkpoint .* needs 0\.00 GB"):
        stage_checkpoint(str(root), identity, "copy", str(tmp_path / "local"))
    assert not (tmp_path / "local").exists()


def test_the_page_cache_is_refused_without_the_memory_and_warmed_with_it(
        checkpoint: tuple[Path, str], monkeypatch: pytest.MonkeyPatch) -> None:
    root, identity = checkpoint
    assert stage_checkpoint(str(root), identity, "page_cache", None).path == str(root)
    monkeypatch.setattr(staging, "available_memory", lambda: 1000)
    with pytest.raises(UsageError, match="needs 0.00 GB of memory, but the host has 0.00 GB available"):
        stage_checkpoint(str(root), identity, "page_cache", None)


def test_another_checkpoint_than_the_pinned_one_is_not_staged(tmp_path: Path, checkpoint: tuple[Path, str]) -> None:
    root, _ = checkpoint
    with pytest.raises(WeightIntegrityError, match="but the spec pins sha256:0000"):
        stage_checkpoint(str(root), "sha256:0000", "copy", str(tmp_path / "local"))
    assert not (tmp_path / "local").exists()


def test_without_files_nothing_is_read_and_the_note_says_why() -> None:
    staged = stage_checkpoint("MiniMaxAI/MiniMax-H3", "UNPINNED", "page_cache", None)
    assert staged.identity is None and staged.bytes == 0 and "not a directory here" in staged.note


def test_the_spec_table_and_its_id() -> None:
    data = load_runspec(FIXTURES / "sim.toml").model_dump(mode="json")
    plain = parse_runspec(data, source="t")
    assert plain.staging is None and "staging" not in plain.canonical_json()  # older specs keep their id
    staged = parse_runspec({**data, "staging": {"mode": "page_cache"}}, source="t")
    assert staged.spec_id != plain.spec_id
    with pytest.raises(RunSpecError, match="staging: .*copy\" needs target"):
        parse_runspec({**data, "staging": {"mode": "copy"}}, source="t")
    with pytest.raises(RunSpecError, match="takes no target"):
        parse_runspec({**data, "staging": {"mode": "page_cache", "target": "/x"}}, source="t")


@pytest.mark.parametrize("staged", [False, True])
def test_the_simulator_loads_faster_when_the_harness_staged_the_weights(tmp_path: Path, staged: bool) -> None:
    port = find_free_port()
    # 500 modelled seconds at 0.002: 1 s of weight load, 0.4 s staged (the profile's staged_load_share).
    argv = [sys.executable, "-m", "h3bench.sim", "--port", str(port), "--workers", "1", "--time-scale", "0.002",
            "--load-s", "500"]
    env = {STAGED_ENV: "page_cache"} if staged else {}
    with ServerProcess(argv, port=port, log_path=tmp_path / "sim.log", env=env, startup_budget_s=60) as srv:
        pass
    assert srv.startup_phases is not None
    assert srv.startup_phases.weight_load_s == pytest.approx(0.4 if staged else 1.0, abs=0.01)


def test_every_arm_is_given_the_staged_copy(tmp_path: Path, checkpoint: tuple[Path, str]) -> None:
    from h3bench.run.launch import served_model

    root, _ = checkpoint
    data = load_runspec(FIXTURES / "sim.toml").model_dump(mode="json")
    data["model"]["path"] = str(root)
    assert served_model(parse_runspec(data, source="t")) == str(root)
    copied = parse_runspec({**data, "staging": {"mode": "copy", "target": str(tmp_path / "local")}}, source="t")
    assert served_model(copied) == str(tmp_path / "local" / "MiniMax-H3")
    assert served_model(parse_runspec({**data, "staging": {"mode": "page_cache"}}, source="t")) == str(root)


def test_a_staged_campaign_records_what_was_staged_and_tells_every_server(tmp_path: Path) -> None:
    """start_campaign stages before any server starts; the manifest keeps it; each block's server is told."""
    from h3bench.course.schedule import Schedule
    from h3bench.evidence import Bundle
    from h3bench.evidence.manifest import Manifest
    from h3bench.run.launch import block_server
    from h3bench.session.campaign import start_campaign
    from h3bench.session.settings import Settings

    inputs = (FIXTURES.parent / "inputs").resolve()
    text = (FIXTURES / "sim.toml").read_text().replace("../inputs/", f"{inputs}/")
    spec_path = tmp_path / "staged.toml"
    spec_path.write_text(text + '\n[staging]\nmode = "page_cache"\n')
    campaign = start_campaign(Settings(runspec=spec_path, evidence_root=tmp_path / "ev"))
    staged = campaign.runner.preflight.host["staging"]
    assert staged["mode"] == "page_cache" and "not a directory here" in staged["note"]  # the simulator: no files
    spec = load_runspec(spec_path)
    block = Schedule(spec).blocks[0]
    bundle = Bundle.create(tmp_path / "b", Manifest.new(spec_id=spec.spec_id, spec={}))
    server = block_server(spec, block, tmp_path / "b.log", bundle, None, None)
    assert server.env[STAGED_ENV] == "page_cache"
    bundle.close()
