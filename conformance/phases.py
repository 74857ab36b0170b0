"""What both conformance lanes run: h3bench's client against a server, and a campaign to a bundle that verifies.

The stand-in lane (:mod:`conformance.run`) and the real-engine lane
(:mod:`conformance.realrun`) share them; each phase fails with
:class:`ConformanceFailure`, which names it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from conformance.envbuild import REPO_ROOT
from conformance.probes import ProbeInputs
from conformance.serve import ENGINE_ENV
from h3bench.errors import H3BenchError

__all__ = ["CAMPAIGN_SPEC", "INPUTS", "ConformanceFailure", "campaign_phase", "client_phase", "rss_mb", "say"]

CAMPAIGN_SPEC = REPO_ROOT / "fixtures" / "runspecs" / "conformance.toml"
INPUTS = ProbeInputs(REPO_ROOT / "fixtures" / "inputs" / "ref_video.mp4", REPO_ROOT / "fixtures" / "inputs" / "ref_audio.wav")


class ConformanceFailure(H3BenchError):
    """A phase of the conformance step failed (``phase=``)."""

    def __init__(self, message: str, *, phase: str) -> None:
        super().__init__(message)
        self.phase = phase


def rss_mb(pid: int | None) -> float | None:
    """RSS of a process and its children, in MiB (None once it is gone)."""
    if pid is None:
        return None
    try:
        root = psutil.Process(pid)
        total = root.memory_info().rss + sum(child.memory_info().rss for child in root.children(recursive=True))
    except psutil.Error:
        return None
    return total / 2**20


def say(text: str) -> None:
    print(text, flush=True)


def client_phase(url: str, work: Path, *, inputs: ProbeInputs = INPUTS, model: str = "MiniMaxAI/MiniMax-H3",
                  timeout: float = 120, modes: tuple[str, ...] = ("sync", "async")) -> dict[str, Any]:
    """h3bench's client in both request modes against upstream's server; each output must have H3's shape."""
    from h3bench.quality.expected import expected_duration_checks
    from h3bench.run.client import GenerationRequest, Reference, VideoClient

    request = GenerationRequest(prompt=inputs.prompt, duration_s=4.0, size=inputs.size, num_inference_steps=4,
                                references=(Reference.from_path(inputs.video), Reference.from_path(inputs.audio)))
    results: dict[str, Any] = {}
    with VideoClient(url, model=model, timeout=timeout) as client:
        work.mkdir(parents=True, exist_ok=True)
        for mode, generate in ((mode, getattr(client, f"generate_{mode}")) for mode in modes):
            result = generate(request, work / f"client-{mode}.mp4")
            failed = [check for check in expected_duration_checks(result.output_path, 4.0) if check.status.value != "pass"]
            if failed:
                raise ConformanceFailure(f"h3bench's client, {mode} mode: the output fails H3's expected-duration "
                                         f"checks: {'; '.join(f'{c.name}: {c.detail}' for c in failed)}", phase="client")
            missing = [key for key in ("MiniMaxH3Pipeline.diffuse", "MiniMaxH3Pipeline.decode")
                       if key not in result.stage_durations]
            if missing:
                raise ConformanceFailure(f"h3bench's client, {mode} mode: no stage durations {missing} "
                                         f"(got {sorted(result.stage_durations)})", phase="client")
            results[mode] = {"e2e_s": result.e2e_s, "inference_time_s": result.inference_time_s,
                             "request_id": result.request_id, "model": result.model, "size_bytes": result.size_bytes,
                             "stages": sorted(result.stage_durations), "stage_durations": result.stage_durations}
            say(f"client {mode}: {result.request_id} in {result.e2e_s:.3f} s, {result.size_bytes} bytes, "
                 f"stages {len(result.stage_durations)}, H3's expected-duration checks pass")
    return results


_VERDICTS = {0: "PASS", 1: "FAIL", 3: "INCONCLUSIVE"}  # h3bench run's exit codes (h3bench/cli/campaign.py)


def campaign_phase(engine: str, work: Path, spec: Path = CAMPAIGN_SPEC, *, env: dict[str, str] | None = None,
                    accept: tuple[str, ...] = ("PASS",)) -> dict[str, Any]:
    """``h3bench run`` on a conformance RunSpec (``env`` added), which must end with a verdict in ``accept``;
    then ``h3bench verify`` on its bundle."""
    evidence = work / "evidence"
    env = {**os.environ, ENGINE_ENV: engine, **(env or {})}
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "h3bench.cli", "run", "--runspec", str(spec),
                          "--evidence-dir", str(evidence)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, check=False, cwd=REPO_ROOT)
    seconds = time.perf_counter() - start
    (work / "campaign.log").write_text(run.stdout, encoding="utf-8")
    tail = "\n".join(run.stdout.splitlines()[-25:])
    bundles = sorted(p for p in evidence.iterdir() if p.is_dir()) if evidence.is_dir() else []
    verdict = _VERDICTS.get(run.returncode, f"exit code {run.returncode}")
    if verdict not in accept or len(bundles) != 1:
        raise ConformanceFailure(f"the campaign {spec.name} ended {verdict}, not {' or '.join(accept)} "
                                 f"({len(bundles)} bundle(s)); log {work / 'campaign.log'}:\n{tail}", phase="campaign")
    bundle = bundles[0]
    verify = subprocess.run([sys.executable, "-m", "h3bench.cli", "verify", str(bundle)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, check=False, cwd=REPO_ROOT)
    if verify.returncode != 0:
        raise ConformanceFailure(f"h3bench verify {bundle} failed:\n{verify.stdout[-3000:]}", phase="campaign")
    say(tail)
    say(verify.stdout.strip().splitlines()[-1] if verify.stdout.strip() else "verify: ok")
    return {"seconds": seconds, "bundle": str(bundle), "verdict": verdict, "verify": verify.stdout.strip()[-500:]}
