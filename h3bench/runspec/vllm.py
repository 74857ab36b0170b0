"""An arm of type ``vllm``: vLLM-Omni's serving options as fields, built into ``vllm serve MODEL --omni ...``.

The fields are vLLM-Omni's own (``entrypoints/cli/serve.py``): the task type
and the devices, the parallel sizes, the VAE, offload (the legacy DLO flags
and/or ``diffusion_offload_config``), attention, quantization, cache,
profiling, the environment and passthrough args for flags h3bench does not
model. :attr:`VllmArm.argv` is the exact command, with ``{host}``, ``{port}``
and ``{model}`` left for the launch; :meth:`VllmArm.launch_env` adds
``ASCEND_RT_VISIBLE_DEVICES`` from ``device_ids``.

Every rule upstream applies before or during start-up that h3bench can see
from the options is checked when the spec loads
(:mod:`~h3bench.runspec.vllm_rules`), so an invalid arm never launches.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, StrictInt, StrictStr, field_validator, model_validator

from h3bench.runspec.attribution import Attributed
from h3bench.runspec.base import Frozen, raise_at
from h3bench.runspec.launch import Args, DeviceIds, Environment, command_from
from h3bench.runspec.vllm_rules import (
    ATTENTION_LOG_NAMES,
    CACHE_BACKENDS,
    CHECKED_AGAINST,
    DEVICE_ENV,
    TASK_TYPES,
    VAE_PARALLEL_MODES,
    arm_problems,
    invalid_choice,
)

__all__ = ["Attention", "Cache", "LegacyDlo", "Offload", "Profiler", "Vae", "VllmArm"]

_Size = Annotated[StrictInt, Field(ge=1)]
_Json = dict[StrictStr, Any]


def _compact(value: Any) -> str:
    """The JSON text of a config flag: compact, keys in the order written."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class Vae(Frozen):
    """``--vae-parallel-mode``, ``--vae-use-tiling`` and ``--vae-patch-parallel-size``."""

    parallel_mode: StrictStr = "tile"
    use_tiling: StrictBool = False
    patch_parallel_size: _Size = 1

    @field_validator("parallel_mode")
    @classmethod
    def _mode(cls, value: str) -> str:
        invalid_choice("--vae-parallel-mode", value, VAE_PARALLEL_MODES)
        return value


class LegacyDlo(Frozen):
    """``--enable-distributed-layerwise-offload`` with ``--dlo-[no-]use-allgather`` and ``--dlo-resident-layers``."""

    transfer: Literal["allgather", "rank-local"] = "allgather"
    resident_layers: Annotated[StrictInt, Field(ge=0)] = 0


class Offload(Frozen):
    """No offload, the legacy DLO flags, or ``diffusion_offload_config`` (both only where upstream allows it)."""

    dlo: LegacyDlo | None = None
    config: _Json | None = None


class Attention(Frozen):
    """``--diffusion-attention-backend`` or ``--diffusion-attention-config``, and the backend the log must show.

    ``expect_backend`` is the name the workers log for role ``'self'``
    (``SDPA`` for TORCH_SDPA); a block whose server resolved another fails.
    """

    backend: StrictStr | None = None
    config: _Json | None = None
    expect_backend: StrictStr | None = None

    @field_validator("expect_backend")
    @classmethod
    def _log_name(cls, value: str | None) -> str | None:
        if value is not None and value not in ATTENTION_LOG_NAMES:
            hint = " (the workers log TORCH_SDPA as 'SDPA')" if value.upper() == "TORCH_SDPA" else ""
            raise ValueError(f"{value!r} is not a backend name the workers log{hint}; "
                             f"choose from: {', '.join(ATTENTION_LOG_NAMES)}")
        return value


class Cache(Frozen):
    """``--cache-backend`` and ``--cache-config``."""

    backend: StrictStr = "none"
    config: _Json | None = None

    @field_validator("backend")
    @classmethod
    def _known(cls, value: str) -> str:
        if value != "none" and value not in CACHE_BACKENDS:
            # diffusion/cache/selector.py refuses it in every worker; here it is refused before launch.
            raise ValueError(f"Unsupported cache backend: {value}. "
                             "Supported: 'cache_dit', 'tea_cache', 'mag_cache', 'sea_cache', 'step_cache'")
        return value


class Profiler(Frozen):
    """The diffusion pipeline profiler's stage timings, and vLLM's torch profiler (``/start_profile``)."""

    pipeline: StrictBool = False
    torch_dir: Annotated[StrictStr, Field(pattern=r"^/")] | None = None


