"""RunSpec: the frozen description of one campaign, validated, hashed and compared only with itself.

:mod:`~h3bench.runspec.spec` holds :class:`RunSpec` and its loading,
:mod:`~h3bench.runspec.tables` the hardware, source, model, inputs,
workload, protocol and gates tables, :mod:`~h3bench.runspec.arms` the arms.
"""

from __future__ import annotations

from h3bench.runspec.arms import BASELINE, PLACEHOLDERS, Arm
from h3bench.runspec.spec import RunSpec, load_runspec, parse_runspec, require_same_spec
from h3bench.runspec.tables import (
    UNPINNED,
    Gates,
    Hardware,
    Hints,
    InputFile,
    Inputs,
    Model,
    Protocol,
    Source,
    Workload,
)

__all__ = [
    "BASELINE",
    "PLACEHOLDERS",
    "UNPINNED",
    "Arm",
    "Gates",
    "Hardware",
    "Hints",
    "InputFile",
    "Inputs",
    "Model",
    "Protocol",
    "RunSpec",
    "Source",
    "Workload",
    "load_runspec",
    "parse_runspec",
    "require_same_spec",
]
