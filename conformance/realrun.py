"""``./dev conformance --engine-mode real``: h3bench against vLLM-Omni's own diffusion engine, on a CPU.

Where ``./dev conformance`` runs upstream's serving code over a stand-in
engine (:mod:`conformance.run`), this lane starts upstream's whole
server, ``vllm serve MODEL --omni``: its API server, engine and scheduler, a
spawned worker process, the weight loader, the pipeline profiler and
``/metrics``, serving a tiny random-weight H3-shaped pipeline
(:mod:`conformance.tiny_h3`; what a CPU needs besides is in
:mod:`conformance.realengine`). Seven phases, each of which fails the
step with its reason:

1. **Environment**: the conformance environment (shared with the stand-in
   lane), and ``ffprobe``/``ffmpeg``, which upstream's H3 preprocessing runs.
2. **Checkpoint**: the tiny checkpoint, written once.
3. **Probes**: the real server and the simulator answer the probe suite
   (:data:`REAL_PROBES`: the stand-in lane's probes, less the two whose
   failure only the stand-in can inject, plus the ``/metrics`` families);
   a difference not listed for ``engine = "real"`` in
   ``conformance/deliberate.toml`` fails the step. The server's
   start-up time, process tree and first requests are recorded.
4. **Client**: h3bench's client in both request modes; each output passes
   H3's expected-duration checks and carries H3's profiler keys.
5. **Stop**: SIGTERM within the shutdown budget, every process of the tree
   gone, the port free (:meth:`~h3bench.server.process.ServerProcess.verify_exited`).
6. **Fault**: a harness process (:mod:`conformance.harness`) holds a
   second server; its worker is SIGKILLed while a request runs, which must end
   in a named failure (the client's error, the failed job, upstream's own
   "worker died" line in the log), and then the harness itself is SIGKILLed,
   which must leave no process of that server and a free port.
7. **Campaign**: ``h3bench run --runspec fixtures/runspecs/conformance-real.toml``
   (tiled against untiled VAE decode) to a bundle that ``h3bench verify``
   accepts, with the untiled arm's quality PASS (the same frames) and its
   speed PASS or INCONCLUSIVE, never FAIL: a real engine's times follow the
   machine's load, and three AB/BA pairs on shared cores may leave the bounds wide.

Everything goes to ``<cache>/conformance/<engine>/runs/<UTC time>-real/``,
with ``conformance.json`` holding every measurement.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil

from conformance.compare import Comparison, compare, load_deliberate, render_table
from conformance.envbuild import REPO_ROOT, ensure_environment
from conformance.phases import ConformanceFailure, campaign_phase, client_phase, rss_mb, say
from conformance.probes import METRICS_PROBE, PROBES, ProbeInputs, Side, probe_names, run_probes
from conformance.realengine import CHECKPOINT_ENV, CPU_FLAGS, LANE_ENV, TINY_MODEL, ensure_checkpoint
from conformance.serve import ENGINE_ENV
from h3bench.server.ports import LOCALHOST, find_free_port, port_free
from h3bench.server.process import ServerProcess
from h3bench.server.proctree import SERVER_ID_ENV, marked_processes, session_processes

__all__ = ["REAL_INPUTS", "REAL_PROBES", "REAL_SPEC", "run_real"]

REAL_SPEC = REPO_ROOT / "fixtures" / "runspecs" / "conformance-real.toml"
# Upstream's H3 preprocessing refuses a reference side under 256 pixels (reference_video.py), so not ref_video.mp4.
REAL_INPUTS = ProbeInputs(REPO_ROOT / "fixtures" / "inputs" / "ref_video_h3.mp4",
                          REPO_ROOT / "fixtures" / "inputs" / "ref_audio.wav")
REAL_PROBES = (*(p for p in PROBES if p.name not in ("engine-oom-sync", "engine-oom-async")), METRICS_PROBE)
_STARTUP_BUDGET_S = 600.0  # two interpreters importing vLLM and torch; minutes on 2 busy cores
_STOP_BUDGET_S = 30.0
_REQUEST_TIMEOUT_S = 600.0
_SIM_BUDGET_S = 60.0
# The simulator's probe speed: its stage model × this (a modelled 4 s request in a fraction of a second).
_SIM_TIME_SCALE = "0.0002"
_GONE_WAIT_S = 120.0  # after the harness dies: the guard's SIGTERM, the stop budget, then SIGKILL
_FAULT_TIMEOUT_S = 240.0  # a request whose worker was killed must have failed long before this
_WORKER_TITLE = "vLLM-Omni::Diff"  # the workers' process title (setproctitle: vLLM-Omni::DiffusionWorker)


def _server_argv(profiler_dir: Path) -> list[str]:
    """The lane's server command (``{port}`` left to fill): the spec's baseline arm, with the torch profiler on."""
    profiler = json.dumps({"profiler": "torch", "torch_profiler_dir": str(profiler_dir)})
    return [sys.executable, "-m", "conformance.realengine", "serve", TINY_MODEL, "--omni",
            "--host", LOCALHOST, "--port", "{port}", "--task-type", "ref2va", "--num-gpus", "1",
            "--enable-diffusion-pipeline-profiler", *CPU_FLAGS, "--served-model-name", TINY_MODEL,
            "--profiler-config", profiler]


def _server_env(engine: str, checkpoint: Path) -> dict[str, str]:
    return {**LANE_ENV, ENGINE_ENV: engine, CHECKPOINT_ENV: str(checkpoint)}


def _real_server(engine: str, checkpoint: Path, work: Path, name: str) -> ServerProcess:
    port = find_free_port(LOCALHOST)
    argv = [arg.replace("{port}", str(port)) for arg in _server_argv(work / f"profiles-{name}")]
    return ServerProcess(argv, port=port, host=LOCALHOST, log_path=work / f"{name}.log", env=_server_env(engine, checkpoint),
                         startup_budget_s=_STARTUP_BUDGET_S, stop_budget_s=_STOP_BUDGET_S)


def _tree(server: ServerProcess) -> list[dict[str, Any]]:
    """The server's processes now: pid, parent, name and the start of the command line."""
    return [{"pid": p.pid, "ppid": p.ppid, "name": p.name, "cmdline": " ".join(p.cmdline)[:160],
             "found_by": p.found_by} for p in server.snapshot()]


