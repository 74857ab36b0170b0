"""The vLLM-Omni simulator: ``h3bench sim`` and ``python -m h3bench.sim``.

A real HTTP server process that speaks vLLM-Omni's ``/v1/videos`` API
(:mod:`h3bench.sim.app`), spawns worker processes as vLLM does
(:mod:`h3bench.sim.worker`) and returns real H.264/AAC MP4s with H3's shapes
(:mod:`h3bench.sim.content`). How an arm behaves (latency, quality, failures)
is its :class:`~h3bench.sim.profile.SimProfile`, given as a TOML table, as
flags, or both (flags win)::

    h3bench sim --port 8000 --profile spec.toml --profile-table arms.candidate.sim --time-scale 0.01

This module stays light: worker processes start with the spawn method and
import the package, so FastAPI and uvicorn load only in :func:`main`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from h3bench.errors import H3BenchError, UsageError

if TYPE_CHECKING:
    from h3bench.sim.profile import SimProfile

__all__ = ["PROFILE_ENV", "SimArgs", "build_parser", "main", "parse_args"]

PROFILE_ENV = "H3BENCH_SIM_PROFILE"


def _json_table(text: str) -> dict[str, Any]:
    try:
        table = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"${PROFILE_ENV} is not JSON: {exc}") from exc
    if not isinstance(table, dict):
        raise UsageError(f"${PROFILE_ENV} must be a JSON object, got {type(table).__name__}")
    return table


def _anchors(text: str) -> tuple[float, float]:
    """``"14.9,119.33"`` → (14.9, 119.33): a stage's modelled seconds at 5 s and 15 s."""
    parts = text.split(",")
    try:
        if len(parts) != 2:
            raise ValueError
        return float(parts[0]), float(parts[1])
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected two numbers 'AT_5S,AT_15S', got {text!r}") from None


def _base_type(annotation: Any) -> Any:
    """The plain type under ``Annotated[...]`` and ``... | None``."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _base_type(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return _base_type(next(arg for arg in typing.get_args(annotation) if arg is not type(None)))
    return origin or annotation


def build_parser() -> argparse.ArgumentParser:
    """``--host``, ``--port``, ``--profile``, ``--profile-table`` and one flag per profile field."""
    from h3bench.sim.profile import SimProfile

    parser = argparse.ArgumentParser(
        prog="h3bench sim",
        description="Run the vLLM-Omni /v1/videos simulator (MiniMax-H3 Ref2VA shapes) until SIGTERM.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s, loopback)")
    parser.add_argument("--port", type=int, default=8000, help="port; 0 picks a free one (default: %(default)s)")
    parser.add_argument("--profile", metavar="FILE.toml", help="load the arm profile from this TOML file")
    parser.add_argument("--profile-table", metavar="TABLE", help="table inside --profile, e.g. arms.baseline.sim")
    parser.add_argument("--profiler-config", metavar="JSON",
                        help='vLLM\'s profiler config, {"profiler": "torch", "torch_profiler_dir": DIR}: '
                             "enables POST /start_profile and /stop_profile, which write Chrome traces into DIR")
    group = parser.add_argument_group("profile", "single profile fields (modelled seconds are × time_scale)")
    for name, info in SimProfile.model_fields.items():
        flag = "--" + name.replace("_", "-")
        kind = _base_type(info.annotation)
        default = info.get_default(call_default_factory=True)  # a list field has a factory, not a default
        help_text = f"{info.description} (default: {default!r})"
        # SUPPRESS: only the flags given override the file.
        common: dict[str, Any] = {"dest": name, "default": argparse.SUPPRESS, "help": help_text}
        if kind is bool:
            group.add_argument(flag, action=argparse.BooleanOptionalAction, **common)
        elif kind is typing.Literal:
            group.add_argument(flag, choices=typing.get_args(info.annotation), **common)
        elif kind is list:
            group.add_argument(flag, type=int, nargs="*", metavar="N", **common)
        elif kind is tuple:
            group.add_argument(flag, type=_anchors, metavar="AT_5S,AT_15S", **common)
        else:
            group.add_argument(flag, type=kind, **common)
    return parser


@dataclass(frozen=True)
class SimArgs:
    """A parsed ``h3bench sim`` command line."""

    host: str
    port: int
    profile: SimProfile
    profiler_dir: Path | None = None  # from --profiler-config


def parse_args(argv: list[str] | None = None) -> SimArgs:
    """Parse ``argv``: the profile file (or table) first, then single-field flags over it.

    Raises
    ------
    H3BenchError
        :class:`~h3bench.errors.RunSpecError` for an unreadable or invalid
        profile, :class:`~h3bench.errors.UsageError` for ``--profile-table``
        without ``--profile``. argparse exits 2 on a malformed command line.
    """
    from h3bench.sim.profile import SimProfile, load_profile, parse_profile
    from h3bench.sim.profiler import parse_profiler_config

    options = vars(build_parser().parse_args(argv))
    host, port = options.pop("host"), options.pop("port")
    profiler_config = options.pop("profiler_config")
    try:
        profiler_dir = parse_profiler_config(profiler_config) if profiler_config is not None else None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    path, table = options.pop("profile"), options.pop("profile_table")
    if table is not None and path is None:
        raise UsageError("--profile-table needs --profile")
    if path is not None:
        base = load_profile(path, table)
    elif os.environ.get(PROFILE_ENV):
        # How a campaign hands over the RunSpec's [arms.<name>.sim] table (as JSON).
        base = parse_profile(_json_table(os.environ[PROFILE_ENV]), source=f"${PROFILE_ENV}")
    else:
        base = SimProfile()
    profile = parse_profile({**base.model_dump(), **options}, source="command line") if options else base
    return SimArgs(host, port, profile, profiler_dir)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``) and serve; return the exit code.

    Exit codes: 0 after SIGTERM/SIGINT, 1 for a startup failure (port taken,
    worker startup error, a signal during startup), 2 for an invalid profile
    or command line.
    """
    try:
        args = parse_args(argv)
    except H3BenchError as exc:
        print(f"h3bench sim: error: {exc}", file=sys.stderr)
        return 2

    from h3bench.sim.app import serve

    return serve(args.host, args.port, args.profile, profiler_dir=args.profiler_dir)
