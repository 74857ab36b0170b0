"""``python -m conformance.serve``: start upstream's app in the conformance environment, from h3bench's own.

A RunSpec arm cannot name the conformance environment's interpreter (its
path depends on the machine), so its ``argv`` runs this module with
``{python}``; it replaces itself (``exec``, same process id, so the
harness's process tree and signals are unchanged) with
:mod:`conformance.upstream_app` under that environment's Python,
passing every other argument on::

    {python} -m conformance.serve --host {host} --port {port} --model {model} --time-scale 0.001

The engine is ``--engine``, else ``$H3BENCH_CONFORMANCE_ENGINE``, else
:data:`~conformance.envbuild.DEFAULT_ENGINE`. It exits 2 with the
reason when that environment has not been built.
"""

from __future__ import annotations

import argparse
import os
import sys

from conformance.envbuild import DEFAULT_ENGINE, server_command
from h3bench.errors import UsageError

__all__ = ["ENGINE_ENV", "main"]

ENGINE_ENV = "H3BENCH_CONFORMANCE_ENGINE"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.serve", add_help=True,
                                     description="run upstream's /v1/videos app with the stand-in engine "
                                                 "(other arguments go to conformance.upstream_app)")
    parser.add_argument("--engine", default=os.environ.get(ENGINE_ENV) or DEFAULT_ENGINE)
    args, rest = parser.parse_known_args(argv)
    try:
        command, env = server_command(args.engine, *rest)
    except UsageError as exc:
        print(f"conformance.serve: error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(command[0], command, env)
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