def _server_pids(server_id: str, pid: int) -> list[int]:
    """The live processes of a server: those carrying its marker, and every member of its session (it leads its own).

    A dead harness's orphans are re-parented to this process (a child subreaper, as every ServerProcess user):
    their zombies are reaped here, not counted.
    """
    found = []
    for proc in {p.pid: p for p in (*marked_processes(SERVER_ID_ENV, server_id), *session_processes(pid))}.values():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE and proc.ppid() == os.getpid():
                os.waitpid(proc.pid, os.WNOHANG)
                continue
        except (psutil.Error, ChildProcessError):
            continue
        found.append(proc.pid)
    return sorted(found)


def _workers(pids: list[int]) -> list[psutil.Process]:
    """The diffusion workers among ``pids``, by the title vLLM-Omni gives them."""
    found = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if proc.name().startswith(_WORKER_TITLE):
                found.append(proc)
        except psutil.Error:
            continue
    return found


@contextmanager
def _sim(work: Path) -> Iterator[ServerProcess]:
    profiler = json.dumps({"profiler": "torch", "torch_profiler_dir": str(work / "profiles-sim")})
    port = find_free_port(LOCALHOST)
    sim = ServerProcess([sys.executable, "-m", "h3bench.sim", "--host", LOCALHOST, "--port", str(port),
                         "--model", TINY_MODEL, "--time-scale", _SIM_TIME_SCALE, "--compile-s", "0",
                         "--profiler-config", profiler],
                        port=port, host=LOCALHOST, log_path=work / "sim.log", startup_budget_s=_SIM_BUDGET_S)
    with sim:
        yield sim


