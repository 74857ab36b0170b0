"""The ``[bisect]`` table: the engine commits between a good and a bad engine, each an arm of its own.

A bisect spec is a campaign spec of the good engine (``arms.baseline``)
against the bad one (its one candidate arm), and its ``[bisect]`` table
lists the ordered first-parent commits strictly between them, oldest
first. Each commit is an arm built from the baseline's:

- **vLLM arms**: ``commit`` is the engine commit (40 hexadecimal digits)
  and ``image_digest`` its image; the arm is the baseline's options with
  ``launcher`` = ``[bisect].launcher`` where ``{image}`` becomes
  ``<[bisect].image>@<digest>`` (for example ``docker run ... {image} vllm``);
  ``good`` and ``bad`` give the endpoints' commits and digests the same way;
- **simulator arms**: ``commit`` is a label and ``sim`` the commit's profile,
  written as the fields that differ from the good engine's
  (``arms.baseline.sim``); the bad engine's profile is its arm's.

``on`` says what regressed: ``speed`` (the E2E step) or ``quality`` (the
gates). ``posterior`` is the mass at which one commit is named,
``campaign_pairs`` the last look of the verify and the confirm campaigns (their
looks after every pair from 2, at the spec's levels),
``budget_device_h`` the device-hours the search may spend (device-hours as
the plan counts them: wall hours times the arm's devices), ``level``,
``min_pairs`` and ``max_pairs`` the probe test's (:mod:`h3bench.bisect.probe`),
``weight`` a commit's prior weight (default 1: uniform), ``size`` the
smallest change to find as a ratio (1.05: 5 %; ``h3bench plan`` prices the
search at it and says when it is out of reach). ``image_s`` is the
hint of what pulling or building one commit's image costs a host (the
server start and stop are ``[hints]``' ``startup_s`` and ``shutdown_s``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, StrictFloat, StrictInt, StrictStr, model_validator

from h3bench.runspec.base import Frozen, Problem, raise_at

__all__ = ["IMAGE_PLACEHOLDER", "Bisect", "BisectCommit", "arm_label"]

IMAGE_PLACEHOLDER = "{image}"
_DIGEST = r"^sha256:[0-9a-f]{64}$"


class BisectCommit(Frozen):
    """One engine of the range: its commit, and its image (vLLM) or its profile's changes (simulator)."""

    commit: Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
    image_digest: Annotated[StrictStr, Field(pattern=_DIGEST)] | None = None
    sim: dict[str, Any] | None = None
    weight: Annotated[StrictFloat, Field(gt=0)] = 1.0
    note: StrictStr = ""  # what the commit changed, for the report (its subject line)


class Bisect(Frozen):
    """The range to search and how; see the module docstring."""

    good: BisectCommit
    bad: BisectCommit
    commits: tuple[BisectCommit, ...] = Field(min_length=1)
    on: Literal["speed", "quality"] = "speed"
    posterior: Annotated[StrictFloat, Field(gt=0.5, lt=1)] = 0.95
    budget_device_h: Annotated[StrictFloat, Field(gt=0)] | None = None
    level: Annotated[StrictFloat, Field(gt=0, lt=0.5)] = 0.1
    min_pairs: Annotated[StrictInt, Field(ge=1)] = 1
    max_pairs: Annotated[StrictInt, Field(ge=1, le=32)] = 8
    campaign_pairs: Annotated[StrictInt, Field(ge=3, le=32)] = 16  # the verify's and the confirm's last look
    image: StrictStr | None = None  # vLLM: the repository the digests are of
    launcher: tuple[StrictStr, ...] | None = None  # vLLM: how to run an image's engine; contains {image}
    image_s: Annotated[StrictFloat, Field(ge=0)] = 0.0  # hint: pulling or building one commit's image on a host
    size: Annotated[StrictFloat, Field(gt=1, le=4)] | None = None  # the smallest change to find, as a ratio

    @model_validator(mode="after")
    def _range(self) -> Bisect:
        problems: list[Problem] = []
        if self.max_pairs < self.min_pairs:
            problems.append((("max_pairs",), f"must be at least min_pairs ({self.min_pairs})", self.max_pairs))
        seen: dict[str, str] = {}
        for where, entry in self.entries():
            if entry.commit in seen:
                problems.append(((*where, "commit"), f"{entry.commit!r} is also {seen[entry.commit]}", entry.commit))
            seen.setdefault(entry.commit, ".".join(where))
        if self.launcher is not None and not any(IMAGE_PLACEHOLDER in arg for arg in self.launcher):
            problems.append((("launcher",), f"must contain {IMAGE_PLACEHOLDER}, where each commit's image goes",
                             list(self.launcher)))
        raise_at(problems, "Bisect")
        return self

    def entries(self) -> list[tuple[tuple[str, ...], BisectCommit]]:
        """Every engine with its field path: good, the commits in order, bad."""
        return [(("good",), self.good), *((("commits", str(i)), c) for i, c in enumerate(self.commits)),
                (("bad",), self.bad)]

    @property
    def range(self) -> tuple[BisectCommit, ...]:
        """The culprit's candidates in order: every commit after the good engine, the bad one last."""
        return (*self.commits, self.bad)

    def image_of(self, entry: BisectCommit) -> str:
        return f"{self.image}@{entry.image_digest}"

    def launcher_of(self, entry: BisectCommit) -> tuple[str, ...]:
        """The launcher of a vLLM commit's engine: ``launcher`` with its image in place of ``{image}``."""
        assert self.launcher is not None
        return tuple(arg.replace(IMAGE_PLACEHOLDER, self.image_of(entry)) for arg in self.launcher)


def arm_label(index: int, entry: BisectCommit) -> str:
    """A commit's arm name: ``c<position>_<commit>`` in the arm names' alphabet (position 0 is the good engine)."""
    short = re.sub(r"[^a-z0-9_]", "_", entry.commit.lower())[:12]
    return f"c{index:02d}_{short}"
