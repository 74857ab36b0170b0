"""The real-NPU code path, through fake ``vllm`` and ``npu-smi`` executables on PATH (pytester, in subprocesses).

Each test runs a small campaign whose RunSpec is shaped like the 8x910B1 one
(fixtures/runspecs/910b1-x8.toml): hardware kind 910b1 with NPUs 0-7, a
``[source]`` table, and arms that are the real ``vllm serve ... --omni``
command lines with their environment, written out (argv arms) or built by
h3bench from vLLM-Omni's options (vllm arms). The fake ``vllm``
(tests_unit/fakes) checks the flags as vLLM-Omni does, logs the attention
backend its workers resolved, then becomes the simulator with one worker per
device; ``FAKE_VLLM_SIM_ARGS`` in the arm's environment makes it fast. The
fake ``npu-smi`` answers from recorded ``npu-smi info`` samples, one per call
in turn, so the campaign's device checks (before each server start, after each
stop) see idle devices, a foreign process or a leftover worker.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from h3bench.evidence import verify
from h3bench.host.telemetry import TELEMETRY_KEYS
from tests_unit.campaign_project import bundle_of, run_campaign, write_campaign

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("campaign_subprocess_env")]

FAKES = Path(__file__).parents[1] / "fakes"
SAMPLES = FAKES / "npu-smi-samples"
IDLE = SAMPLES / "910b1-x8-idle.txt"
SERVING = SAMPLES / "910b1-x8-serving.txt"  # VLLMWorker pids 51230-51237 on NPUs 0-7
FOREIGN = SAMPLES / "910b1-x8-foreign-process-on-npu3.txt"  # pid 8811 (python3) on NPU 3

# The base serving command of campaign #293 (vLLM-Omni's cli/serve.py), as the 910B1 spec writes it.
VLLM_SERVE = [
    "vllm", "serve", "{model}", "--omni", "--host", "{host}", "--port", "{port}",
    "--task-type", "ref2va", "--num-gpus", "8", "--usp", "8", "--ring", "1", "--text-encoder-tp-size", "8",
    "--vae-parallel-mode", "tile", "--vae-use-tiling", "--vae-patch-parallel-size", "8",
    "--enable-diffusion-pipeline-profiler", "--enable-distributed-layerwise-offload",
]
NPU_ENV = {
    "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
    "VLLM_OMNI_VIDEO_SYNC_TIMEOUT": "60",
    "HF_HUB_OFFLINE": "1",
    "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
    "HCCL_NPU_SOCKET_PORT_RANGE": "auto",
    "ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
}
# Answers played in turn are consumed one per call, so those tests sample telemetry only at each stop.
ONE_SAMPLE = {"telemetry_interval_s": 3600.0}
# Modelled seconds x 0.0002: a 5 s request takes about 0.2 s behind the fake vllm (64x64 canvas).
FAST = "--time-scale 0.0002 --jitter-cv 0.01"
CANDIDATE = "dlo_rank_local"
INVENTORY = 1  # the host's npu-smi inventory, recorded in the manifest before the first block


class FakeNpuSmi:
    """What the fake ``npu-smi info`` answers: the given samples one per call, then the last one again."""

    def __init__(self, directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.directory = directory
        self._monkeypatch = monkeypatch

    def answer(self, *samples: Path) -> None:
        self.directory.mkdir()
        for i, sample in enumerate(samples, start=1):
            shutil.copy(sample, self.directory / f"{i:02d}-{sample.name}")
        self._monkeypatch.setenv("FAKE_NPU_SMI_OUTPUT", str(self.directory))

    @property
    def calls(self) -> int:
        """How many times ``npu-smi info`` ran (the fake counts them)."""
        return int((self.directory / ".calls").read_text())


@pytest.fixture
def npu_smi(pytester, monkeypatch) -> FakeNpuSmi:
    """Make the inner pytest's host look like an 8x910B1 host; the fakes come first on PATH.

    This interpreter's directory comes next, so that the fake vllm finds h3bench.
    """
    monkeypatch.setenv("PATH", os.pathsep.join([str(FAKES), str(Path(sys.executable).parent), os.environ["PATH"]]))
    return FakeNpuSmi(pytester.path / "npu-smi-answers", monkeypatch)


def npu_arm(*flags: str, sim_args: str = FAST) -> dict:
    return {
        "description": "vllm serve on 8 NPUs " + " ".join(flags),
        "argv": [*VLLM_SERVE, *flags],
        "env": {**NPU_ENV, "FAKE_VLLM_SIM_ARGS": sim_args},
    }


def write_npu_campaign(
    pytester: pytest.Pytester, candidate: str = CANDIDATE, *flags: str, sim_args: str = FAST,
    protocol: dict | None = None, arm_tables: dict | None = None, devices: int = 8,
) -> Path:
    """Baseline: DLO with AllGather; the candidate adds ``flags`` (default: rank-local DLO transfer)."""
    return write_910b1_campaign(pytester, arm_tables or {
        "baseline": npu_arm("--dlo-use-allgather"),
        candidate: npu_arm(*(flags or ("--dlo-no-use-allgather",)), sim_args=sim_args),
    }, protocol=protocol, devices=devices)


def write_910b1_campaign(
    pytester: pytest.Pytester, arm_tables: dict[str, dict], protocol: dict | None = None, devices: int = 8
) -> Path:
    """A campaign on (fake) 910B1 NPUs with the frozen source of campaign #293 and these arms."""
    return write_campaign(
        pytester.path,
        hardware={"kind": "910b1", "device_ids": list(range(devices))},
        source={
            "engine_commit": "c7f56f0155953c7d4a77276a2f4fcbd844ab0da2",
            "image_digest": "sha256:7fc6c73bd19a6ef4ee8d6048009972234796a1fc1bd3067168a425343cc476f7",
        },
        # Eight spawned workers per server on two cores: generous budgets, the same for both arms.
        protocol={"startup_budget_s": 60.0, "shutdown_budget_s": 10.0,
                  **(protocol or ONE_SAMPLE)},
        arm_tables=arm_tables,
    )


