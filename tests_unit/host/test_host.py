"""NPU-host evidence from fake interpreters and files in temporary directories, and the pre-launch pin checks."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from h3bench.course.preflight import DIAGNOSTIC, FORMAL, preflight, todo_fields, unpinned_fields
from h3bench.errors import RunSpecError
from h3bench.host import inventory as host
from h3bench.host.checkpoint import content_identity
from h3bench.runspec import parse_runspec
from tests_unit.campaign_project import bundle_of, run_campaign, write_campaign

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "fixtures" / "runspecs"
COMMIT = "c7f56f0155953c7d4a77276a2f4fcbd844ab0da2"
DIGEST = "sha256:" + "7" * 64


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def engine_env(tmp_path: Path):
    """A fake engine install: a site directory with vllm-omni's dist-info, an interpreter, and a ``vllm`` script.

    The interpreter is a wrapper around this one; the arm's PYTHONPATH makes it see the fake site.
    """
    site = tmp_path / "site"
    (site / "vllm_omni").mkdir(parents=True)
    (site / "vllm_omni" / "__init__.py").write_text("")
    python = executable(tmp_path / "bin" / "python3", f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    vllm = executable(tmp_path / "bin" / "vllm", f"#!{python}\nraise SystemExit('not run')\n")

    def install(version: str = "0.30.0", direct_url: dict | None = None) -> dict[str, str]:
        info = site / f"vllm_omni-{version}.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm-omni\nVersion: {version}\n")
        if direct_url is not None:
            (info / "direct_url.json").write_text(json.dumps(direct_url))
        return {"PYTHONPATH": str(site), "PATH": str(tmp_path / "bin")}

    install.python, install.vllm, install.site = python, vllm, site  # type: ignore[attr-defined]
    return install


def test_the_server_interpreter_from_argv_or_the_scripts_shebang(tmp_path: Path, engine_env) -> None:
    env = {"PATH": str(tmp_path / "bin")}
    assert host.server_interpreter([str(engine_env.python), "-m", "x"], env) == engine_env.python
    assert host.server_interpreter(["vllm", "serve"], env) == engine_env.python  # found on the arm's PATH
    via_env = executable(tmp_path / "bin" / "vllm-omni", "#!/usr/bin/env -S python3 -u\n")
    assert host.server_interpreter([str(via_env)], env) == engine_env.python
    assert host.server_interpreter([str(executable(tmp_path / "plain", "echo hi\n"))], env) is None
    assert host.server_interpreter(["no-such-server"], env) is None


def test_versions_and_the_commit_from_direct_url(engine_env) -> None:
    env = engine_env(direct_url={"url": "https://github.com/vllm-project/vllm-omni",
                                 "vcs_info": {"vcs": "git", "commit_id": COMMIT}})
    found = host.engine(["vllm", "serve", "m"], env)
    assert found["interpreter"] == sys.executable and found["versions"]["vllm_omni"] == "0.30.0"
    assert set(found["versions"]) == {"torch", "torch_npu", "vllm", "vllm_omni"}
    assert (found["vllm_omni_commit"], found["commit_source"]) == (COMMIT, "direct_url.json vcs_info.commit_id")


def test_the_commit_of_an_editable_install_from_git_or_of_a_local_version(engine_env, tmp_path: Path) -> None:
    source = tmp_path / "vllm-omni"
    source.mkdir()
    git = ["git", "-C", str(source), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    env = engine_env(direct_url={"url": f"file://{source}", "dir_info": {"editable": True}})
    assert host.engine(["vllm"], env)["vllm_omni_commit"] == head
    (engine_env.site / "vllm_omni-0.30.0.dist-info" / "direct_url.json").unlink()
    (engine_env.site / "vllm_omni-0.30.0.dist-info").rename(engine_env.site / "vllm_omni-0.30.1.dev3+gc7f56f0.dist-info")
    env = engine_env("0.30.1.dev3+gc7f56f0")
    assert host.engine(["vllm"], env)["vllm_omni_commit"] == "c7f56f0"


def test_a_pypi_wheel_records_no_commit(engine_env) -> None:
    found = host.engine(["vllm"], engine_env())
    assert found["vllm_omni_commit"] is None and "records no commit" in found["commit_source"]


def test_cann_and_driver_versions_from_their_files(tmp_path: Path) -> None:
    toolkit = tmp_path / "Ascend" / "ascend-toolkit" / "latest"
    (toolkit / "aarch64-linux").mkdir(parents=True)
    info = toolkit / "aarch64-linux" / "ascend_toolkit_install.info"
    info.write_text("package_name=Ascend-cann-toolkit\nversion=8.1.RC1\n")
    assert host.cann_version({"ASCEND_HOME_PATH": str(toolkit)}) == {"version": "8.1.RC1", "file": str(info)}
    assert host.cann_version({"ASCEND_HOME_PATH": str(tmp_path / "none")}) is None
    (tmp_path / "Ascend" / "driver").mkdir()
    (tmp_path / "Ascend" / "driver" / "version.info").write_text("Version=24.1.rc2\nascendhal_version=7.35.19\n")
    assert host.driver_version(tmp_path / "Ascend")["version"] == "24.1.rc2"
    assert host.driver_version(tmp_path / "nothing") is None


def test_the_fixture_specs_fields_to_pin_are_all_listed() -> None:
    spec = SPECS / "910b1-x8.toml"
    data = tomllib.loads(spec.read_text())
    fields = unpinned_fields(parse_runspec(data, source=str(spec)), spec)
    assert fields == ["model.content_identity", "model.path", "inputs.reference_video",
                      "arms.dlo_rank_local_resident.offload"]
    with pytest.raises(RunSpecError, match="a formal run refuses fields that are UNPINNED or marked TODO: "
                                           "model.content_identity, model.path, inputs.reference_video, "
                                           "arms.dlo_rank_local_resident.offload"):
        preflight(parse_runspec(data, source=str(spec)), spec_file=spec, allow_unpinned=False)


def test_todo_markers_in_lines_comments_arrays_but_not_in_strings() -> None:
    text = '''# TODO: the whole file (a header comment, apart from the fields)

name = "x"
[model]
path = "/p"  # TODO(NPU host)
# TODO: pin it
content_identity = "abc"
prompt = """
TODO inside a prompt is text
"""
[arms.b]
argv = [
  "vllm",  # TODO confirm
]
env = { A = "1" }
'''
    assert todo_fields(text) == ["model.path", "model.content_identity", "arms.b.argv"]


def npu_spec(tmp_path: Path, arm_argv: list[str], env: dict, **model) -> object:
    sim = tomllib.loads((SPECS / "sim.toml").read_text())
    arms = {name: {"description": name, "argv": arm_argv, "env": env} for name in ("baseline", "candidate")}
    arms["candidate"] |= {"hypothesis": "It is faster.", "source": {"kind": "code", "ref": "a commit"}}  # formal
    data = {**sim, "hardware": {"kind": "910b1", "device_ids": [0]}, "arms": arms,
            "source": {"engine_commit": COMMIT, "image_digest": DIGEST},
            "model": {"path": str(tmp_path / "model"), "content_identity": "UNPINNED", **model}}
    return parse_runspec(data, source="spec", spec_dir=SPECS)


def test_preflight_records_the_host_and_refuses_a_mismatch_before_launch(tmp_path, engine_env, monkeypatch) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "weights.bin").write_bytes(b"w" * 100)
    monkeypatch.setenv("H3BENCH_HASH_CACHE", str(tmp_path / "hash-cache.json"))
    monkeypatch.delenv(host.IMAGE_DIGEST_ENV, raising=False)
    good = engine_env(direct_url={"url": "x", "vcs_info": {"commit_id": COMMIT}})
    identity = content_identity(model, progress=None).identity

    checked = preflight(npu_spec(tmp_path, ["vllm", "serve"], good, content_identity=identity), spec_file=None,
                        allow_unpinned=False)
    assert checked.kind == FORMAL and checked.unverified == ("source.image_digest ($H3BENCH_IMAGE_DIGEST is not set)",)
    record = checked.host  # the manifest's host record
    assert record["engine"]["baseline"]["vllm_omni_commit"] == COMMIT
    assert record["checkpoint"]["identity"] == identity and record["memory_bytes"] > 0
    assert record["cann"] is None and record["driver"] is None  # absent here, not an error

    monkeypatch.setenv(host.IMAGE_DIGEST_ENV, "sha256:" + "8" * 64)
    with pytest.raises(RunSpecError, match=r"source.image_digest pins sha256:7{64}, but the host has sha256:8{64}"):
        preflight(npu_spec(tmp_path, ["vllm"], good, content_identity=identity), spec_file=None, allow_unpinned=False)
    monkeypatch.setenv(host.IMAGE_DIGEST_ENV, DIGEST)
    with pytest.raises(RunSpecError, match="model.content_identity pins sha256:0+, but the host has " + identity):
        preflight(npu_spec(tmp_path, ["vllm"], good, content_identity="sha256:" + "0" * 64), spec_file=None,
                  allow_unpinned=False)
    diagnostic = preflight(npu_spec(tmp_path, ["vllm"], good), spec_file=None, allow_unpinned=True)  # same engine
    assert (diagnostic.kind, diagnostic.unpinned) == (DIAGNOSTIC, ("model.content_identity",))
    assert diagnostic.host["checkpoint"]["identity"] == identity, "recorded, to be pinned"
    other = engine_env(direct_url={"url": "x", "vcs_info": {"commit_id": "922f1e9f1cb85b9f2b66d86e1eb500e6872b2dcb"}})
    with pytest.raises(RunSpecError, match=f"source.engine_commit pins {COMMIT}, but the host has 922f1e9f"):
        preflight(npu_spec(tmp_path, ["vllm"], other, content_identity=identity), spec_file=None, allow_unpinned=False)


def test_the_simulator_records_the_npu_evidence_as_absent() -> None:
    spec = SPECS / "sim.toml"
    checked = preflight(parse_runspec(tomllib.loads(spec.read_text()), source="sim"), spec_file=spec, allow_unpinned=False)
    assert checked.kind == FORMAL and checked.unpinned == () and checked.unverified == ()
    assert checked.host["engine"] is None and checked.host["npu_smi"] is None and "simulator" in checked.host["absent_because"]


@pytest.mark.slow
@pytest.mark.usefixtures("campaign_subprocess_env")
def test_an_unpinned_campaign_is_refused_unless_it_runs_as_diagnostic(pytester) -> None:
    spec = write_campaign(pytester.path, protocol={"audit": False})  # not about the audit, whose timing is noisy here
    spec.write_text(spec.read_text().replace('content_identity = "simulator"', 'content_identity = "UNPINNED"'))

    refused = run_campaign(pytester, spec, "tests_perf")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*a formal run refuses fields that are UNPINNED or marked TODO: model.content_identity;*"])
    assert not (pytester.path / "evidence").exists()

    result = run_campaign(pytester, spec, "tests_perf", "--benchmark-disable", "--allow-unpinned")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["h3bench: --runspec * --allow-unpinned",
                                 "DIAGNOSTIC run: not a campaign result; --allow-unpinned: model.content_identity"])
    bundle = bundle_of(pytester)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["run"] == {"kind": "DIAGNOSTIC", "reasons": ["--allow-unpinned: model.content_identity"],
                               "unpinned": ["model.content_identity"], "unverified": [], "underpowered": []}
    assert json.loads((bundle / "verdict.json").read_text())["run"] == "DIAGNOSTIC"
