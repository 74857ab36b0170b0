"""h3bench.runspec: validation with field paths, freezing and hashing, pinned inputs, shipped specs."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from h3bench.errors import RunSpecError
from h3bench.runspec import RunSpec, load_runspec, parse_runspec, require_same_spec
from h3bench.stats import speed as stats

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / "fixtures" / "runspecs"
SHIPPED = sorted(SPECS.glob("*.toml"))
# Campaign #293's prompt, and REF2VA_PROMPT of the upstream accuracy test (commit 8ce0c527), UTF-8 SHA-256.
UPSTREAM_VIDEO_SHA256 = "d6edc20ac82aa980c9cbd0b05b371f60d12dc8d018492e571b42de0086819c41"
UPSTREAM_AUDIO_SHA256 = "2a48d447b343b38a2c504d5281a0c97c688db0ba87931ed9282c598bd6752454"
UPSTREAM_PROMPT_SHA256 = "91c1340ea893aede82312dec30a6ae8c975c1def921348fc1cc45ccc86b315dd"

MINIMAL_TOML = """\
name = "t"

[hardware]
kind = "sim"

[model]
path = "m"
content_identity = "c"

[inputs]
prompt = "p"
reference_video = {{ path = "v.mp4", sha256 = "{video}" }}
reference_audio = {{ path = "a.wav", sha256 = "{audio}" }}

[protocol]
request_timeout_s = 60
startup_budget_s = 30
shutdown_budget_s = 5

[arms.baseline]
description = "b"
argv = ["{{python}}", "-c", "pass"]

