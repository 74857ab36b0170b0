"""What an NPU host runs, recorded before the first block: engine, CANN, driver, devices, CPU, memory, image.

The engine's versions come from the **server's own interpreter**, which is
not necessarily h3bench's: the arm's argv either starts with a Python
interpreter, or with a script (``vllm``) whose shebang names one. That
interpreter reports, through ``importlib.metadata`` (nothing is imported),
the versions of torch, torch_npu, vllm and vllm-omni, and vllm-omni's
``direct_url.json`` (PEP 610). vllm-omni's source commit is its
``vcs_info.commit_id`` (``pip install git+...@rev``), else ``git rev-parse
HEAD`` of its source tree (an editable or source install, as in the NPU
images), else the ``+g<sha>`` of a local version; a PyPI wheel records none.

The CANN version is read from the toolkit's version files under
``$ASCEND_HOME_PATH`` (else ``/usr/local/Ascend/ascend-toolkit/latest``),
the driver's from ``/usr/local/Ascend/driver/version.info``, and the image
digest from ``$H3BENCH_IMAGE_DIGEST``, which the CI job sets to the digest
it pulled. On a host without them (the simulator) each is recorded as
absent (None), never an error.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

from h3bench.errors import H3BenchError
from h3bench.host.environment import cpu_model
from h3bench.host.npusmi import board_serial, read_npu_smi

__all__ = ["ASCEND_ROOT", "HOST_NAME_ENV", "IMAGE_DIGEST_ENV", "cann_version", "driver_version", "engine", "host_evidence",
           "host_identity", "server_interpreter"]

IMAGE_DIGEST_ENV = "H3BENCH_IMAGE_DIGEST"
ASCEND_ROOT = Path("/usr/local/Ascend")
PACKAGES = ("torch", "torch_npu", "vllm", "vllm_omni")
_PYTHON = re.compile(r"python[0-9.]*")
_VERSION_LINE = re.compile(r"^\s*(?:version|Version|VERSION)\s*[=:]\s*(\S+)", re.MULTILINE)
# Runs in the server's interpreter: versions and vllm-omni's install record, without importing anything heavy.
_PROBE = r"""
import importlib.metadata as md, importlib.util, json, sys
out = {"executable": sys.executable, "python": sys.version.split()[0], "versions": {}, "direct_url": None,
       "omni_path": None}
for name in sys.argv[1:]:
    try:
        out["versions"][name] = md.version(name)
    except md.PackageNotFoundError:
        out["versions"][name] = None
try:
    out["direct_url"] = md.distribution("vllm_omni").read_text("direct_url.json")
except md.PackageNotFoundError:
    pass
spec = importlib.util.find_spec("vllm_omni")
out["omni_path"] = spec.origin if spec else None
print(json.dumps(out))
"""


def _which(name: str, env: Mapping[str, str]) -> Path | None:
    found = shutil.which(name, path=env.get("PATH", os.environ.get("PATH")))
    return Path(found) if found else None


def server_interpreter(argv: Sequence[str], env: Mapping[str, str]) -> Path | None:
    """The Python interpreter that runs a server command: argv[0] itself, or its script's shebang; else None."""
    if not argv:
        return None
    program = _which(argv[0], env) if "/" not in argv[0] else Path(argv[0])
    if program is None or not program.is_file():
        return None
    if _PYTHON.fullmatch(program.name):
        return program
    try:
        with program.open("rb") as handle:
            first = handle.readline(512).decode("utf-8", "replace")
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    words = first[2:].split()
    if words and Path(words[0]).name == "env":
        words = [w for w in words[1:] if not w.startswith("-")]  # "#!/usr/bin/env -S python3 -u"
        return _which(words[0], env) if words else None
    return Path(words[0]) if words else None


def _git_head(path: Path) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    head = proc.stdout.strip()
    return head if proc.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}", head) else None


def _commit(probe: Mapping[str, Any]) -> tuple[str | None, str]:
    """vllm-omni's source commit and where it came from."""
    direct: dict[str, Any] = {}
    if probe.get("direct_url"):
        try:
            direct = json.loads(probe["direct_url"])
        except ValueError:
            direct = {}
    commit = (direct.get("vcs_info") or {}).get("commit_id")
    if isinstance(commit, str) and commit:
        return commit, "direct_url.json vcs_info.commit_id"
    url = str(direct.get("url", ""))
    candidates = [Path(url.removeprefix("file://"))] if url.startswith("file://") else []
    if probe.get("omni_path"):
        candidates.append(Path(probe["omni_path"]).parent)
    for path in candidates:
        if (head := _git_head(path)) is not None:
            return head, f"git rev-parse HEAD in {path}"
    version = (probe.get("versions") or {}).get("vllm_omni") or ""
    if match := re.search(r"\+g([0-9a-f]{7,40})", version):
        return match.group(1), f"the local version {version}"
    return None, "vllm-omni records no commit (a PyPI wheel, or not installed)"


