"""Every command that README.md and docs/ show runs, or says that it needs an NPU.

The commands are the lines of the pages' ``bash`` blocks (a trailing ``# ...`` is a comment). A line
whose comment says ``needs an NPU`` is not run here. Every other line is run as a user would type
it, with its placeholders filled (BUNDLE: a sealed bundle of sim.toml; SHA256: its seal; A.mp4 and
B.mp4: two short clips; FILE, DIR, SPEC, EVIDENCE, POOLED: paths of the right kind), once without its
``[optional]`` parts and once with all of them (the first of ``a|b`` alternatives):

- ``./dev campaign``, ``./dev test`` and ``./dev conformance`` are what ``.ci/run`` runs, and
  ``./dev conformance --engine-mode real`` is what its own workflow runs: the test checks that one of
  them runs the command (without its ``[optional]`` parts);
- ``pytest ...`` is collected in the repository (``--collect-only``): the options, the spec, the
  selection and every refusal are decided there, before any server starts;
- ``h3bench run``, ``pool``, ``sim`` and ``bisect`` start servers or campaigns, and a command on a
  bisection's directory (BISECTION) needs a search first: their command lines are parsed by h3bench's
  own parser (the campaign options are the ones ``pytest`` and ``h3bench plan`` take, which run here
  for real; ``tests_unit/bisect/`` runs the search and its report);
- every other ``h3bench`` command runs for real, and must neither be refused as a usage error nor
  print a traceback.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from h3bench import media
from h3bench.evidence.verify import final_sha256
from h3bench.runspec import load_runspec
from tests_unit import mediagen
from tests_unit.bundlesim import FIXTURES, write_bundle
from tests_unit.campaign_project import UNUSED_PLUGINS, write_campaign

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("docs")]

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
NPU = "needs an NPU"
PARSED_ONLY = {"run", "pool", "sim", "bisect"}  # they start servers or whole campaigns
BY_CI = ("./dev ",)  # ./dev campaign, test and conformance: .ci/run or a workflow runs them
H3BENCH = shutil.which("h3bench", path=str(Path(sys.executable).parent)) or "h3bench"


def commands() -> list[tuple[str, str]]:
    """(page, line) of every command of every bash block; a line ending in a backslash goes on on the next."""
    found = []
    for page in PAGES:
        for block in re.findall(r"```bash\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            joined = re.sub(r"\\\n\s*", " ", block)
            found += [(page.relative_to(REPO).as_posix(), line.strip()) for line in joined.splitlines()
                      if line.strip() and not line.strip().startswith("#")]
    return found


@functools.cache
def ci_commands() -> dict[str, list[str]]:
    """The commands CI runs: ``.ci/run``'s lines, and the ``run:`` steps of each workflow, comments left out."""
    lines = {".ci/run": [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()
                         if not line.strip().startswith("#")]}
    for workflow in sorted((REPO / ".github" / "workflows").glob("*.yml")):
        steps = [step for job in yaml.safe_load(workflow.read_text())["jobs"].values() for step in job.get("steps", [])]
        lines[f".github/workflows/{workflow.name}"] = [
            line.strip() for step in steps for line in str(step.get("run", "")).splitlines()
            if line.strip() and not line.strip().startswith("#")]
    return lines


def _run_by_ci(command: str) -> bool:
    """Whether a line of CI runs the command, word for word (its options may be followed by more)."""
    said = f" {' '.join(command.split())} "
    return any(said in f" {' '.join(line.split())} " for lines in ci_commands().values() for line in lines)


def _without_comment(line: str) -> tuple[str, str]:
    command, _, comment = line.partition("  #")
    return command.strip(), comment.strip()


def variants(command: str) -> list[str]:
    """Without its [optional] parts, and with all of them (the first of each a|b)."""
    minimal = re.sub(r"\s*\[[^][]*\]", "", command)
    full = re.sub(r"\[([^][]*)\]", lambda m: m.group(1), command)
    full = re.sub(r"(\S+)\|\S+", lambda m: m.group(1).split("|")[0], full)
    return list(dict.fromkeys([minimal, full]))


