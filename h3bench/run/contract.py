"""The engine's contract: what each server says it accepts, recorded at every server start.

Two documents say what an engine accepts, and both change when the engine
does, even when its commit or image is not pinned:

- ``GET /openapi.json``: FastAPI's schema of every route, form field and
  response model. vLLM's ``build_app`` serves it unless the server runs with
  ``--disable-fastapi-docs`` (``vllm/entrypoints/launchers/app.py``), and the
  simulator serves its own. The bytes as served are stored, named and
  compared by their SHA-256.
- ``vllm serve --omni --help=all``, for vllm arms: every flag with its
  default. vLLM-Omni's CLI (``vllm_omni/entrypoints/cli/main.py``) parses
  with vLLM's ``FlexibleArgumentParser`` (``vllm/utils/argparse_utils.py``),
  whose plain ``--help`` lists only the config groups; ``--help=all`` prints
  every flag. The engine's own log lines come first on stdout, with
  timestamps; the contract is the text from the ``usage:`` line on, so that
  the same engine gives the same hash. It runs once per launcher and
  environment in a process (a run), before that arm's first server starts.

A server without ``/openapi.json``, or an engine whose help cannot be had,
is noted, never failed. What a bundle holds is read back by
:meth:`Contract.of` (``lifecycle.jsonl``'s ``contract``), and two contracts
are compared by :func:`contract_changes`: history, the ledger, the pool's
fan-in and a candidate-only run's ``--baseline-evidence`` name a change with it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from h3bench.evidence import Bundle

__all__ = ["HELP_ARGS", "OPENAPI_PATH", "ArmContract", "Contract", "ContractPart", "ServerContract",
           "contract_changes", "engine_help", "help_text", "record_help", "record_openapi"]

OPENAPI_PATH = "/openapi.json"
HELP_ARGS = ("serve", "--omni", "--help=all")
HELP_TIMEOUT_S = 600.0  # the engine imports torch and its device plugin before it prints
_USAGE = "usage:"


@dataclass(frozen=True)
class ContractPart:
    """One contract document as a block recorded it: its SHA-256 and file, or why there is none."""

    sha256: str | None
    relpath: str | None
    note: str = ""  # why not recorded, or what was left out


@dataclass(frozen=True)
class ServerContract:
    """What one block recorded at its server's start (``lifecycle.jsonl``'s ``contract``)."""

    openapi: ContractPart
    help: ContractPart | None = None  # None: not a vllm arm


def record_openapi(base_url: str, bundle: Bundle, *, timeout: float = 30.0) -> ContractPart:
    """``GET {base_url}/openapi.json``, stored in the bundle; a server without it gives a note."""
    import httpx  # the plugin's imports stay light

    from h3bench.server import localhttp

    url = base_url.rstrip("/") + OPENAPI_PATH
    try:
        with localhttp.client(timeout=timeout) as client:
            response = client.get(url)
    except httpx.HTTPError as exc:
        return ContractPart(None, None, f"not recorded: {OPENAPI_PATH} failed ({type(exc).__name__}: {exc})")
    if response.status_code != 200:
        return ContractPart(None, None, f"not recorded: {OPENAPI_PATH} answered HTTP {response.status_code}")
    sha, relpath = bundle.store_contract(response.content, "json")
    return ContractPart(sha, relpath)


def help_text(stdout: str) -> tuple[str, str]:
    """The contract part of the engine's help output, and a note on what was left out.

    From the first line that starts with ``usage:`` on: the log lines before it
    carry timestamps. Without such a line the whole output is kept.
    """
    lines = stdout.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.startswith(_USAGE)), None)
    if start is None:
        return stdout, "no 'usage:' line: the whole output is kept"
    return "".join(lines[start:]), f"{start} log line(s) before 'usage:' left out" if start else ""


# One help run per launcher and environment in a process: the engine on disk does not change within a run.
_HELP_CACHE: dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], tuple[bytes | None, str]] = {}


def _run_help(launcher: Sequence[str], env: Mapping[str, str], timeout: float) -> tuple[bytes | None, str]:
    argv = [*launcher, *HELP_ARGS]
    shown = " ".join(argv)
    try:
        done = subprocess.run(argv, env={**os.environ, **env}, capture_output=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)
    except FileNotFoundError:
        return None, f"not recorded: {launcher[0]} not found ({shown})"
    except subprocess.TimeoutExpired:
        return None, f"not recorded: {shown} did not finish within {timeout:g} s"
    except OSError as exc:
        return None, f"not recorded: {shown} could not run ({exc})"
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
        return None, f"not recorded: {shown} exited {done.returncode} ({tail[0]})"
    text, note = help_text(done.stdout.decode(errors="replace"))
    return text.encode(), note


def engine_help(launcher: Sequence[str], env: Mapping[str, str], *,
                timeout: float = HELP_TIMEOUT_S) -> tuple[bytes | None, str]:
    """The contract text of ``<launcher> serve --omni --help=all`` in the arm's environment (run once per process),
    and a note; None with the reason when it cannot be had."""
    key = (tuple(launcher), tuple(sorted(env.items())))
    if key not in _HELP_CACHE:
        _HELP_CACHE[key] = _run_help(launcher, env, timeout)
    return _HELP_CACHE[key]


def record_help(launcher: Sequence[str], env: Mapping[str, str], bundle: Bundle, *,
                timeout: float = HELP_TIMEOUT_S) -> ContractPart:
    """:func:`engine_help`, stored in the bundle."""
    data, note = engine_help(launcher, env, timeout=timeout)
    if data is None:
        return ContractPart(None, None, note)
    sha, relpath = bundle.store_contract(data, "txt")
    return ContractPart(sha, relpath, note)


def _seen(values: Iterable[str | None]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(v for v in values if v))


@dataclass(frozen=True)
class ArmContract:
    """One arm's contract over the blocks of a bundle: every distinct SHA-256 seen, in order."""

    openapi: tuple[str, ...] = ()
    help: tuple[str, ...] = ()