def _probe_and_client_phases(engine: str, checkpoint: Path, work: Path, record: dict[str, Any]) -> Comparison:
    """Probes (real against simulator), the client in both modes, then the stop of the real server, checked."""
    deliberate = load_deliberate(probes=probe_names(), engine="real")
    with ExitStack() as stack:
        real = _real_server(engine, checkpoint, work, "real")
        stack.callback(real.stop)
        say(f"starting vLLM-Omni's own server (vllm serve {TINY_MODEL} --omni, engine {engine}) on port {real.port} ...")
        real.start()
        record["startup_s"] = real.startup_s
        record["tree_at_ready"] = _tree(real)
        record["rss_mb_at_ready"] = rss_mb(real.pid)
        say(f"ready in {real.startup_s:.1f} s; processes: "
             + ", ".join(f"{p['name']} ({p['pid']})" for p in record["tree_at_ready"]))
        # The first request after start-up, apart: on an NPU it carries the regional compilation (on a CPU none).
        record["first_request"] = client_phase(real.base_url, work / "first", inputs=REAL_INPUTS, model=TINY_MODEL,
                                                timeout=_REQUEST_TIMEOUT_S, modes=("sync",))
        sim = stack.enter_context(_sim(work))
        real_side = Side("upstream", dict.fromkeys(("main", "fail-sync", "fail-async"), real.base_url),
                         timeout=_REQUEST_TIMEOUT_S)
        sim_side = Side("sim", dict.fromkeys(("main", "fail-sync", "fail-async"), sim.base_url))
        start = time.perf_counter()
        with real_side, sim_side:
            order = run_probes(real_side, sim_side, REAL_INPUTS, REAL_PROBES)
        record["probes_s"] = time.perf_counter() - start
        record["client"] = client_phase(real.base_url, work, inputs=REAL_INPUTS, model=TINY_MODEL,
                                          timeout=_REQUEST_TIMEOUT_S)
        record["rss_mb_after_requests"] = rss_mb(real.pid)
        record["tree_after_requests"] = _tree(real)
        say(f"stopping the real server with SIGTERM (budget {_STOP_BUDGET_S:g} s) ...")
        real.stop()
        report = real.verify_exited()
        record["stop"] = {"graceful": real.graceful, "shutdown_s": real.shutdown_s, "exit_code": real.exit_code,
                          "problems": list(report.problems),
                          "pids_seen": [f"{p.pid} {p.name} ({p.found_by})" for p in report.pids_seen]}
        if not real.graceful or report.problems:
            raise ConformanceFailure(f"the real server did not stop cleanly: graceful={real.graceful}, "
                                     f"{'; '.join(report.problems) or 'nothing left'}", phase="stop")
        if not any(p.name.startswith(_WORKER_TITLE) for p in report.pids_seen):
            raise ConformanceFailure(f"no diffusion worker ({_WORKER_TITLE}...) was ever seen in the real server's "
                                     f"tree: {record['stop']['pids_seen']}", phase="stop")
        say(f"stopped in {real.shutdown_s:.1f} s by SIGTERM; {len(report.pids_seen)} processes seen, none left, "
             "port free")
    return compare(real_side.answers, sim_side.answers, deliberate, order=order)


