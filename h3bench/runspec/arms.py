"""An arm of a RunSpec: one server configuration, its command line and environment.

An arm is either an **argv arm**, the command written out (for any engine,
the simulator included), or a **vllm arm** (``type = "vllm"``,
:class:`~h3bench.runspec.vllm.VllmArm`), whose command h3bench builds from
vLLM-Omni's options after checking upstream's rules. Both offer the same
launch interface: :meth:`command`, :meth:`launch_env`, ``sim``, ``argv`` and
``expected_attention_backend``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import Discriminator, Field, StrictStr, Tag

from h3bench.runspec.attribution import Attributed, Attribution
from h3bench.runspec.launch import PLACEHOLDERS, Args, Environment, command_from
from h3bench.runspec.vllm import VllmArm

__all__ = ["ARM_TAGS", "BASELINE", "PLACEHOLDERS", "SIM_PROFILE_ENV", "ArgvArm", "Arm", "Attribution"]

BASELINE = "baseline"
# The variable the simulator reads its arm's profile from (h3bench/sim/__init__.py names it too; a test holds both).
SIM_PROFILE_ENV = "H3BENCH_SIM_PROFILE"


class ArgvArm(Attributed):
    """One server configuration, written as its command.

    ``argv`` is the server command; ``{host}``, ``{port}``, ``{model}`` and
    ``{python}`` (this interpreter) are substituted at launch and any other
    braces, such as JSON configs, are literal. ``env`` is added to the
    launcher's environment. ``sim`` is the simulator profile, kept opaque
    here and validated by the simulator.

    A candidate also records why it exists (``hypothesis``, ``source``,
    ``combination_of``: :mod:`h3bench.runspec.attribution`).
    """

    description: Annotated[StrictStr, Field(min_length=1)]
    argv: Args = Field(min_length=1)
    env: Environment = Field(default_factory=dict)
    sim: dict[str, Any] | None = None

    @property
    def expected_attention_backend(self) -> None:
        """h3bench reads the attention backend only from vLLM-Omni's log (a vllm arm)."""
        return None

    def command(self, host: str, port: int, model: str) -> list[str]:
        """The argv with its placeholders substituted."""
        return command_from(self.argv, host, port, model)

    def launch_env(self) -> dict[str, str]:
        """What the launch adds to the launcher's environment: ``env``, and a simulator arm's profile."""
        if self.sim is None:
            return dict(self.env)
        return {**self.env, SIM_PROFILE_ENV: json.dumps(self.sim)}


# The tags appear in pydantic's error locations; the spec's messages leave them out.
_ARGV, _VLLM = "argv arm", "vllm arm"
ARM_TAGS = frozenset({_ARGV, _VLLM})


def _arm_kind(value: Any) -> str | None:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return {None: _ARGV, "vllm": _VLLM}.get(kind)


Arm = Annotated[
    Annotated[ArgvArm, Tag(_ARGV)] | Annotated[VllmArm, Tag(_VLLM)],
    Discriminator(
        _arm_kind,
        custom_error_type="arm_type",
        custom_error_message='unknown arm type: write type = "vllm", or no type for an arm that gives its argv',
    ),
]