def engine(argv: Sequence[str], env: Mapping[str, str]) -> dict[str, Any] | None:
    """The server interpreter's package versions and vllm-omni's commit; None without a Python interpreter."""
    python = server_interpreter(argv, env)
    if python is None:
        return None
    full_env = {**os.environ, **env}
    try:
        proc = subprocess.run([str(python), "-c", _PROBE, *PACKAGES], capture_output=True, text=True, timeout=120,
                              env=full_env)
        probe = json.loads(proc.stdout) if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        probe = None
    if probe is None:
        return {"interpreter": str(python), "error": f"{python} could not report its packages"}
    commit, source = _commit(probe)
    return {"interpreter": probe["executable"], "python": probe["python"], "versions": probe["versions"],
            "vllm_omni_commit": commit, "commit_source": source}


def _version_in(paths: Sequence[Path]) -> dict[str, str] | None:
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if match := _VERSION_LINE.search(text):
            return {"version": match.group(1), "file": str(path)}
    return None


def cann_version(env: Mapping[str, str]) -> dict[str, str] | None:
    """The CANN toolkit's version and the file it came from, or None."""
    home = Path(env.get("ASCEND_HOME_PATH") or os.environ.get("ASCEND_HOME_PATH") or ASCEND_ROOT / "ascend-toolkit/latest")
    return _version_in([*sorted(home.glob("*-linux/ascend_toolkit_install.info")), home / "version.cfg",
                        home / "compiler/version.info", home / "runtime/version.info"])


def driver_version(root: Path = ASCEND_ROOT) -> dict[str, str] | None:
    """The NPU driver's version from ``driver/version.info``, or None."""
    return _version_in([root / "driver/version.info"])


def _inventory() -> dict[str, Any] | None:
    try:
        report = read_npu_smi(timeout_s=60)
    except H3BenchError:
        return None
    return {"version": report.version, "layout": report.layout,
            "chips": [{"npu_id": d.npu_id, "chip_id": d.chip_id, "phy_id": d.phy_id, "name": d.name,
                       "health": d.health, "bus_id": d.bus_id, "hbm_total_mb": d.hbm_total_mb}
                      for d in report.devices]}


def host_evidence(env: Mapping[str, str]) -> dict[str, Any]:
    """Everything above but the engine, with a server's environment (``ASCEND_HOME_PATH``); absent parts None."""
    return {
        "cann": cann_version(env),
        "driver": driver_version(),
        "npu_smi": _inventory(),
        "cpu": {"model": cpu_model(), "count": os.cpu_count()},
        "memory_bytes": psutil.virtual_memory().total,
        "image_digest": os.environ.get(IMAGE_DIGEST_ENV) or None,
    }


HOST_NAME_ENV = "H3BENCH_HOST_NAME"  # the host's name as the engine knows it: a Job's node name, a runner's name


def _machine_id() -> str | None:
    for path in (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id")):
        try:
            text = path.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if text:
            return text
    return None


def host_identity() -> dict[str, Any]:
    """Which host ran a shard: its name, its NPUs' board serials and bus ids, driver and CANN.

    The name is ``$H3BENCH_HOST_NAME`` where the engine sets it (a pod's
    hostname is the pod's, not the node's: the Job passes the node name), else
    the hostname. The pool refuses two shards whose names or whose board
    serials are the same: one host cannot pose as two.
    """
    inventory = _inventory()
    chips = (inventory or {}).get("chips") or []
    npus = sorted({int(c["npu_id"]) for c in chips})
    serials = [s for n in npus if (s := board_serial(n)) is not None]
    return {
        "name": os.environ.get(HOST_NAME_ENV) or socket.gethostname(),
        "hostname": socket.gethostname(),
        "machine_id": _machine_id(),
        "device_serials": serials,
        "bus_ids": sorted(str(c["bus_id"]) for c in chips if c.get("bus_id")),
        "driver": driver_version(),
        "cann": cann_version(os.environ),
    }