def lifecycle_of(pytester: pytest.Pytester) -> dict[str, dict]:
    lines = (bundle_of(pytester) / "lifecycle.jsonl").read_text().splitlines()
    return {event["block"]: event for event in map(json.loads, lines)}


def verdict_of(pytester: pytest.Pytester, candidate: str) -> dict:
    return json.loads((bundle_of(pytester) / "verdict.json").read_text())["candidates"][candidate]


def test_idle_npus_let_every_block_run_with_eight_workers_that_release_the_devices(pytester, npu_smi):
    npu_smi.answer(IDLE)
    spec = write_npu_campaign(pytester, sim_args="--time-scale 0.00015 --jitter-cv 0.01")

    result = run_campaign(pytester, spec, "-v", "tests_perf", "tests_lifecycle", "--benchmark-disable")

    # 4 blocks (ABBA); 5 lifecycle tests x 4 blocks.
    result.assert_outcomes(passed=4 + 20)
    # npu-smi was asked once for the host's inventory, then before each of the four starts, at each stop
    # (telemetry) and after it.
    assert npu_smi.calls == INVENTORY + 12
    events = lifecycle_of(pytester)
    assert len(events) == 4
    for event in events.values():
        assert event["failure"] is None
        assert event["argv"][:2] == ["vllm", "serve"] and "--omni" in event["argv"]
        assert event["env"]["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
        assert event["exit"]["device_leftovers"] == [] and not event["exit"]["survivors"]
        assert len(event["exit"]["pids_seen"]) >= 1 + 8, "the server and one worker per NPU"
        log = (bundle_of(pytester) / event["log_relpath"]).read_text()
        assert "starting 8 diffusion workers" in log
        # Each arm's own environment reached its server: FAKE_VLLM_SIM_ARGS set the simulator's time scale.
        scale = "0.0002" if event["arm"] == "baseline" else "0.00015"
        assert f"8 worker(s), time_scale {scale}," in log
    manifest = json.loads((bundle_of(pytester) / "manifest.json").read_text())
    assert manifest["source"]["engine_commit"] == "c7f56f0155953c7d4a77276a2f4fcbd844ab0da2"
    assert verdict_of(pytester, CANDIDATE)["stopped"] is None
    result.stdout.fnmatch_lines([f"ref2va 5s, {CANDIDATE} against baseline:", f"verdict {CANDIDATE}: *"])


@pytest.mark.parametrize(
    ("answers", "blocked", "outcomes"),
    [
        # The baseline's first block already finds the foreign process: no server starts at all.
        ((IDLE, FOREIGN), "1A-baseline", {"failed": 1, "skipped": 3}),
        # It appears after block 1A: the candidate's own block is refused, and still not failed.
        ((IDLE, IDLE, IDLE, IDLE, FOREIGN), f"2B-{CANDIDATE}", {"passed": 1, "failed": 1, "skipped": 2}),
    ],
    ids=["before-baseline", "before-candidate"],
)
def test_foreign_process_on_an_npu_is_interference_that_makes_the_verdict_inconclusive(
    pytester, npu_smi, answers, blocked, outcomes
):
    npu_smi.answer(*answers)
    spec = write_npu_campaign(pytester)

    result = run_campaign(pytester, spec, "-v", "tests_perf", "--benchmark-disable", "-rs")

    result.assert_outcomes(**outcomes)
    interference = "resource interference*pid 8811 (python3) on NPU 3 chip 0"
    result.stdout.fnmatch_lines([f"*5s-{CANDIDATE}-{blocked}: {interference}*"])
    result.stdout.fnmatch_lines([f"*candidate '{CANDIDATE}' was stopped*resource interference*"])
    result.stdout.fnmatch_lines([f"verdict {CANDIDATE}: INCONCLUSIVE (stopped: *pid 8811 (python3) on NPU 3*"])
    # The inventory; per block that ran: before its start, at its stop and after it; then the refused start.
    assert npu_smi.calls == len(answers)
    refused = lifecycle_of(pytester)[f"5s-{CANDIDATE}-{blocked}"]
    assert refused["pid"] is None, "no server may start on a device that another process holds"
    assert refused["failure_outcome"] == "INCONCLUSIVE"
    assert verdict_of(pytester, CANDIDATE)["verdict"] == "INCONCLUSIVE"


def test_conflicting_offload_settings_kill_the_candidate_before_ready_and_fail_it(pytester, npu_smi):
    npu_smi.answer(IDLE)
    # The DLO flag with a config that resolves to plain layer-wise offload (rank-local is its default transfer).
    layer_wise = '{"mode": "layer", "components": ["dit"]}'
    spec = write_npu_campaign(pytester, "offload_config", "--diffusion-offload-config", layer_wise)

    result = run_campaign(pytester, spec, "-v", "tests_perf", "--benchmark-disable", "-rs")

    # Block 1A passes, 2B dies before ready, the rest of the candidate's series (3B, 4A) is skipped.
    result.assert_outcomes(passed=1, failed=1, skipped=2)
    conflict = "ValueError: diffusion_offload_config cannot be combined with legacy enable_*_offload flags"
    result.stdout.fnmatch_lines([
        "*5s-offload_config-2B-offload_config: server did not start*exited before it was ready*exit code 1*",
        f"*{conflict}*",
    ])
    result.stdout.fnmatch_lines(["*candidate 'offload_config' was stopped*server did not start*"])
    result.stdout.fnmatch_lines([f"verdict offload_config: FAIL (stopped: *server did not start*{conflict}*"])
    dead = lifecycle_of(pytester)["5s-offload_config-2B-offload_config"]
    assert dead["exit_code"] == 1 and dead["exited_before_stop"] is True and dead["startup_s"] is None
    assert verdict_of(pytester, "offload_config")["verdict"] == "FAIL"
    # The inventory, then per block: before, at the stop and after, the dead server's block too.
    assert npu_smi.calls == INVENTORY + 6


def test_processes_that_are_not_the_servers_after_its_stop_are_interference_not_cleanup(pytester, npu_smi):
    # The inventory, then block 1A: idle throughout. Block 2B: idle before and at its stop; after it, the
    # serving sample's workers, whose PIDs were never the server's: another process came, which invalidates it.
    npu_smi.answer(IDLE, IDLE, IDLE, IDLE, IDLE, IDLE, SERVING)
    spec = write_npu_campaign(pytester)

    result = run_campaign(pytester, spec, "-v", "tests_perf", "--benchmark-disable", "-rs")

    result.assert_outcomes(passed=1, failed=1, skipped=2)
    result.stdout.fnmatch_lines([
        f"*5s-{CANDIDATE}-2B-{CANDIDATE}: resource interference*"
        "pid 51230 (VLLMWorker) on NPU 0 chip 0, 20480 MB is on a reserved device after the stop, "
        "and it is not a process of this server*"
    ])
    result.stdout.fnmatch_lines([f"verdict {CANDIDATE}: INCONCLUSIVE (stopped: *resource interference*"])
    event = lifecycle_of(pytester)[f"5s-{CANDIDATE}-2B-{CANDIDATE}"]
    assert event["exit"]["device_leftovers"] == [] and len(event["exit"]["device_interference"]) == 8
    assert event["failure_outcome"] == "INCONCLUSIVE"
    assert event["graceful"] is True and not event["exit"]["survivors"]
    assert verdict_of(pytester, CANDIDATE)["verdict"] == "INCONCLUSIVE"
    assert npu_smi.calls == INVENTORY + 6


# ---- a live fake host: its processes are the simulator's own workers, and its telemetry follows them

TWO_NPUS = [
    "vllm", "serve", "{model}", "--omni", "--host", "{host}", "--port", "{port}",
    "--task-type", "ref2va", "--num-gpus", "2", "--usp", "2", "--ring", "1", "--text-encoder-tp-size", "2",
    "--vae-parallel-mode", "tile", "--vae-use-tiling", "--vae-patch-parallel-size", "2",
    "--enable-diffusion-pipeline-profiler", "--enable-distributed-layerwise-offload",
]


def two_npu_arm(*flags: str) -> dict:
    return {"description": "vllm serve on 2 NPUs", "argv": [*TWO_NPUS, *flags],
            "env": {**NPU_ENV, "ASCEND_RT_VISIBLE_DEVICES": "0,1", "FAKE_VLLM_SIM_ARGS": FAST}}


def live_campaign(pytester: pytest.Pytester, npu_smi: FakeNpuSmi, order: str = "ABBA", **live) -> Path:
    npu_smi.directory.mkdir()
    (npu_smi.directory / "live.json").write_text(json.dumps({"npus": 2, **live}))
    npu_smi._monkeypatch.setenv("FAKE_NPU_SMI_OUTPUT", str(npu_smi.directory))
    return write_npu_campaign(
        pytester, devices=2, protocol={"order": order, "telemetry_interval_s": 0.5},
        arm_tables={"baseline": two_npu_arm("--dlo-use-allgather"), CANDIDATE: two_npu_arm("--dlo-no-use-allgather")},
    )


def test_telemetry_of_every_block_and_a_hot_block_named_in_the_verdict(pytester, npu_smi):
    spec = live_campaign(pytester, npu_smi, order="ABBAABBA", hot_server=3)  # 3B: 25 °C hotter, 120 W more

    result = run_campaign(pytester, spec, "-v", "tests_perf", "--benchmark-disable")

    result.assert_outcomes(passed=8)
    bundle = bundle_of(pytester)
    records = [json.loads(line) for line in (bundle / "telemetry.jsonl").read_text().splitlines()]
    assert all(list(r) == list(TELEMETRY_KEYS) for r in records)
    blocks = set(lifecycle_of(pytester))
    assert {r["block"] for r in records} == blocks and len(blocks) == 8
    assert {(r["npu_id"], r["chip_id"]) for r in records} == {(0, 0), (1, 0)}
    assert any(r["hbm_used_mb"] == 3381 + 20480 and r["aicore_pct"] == 97 for r in records), "the workers' load"
    assert all(e["exit"]["device_interference"] == [] for e in lifecycle_of(pytester).values())
    final = json.loads((bundle / "final.json").read_text())
    assert "telemetry.jsonl" in final["files"] and verify(bundle).ok
    hot = f"5s-{CANDIDATE}-3B-{CANDIDATE}"
    (note,) = verdict_of(pytester, CANDIDATE)["notes"]
    assert note.startswith(f"block {hot}: telemetry is an outlier among the {CANDIDATE} 5 s blocks (")
    assert "temperature 85.0 °C against 60.0 °C in the others; power 370.0 W against 250.0 W in the others" in note
    result.stdout.fnmatch_lines([f"verdict {CANDIDATE}: *", f"  note: block {hot}: telemetry is an outlier*"])


@pytest.mark.parametrize(
    ("live", "failure", "outcome"),
    [
        # The driver still lists the candidate's own workers after its stop: the candidate's failure.
        ({"linger_server": 2}, "incomplete process cleanup*still holds the device after the stop", "FAIL"),
        # Another process appears on NPU 1 while the candidate's server runs: the block is invalid.
        ({"foreign": {"pid": os.getpid(), "npu": 1, "from_server": 2}},
         f"resource interference: pid {os.getpid()} (python3) on NPU 1 chip 0, 20480 MB appeared while the server ran",
         "INCONCLUSIVE"),
    ],
    ids=["our-worker-lingers", "another-process-appears"],
)
def test_what_is_on_the_devices_decides_between_cleanup_and_interference(pytester, npu_smi, live, failure, outcome):
    spec = live_campaign(pytester, npu_smi, **live)

    result = run_campaign(pytester, spec, "-v", "tests_perf", "--benchmark-disable", "-rs")

    result.assert_outcomes(passed=1, failed=1, skipped=2)
    result.stdout.fnmatch_lines([f"*5s-{CANDIDATE}-2B-{CANDIDATE}: {failure}*"])
    event = lifecycle_of(pytester)[f"5s-{CANDIDATE}-2B-{CANDIDATE}"]
    assert event["failure_outcome"] == outcome and verdict_of(pytester, CANDIDATE)["verdict"] == outcome


# ---- vllm arms: h3bench builds the command from vLLM-Omni's options


def vllm_arm(description: str, *, mindiesd: bool = True, **fields) -> dict:
    """A vllm arm of the base serving on 8 NPUs; ``mindiesd`` says whether the fake finds it installed."""
    env = {k: v for k, v in NPU_ENV.items() if k != "ASCEND_RT_VISIBLE_DEVICES"}  # built from device_ids
    return {
        "type": "vllm", "description": description, "task_type": "ref2va", "device_ids": list(range(8)),
        "usp": 8, "ring": 1, "text_encoder_tp_size": 8,
        "vae": {"parallel_mode": "tile", "use_tiling": True, "patch_parallel_size": 8},
        "profiler": {"pipeline": True}, "attention": {"expect_backend": "FLASH_ATTN"},
        "env": {**env, "FAKE_VLLM_SIM_ARGS": FAST, "FAKE_VLLM_MINDIESD": "1" if mindiesd else "0"},
        **fields,
    }


@pytest.mark.parametrize(
    ("without_mindiesd", "failed_block", "verdict", "outcomes"),
    [
        (CANDIDATE, f"5s-{CANDIDATE}-2B-{CANDIDATE}", "FAIL", {"passed": 1, "failed": 1, "skipped": 2}),
        ("baseline", f"5s-{CANDIDATE}-1A-baseline", "INCONCLUSIVE", {"failed": 1, "skipped": 3}),
    ],
    ids=["candidate", "baseline"],
)
def test_a_server_on_another_attention_backend_than_the_arm_expects_fails_its_block(
    pytester, npu_smi, without_mindiesd, failed_block, verdict, outcomes
):
    """Without mindiesd vLLM-Omni silently serves SDPA, not FLASH_ATTN: the log says so, the block fails."""
    npu_smi.answer(IDLE)
    baseline = vllm_arm("AllGather DLO", mindiesd=without_mindiesd != "baseline", offload={"dlo": {}})
    candidate = vllm_arm("rank-local DLO", mindiesd=without_mindiesd != CANDIDATE,
                         offload={"dlo": {"transfer": "rank-local"}})
    spec = write_910b1_campaign(pytester, {"baseline": baseline, CANDIDATE: candidate})

    result = run_campaign(pytester, spec, "-v", "tests_perf", "--benchmark-disable", "-rs")

    result.assert_outcomes(**outcomes)
    mismatch = ("attention backend mismatch: the server's workers used attention backend SDPA for role 'self' "
                "(via platform default), but the arm expects FLASH_ATTN*mindiesd*")
    result.stdout.fnmatch_lines([f"*{failed_block}: {mismatch}"])
    result.stdout.fnmatch_lines([f"verdict {CANDIDATE}: {verdict} (stopped: *attention backend mismatch*"])
    # The header shows each arm's built command.
    result.stdout.fnmatch_lines([
        "h3bench baseline: vllm serve MiniMaxAI/MiniMax-H3 --omni --host 127.0.0.1 --port 0 --task-type ref2va "
        "--num-gpus 8 --usp 8 *--enable-distributed-layerwise-offload --dlo-use-allgather",
        f"h3bench {CANDIDATE}: vllm serve *--enable-distributed-layerwise-offload --dlo-no-use-allgather",
    ])
    events = lifecycle_of(pytester)
    # Every server start recorded the engine's contract: its /openapi.json and this engine's vllm serve --help=all.
    for event in events.values():
        engine_help = (bundle_of(pytester) / event["contract"]["help"]["relpath"]).read_text()
        assert engine_help.startswith("usage: vllm serve [model_tag] --omni [options]"), engine_help[:200]
        assert "--dlo-resident-layers" in engine_help and event["contract"]["openapi"]["sha256"]
    assert len({e["contract"]["help"]["sha256"] for e in events.values()}) == 1
    failed = events[failed_block]
    assert failed["failure_outcome"] == verdict and failed["pid"] is not None
    assert failed["attention_backend"] == {"used": ["SDPA"], "via": ["platform default"], "expected": "FLASH_ATTN"}
    for block, event in events.items():
        if block != failed_block:
            assert event["failure"] is None
            assert event["attention_backend"]["used"] == ["FLASH_ATTN"]
    assert verdict_of(pytester, CANDIDATE)["verdict"] == verdict
    manifest = json.loads((bundle_of(pytester) / "manifest.json").read_text())
    launch = manifest["arms"][CANDIDATE]
    assert launch["argv"][:4] == ["vllm", "serve", "{model}", "--omni"] and "--dlo-no-use-allgather" in launch["argv"]
    assert launch["env"]["ASCEND_RT_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert "vllm-omni 0.30.0" in launch["rules_checked_against"]


def test_conflicting_offload_settings_in_a_vllm_arm_are_refused_before_any_server_starts(pytester, npu_smi):
    npu_smi.answer(IDLE)
    conflicting = vllm_arm("DLO flag with a layer-wise config",
                           offload={"dlo": {}, "config": {"mode": "layer", "components": ["dit"]}})
    spec = write_910b1_campaign(pytester, {"baseline": vllm_arm("AllGather DLO", offload={"dlo": {}}),
                                           CANDIDATE: conflicting})

    result = run_campaign(pytester, spec, "-v", "tests_perf", "--benchmark-disable")

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*arms.{CANDIDATE}.offload: diffusion_offload_config cannot be combined with "
                                 "legacy enable_*_offload flags*"])
    assert not (pytester.path / "evidence").exists(), "nothing ran, nothing was written"
    assert not (npu_smi.directory / ".calls").exists(), "no device was even checked"