@pytest.fixture(scope="module")
def places(tmp_path_factory) -> dict[str, str]:
    """What the placeholders stand for, in a campaign project (a small copy of this one, both workloads).

    A sealed bundle of its spec (the default spec of the project's ``pytest``), its seal, a ledger holding
    it, a stored pytest-benchmark run, two clips, and paths to write.
    """
    root = tmp_path_factory.mktemp("docs")
    spec_path = write_campaign(root, durations=(5, 15), protocol={"order": "ABBAABBA"})
    evidence = root / "evidence"
    evidence.mkdir()
    bundle = write_bundle(evidence, load_runspec(spec_path),
                          lambda block, index: (0.9 if block.letter == "B" else 1.0) * block.duration,
                          started_at="2026-12-01T00:00:00Z")
    clips = [media.write_mp4(root / name, mediagen.textured_frames(5, 64, 64, seed=seed), mediagen.tone(16_000, 440.0))
             for name, seed in (("A.mp4", 1), ("B.mp4", 2))]
    for ledger in (root / "h3bench-ledger.jsonl", root / "ledger.jsonl"):  # the default ledger and a --ledger FILE
        subprocess.run([H3BENCH, "ledger", "add", str(bundle), "--ledger", str(ledger)], check=True,
                       capture_output=True)
    stored = root / ".benchmarks" / "stored"  # what --benchmark-autosave leaves, for --benchmark-compare
    stored.mkdir(parents=True)
    (stored / "0001_stored.json").write_text(json.dumps({"machine_info": {}, "commit_info": {}, "benchmarks": [],
                                                         "datetime": "2026-12-01T00:00:00", "version": "5.3.1"}))
    return {"BUNDLE": str(bundle), "SHA256": final_sha256(bundle) or "", "A.mp4": str(clips[0]),
            "B.mp4": str(clips[1]), "SPEC": str(spec_path), "spec.toml": str(FIXTURES / "sim.toml"),
            "EVIDENCE": str(evidence), "POOLED": str(root / "pooled"), "ROOT": str(root)}


def fill(command: str, places: dict[str, str]) -> list[str]:
    """The command's words with its placeholders replaced by real paths."""
    root = Path(places["ROOT"])
    words = shlex.split(command)  # a quoted option (bisect's --launcher) is one word, as the shell makes it
    out = []
    for i, word in enumerate(words):
        before = words[i - 1] if i else ""
        if word in ("h3bench-evidence/BUNDLE", "BUNDLE"):
            out.append(places["BUNDLE"])
        elif word in places:
            out.append(places[word])
        elif word == "EVIDENCE/*":
            out.append(places["BUNDLE"])
        elif "/" in word and not word.startswith("-") and (REPO / word).exists():  # a path of the repository
            out.append(str(REPO / word))
        elif word in ("FILE", "DIR", "DIR..."):
            kind = {"--ledger": "ledger.jsonl", "--html": "history.html", "--out": "out.json", "--runspec":
                    places["SPEC"]}.get(before) if word == "FILE" else None  # a DIR is a fresh directory
            if before == "probe":
                out.append(places["A.mp4"])
            elif word == "DIR..." or before == "--bundles":
                out.append(places["EVIDENCE"])
            elif before == "--lpips-dir":
                out.append(str(root / "no-weights"))
            elif kind is not None:
                out.append(kind if os.path.isabs(kind) else str(root / kind))
            else:
                out.append(str(root / "out"))
        else:
            out.append(word)
    return out


COMMANDS = commands()


@pytest.mark.parametrize(("page", "line"), COMMANDS, ids=[f"{p}:{c[:60]}" for p, c in COMMANDS])
def test_the_command_runs_or_says_it_needs_an_npu(page, line, places, tmp_path):
    command, comment = _without_comment(line)
    if NPU in comment:
        return  # shown for an NPU host; nothing here can run it
    words = command.split()
    if words[:2] == ["./dev", "h3bench"]:  # the command-line tool from the project's environment
        command = command.removeprefix("./dev").lstrip()
    elif any(command.startswith(prefix) for prefix in BY_CI):
        minimal = variants(command)[0]
        assert _run_by_ci(minimal), f"{page}: {minimal} is neither run by .ci/run nor by a workflow nor marked: {NPU}"
        return
    for variant in variants(command):
        argv = fill(variant, places)
        if argv[0] == "pytest":
            _collects(argv, places, tmp_path)
        elif argv[0] == "h3bench" and (argv[1] in PARSED_ONLY or "BISECTION" in argv):
            _parses(argv)
        elif argv[0] == "h3bench":
            _runs(argv, places, tmp_path)
        else:
            pytest.fail(f"{page}: {command!r} is no command this test knows how to run; mark it '# {NPU}' "
                        "if it is for an NPU host")


