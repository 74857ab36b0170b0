"""Secrets scrubbed from what h3bench records: the rules, and a campaign with secrets planted in every place."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from h3bench.evidence.scrub import Scrubber, mask, secret_name
from h3bench.runspec import parse_runspec
from tests_unit.campaign_project import FAST_SIM, bundle_of, run_campaign, write_campaign


def masked(value: str) -> str:
    return "***" + hashlib.sha256(value.encode()).hexdigest()[:12]


@pytest.mark.parametrize(
    ("name", "secret"),
    [("HF_TOKEN", True), ("--hf-token", True), ("--api-key", True), ("AWS_SECRET_ACCESS_KEY", True),
     ("db.password", True), ("apikey", True), ("GITHUB_TOKEN", True), ("Authorization", True),
     ("PIP_INDEX_CREDENTIALS", True), ("client_secret", True),
     ("max_tokens", False), ("num_key_value_heads", False), ("TOKENIZERS_PARALLELISM", False), ("PWD", False),
     ("PATH", False), ("--port", False), ("keyframes", False), ("", False)],
)
def test_which_names_hold_secrets(name: str, secret: bool) -> None:
    assert secret_name(name) is secret


def test_a_value_becomes_its_hash_prefix_once() -> None:
    assert mask("hunter22") == masked("hunter22") and len(mask("x")) == 15
    assert mask(mask("hunter22")) == mask("hunter22")


def test_text_argv_env_and_records() -> None:
    scrubber = Scrubber(["knownSecretValue"], environ=False)
    text = ("HF_TOKEN=tok1 https://bob:pw2@host/simple --api-key=k3 --hf-token t4 'hf_token': 't5' "
            '"password": "p6" Authorization: Bearer b7 num_key_value_heads=8 max_tokens=9 knownSecretValue')
    assert scrubber.text(text) == (
        f"HF_TOKEN={masked('tok1')} https://{masked('bob:pw2')}@host/simple --api-key={masked('k3')} "
        f"--hf-token {masked('t4')} 'hf_token': '{masked('t5')}' \"password\": \"{masked('p6')}\" "
        f"Authorization: Bearer {masked('b7')} num_key_value_heads=8 max_tokens=9 {masked('knownSecretValue')}"
    )
    assert scrubber.argv(["vllm", "--hf-token", "a1", "--api-key=b2", "--port", "8", "--token"]) == [
        "vllm", "--hf-token", masked("a1"), f"--api-key={masked('b2')}", "--port", "8", "--token"]
    assert scrubber.env({"HF_TOKEN": "x", "PIP_INDEX_URL": "https://u:p@pypi/simple", "PATH": "/bin"}) == {
        "HF_TOKEN": masked("x"), "PIP_INDEX_URL": f"https://{masked('u:p')}@pypi/simple", "PATH": "/bin"}
    record = {"argv": ["a", "--token", "t"], "env": {"API_KEY": "k"}, "pids": [{"cmdline": ["x", "--secret", "s"]}],
              "n": 3, "failure": "pid 9 (sh: sh -c run --api-key abcdef) is still running"}
    assert scrubber.record(record) == {
        "argv": ["a", "--token", masked("t")], "env": {"API_KEY": masked("k")},
        "pids": [{"cmdline": ["x", "--secret", masked("s")]}], "n": 3,
        "failure": f"pid 9 (sh: sh -c run --api-key {masked('abcdef')}) is still running"}


def test_the_environment_of_this_process_is_known(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("H3BENCH_TEST_ACCESS_TOKEN", "fromTheEnvironment")
    assert Scrubber().text("printed fromTheEnvironment alone") == f"printed {masked('fromTheEnvironment')} alone"
    assert Scrubber(environ=False).text("printed fromTheEnvironment alone") == "printed fromTheEnvironment alone"


@given(st.text(max_size=80))
def test_scrubbing_twice_changes_nothing(text: str) -> None:
    scrubber = Scrubber(["s3cr3t-value"], environ=False)
    once = scrubber.text(text + " HF_TOKEN=s3cr3t-value")
    assert scrubber.text(once) == once and "s3cr3t-value" not in once


def test_a_log_file_is_scrubbed_in_place(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"INFO args: {'hf_token': 'abc123'}\n\xff binary tail\n")
    Scrubber(environ=False).file(log)
    assert log.read_bytes() == f"INFO args: {{'hf_token': '{masked('abc123')}'}}\n".encode() + b"\xff binary tail\n"


# ---- a campaign with secrets planted in the arm's argv and environment, echoed into its log

ARGV_SECRET, ENV_SECRET, URL_SECRET = "plantedArgvSecret41", "plantedEnvSecret42", "plantedUrlSecret43"
# sh stays the server's parent (it does not exec the simulator), so its command line, with the secret flag, is recorded.
WRAPPER = ('echo "starting with HF_TOKEN=$HF_TOKEN from https://ci:$MIRROR_PASSWORD@mirror.example/simple"; '
           '"$0" -m h3bench.sim --host "$1" --port "$2"; exit $?')


@pytest.mark.slow
@pytest.mark.usefixtures("campaign_subprocess_env")
def test_no_planted_secret_reaches_the_bundle_or_the_terminal(pytester) -> None:
    arm = {
        "description": "the simulator behind a shell that prints its secrets",
        "argv": ["/bin/sh", "-c", WRAPPER, "{python}", "{host}", "{port}", "--hf-token", ARGV_SECRET],
        "env": {"HF_TOKEN": ENV_SECRET, "MIRROR_PASSWORD": URL_SECRET},
        "sim": FAST_SIM,
    }
    spec = write_campaign(pytester.path, arm_tables={"baseline": arm, "clean": arm}, protocol={"audit": False})

    result = run_campaign(pytester, spec, "tests_perf", "--benchmark-disable")

    result.assert_outcomes(passed=4)
    bundle = bundle_of(pytester)
    everything = "\n".join(p.read_text(errors="replace") for p in bundle.rglob("*") if p.is_file() and p.suffix != ".mp4")
    for secret in (ARGV_SECRET, ENV_SECRET, URL_SECRET):
        assert secret not in everything and secret not in result.stdout.str() + result.stderr.str()
    log = next((bundle / "logs").iterdir()).read_text()
    assert f"HF_TOKEN={masked(ENV_SECRET)} from https://{masked('ci:' + URL_SECRET)}@mirror.example" in log
    event = json.loads((bundle / "lifecycle.jsonl").read_text().splitlines()[0])
    assert event["argv"][-2:] == ["--hf-token", masked(ARGV_SECRET)]
    assert (event["env"]["HF_TOKEN"], event["env"]["MIRROR_PASSWORD"]) == (masked(ENV_SECRET), masked(URL_SECRET))
    shell = next(p for p in event["pids_seen"] if p["name"] == "sh")
    assert shell["cmdline"][-2:] == ["--hf-token", masked(ARGV_SECRET)], "the process command line"
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["spec"]["arms"]["baseline"]["env"]["HF_TOKEN"] == masked(ENV_SECRET)
    # The scrubbed copy of the spec is still the spec the bundle names.
    assert parse_runspec(manifest["spec"], source="manifest").spec_id == manifest["spec_id"]
