"""Real small, full and read-only file systems for tests, made in a private mount namespace.

``unshare -rm`` gives the child its own mount table (and, as an unprivileged
user, root inside a user namespace), so it can mount a tmpfs of a few
megabytes or remount a bind mount read-only without touching the host: the
mounts vanish with the namespace. :func:`in_namespace` runs a Python script
there; :func:`namespace_unavailable` says why that cannot work here, for a
skip with its reason.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["PRELUDE", "in_namespace", "namespace_unavailable"]

REPO = Path(__file__).resolve().parents[1]

# Helpers the scripts start with: mount a tmpfs, fill it, make a directory read-only, run h3bench.
PRELUDE = '''
import json, os, subprocess, sys
from pathlib import Path

def mount_tmpfs(path, size):
    Path(path).mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)

def fill(path):
    """Write a ballast file until the file system says it is full."""
    with open(Path(path) / "ballast", "wb") as f:
        try:
            while True:
                f.write(b"\\0" * 65536)
                f.flush()
        except OSError:
            pass

def read_only(path):
    Path(path).mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", str(path), str(path)], check=True)
    subprocess.run(["mount", "-o", "remount,ro,bind", str(path)], check=True)

def h3bench(*args):
    done = subprocess.run([sys.executable, "-m", "h3bench.cli", *map(str, args)], capture_output=True, text=True)
    return {"code": done.returncode, "out": done.stdout, "err": done.stderr}
'''


@functools.cache
def namespace_unavailable() -> str | None:
    """Why a private mount namespace cannot be had here (for the skip), or None when it can."""
    if shutil.which("unshare") is None:
        return "no unshare(1) on this host: the test cannot mount its own file systems"
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt 2>&1 || "
                            "mount -t tmpfs -o size=1m tmpfs /tmp 2>&1"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"unshare -rm cannot mount a tmpfs here ({(probe.stdout + probe.stderr).strip()[:200]})"
    return None


def in_namespace(script: str, args: Any, *, timeout: float = 900) -> Any:
    """Run ``PRELUDE + script`` in a private mount namespace with ``ARGS`` (JSON) set; what it printed last, as JSON."""
    # This checkout's h3bench first, as the test's own interpreter sees it.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    code = PRELUDE + f"\nARGS = json.loads({json.dumps(json.dumps(args))})\n" + script
    done = subprocess.run(["unshare", "-rm", sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"the namespace script failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])
