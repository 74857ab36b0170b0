"""What a vLLM-Omni server's log says about how it runs: the attention backend its workers resolved.

With no backend given, vLLM-Omni on NPU picks FLASH_ATTN only where mindiesd
is installed and otherwise SDPA, without a warning
(``platforms/npu/platform.py``), so the backend a run used is read from the
log, not assumed. Every worker logs, once per attention role
(``diffusion/attention/selector.py``)::

    (DiffusionWorker_SP3 pid=123) INFO 08-22 12:00:00 [selector.py:94] Resolved diffusion attention
        backend 'FLASH_ATTN' for role='self' via platform default

The name is the backend's own (``SDPA`` for TORCH_SDPA); the DiT's blocks use
role ``'self'``. vLLM-Omni colours its logs even when piped, so ANSI codes
are removed first, and only the message is matched, since vLLM's prefix
format varies between versions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from h3bench.errors import AttentionBackendError

__all__ = ["AttentionBackends", "attention_backends", "read_attention_backends", "require_attention_backend"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_RESOLVED = re.compile(
    r"Resolved diffusion attention backend '(?P<name>[A-Za-z0-9_]+)' for role='(?P<role>[^']+)'"
    r"(?: \(role_category='[^']+'\))? via (?P<source>platform default|attention_config"
    r"(?:\.default|\.per_role\['[^']*'\](?: \(role_category fallback\))?)?)"
)
_ROLE = "self"


@dataclass(frozen=True)
class AttentionBackends:
    """What the workers logged for role ``'self'``: the backend names and their sources, distinct and sorted."""

    used: tuple[str, ...]
    via: tuple[str, ...]


def attention_backends(log_text: str) -> AttentionBackends:
    """The attention backends a server's workers resolved for role ``'self'``, read from its log."""
    names: set[str] = set()
    sources: set[str] = set()
    for line in _ANSI.sub("", log_text).splitlines():
        match = _RESOLVED.search(line)
        if match and match["role"] == _ROLE:
            names.add(match["name"])
            sources.add(match["source"])
    return AttentionBackends(tuple(sorted(names)), tuple(sorted(sources)))


def read_attention_backends(log_path: Path) -> AttentionBackends:
    """:func:`attention_backends` of a log file; nothing when there is no log."""
    try:
        return attention_backends(log_path.read_text(encoding="utf-8", errors="replace"))
    except FileNotFoundError:
        return AttentionBackends((), ())


def require_attention_backend(expected: str | None, log_path: Path) -> AttentionBackends:
    """What the log says; AttentionBackendError when the arm expects a backend the workers did not all use."""
    found = read_attention_backends(log_path)
    if expected is None or found.used == (expected,):
        return found
    if not found.used:
        message = (f"the server log names no attention backend for role 'self' (vLLM-Omni's workers log "
                   f"\"Resolved diffusion attention backend ... for role='self'\"), but the arm expects {expected}")
    else:
        message = (f"the server's workers used attention backend {', '.join(found.used)} for role 'self' "
                   f"(via {'; '.join(found.via)}), but the arm expects {expected}")
        if "platform default" in found.via:
            message += ("; with no backend given, vLLM-Omni on NPU picks FLASH_ATTN only where mindiesd "
                        "is installed, else SDPA")
    raise AttentionBackendError(message, expected=expected, used=found.used)