def _fault_phase(engine: str, checkpoint: Path, work: Path, record: dict[str, Any]) -> None:
    """SIGKILL the worker mid-request (a named failure, evidence kept), then SIGKILL the harness (nothing left)."""
    from h3bench.errors import RequestError
    from h3bench.run.client import GenerationRequest, Reference, VideoClient

    spec = {"argv": _server_argv(work / "profiles-fault"), "env": _server_env(engine, checkpoint),
            "startup_budget_s": _STARTUP_BUDGET_S, "stop_budget_s": _STOP_BUDGET_S}
    log = work / "fault.log"
    say("starting a harness that holds a second real server ...")
    with (work / "harness.log").open("wb") as harness_log:
        harness = subprocess.Popen([sys.executable, "-m", "conformance.harness", json.dumps(spec), str(log)],
                                   stdout=subprocess.PIPE, stderr=harness_log, cwd=REPO_ROOT, text=True)
    try:
        assert harness.stdout is not None
        line = harness.stdout.readline()
        if not line:
            raise ConformanceFailure(f"the harness exited ({harness.wait()}) before its server was ready; "
                                     f"see {work / 'harness.log'} and {log}", phase="fault")
        held = json.loads(line)
        record["server"] = held
        server_id, url = held["server_id"], f"http://{LOCALHOST}:{held['port']}"
        # The workers' marker cannot be read once they retitle themselves (setproctitle): the session finds them.
        held_pids = _server_pids(server_id, int(held["pid"]))
        workers = _workers(held_pids)
        record["processes"] = held_pids
        if not workers:
            raise ConformanceFailure(f"no diffusion worker among the server's processes {held_pids}", phase="fault")
        killed: dict[str, Any] = {}
        jobs: list[str] = []

        def kill_when_running(job: dict[str, Any]) -> None:
            jobs[:] = [str(job.get("id"))]
            if job.get("status") == "in_progress" and not killed:
                time.sleep(1.0)  # into the request: its preprocessing or the denoise loop
                for worker in workers:
                    killed[str(worker.pid)] = worker.name()
                    worker.kill()

        request = GenerationRequest(prompt=REAL_INPUTS.prompt, duration_s=4.0, size=REAL_INPUTS.size,
                                    num_inference_steps=8, references=(Reference.from_path(REAL_INPUTS.video),
                                                                       Reference.from_path(REAL_INPUTS.audio)))
        started = time.perf_counter()
        with VideoClient(url, model=TINY_MODEL, timeout=_FAULT_TIMEOUT_S) as client:
            try:
                client.generate_async(request, work / "fault.mp4", on_poll=kill_when_running)
            except RequestError as exc:
                record["client_error"] = f"{type(exc).__name__}: {exc}"
            else:
                raise ConformanceFailure("the request finished although its worker was killed", phase="fault")
        record["failed_after_s"] = time.perf_counter() - started
        record["killed"] = killed
        with httpx.Client(base_url=url, timeout=30, trust_env=False) as http:
            for name, path in (("job_after", f"/v1/videos/{jobs[0] if jobs else '-'}"), ("health_after", "/health")):
                try:
                    answer = http.get(path)
                except httpx.HTTPError as exc:
                    record[name] = {"error": str(exc)}
                    continue
                try:
                    body = answer.json()
                except ValueError:
                    body = answer.text[:500]
                record[name] = {"http_status": answer.status_code, "body": body}
        job = record["job_after"].get("body")
        job_status = job.get("status") if isinstance(job, dict) else None
        text = log.read_text(encoding="utf-8", errors="replace")
        died = [line for line in text.splitlines() if "died unexpectedly" in line]
        record["log_lines"] = died[:3]
        if not killed or not died or job_status != "failed":
            raise ConformanceFailure(f"the worker's death is not named: killed {killed}, the job's status is "
                                     f"{job_status!r}, upstream's log says {died or 'nothing'} ({log})", phase="fault")
        say(f"worker {', '.join(killed)} SIGKILLed mid-request: {record['client_error']}")
        say(f"  upstream's log: {died[0].strip()[-160:]}")
        record["processes_after_fault"] = _server_pids(server_id, int(held["pid"]))
    finally:
        harness.kill()  # the point of the phase: a harness that dies without stopping its server
        harness.wait()
        if harness.stdout is not None:
            harness.stdout.close()
    deadline = time.monotonic() + _GONE_WAIT_S
    while time.monotonic() < deadline:
        left = _server_pids(record["server"]["server_id"], int(record["server"]["pid"]))
        if not left and port_free(LOCALHOST, int(record["server"]["port"])):
            break
        time.sleep(0.5)
    gone_s = _GONE_WAIT_S - max(deadline - time.monotonic(), 0.0)
    record["after_harness_kill"] = {"left": left, "seconds": gone_s,
                                    "port_free": port_free(LOCALHOST, int(record["server"]["port"]))}
    if left or not record["after_harness_kill"]["port_free"]:
        raise ConformanceFailure(f"after the harness was SIGKILLed, processes {left} of its server were still "
                                 f"running after {_GONE_WAIT_S:g} s (port free: "
                                 f"{record['after_harness_kill']['port_free']})", phase="fault")
    say(f"harness SIGKILLed: its server's processes were gone {gone_s:.1f} s later, port free")