class VllmArm(Attributed):
    """One vLLM-Omni server configuration, built into its ``vllm serve`` command.

    ``device_ids`` are the physical NPUs the server gets: ``--num-gpus`` is
    their count and ``ASCEND_RT_VISIBLE_DEVICES`` lists them.
    ``extra_args`` pass flags h3bench does not model; a flag that a field
    builds, or whose rules h3bench checks, is refused there. A candidate
    records why it exists (:mod:`h3bench.runspec.attribution`).
    """

    type: Literal["vllm"]
    description: Annotated[StrictStr, Field(min_length=1)]
    launcher: Args = Field(("vllm",), min_length=1)
    task_type: StrictStr
    device_ids: DeviceIds = Field(min_length=1)
    usp: _Size = 1
    ring: _Size = 1
    cfg_parallel_size: _Size = 1
    text_encoder_tp_size: _Size = 1
    vae: Vae = Vae()
    offload: Offload = Offload()
    attention: Attention = Attention()
    quantization: _Json | StrictStr | None = None
    cache: Cache = Cache()
    profiler: Profiler = Profiler()
    env: Environment = Field(default_factory=dict)
    extra_args: Args = ()

    @field_validator("task_type")
    @classmethod
    def _task(cls, value: str) -> str:
        if value.lower() not in TASK_TYPES:
            # MiniMax-H3's checkpoint.py, case-insensitive, in every worker.
            raise ValueError(f"MiniMax-H3 task_type must be one of auto, combined, t2va, fl2va, or ref2va; "
                             f"got {value!r}")
        return value

    @model_validator(mode="after")
    def _upstream_rules(self) -> VllmArm:
        raise_at(arm_problems(self), "VllmArm")
        return self

    # ---- what the launch needs (the same interface as an argv arm)

    @property
    def sim(self) -> None:
        """A vLLM-Omni arm has no simulator profile."""
        return None

    @property
    def expected_attention_backend(self) -> str | None:
        return self.attention.expect_backend

    @property
    def checked_against(self) -> str:
        """The vLLM-Omni release whose argument rules the checks reproduce."""
        return CHECKED_AGAINST

    @property
    def argv(self) -> tuple[str, ...]:
        """The exact ``vllm serve`` command, placeholders not yet substituted."""
        vae, offload, attention, cache, profiler = self.vae, self.offload, self.attention, self.cache, self.profiler
        args = [
            *self.launcher, "serve", "{model}", "--omni", "--host", "{host}", "--port", "{port}",
            "--task-type", self.task_type, "--num-gpus", str(len(self.device_ids)),
            "--usp", str(self.usp), "--ring", str(self.ring), "--cfg-parallel-size", str(self.cfg_parallel_size),
            "--text-encoder-tp-size", str(self.text_encoder_tp_size),
            "--vae-parallel-mode", vae.parallel_mode, *(["--vae-use-tiling"] if vae.use_tiling else []),
            "--vae-patch-parallel-size", str(vae.patch_parallel_size),
        ]
        if profiler.pipeline:
            args.append("--enable-diffusion-pipeline-profiler")
        if profiler.torch_dir is not None:
            args += ["--profiler-config", _compact({"profiler": "torch", "torch_profiler_dir": profiler.torch_dir})]
        if offload.dlo is not None:
            allgather = offload.dlo.transfer == "allgather"
            args += ["--enable-distributed-layerwise-offload",
                     "--dlo-use-allgather" if allgather else "--dlo-no-use-allgather"]
            if offload.dlo.resident_layers:
                args += ["--dlo-resident-layers", str(offload.dlo.resident_layers)]
        if offload.config is not None:
            args += ["--diffusion-offload-config", _compact(offload.config)]
        if attention.backend is not None:
            args += ["--diffusion-attention-backend", attention.backend]
        if attention.config is not None:
            args += ["--diffusion-attention-config", _compact(attention.config)]
        if self.quantization is not None:
            args += ["--diffusion-quantization-config", _compact(self.quantization)]
        if cache.backend != "none":
            args += ["--cache-backend", cache.backend]
        if cache.config is not None:
            args += ["--cache-config", _compact(cache.config)]
        return (*args, *self.extra_args)

    def command(self, host: str, port: int, model: str) -> list[str]:
        """The argv with its placeholders substituted."""
        return command_from(self.argv, host, port, model)

    def launch_env(self) -> dict[str, str]:
        """The declared environment, with ``ASCEND_RT_VISIBLE_DEVICES`` naming ``device_ids``."""
        return {**self.env, DEVICE_ENV: ",".join(map(str, self.device_ids))}
