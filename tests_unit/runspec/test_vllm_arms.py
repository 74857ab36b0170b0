"""vllm arms: one table of option combinations against h3bench's checks and against the fake ``vllm``.

tests_unit/vllm_cases.py holds the table, each case with vLLM-Omni 0.30.0's
own outcome. h3bench must refuse, when the spec loads, every combination
upstream refuses (naming the arm's field, in upstream's words), and accept
the rest; the fake ``vllm``, an independent model of upstream, must do what
upstream does at the stage upstream does it. The rules h3bench adds of its
own each have a failing and a passing case here too.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from h3bench.errors import RunSpecError
from h3bench.runspec import CHECKED_AGAINST, ArgvArm, RunSpec, VllmArm, parse_runspec
from tests_unit.vllm_cases import BASE_FIELDS, BASE_FLAGS, CASES, Case

ROOT = Path(__file__).resolve().parents[2]
FAKE_VLLM = Path(__file__).parents[1] / "fakes" / "vllm"
NPU_SPEC = ROOT / "fixtures" / "runspecs" / "910b1-x8.toml"
EIGHT = "0,1,2,3,4,5,6,7"
EXIT_STATUS = {"A": 2, "B": 1, "C": 1, "D": 1, "E": 1}
CANDIDATE = "candidate"


ATTRIBUTION = {"hypothesis": "The option under test is faster.", "source": {"kind": "configuration", "ref": "the case"}}


def spec_with(candidate: dict[str, Any], hardware: dict[str, Any] | None = None) -> dict[str, Any]:
    """The 910B1 spec's data with a vllm baseline of the table's base options and this (attributed) candidate."""
    data = tomllib.loads(NPU_SPEC.read_text())
    data["arms"] = {"baseline": copy.deepcopy(BASE_FIELDS), CANDIDATE: {**ATTRIBUTION, **candidate}}
    if hardware is not None:
        data["hardware"] = hardware
    return data


def load(candidate: dict[str, Any], **kwargs: Any) -> RunSpec:
    return parse_runspec(spec_with(candidate, **kwargs), source="case")


def arm(**fields: Any) -> dict[str, Any]:
    return {**copy.deepcopy(BASE_FIELDS), **copy.deepcopy(fields)}


def refusal(candidate: dict[str, Any], **kwargs: Any) -> RunSpecError:
    with pytest.raises(RunSpecError) as caught:
        load(candidate, **kwargs)
    return caught.value


def run_fake(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "FAKE_VLLM_DRY_RUN": "1", **env}
    return subprocess.run([sys.executable, str(FAKE_VLLM), *args], env=environment, capture_output=True,
                          text=True, timeout=120)


def meaning(args: tuple[str, ...] | list[str]) -> dict[str, str | None]:
    """Flags and their values as argparse keeps them: the last one given wins."""
    kept: dict[str, str | None] = {}
    for i, arg in enumerate(args):
        if arg.startswith("-"):
            value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("-") else None
            kept[arg] = value
    return kept


def test_the_base_options_build_the_base_command_of_the_table():
    built = VllmArm.model_validate(BASE_FIELDS).argv
    assert built == ("vllm", "serve", "{model}", "--omni", "--host", "{host}", "--port", "{port}", *BASE_FLAGS)


@pytest.mark.parametrize("case", [c for c in CASES if c.fields is not None], ids=lambda c: c.id)
def test_h3bench_refuses_before_launch_what_upstream_refuses(case: Case):
    expected = case.ours or case.upstream
    candidate = arm(**case.fields or {})
    if expected.accepted:
        built = load(candidate).arms[CANDIDATE]
        # The built command means what the case's command means.
        assert meaning(built.argv[8:]) == meaning((*BASE_FLAGS, *case.flags))
        return
    error = refusal(candidate)
    assert expected.message in str(error)
    assert error.field_path == f"arms.{CANDIDATE}.{case.where}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_the_fake_vllm_does_what_upstream_does(case: Case):
    done = run_fake(["serve", "/models/MiniMax-H3", "--omni", "--port", "0", *BASE_FLAGS, *case.flags],
                    {"ASCEND_RT_VISIBLE_DEVICES": EIGHT, **case.env})
    out = done.stderr
    stage = case.upstream.stage
    if stage is None:
        assert done.returncode == 0, out
        assert "every worker initialised" in out
        return
    assert done.returncode == EXIT_STATUS[stage], out
    if stage == "A":
        assert f"vllm serve: error: {case.upstream.message}" in out
        assert "usage: vllm serve [model_tag] --omni [options]" in out
        return
    assert f"{case.upstream.error}: {case.upstream.message}" in out
    if stage == "E":
        # In the workers, after they spawned: each logs the refusal, the server gives up.
        assert any("DiffusionWorker" in line and case.upstream.message in line for line in out.splitlines())
        assert "scheduler is dead" in out and "RuntimeError: Initialization failed" in out
    else:
        # In the API server, before any worker exists.
        assert "DiffusionWorker" not in out and "starting" not in out


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.fields is not None and (c.ours or c.upstream).accepted], ids=lambda c: c.id
)
def test_the_fake_vllm_accepts_every_command_h3bench_builds(case: Case):
    built = load(arm(**case.fields or {})).arms[CANDIDATE]
    done = run_fake(built.command("127.0.0.1", 0, "/models/MiniMax-H3")[1:], built.launch_env())
    assert done.returncode == 0, done.stderr


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    devices=st.sampled_from([1, 2, 4, 8]),
    usp=st.sampled_from([1, 2, 3, 4, 8]),
    ring=st.sampled_from([1, 2]),
    cfg=st.sampled_from([1, 2]),
    tp=st.sampled_from([1, 2, 3, 4, 8, 16]),
    patch=st.sampled_from([1, 2, 4, 8]),
)
def test_h3bench_and_the_fake_agree_on_any_parallel_layout(devices, usp, ring, cfg, tp, patch):
    fields = {"device_ids": list(range(devices)), "usp": usp, "ring": ring, "cfg_parallel_size": cfg,
              "text_encoder_tp_size": tp, "vae": {"use_tiling": True, "patch_parallel_size": patch}}
    try:
        load(arm(**fields), hardware={"kind": "910b1", "device_ids": list(range(8))})
        accepted = True
    except RunSpecError:
        accepted = False
    flags = ["--task-type", "ref2va", "--num-gpus", str(devices), "--usp", str(usp), "--ring", str(ring),
             "--cfg-parallel-size", str(cfg), "--text-encoder-tp-size", str(tp), "--vae-use-tiling",
             "--vae-patch-parallel-size", str(patch)]
    done = run_fake(["serve", "m", "--omni", *flags], {"ASCEND_RT_VISIBLE_DEVICES": ",".join(map(str, range(devices)))})
    assert (done.returncode == 0) == accepted, done.stderr[-2000:]


# ---- the rules h3bench adds, each failing and passing


def test_a_flag_a_field_builds_is_refused_in_extra_args_and_others_pass_through():
    error = refusal(arm(extra_args=["--trust-remote-code", "--usp=4"]))
    assert error.field_path == f"arms.{CANDIDATE}.extra_args"
    assert "--usp is built from usp: set that field instead" in str(error)
    built = load(arm(extra_args=["--trust-remote-code", "--stage-init-timeout", "900"])).arms[CANDIDATE]
    assert built.argv[-3:] == ("--trust-remote-code", "--stage-init-timeout", "900")


def test_an_arm_may_use_only_reserved_devices():
    error = refusal(arm(device_ids=[0, 1, 2, 3, 4, 5, 6, 9]))
    assert error.field_path == f"arms.{CANDIDATE}.device_ids" and "[9] are not among hardware.device_ids" in str(error)
    four = load(arm(device_ids=[4, 5, 6, 7], usp=4, text_encoder_tp_size=4,
                    vae={"use_tiling": True, "patch_parallel_size": 4})).arms[CANDIDATE]
    assert four.launch_env()["ASCEND_RT_VISIBLE_DEVICES"] == "4,5,6,7"
    assert four.command("h", 1, "m")[four.argv.index("--num-gpus") + 1] == "4"


def test_visible_devices_written_in_env_must_name_the_device_ids():
    error = refusal(arm(env={"ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3,4,5,6"}))
    assert error.field_path == f"arms.{CANDIDATE}.env.ASCEND_RT_VISIBLE_DEVICES"
    agreed = load(arm(env={"ASCEND_RT_VISIBLE_DEVICES": "0, 1,2,3,4,5,6,7", "HF_HUB_OFFLINE": "1"})).arms[CANDIDATE]
    assert agreed.launch_env() == {"ASCEND_RT_VISIBLE_DEVICES": EIGHT, "HF_HUB_OFFLINE": "1"}


@pytest.mark.parametrize(
    ("attention", "problem"),
    [
        ({"expect_backend": "TORCH_SDPA"}, "the workers log TORCH_SDPA as 'SDPA'"),
        ({"backend": "TORCH_SDPA", "expect_backend": "FLASH_ATTN"}, "can never match"),
        ({"config": {"per_role": {"self": "RAINFUSION_ATTN"}}, "expect_backend": "FLASH_ATTN"}, "can never match"),
        ({"expect_backend": "SDPA"}, None),
        ({"backend": "FLASH_ATTN_HUB", "expect_backend": "FLASH_ATTN"}, None),  # the hub falls back on NPU
        ({"config": {"default": {"backend": "RAINFUSION_ATTN"}}, "expect_backend": "RAINFUSION_ATTN"}, None),
    ],
)
def test_an_expected_backend_must_be_a_logged_name_the_arm_can_resolve_to(attention, problem):
    if problem is None:
        assert load(arm(attention=attention)).arms[CANDIDATE].expected_attention_backend == attention["expect_backend"]
        return
    error = refusal(arm(attention=attention))
    assert problem in str(error) and error.field_path == f"arms.{CANDIDATE}.attention.expect_backend"


def test_a_relative_torch_profiler_directory_is_refused():
    assert refusal(arm(profiler={"torch_dir": "traces"})).field_path == f"arms.{CANDIDATE}.profiler.torch_dir"
    assert "--profiler-config" in load(arm(profiler={"torch_dir": "/traces"})).arms[CANDIDATE].argv


def test_an_unknown_arm_type_is_refused_and_errors_inside_an_arm_name_its_own_fields():
    error = refusal({**arm(), "type": "sglang"})
    assert error.field_path == f"arms.{CANDIDATE}" and 'write type = "vllm"' in str(error)
    assert refusal(arm(usp="eight")).field_path == f"arms.{CANDIDATE}.usp"
    assert refusal({"description": "d", "argv": []}).field_path == f"arms.{CANDIDATE}.argv"


def test_an_argv_arm_serializes_as_before_so_specs_without_vllm_arms_keep_their_id():
    argv_arm = ArgvArm(description="d", argv=("x",))
    # The launch fields, and a candidate's attribution (h3bench.runspec.attribution), as for a vllm arm.
    assert set(argv_arm.model_dump()) == {"description", "argv", "env", "sim", "hypothesis", "source", "combination_of"}
    spec = load({"description": "written out", "argv": ["vllm", "serve", "{model}", "--omni", "--usp", "8"]})
    assert isinstance(spec.arms[CANDIDATE], ArgvArm) and isinstance(spec.baseline, VllmArm)
    assert "type" not in spec.model_dump(mode="json")["arms"][CANDIDATE]
    # A vllm arm's spec survives the manifest's round trip (the review re-parses it) with the same id.
    assert parse_runspec(spec.model_dump(mode="json"), source="copy").spec_id == spec.spec_id


def test_the_rules_name_the_release_they_were_checked_against():
    assert "vllm-omni 0.30.0" in CHECKED_AGAINST
    assert "141cb0c7b9c07970e5c92a99aab9696e81682dbfa3d2bfcde359c3c1533385f4" in CHECKED_AGAINST
    assert "141cb0c7b9c07970e5c92a99aab9696e81682dbfa3d2bfcde359c3c1533385f4" in NPU_SPEC.read_text()


def test_the_quantization_registry_names_the_vllm_release_it_comes_from():
    from h3bench.runspec.vllm_rules import SUPPORTED_QUANTIZATION_METHODS

    assert "vllm 0.30.0" in CHECKED_AGAINST and "ef52ee58c410ead0" in CHECKED_AGAINST
    # vLLM's names first, then the ones only vLLM-Omni's factory adds, as upstream's refusal prints them.
    assert SUPPORTED_QUANTIZATION_METHODS[:3] == ("awq", "auto_awq", "fp8")
    assert SUPPORTED_QUANTIZATION_METHODS[-7:] == ("int8", "bitsandbytes", "mxfp4_dualscale", "svdquant", "auto-round",
                                                   "auto_round", "torchao_float8_weight_only")
    assert len(SUPPORTED_QUANTIZATION_METHODS) == 37