def _campaign_verdicts(bundle: Path) -> dict[str, dict[str, Any]]:
    """The candidate's verdict per duration from the bundle's ``verdict.json``: quality PASS, speed not FAIL."""
    verdict = json.loads((bundle / "verdict.json").read_text(encoding="utf-8"))
    durations = verdict["candidates"]["untiled"]["durations"]
    found = {duration: {"quality": d["quality"], "speed": d["speed"], "ratio": d["estimate"]["geomean"],
                        "bounds": [d["estimate"]["ci_low"], d["estimate"]["ci_high"]]}
             for duration, d in durations.items()}
    wrong = {duration: d for duration, d in found.items() if d["quality"] != "PASS" or d["speed"] == "FAIL"}
    if not found or wrong:
        raise ConformanceFailure(f"the real campaign's untiled arm must keep the frames (quality PASS) and never be "
                                 f"slower (speed not FAIL): {wrong or 'no duration judged'} ({bundle})",
                                 phase="campaign")
    for duration, d in found.items():
        say(f"campaign {duration}: quality {d['quality']}, speed {d['speed']} (ratio {d['ratio']:.3f}, bounds "
             f"[{d['bounds'][0]:.3f}, {d['bounds'][1]:.3f}])")
    return found


def _require_ffmpeg() -> None:
    missing = [tool for tool in ("ffprobe", "ffmpeg") if shutil.which(tool) is None]
    if missing:
        raise ConformanceFailure(f"{' and '.join(missing)} not on PATH: upstream's MiniMax-H3 preprocessing runs them "
                                 "for every reference video (vllm_omni/model_executor/models/minimax_h3/"
                                 "reference_video.py); ./dev conformance --engine-mode real installs Debian's ffmpeg",
                                 phase="environment")


def run_real(engine: str, work: Path, record: dict[str, Any], *, campaign: bool = True) -> None:
    """Every phase of the real-engine lane, each one's measurements put in ``record`` as it ends.

    Raises ConformanceFailure (``record`` then holds what the phases before measured).
    """
    record["engine_mode"] = "real"
    say(f"== real engine, vLLM-Omni {engine}: environment")
    build = ensure_environment(engine)
    record["environment"] = build.to_dict()
    say(build.describe())
    _require_ffmpeg()
    work.mkdir(parents=True, exist_ok=True)
    say("== checkpoint: tiny random-weight H3-shaped pipeline")
    start = time.perf_counter()
    checkpoint = ensure_checkpoint(engine)
    record["checkpoint"] = {"path": str(checkpoint), "seconds": time.perf_counter() - start}
    say(f"{checkpoint} ({record['checkpoint']['seconds']:.1f} s)")
    say(f"== probes: vLLM-Omni's own engine and the simulator (work directory {work})")
    served: dict[str, Any] = {}
    record["served"] = served
    comparison = _probe_and_client_phases(engine, checkpoint, work, served)
    (work / "probes.json").write_text(json.dumps(comparison.to_dict(), indent=1, default=str), encoding="utf-8")
    table = render_table(comparison)
    (work / "probes.txt").write_text(table + "\n", encoding="utf-8")
    say(table)
    if not comparison.ok:
        raise ConformanceFailure("the real engine and the simulator differ beyond the deliberate differences "
                                 "(UNEXPLAINED or STALE above)", phase="probes")
    say("== fault: a worker SIGKILLed mid-request, then the harness SIGKILLed")
    record["fault"] = {}
    _fault_phase(engine, checkpoint, work, record["fault"])
    if campaign:
        say("== campaign: both arms vLLM-Omni's own server, tiled against untiled VAE decode")
        # A real engine's requests are computed, so their times follow the machine's load: with three AB/BA
        # pairs on shared cores the speed bounds may stay wide. INCONCLUSIVE is accepted; the outputs must be the
        # same (quality PASS, tiling changes no pixel) and the speed never FAIL (the untiled arm is never slower).
        record["campaign"] = campaign_phase(engine, work, REAL_SPEC, env={CHECKPOINT_ENV: str(checkpoint)},
                                             accept=("PASS", "INCONCLUSIVE"))
        record["campaign"]["durations"] = _campaign_verdicts(Path(record["campaign"]["bundle"]))
