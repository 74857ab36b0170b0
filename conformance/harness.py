"""``python -m conformance.harness ARGV_JSON LOG``: a harness that holds one server until it is killed.

The real-engine lane (:mod:`conformance.realrun`) checks what a
SIGKILLed harness leaves behind. This process is that harness: it starts the
server with :class:`~h3bench.server.process.ServerProcess`, as a campaign's
block does (its own session, a parent-death signal, a guard), prints one JSON
line with the server's pid, port and marker once it is ready, and then waits
to be killed. It never stops the server itself.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from h3bench.server.ports import LOCALHOST, find_free_port
from h3bench.server.process import ServerProcess

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    spec_json, log = sys.argv[1:] if argv is None else argv
    spec = json.loads(spec_json)
    port = find_free_port(LOCALHOST)
    argv_ = [arg.replace("{port}", str(port)) for arg in spec["argv"]]
    server = ServerProcess(argv_, port=port, host=LOCALHOST, log_path=Path(log), env=spec["env"],
                           startup_budget_s=float(spec["startup_budget_s"]), stop_budget_s=float(spec["stop_budget_s"]))
    server.start()
    print(json.dumps({"pid": server.pid, "port": port, "server_id": server.server_id,
                      "startup_s": server.startup_s}), flush=True)
    while True:  # until SIGKILL: what a killed harness leaves is the point
        time.sleep(3600)


if __name__ == "__main__":
    raise SystemExit(main())
