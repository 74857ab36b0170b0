"""RunSpec: the frozen description of one campaign, validated, hashed and compared only with itself.

:mod:`~h3bench.runspec.spec` holds :class:`RunSpec` and its loading,
:mod:`~h3bench.runspec.tables` the hardware, source, model, inputs,
workload, protocol and gates tables, :mod:`~h3bench.runspec.arms` the arms:
an argv arm, or a vLLM-Omni arm (:mod:`~h3bench.runspec.vllm`) whose command
h3bench builds after checking upstream's rules
(:mod:`~h3bench.runspec.vllm_rules`).
"""

from __future__ import annotations

from h3bench.runspec.arms import BASELINE, PLACEHOLDERS, ArgvArm, Arm
from h3bench.runspec.spec import RunSpec, load_runspec, parse_runspec, require_same_spec
from h3bench.runspec.tables import UNPINNED, Gates, Hardware, Hints, InputFile, Inputs, Model, Protocol, Source, Workload
from h3bench.runspec.vllm import VllmArm
from h3bench.runspec.vllm_rules import CHECKED_AGAINST

__all__ = [
    "BASELINE",
    "CHECKED_AGAINST",
    "PLACEHOLDERS",
    "UNPINNED",
    "ArgvArm",
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
    "VllmArm",
    "Workload",
    "load_runspec",
    "parse_runspec",
    "require_same_spec",
]
