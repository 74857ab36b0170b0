"""The host and interpreter of a run, as a reviewer needs them to repeat it (recorded in every manifest)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import sys
from typing import Any

__all__ = ["cpu_model", "environment"]


def cpu_model() -> str:
    """The CPU model from /proc/cpuinfo; aarch64 hosts (Kunpeng) give only implementer and part."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep:
                    fields.setdefault(key.strip().lower(), value.strip())
    except OSError:
        pass
    if "model name" in fields:
        return fields["model name"]
    if "cpu implementer" in fields:
        return f"implementer {fields['cpu implementer']} part {fields.get('cpu part', '?')}"
    return platform.processor() or "unknown"


def _packages() -> dict[str, str]:
    packages: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        # The first distribution on sys.path is the one that imports.
        if name and name not in packages:
            packages[name] = dist.version
    return dict(sorted(packages.items(), key=lambda item: item[0].lower()))


def environment() -> dict[str, Any]:
    """Describe the host and interpreter the way a reviewer needs to repeat a run."""
    affinity = getattr(os, "sched_getaffinity", None)
    return {
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
        },
        "packages": _packages(),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(affinity(0)) if affinity else None,
        "argv": list(sys.argv),
    }
