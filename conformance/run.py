"""``./dev conformance [--engine 0.30.0]``: h3bench against vLLM-Omni's real serving code, end to end.

Four phases, each of which fails the step with its reason:

1. **Environment** (:func:`conformance.envbuild.ensure_environment`):
   built from PyPI on first use, reused afterwards; its download size,
   install time and disk are reported.
2. **Probes** (:mod:`conformance.probes`): upstream's app with the
   stand-in engine, and the simulator, answer the same probes; the table
   shows every step with both answers, and any difference that
   ``conformance/deliberate.toml`` does not list (or an entry
   there that no longer matches) fails the step. Upstream's ready time and
   RSS are measured here.
3. **Client**: h3bench's own client (:class:`h3bench.run.client.VideoClient`)
   generates once in each request mode against upstream's app, and each
   output passes H3's expected-duration checks.
4. **Campaign**: ``h3bench run --runspec fixtures/runspecs/conformance.toml``
   (both arms upstream's app, stand-in engines of different speeds), which
   must end with PASS, then ``h3bench verify`` on its bundle.

Everything this run writes (server logs, the probe table and answers as
JSON, the campaign's bundle, ``conformance.json`` with every measurement)
goes to ``<cache>/conformance/<engine>/runs/<UTC time>/``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from conformance.compare import Comparison, compare, load_deliberate, render_table
from conformance.envbuild import DEFAULT_ENGINE, REPO_ROOT, ensure_environment, environment_root, server_command
from conformance.phases import CAMPAIGN_SPEC, INPUTS, ConformanceFailure, campaign_phase, client_phase, rss_mb, say
from conformance.probes import Side, probe_names, run_probes
from h3bench.errors import H3BenchError
from h3bench.server.process import ServerProcess

__all__ = ["CAMPAIGN_SPEC", "ConformanceFailure", "ServerFacts", "main"]

# The probes' engines: fast, so that a probe's generation takes a fraction of a second.
_PROBE_TIME_SCALE = "0.0002"
_UPSTREAM_BUDGET_S = 240.0
_SIM_BUDGET_S = 60.0


@dataclass(frozen=True)
class ServerFacts:
    """One server of the probe phase: its ready time (launch to first 200 on /health) and peak RSS."""

    name: str
    startup_s: float | None
    rss_mb: float | None
    log: str


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def _servers(engine: str, work: Path) -> Iterator[dict[str, tuple[ServerProcess, str]]]:
    """Upstream's app (one server answers every target) and the three simulators, started and finally stopped."""
    servers: dict[str, tuple[ServerProcess, str]] = {}
    with ExitStack() as stack:
        port = _free_port()
        argv, env = server_command(engine, "--host", "127.0.0.1", "--port", str(port), "--time-scale",
                                   _PROBE_TIME_SCALE, "--profiler-dir", str(work / "profiles-upstream"))
        upstream = ServerProcess(argv, port=port, log_path=work / "upstream.log", startup_budget_s=_UPSTREAM_BUDGET_S,
                                 env={"PYTHONPATH": env["PYTHONPATH"]})
        stack.callback(upstream.stop)
        say(f"starting upstream's app (vLLM-Omni {engine}) on port {port} ...")
        upstream.start()
        servers["upstream"] = (upstream, upstream.base_url)
        profiler = json.dumps({"profiler": "torch", "torch_profiler_dir": str(work / "profiles-sim")})
        for name, extra in (("sim", ["--profiler-config", profiler]), ("sim-fail-sync", ["--fail-request", "1"]),
                            ("sim-fail-async", ["--fail-request", "1"])):
            port = _free_port()
            sim = ServerProcess([sys.executable, "-m", "h3bench.sim", "--host", "127.0.0.1", "--port", str(port),
                                 "--time-scale", _PROBE_TIME_SCALE, "--compile-s", "0", *extra],
                                port=port, log_path=work / f"{name}.log", startup_budget_s=_SIM_BUDGET_S)
            stack.callback(sim.stop)
            sim.start()
            servers[name] = (sim, sim.base_url)
        yield servers


