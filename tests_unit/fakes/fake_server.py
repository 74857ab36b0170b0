"""A tiny stand-alone server with a real process tree, for the ServerProcess tests.

It serves ``GET /health`` with the standard library only and spawns worker
child processes, like ``vllm serve`` does. Flags inject the failures that the
lifecycle checks must catch. It never imports h3bench.
"""

from __future__ import annotations

import argparse
import http.server
import signal
import subprocess
import sys
import threading
import time

ME = [sys.executable, __file__]


def sleep_forever() -> None:
    while True:
        time.sleep(3600)


def run_worker(ignore_sigterm: bool) -> None:
    if ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("worker ready", flush=True)  # to the server's pipe: it is ready only after its workers
    sleep_forever()


def spawn_orphan(mode: str) -> None:
    """Start a grandchild and exit at once, so that it is re-parented."""
    orphan = subprocess.Popen([*ME, "--as-orphan"], start_new_session=mode == "detached", stdout=subprocess.PIPE)
    orphan.stdout.readline()
    print(f"orphan pid {orphan.pid} ({mode})", flush=True)


def run_orphan() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("orphan ready", flush=True)
    sleep_forever()


def serve(args: argparse.Namespace) -> None:
    for i in range(args.log_lines):
        print(f"startup log line {i}", flush=True)
    if args.exit_at_startup:
        print(f"ERROR {args.exit_at_startup}", file=sys.stderr, flush=True)
        sys.exit(3)
    worker_flags = ["--ignore-sigterm"] if args.worker_ignores_sigterm else []
    workers = [
        subprocess.Popen([*ME, "--as-worker", *worker_flags], stdout=subprocess.PIPE) for _ in range(args.workers)
    ]
    for w in workers:
        w.stdout.readline()
        w.stdout.close()
    if args.orphan:
        subprocess.run([*ME, "--as-orphan-spawner", args.orphan], check=True)
    ready_at = time.monotonic() + args.ready_after

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ready = not args.never_ready and time.monotonic() >= ready_at
            code = 200 if self.path == "/health" and ready else 503 if self.path == "/health" else 404
            body = b"ok" if code == 200 else b"not ready"
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt: str, *fargs: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer((args.host, args.port), Handler)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=httpd.shutdown).start())
    print(f"serving on {args.host}:{args.port} with workers {[w.pid for w in workers]}", flush=True)
    httpd.serve_forever(poll_interval=0.02)
    httpd.server_close()
    print("SIGTERM received: stopping workers", flush=True)
    for w in workers:
        w.terminate()
    for w in workers:
        w.wait()  # hangs on a worker that ignores SIGTERM, as a stuck vLLM worker would
    time.sleep(args.shutdown_delay)
    print("shutdown complete", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--log-lines", type=int, default=3)
    parser.add_argument("--exit-at-startup", metavar="MESSAGE")
    parser.add_argument("--never-ready", action="store_true")
    parser.add_argument("--ready-after", type=float, default=0.0)
    parser.add_argument("--worker-ignores-sigterm", action="store_true")
    parser.add_argument("--shutdown-delay", type=float, default=0.0)
    parser.add_argument("--orphan", choices=["session", "detached"])
    parser.add_argument("--as-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ignore-sigterm", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--as-orphan-spawner", choices=["session", "detached"], help=argparse.SUPPRESS)
    parser.add_argument("--as-orphan", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.as_worker:
        run_worker(args.ignore_sigterm)
    elif args.as_orphan_spawner:
        spawn_orphan(args.as_orphan_spawner)
    elif args.as_orphan:
        run_orphan()
    else:
        serve(args)


if __name__ == "__main__":
    main()