[arms.fast]
description = "f"
argv = ["{{python}}", "-c", "pass", "--port", "{{port}}"]
"""


@pytest.fixture
def spec_dir(tmp_path: Path) -> Path:
    """A directory with a minimal spec and the two input files it pins."""
    (tmp_path / "v.mp4").write_bytes(b"video bytes")
    (tmp_path / "a.wav").write_bytes(b"audio bytes")
    text = MINIMAL_TOML.format(
        video=hashlib.sha256(b"video bytes").hexdigest(), audio=hashlib.sha256(b"audio bytes").hexdigest()
    )
    (tmp_path / "spec.toml").write_text(text, encoding="utf-8")
    return tmp_path


@pytest.fixture
def data(spec_dir: Path) -> dict[str, Any]:
    """The minimal spec as parsed TOML, to edit per test."""
    return tomllib.loads((spec_dir / "spec.toml").read_text(encoding="utf-8"))


def edited(data: dict[str, Any], path: str, value: Any = ..., *, delete: bool = False) -> dict[str, Any]:
    """A deep copy of ``data`` with the dotted ``path`` set to ``value`` or deleted."""
    result = copy.deepcopy(data)
    *parents, leaf = path.split(".")
    node = result
    for key in parents:
        node = node.setdefault(key, {})
    if delete:
        del node[leaf]
    else:
        node[leaf] = value
    return result


def parse(data: dict[str, Any]) -> RunSpec:
    return parse_runspec(data, source="spec.toml")


# ---- loading and defaults


def test_minimal_spec_fills_every_default(spec_dir: Path):
    spec = load_runspec(spec_dir / "spec.toml")
    assert spec.workload.durations == (5.0, 15.0)
    assert (spec.workload.width, spec.workload.height, spec.workload.fps) == (1344, 768, 24)
    assert (spec.workload.seed, spec.workload.steps, spec.workload.flow_shift, spec.workload.audio_flow_shift) == (
        0,
        50,
        12.0,
        3.0,
    )
    assert (spec.protocol.order, spec.protocol.warmups_per_block, spec.protocol.requests_per_block) == (
        "ABBAABBA",
        1,
        3,
    )
    assert spec.protocol.audit and spec.protocol.audit_seed == 1
    assert spec.protocol.lossless_baseline_blocks is None and spec.protocol.anchored_order is None  # unset: chosen
    gates = spec.gates
    assert (gates.ssim_min, gates.psnr_min_db, gates.lpips_max, gates.audio_cosine_min) == (0.97, 34.0, 0.20, 0.80)
    assert (gates.rms_ratio_min, gates.rms_ratio_max, gates.speed_margin) == (0.5, 2.0, 0.02)
    assert gates.lpips_required and not gates.lossless
    assert spec.candidates == ("fast",)
    assert spec.source is None and spec.unpinned == ()
    canonical = json.loads(spec.canonical_json())
    assert canonical["protocol"]["order"] == "ABBAABBA"
    assert canonical["gates"]["ssim_min"] == 0.97


def test_spec_is_frozen(spec_dir: Path):
    spec = load_runspec(spec_dir / "spec.toml")
    with pytest.raises(ValidationError, match="frozen"):
        spec.protocol.order = "ABBA"  # type: ignore[misc]


def test_arm_command_substitutes_placeholders_and_leaves_json_alone():
    spec = load_runspec(SPECS / "950pr-x4.toml")
    argv = spec.arms["eqbsa_mxfp8"].command("127.0.0.1", 9098, "/models/h3")
    assert argv[:8] == ["vllm", "serve", "/models/h3", "--omni", "--host", "127.0.0.1", "--port", "9098"]
    config = json.loads(argv[argv.index("--diffusion-quantization-config") + 1])
    assert config == {"transformer": {"method": "mxfp8"}}
    sim = load_runspec(SPECS / "sim.toml").baseline.command("127.0.0.1", 8000, "m")
    assert sim[0] == sys.executable and "{" not in " ".join(sim)


# ---- freezing and hashing


def test_canonical_json_is_sorted_and_compact(spec_dir: Path):
    text = load_runspec(spec_dir / "spec.toml").canonical_json()
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def test_id_ignores_layout_comments_and_explicit_defaults(spec_dir: Path):
    original = load_runspec(spec_dir / "spec.toml")
    text = (spec_dir / "spec.toml").read_text(encoding="utf-8")
    rewritten = (
        "# a comment\n"
        + text.replace("request_timeout_s = 60", "request_timeout_s = 60.0  # seconds")
        + '\n[workload]\ndurations = [5.0, 15]\nsize = "1344x768"\n\n[gates]\nssim_min = 0.97\n'
    )
    (spec_dir / "other.toml").write_text(rewritten, encoding="utf-8")
    assert load_runspec(spec_dir / "other.toml").spec_id == original.spec_id


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("protocol.order", "ABBA"),
        ("workload.seed", 7),
        ("arms.fast.env", {"X": "1"}),
        ("gates.lossless", True),
        ("inputs.prompt", "q"),
    ],
)
def test_any_changed_value_changes_the_id(data, path, value):
    assert parse(edited(data, path, value)).spec_id != parse(data).spec_id


def test_a_cheap_warmup_is_part_of_the_id_and_a_spec_without_one_keeps_its_id(data):
    cheap = parse(edited(data, "protocol.warmup_steps", 2))
    assert cheap.protocol.warmup_steps == 2 and cheap.spec_id != parse(data).spec_id
    assert "warmup_steps" not in parse(data).canonical_json()


def test_id_survives_a_round_trip_through_the_canonical_json(spec_dir: Path):
    """A bundle keeps the spec as canonical JSON; re-validating it gives the same id."""
    for path in [spec_dir / "spec.toml", *SHIPPED]:
        spec = load_runspec(path)
        again = parse_runspec(json.loads(spec.canonical_json()), source="manifest.json")
        assert again.spec_id == spec.spec_id
        assert again.canonical_json() == spec.canonical_json()


@settings(max_examples=20, deadline=None)
@given(st.randoms(use_true_random=False))
def test_id_does_not_depend_on_key_order(random):
    spec = load_runspec(SPECS / "sim-candidates.toml")
    data = json.loads(spec.canonical_json())

    def shuffled(node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        items = list(node.items())
        random.shuffle(items)
        return {key: shuffled(value) for key, value in items}

    assert parse(shuffled(data)).spec_id == spec.spec_id


def test_require_same_spec():
    require_same_spec("a" * 64, "a" * 64)
    with pytest.raises(RunSpecError) as info:
        require_same_spec("a" * 64, "b" * 64)
    message = str(info.value)
    assert "different frozen RunSpecs (aaaaaaaaaaaa… vs bbbbbbbbbbbb…)" in message
    assert "a changed environment needs a new frozen spec" in message
    assert info.value.field_path == "spec_id"


# ---- bad specs name the field, the problem and the file


@pytest.mark.parametrize(
    ("path", "value", "field_path", "problem"),
    [
        ("protocol.requests_per_block", 1, "protocol.requests_per_block", "greater than or equal to 2"),
        ("protocol.requests_per_block", 2, "protocol", "and a block's median needs at least three"),
        ("protocol.requests_per_block", "3", "protocol.requests_per_block", "valid integer"),
        ("protocol.warmups_per_block", 0, "protocol.warmups_per_block", "greater than or equal to 1"),
        ("protocol.warmup_steps", 1, "protocol.warmup_steps", "greater than or equal to 2"),
        ("protocol.warmup_steps", 50, "protocol.warmup_steps", "fewer inference steps than the measured requests'"),
        ("protocol.order", "AABB", "protocol.order", "adjacent AB/BA pairs"),
        ("protocol.order", "ABA", "protocol.order", "adjacent AB/BA pairs"),
        ("protocol.order", "ABBC", "protocol.order", "adjacent AB/BA pairs"),
        ("protocol.order", "", "protocol.order", "adjacent AB/BA pairs"),
        ("protocol.audit_seed", 0, "protocol.audit_seed", "must differ from workload.seed (0)"),
        ("protocol.anchored_order", "AAB C", "protocol.anchored_order", "A (fresh baseline anchor) and B"),
        ("protocol.anchored_order", "AA", "protocol.anchored_order", "at least one B"),
        ("protocol.lossless_baseline_blocks", -1, "protocol.lossless_baseline_blocks", "greater than or equal to 0"),
        ("protocol.warmup", 1, "protocol.warmup", "Extra inputs are not permitted"),
        ("protocol.audit", 1, "protocol.audit", "valid boolean"),
        ("workload.size", "1345x768", "workload.size", "multiples of 32"),
        ("workload.size", "1344*768", "workload.size", "WIDTHxHEIGHT"),
        ("workload.durations", [5, 3], "workload.durations[1]", "greater than or equal to 4"),
        ("workload.durations", [5, 5], "workload.durations", "unique"),
        ("workload.durations", [], "workload.durations", "at least 1 item"),
        ("workload.flow_shift", float("nan"), "workload.flow_shift", "finite number"),
        ("inputs.reference_video.sha256", "abc", "inputs.reference_video.sha256", "should match pattern"),
        ("gates.rms_ratio_min", 3.0, "gates.rms_ratio_min", "must be below rms_ratio_max (2) (got 3.0)"),
        ("gates.ssim_min", 1.5, "gates.ssim_min", "less than or equal to 1"),
        ("hardware.kind", "h100", "hardware.kind", "'sim', '910b1'"),
        ("hardware.device_ids", [0, 0], "hardware.device_ids", "unique"),
        ("arms.fast.argv", ["{python}", "{hots}"], "arms.fast.argv", "unknown placeholder {hots}"),
        ("arms.fast.argv", [], "arms.fast.argv", "at least 1 item"),
        ("arms.fast.env", {"BAD-NAME": "1"}, "arms.fast.env", "not an environment variable name"),
        ("arms.fast.env", {"N": 1}, "arms.fast.env.N", "valid string"),
        ("arms.Fast", {"description": "x", "argv": ["x"]}, "arms", "lower-case letters"),
        ("name", "../escape", "name", "should match pattern"),
    ],
)
def test_bad_value_names_the_field_and_the_problem(data, path, value, field_path, problem):
    with pytest.raises(RunSpecError) as info:
        parse(edited(data, path, value))
    assert info.value.field_path == field_path
    assert info.value.source == "spec.toml"
    message = str(info.value)
    assert message.startswith(f"spec.toml: invalid RunSpec: {field_path}: ")
    assert problem in message


@pytest.mark.parametrize(
    ("path", "field_path"),
    [
        ("protocol.request_timeout_s", "protocol.request_timeout_s"),
        ("protocol.shutdown_budget_s", "protocol.shutdown_budget_s"),
        ("inputs.reference_audio", "inputs.reference_audio"),
        ("arms.baseline.description", "arms.baseline.description"),
        ("model", "model"),
    ],
)
def test_missing_field_is_named(data, path, field_path):
    with pytest.raises(RunSpecError, match=f"{field_path}: Field required") as info:
        parse(edited(data, path, delete=True))
    assert info.value.field_path == field_path


def test_arms_need_a_baseline_and_a_candidate(data):
    with pytest.raises(RunSpecError, match="arms: .*an arm named 'baseline'"):
        parse(edited(data, "arms", {"fast": data["arms"]["fast"]}))
    with pytest.raises(RunSpecError, match="arms: .*at least one candidate"):
        parse(edited(data, "arms", {"baseline": data["arms"]["baseline"]}))


def test_npu_specs_need_source_devices_and_no_sim_profile(data):
    npu = edited(edited(data, "hardware.kind", "910b1"), "hardware.device_ids", [0, 1])
    npu["arms"]["fast"] |= {"hypothesis": "It is faster.", "source": {"kind": "code", "ref": "a commit"}}  # formal
    with pytest.raises(RunSpecError, match=r"invalid RunSpec: source: .*needs \[source\]"):
        parse(npu)
    npu["source"] = {"engine_commit": "0" * 40, "image_digest": "sha256:" + "0" * 64}
    parse(npu)
    with pytest.raises(RunSpecError, match="hardware.device_ids: .*reserved devices"):
        parse(edited(npu, "hardware.device_ids", delete=True))
    with pytest.raises(RunSpecError, match="arms.fast.sim: a simulator profile needs hardware.kind 'sim'") as info:
        parse(edited(npu, "arms.fast.sim", {"time_scale": 0.1}))
    assert info.value.field_path == "arms.fast.sim"
    with pytest.raises(RunSpecError, match="source.engine_commit"):
        parse(edited(npu, "source.engine_commit", "c7f56f01"))


def test_several_errors_are_all_listed(data):
    bad = edited(edited(data, "protocol.requests_per_block", 1), "workload.size", "100x100")
    with pytest.raises(RunSpecError) as info:
        parse(bad)
    message = str(info.value)
    assert "\n  workload.size: " in message and "\n  protocol.requests_per_block: " in message


@pytest.mark.parametrize(("durations", "reasons"), [
    ([3, 16], ["workload.durations[0]: Input should be greater than or equal to 4 (got 3)",
               "workload.durations[1]: Input should be less than or equal to 15 (got 16)"]),
    ([], ["workload.durations: Tuple should have at least 1 item after validation, not 0 (got [])"]),
], ids=["out-of-range", "empty"])
def test_durations_out_of_range_are_named_without_a_second_confusing_line(data, durations, reasons):
    with pytest.raises(RunSpecError) as info:
        parse(edited(data, "workload.durations", durations))
    message = str(info.value)
    assert all(reason in message for reason in reasons)
    # Only the real reasons: one line per refused duration, none for the emptied list pydantic counted after.
    assert message.count("workload.durations") == len(reasons)


def test_toml_syntax_error_names_the_file_and_line(tmp_path: Path):
    path = tmp_path / "broken.toml"
    path.write_text('name = "x"\n[protocol\n', encoding="utf-8")
    with pytest.raises(RunSpecError, match=r"broken\.toml: TOML syntax error: .*line 2") as info:
        load_runspec(path)
    assert info.value.source == str(path)


def test_missing_file_is_a_runspec_error(tmp_path: Path):
    with pytest.raises(RunSpecError, match="cannot read RunSpec .*nope.toml"):
        load_runspec(tmp_path / "nope.toml")


def test_file_errors_carry_the_file_name(spec_dir: Path):
    path = spec_dir / "spec.toml"
    path.write_text(path.read_text(encoding="utf-8").replace("request_timeout_s = 60", "request_timeout_s = -1"))
    with pytest.raises(RunSpecError, match=rf"^{path}: invalid RunSpec: protocol.request_timeout_s: .*greater than 0"):
        load_runspec(path)


# ---- pinned inputs


def test_inputs_resolve_against_the_spec_directory_and_verify(spec_dir: Path, monkeypatch):
    monkeypatch.chdir(spec_dir.parent)
    spec = load_runspec(spec_dir / "spec.toml")
    assert spec.verify_inputs() == {"reference_video": spec_dir / "v.mp4", "reference_audio": spec_dir / "a.wav"}


def test_changed_input_is_an_error_with_path_and_both_hashes(spec_dir: Path):
    spec = load_runspec(spec_dir / "spec.toml")
    (spec_dir / "a.wav").write_bytes(b"audio bytes, edited")
    with pytest.raises(RunSpecError) as info:
        spec.verify_inputs()
    message = str(info.value)
    assert str(spec_dir / "a.wav") in message
    assert hashlib.sha256(b"audio bytes").hexdigest() in message
    assert hashlib.sha256(b"audio bytes, edited").hexdigest() in message
    assert info.value.field_path == "inputs.reference_audio.sha256"
    assert info.value.source == str(spec_dir / "spec.toml") and message.startswith(f"{spec_dir / 'spec.toml'}: ")


def test_missing_input_is_an_error_not_a_skip(spec_dir: Path):
    spec = load_runspec(spec_dir / "spec.toml")
    (spec_dir / "v.mp4").unlink()
    with pytest.raises(RunSpecError, match=r"inputs.reference_video: cannot read .*v\.mp4") as info:
        spec.verify_inputs()
    assert info.value.field_path == "inputs.reference_video.path"


# ---- the shipped specs


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_shipped_spec_loads(path: Path):
    spec = load_runspec(path)
    assert spec.name == path.stem
    assert len(spec.spec_id) == 64
    counted = spec.protocol.requests_per_block + int(spec.protocol.audit and spec.protocol.audit_counts)
    assert counted >= 3, "a block's median needs three counted requests"
    # Every order the protocol accepts pairs up in the statistics.
    pairs = stats.paired_block_ratios([stats.BlockSamples(role, (1.0,)) for role in spec.protocol.order])
    assert len(pairs) == len(spec.protocol.order) // 2


def test_shipped_spec_ids_are_distinct():
    assert len({load_runspec(path).spec_id for path in SHIPPED}) == len(SHIPPED)


@pytest.mark.parametrize("name", ["sim", "sim-full", "sim-candidates"])
def test_simulator_specs_pin_the_committed_inputs(name: str):
    spec = load_runspec(SPECS / f"{name}.toml")
    paths = spec.verify_inputs()
    assert paths["reference_video"] == ROOT / "fixtures" / "inputs" / "ref_video.mp4"
    assert spec.hardware.kind == "sim" and all(arm.sim is not None for arm in spec.arms.values())
    assert spec.workload.width % 32 == 0 and spec.workload.height % 32 == 0


def test_simulator_specs_differ_only_where_intended():
    names = ("sim", "sim-full", "sim-candidates")
    sim, full, cands = (json.loads(load_runspec(SPECS / f"{name}.toml").canonical_json()) for name in names)
    for other in (full, cands):
        assert {key for key in sim if sim[key] != other[key]} <= {"name", "description", "workload", "arms"}
        assert other["arms"]["baseline"] == sim["arms"]["baseline"]
        assert other["arms"]["clean"] == sim["arms"]["clean"]
    assert full["workload"] == {**sim["workload"], "size": "1344x768"}
    assert set(cands["arms"]) == {"baseline", "clean", "noisy", "audio_shift"}


@pytest.mark.parametrize("name", ["910b1-x8", "950pr-x4"])
def test_npu_specs_carry_the_campaign_pins(name: str, tmp_path: Path):
    spec = load_runspec(SPECS / f"{name}.toml")
    assert spec.inputs.reference_video.sha256 == UPSTREAM_VIDEO_SHA256
    assert spec.inputs.reference_audio.sha256 == UPSTREAM_AUDIO_SHA256
    assert hashlib.sha256(spec.inputs.prompt.encode("utf-8")).hexdigest() == UPSTREAM_PROMPT_SHA256
    assert spec.workload.size == "1344x768" and spec.workload.durations == (5.0, 15.0)
    assert "model.content_identity" in spec.unpinned
    devices = ",".join(map(str, spec.hardware.device_ids))
    for arm_name, arm in spec.arms.items():
        argv = arm.command("h", 1, "m")
        assert argv[:4] == ["vllm", "serve", "m", "--omni"]
        assert argv[argv.index("--task-type") + 1] == "ref2va"
        assert argv[argv.index("--num-gpus") + 1] == str(len(spec.hardware.device_ids)), arm_name
        assert arm.launch_env()["ASCEND_RT_VISIBLE_DEVICES"] == devices, arm_name
        assert arm.expected_attention_backend is not None, "every NPU arm says which attention backend it measures"
    # The input files are not here: verification fails loudly, it never skips.
    with pytest.raises(RunSpecError, match="cannot read /path/to/ref2va/input_video.mp4"):
        spec.verify_inputs()


def test_910b1_spec_pins_the_frozen_source():
    spec = load_runspec(SPECS / "910b1-x8.toml")
    assert spec.source is not None
    assert spec.source.engine_commit == "c7f56f0155953c7d4a77276a2f4fcbd844ab0da2"
    assert spec.source.image_digest == "sha256:7fc6c73bd19a6ef4ee8d6048009972234796a1fc1bd3067168a425343cc476f7"
    assert spec.unpinned == ("model.content_identity",)


def test_910b1_spec_is_the_first_search_slice_with_only_the_weight_transfer_changed():
    spec = load_runspec(SPECS / "910b1-x8.toml")
    arms = {name: arm.model_dump(mode="json") for name, arm in spec.arms.items()}
    assert set(arms) == {"baseline", "dlo_rank_local", "dlo_rank_local_resident"}
    assert arms["baseline"]["offload"] == {"dlo": {"transfer": "allgather", "resident_layers": 0}, "config": None}
    assert arms["dlo_rank_local"]["offload"]["dlo"] == {"transfer": "rank-local", "resident_layers": 0}
    resident = arms["dlo_rank_local_resident"]["offload"]["dlo"]
    assert resident["transfer"] == "rank-local" and 0 < resident["resident_layers"] < 50  # a bounded prefix
    # Arithmetic and weights unchanged: no quantization, cache or attention change in any arm.
    for arm in arms.values():
        assert (arm["quantization"], arm["cache"]["backend"], arm["attention"]["backend"]) == (None, "none", None)
        changes = ("description", "offload", "hypothesis", "source", "combination_of")
        assert {k: v for k, v in arm.items() if k not in changes} == {
            k: v for k, v in arms["baseline"].items() if k not in changes}
    assert "--dlo-use-allgather" in spec.baseline.argv
    assert spec.arms["dlo_rank_local_resident"].argv[-4:] == (
        "--dlo-no-use-allgather", "--dlo-resident-layers", str(resident["resident_layers"]), "--trust-remote-code")


def test_a_spec_copied_elsewhere_keeps_its_id(tmp_path: Path):
    """The id does not depend on where the spec lives; its inputs are identified by hash."""
    shutil.copytree(ROOT / "fixtures", tmp_path / "fixtures")
    moved = load_runspec(tmp_path / "fixtures" / "runspecs" / "sim.toml")
    assert moved.spec_id == load_runspec(SPECS / "sim.toml").spec_id
    assert moved.verify_inputs()["reference_audio"] == tmp_path / "fixtures" / "inputs" / "ref_audio.wav"