def _probe_phase(engine: str, work: Path) -> tuple[Comparison, list[ServerFacts], dict[str, Any]]:
    deliberate = load_deliberate(probes=probe_names())
    with _servers(engine, work) as servers:
        upstream_url = servers["upstream"][1]
        peak = {name: rss_mb(server.pid) for name, (server, _) in servers.items()}
        sides = (
            Side("upstream", {"main": upstream_url, "fail-sync": upstream_url, "fail-async": upstream_url}),
            Side("sim", {"main": servers["sim"][1], "fail-sync": servers["sim-fail-sync"][1],
                         "fail-async": servers["sim-fail-async"][1]}),
        )
        start = time.perf_counter()
        with sides[0], sides[1]:
            order = run_probes(sides[0], sides[1], INPUTS)
        probes_s = time.perf_counter() - start
        for name, (server, _) in servers.items():
            now = rss_mb(server.pid)
            if now is not None and (peak[name] is None or now > (peak[name] or 0)):
                peak[name] = now
        client = client_phase(upstream_url, work)
        facts = [ServerFacts(name, server.startup_s, peak[name], str(server.log_path))
                 for name, (server, _) in servers.items()]
    comparison = compare(sides[0].answers, sides[1].answers, deliberate, order=order)
    return comparison, facts, {"probes_s": probes_s, "client": client}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="./dev conformance", description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", default=DEFAULT_ENGINE, help="the vLLM-Omni release (default %(default)s)")
    parser.add_argument("--engine-mode", choices=("standin", "real"), default="standin",
                        help="standin: upstream's serving code over a stand-in engine (default); real: vLLM-Omni's "
                             "own server and engine on a CPU with a tiny H3-shaped pipeline "
                             "(conformance/realrun.py)")
    parser.add_argument("--no-campaign", action="store_true", help="skip the campaign phase")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run every phase; exit 0 when all pass, 1 when one fails (the reason is printed), 2 for a usage error."""
    args = _parser().parse_args(argv)
    started = time.perf_counter()
    # Every process the lanes start (servers, harness, campaign) runs `python -m conformance...`, which is not in
    # h3bench's wheel: the checkout goes first on their path, wherever they start.
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    suffix = "-real" if args.engine_mode == "real" else ""
    work = environment_root(args.engine) / "runs" / (time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + suffix)
    record: dict[str, Any] = {"engine": args.engine, "work": str(work)}
    try:
        if args.engine_mode == "real":
            from conformance.realrun import run_real

            run_real(args.engine, work, record, campaign=not args.no_campaign)
            _write(work, record, started)
            say(f"conformance (real engine): OK in {time.perf_counter() - started:.0f} s ({work})")
            return 0
        say(f"== conformance with vLLM-Omni {args.engine}: environment")
        build = ensure_environment(args.engine)
        record["environment"] = build.to_dict()
        say(build.describe())
        work.mkdir(parents=True, exist_ok=True)
        say(f"== probes: upstream's app and the simulator (work directory {work})")
        comparison, facts, extra = _probe_phase(args.engine, work)
        record.update(servers=[asdict(f) for f in facts], **extra)
        (work / "probes.json").write_text(json.dumps(comparison.to_dict(), indent=1, default=str), encoding="utf-8")
        table = render_table(comparison)
        (work / "probes.txt").write_text(table + "\n", encoding="utf-8")
        say(table)
        for fact in facts:
            say(f"server {fact.name}: ready in {fact.startup_s:.1f} s, peak RSS {fact.rss_mb or 0:.0f} MiB")
        if not comparison.ok:
            raise ConformanceFailure("the simulator and upstream differ beyond the deliberate differences "
                                     "(UNEXPLAINED or STALE above)", phase="probes")
        if not args.no_campaign:
            say("== campaign: both arms upstream's app with stand-in engines of different speeds")
            record["campaign"] = campaign_phase(args.engine, work)
    except H3BenchError as exc:
        record["failed"] = f"{type(exc).__name__}: {exc}"
        _write(work, record, started)
        print(f"conformance: FAILED: {exc}", file=sys.stderr, flush=True)
        return 2 if type(exc).__name__ == "UsageError" else 1
    _write(work, record, started)
    say(f"conformance: OK in {time.perf_counter() - started:.0f} s ({work})")
    return 0


def _write(work: Path, record: dict[str, Any], started: float) -> None:
    record["total_s"] = time.perf_counter() - started
    if work.exists():
        (work / "conformance.json").write_text(json.dumps(record, indent=1, default=str), encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