def _collects(argv: list[str], places: dict[str, str], tmp_path: Path) -> None:
    """Collect the project's campaign as the command says (its spec the default one), writing nothing."""
    extra = [] if "--evidence-dir" in argv else ["--evidence-dir", str(tmp_path / "evidence")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    env.update({"H3BENCH_RUNSPEC": places["SPEC"], "H3BENCH_DEVICE_LOCK": str(tmp_path / "devices.lock")})
    if "--benchmark-compare" in " ".join(argv):  # the stored run --benchmark-autosave left
        extra.append("--benchmark-storage=.benchmarks/stored")
    result = subprocess.run([sys.executable, "-m", *argv, *extra, "--collect-only", "-q", "-p", "no:randomly",
                             *UNUSED_PLUGINS], cwd=places["ROOT"], env=env, capture_output=True, text=True, timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 0 and "Traceback" not in out, f"{' '.join(argv)} exited {result.returncode}:\n{out}"


def _parses(argv: list[str]) -> None:
    from h3bench.cli import SUBCOMMANDS, Passthrough, build_parser

    if isinstance(SUBCOMMANDS.get(argv[1]), Passthrough):  # h3bench sim: the simulator's own parser
        from h3bench.sim import parse_args

        parse_args(argv[2:])
        return
    build_parser().parse_args(argv[1:])


def _runs(argv: list[str], places: dict[str, str], tmp_path: Path) -> None:
    """Run it in the project; a refusal (exit 2) or a traceback fails, a verdict's exit code does not.

    ``ledger add`` runs where no ledger holds the bundle yet (a bundle is entered once).
    """
    cwd = places["ROOT"]
    if argv[1:3] == ["ledger", "add"]:
        cwd = str(tmp_path)
        argv = [str(tmp_path / "fresh.jsonl") if before == "--ledger" else word
                for before, word in zip(["", *argv], argv, strict=False)]
    result = subprocess.run([H3BENCH, *argv[1:]], cwd=cwd, capture_output=True, text=True, timeout=300)
    out = result.stdout + result.stderr
    if argv[1] == "validate" and result.returncode == 2:  # a validator judges a bundle once: a newer one adds to it
        assert "is already validated with" in out and "only a newer validator version" in out, out
        return
    assert result.returncode != 2 and "Traceback" not in out, f"{' '.join(argv)} exited {result.returncode}:\n{out}"


def test_a_command_that_does_not_run_fails_the_check(places, tmp_path):
    # The checks can fail: a mistyped option, a refused selection, a command nobody knows.
    with pytest.raises(AssertionError, match="exited 2"):
        _runs(["h3bench", "verify", places["BUNDLE"], "--expected", "x"], places, tmp_path)
    with pytest.raises(AssertionError, match="exited"):
        _collects(["pytest", "--arm", "candidate"], places, tmp_path)  # refused: no --baseline-evidence
    with pytest.raises(pytest.fail.Exception, match="no command this test knows"):
        test_the_command_runs_or_says_it_needs_an_npu("README.md", "make campaign", places, tmp_path)
    with pytest.raises(AssertionError, match="neither run by .ci/run nor by a workflow nor marked"):
        test_the_command_runs_or_says_it_needs_an_npu("README.md", "./dev benchmarks", places, tmp_path)
    with pytest.raises(AssertionError, match="neither run by .ci/run nor by a workflow nor marked"):  # no such mode
        test_the_command_runs_or_says_it_needs_an_npu("README.md", "./dev conformance --engine-mode fake", places,
                                                      tmp_path)