@dataclass(frozen=True)
class Contract:
    """A bundle's (or today's) contract per arm; an arm whose servers recorded nothing is absent."""

    arms: dict[str, ArmContract] = field(default_factory=dict)

    @classmethod
    def of(cls, lifecycle: Iterable[Mapping[str, Any]]) -> Contract:
        """From ``lifecycle.jsonl`` records (every segment); records without a contract are left out."""
        found: dict[str, tuple[list[str | None], list[str | None]]] = {}
        for record in lifecycle:
            contract = record.get("contract")
            if not isinstance(contract, dict):
                continue
            openapi, help_ = found.setdefault(str(record.get("arm")), ([], []))
            openapi.append((contract.get("openapi") or {}).get("sha256"))
            help_.append((contract.get("help") or {}).get("sha256"))
        arms = {arm: ArmContract(_seen(o), _seen(h)) for arm, (o, h) in found.items()}
        return cls({arm: c for arm, c in arms.items() if c.openapi or c.help})

    @classmethod
    def of_server(cls, arm: str, contract: ServerContract) -> Contract:
        """One server's recorded contract, as an arm's."""
        found = ArmContract(_seen([contract.openapi.sha256]), _seen([contract.help.sha256 if contract.help else None]))
        return cls({arm: found} if found.openapi or found.help else {})

    @property
    def recorded(self) -> bool:
        return bool(self.arms)

    def describe(self) -> str:
        """``baseline: openapi 1a2b3c4d5e6f, help 0f9e8d7c6b5a; ...``, or that none was recorded."""
        if not self.arms:
            return "no contract recorded"
        return "; ".join(f"{arm}: openapi {_short(c.openapi)}, help {_short(c.help)}" for arm, c in self.arms.items())


def _short(values: tuple[str, ...]) -> str:
    return "/".join(v[:12] for v in values) or "-"


def contract_changes(before: Contract, after: Contract, *, arms: Iterable[str] | None = None) -> tuple[str, ...]:
    """One line per arm and document whose recorded SHA-256 differs between two contracts.

    Only what both recorded is compared: an arm or a document that one side
    lacks (an older bundle, a server without ``/openapi.json``) is no change.
    ``arms`` limits the comparison (default: every arm both have).
    """
    names = [a for a in (arms if arms is not None else before.arms) if a in before.arms and a in after.arms]
    lines = []
    for arm in names:
        old, new = before.arms[arm], after.arms[arm]
        for label, a, b in (("/openapi.json", old.openapi, new.openapi),
                            ("vllm serve --help=all", old.help, new.help)):
            if a and b and set(a) != set(b):
                lines.append(f"{arm}: {label} changed (sha256 {_short(a)} → {_short(b)})")
    return tuple(lines)
