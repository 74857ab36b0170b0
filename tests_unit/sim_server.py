"""A simulator server process for the tests, and the forms and polls they send it.

Every server is ``python -m h3bench.sim`` on 127.0.0.1, started in its own
session and stopped with SIGTERM to its process group, as the lifecycle
harness does. Test modules import the fixtures they use from here.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

from h3bench import media
from tests_unit import mediagen

FAST = ["--time-scale", "0.0005", "--compile-s", "0"]
SIZE = "256x160"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for init to reap it)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class SimServer:
    """One simulator process with its log; a context manager that always cleans up its session."""

    def __init__(self, log_dir: Path, *args: str, env: dict[str, str] | None = None, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"sim-{self.port}.log"
        argv = [sys.executable, "-m", "h3bench.sim", "--port", str(self.port), *args]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, **(env or {})}
            )

    @property
    def log(self) -> str:
        return self.log_path.read_text()

    def wait_ready(self, timeout: float = 60.0) -> SimServer:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "ready on http://" in self.log:
                return self
            if self.proc.poll() is not None:
                raise AssertionError(f"the simulator exited with {self.proc.returncode}:\n{self.log}")
            time.sleep(0.02)
        raise AssertionError(f"the simulator was not ready within {timeout} s:\n{self.log}")

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, trust_env=False, timeout=60)

    def worker_pids(self) -> list[int]:
        return [int(pid) for pid in re.findall(r"spawned worker rank \d+ \(pid (\d+)\)", self.log)]

    def stop(self, timeout: float = 15.0) -> tuple[int | None, float]:
        """SIGTERM the session; return the exit code (None if it had to be killed) and the wait."""
        start = time.monotonic()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            code: int | None = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            code = None
        elapsed = time.monotonic() - start
        self.kill()
        return code, elapsed

    def kill(self) -> None:
        """SIGKILL whatever of this session is left (orphaned workers included) and wait until it is gone."""
        killed = []
        for pid in [self.proc.pid, *self.worker_pids()]:
            try:
                if running(pid) and os.getsid(pid) == self.proc.pid:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            except OSError:
                pass
        self.proc.wait(5)
        deadline = time.monotonic() + 5
        while any(running(pid) for pid in killed) and time.monotonic() < deadline:
            time.sleep(0.01)

    def __enter__(self) -> SimServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def make_reference(directory: Path) -> Path:
    """A small real H.264/AAC reference video (the campaign's inputs are pinned elsewhere)."""
    return media.write_mp4(directory / "ref_video.mp4", mediagen.textured_frames(24, 128, 96), mediagen.tone(32_000))


def form(duration: float = 4.0, **fields: str) -> dict[str, str]:
    data = {"prompt": "a red fox crosses the snow", "size": SIZE, "seed": "0"}
    data["extra_params"] = json.dumps({"task": "ref2va", "duration": duration, "audio_flow_shift": 3.0})
    data.update(fields)
    return data


def files(reference: Path, count: int = 1) -> list[tuple[str, tuple[str, bytes, str]]]:
    return [("input_references", (reference.name, reference.read_bytes(), "video/mp4"))] * count


def error_message(response: httpx.Response) -> str:
    body = response.json()
    assert body["error"]["code"] == response.status_code  # vLLM's ErrorResponse
    return body["error"]["message"]


def wait_job(http: httpx.Client, video_id: str, timeout: float = 30.0) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        response = http.get(f"/v1/videos/{video_id}")
        if response.json()["status"] in ("completed", "failed") or time.monotonic() > deadline:
            return response
        time.sleep(0.01)
