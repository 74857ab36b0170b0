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
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, StrictInt, StrictStr, field_validator, model_validator

from h3bench.runspec.attribution import Attributed
from h3bench.runspec.base import Frozen, raise_at
from h3bench.runspec.launch import Args, DeviceIds, Environment, command_from
from h3bench.runspec.vllm_rules import (
    ALLGATHER_UNSUPPORTED,
    ATTENTION_BACKENDS,
    ATTENTION_LOG_NAMES,
    BUILT_BY,
    CACHE_BACKENDS,
    CHECKED_AGAINST,
    DEVICE_ENV,
    DLO,
    LOGGED_AS,
    NO_OFFLOAD,
    QUANT_PREFIX,
    TASK_TYPES,
    VAE_PARALLEL_MODES,
    OffloadPlan,
    Problem,
    invalid_choice,
    parse_offload_config,
    quantization_problems,
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


# -- upstream's rules (h3bench.runspec.vllm_rules), applied to one arm ----------------------------


def _offload(offload: Offload) -> tuple[list[Problem], OffloadPlan]:
    dlo, config = offload.dlo, offload.config
    if config is None:
        if dlo is None:
            return [], NO_OFFLOAD
        problems: list[Problem] = []
        if dlo.resident_layers and dlo.transfer == "allgather":
            problems.append((("offload", "dlo", "resident_layers"), "dlo_resident_layers requires the DiT DLO "
                             "transfer to be rank-local; set dlo_use_allgather=False", dlo.resident_layers))
        return problems, OffloadPlan(DLO, frozenset({"dit"}) if dlo.transfer == "allgather" else frozenset())
    try:
        plan = parse_offload_config(config)
    except (TypeError, ValueError) as exc:
        return [(("offload", "config"), str(exc), None)], NO_OFFLOAD
    if dlo is None:
        return [], plan
    # A config leaves the legacy tuning at its defaults; an explicit --dlo-use-allgather is that default.
    tuned = [name for name, changed in (("dlo_use_allgather", dlo.transfer != "allgather"),
                                        ("dlo_resident_layers", dlo.resident_layers > 0)) if changed]
    if tuned:
        message = "diffusion_offload_config cannot be combined with legacy DLO option(s): " + ", ".join(tuned)
        return [(("offload", "dlo"), message, None)], plan
    if plan.strategy != DLO:
        message = (f"diffusion_offload_config cannot be combined with legacy enable_*_offload flags (the config "
                   f"resolves to {plan.strategy}, the flag to {DLO})")
        return [(("offload",), message, None)], plan
    return [], plan


# ---- attention (diffusion/data.py, attention/backends/registry.py)

def _backend_of(spec: Any) -> str | None:
    """The backend an attention spec names (a string or a table with ``backend``); None for "auto"."""
    name = spec.get("backend") if isinstance(spec, Mapping) else spec
    return name if isinstance(name, str) and name.lower() != "auto" else None


def _attention(arm: VllmArm) -> list[Problem]:
    attention = arm.attention
    config = attention.config or {}
    flag = _backend_of(attention.backend)
    default = _backend_of(config.get("default"))
    roles = config.get("per_role")
    per_role: Mapping[str, Any] = roles if isinstance(roles, Mapping) else {}
    problems: list[Problem] = []
    if attention.backend is not None and default is not None:
        problems.append((("attention", "backend"), "--diffusion-attention-backend is mutually exclusive with "
                         "--diffusion-attention-config.default.backend.", attention.backend))
    named = {("attention", "backend"): flag, ("attention", "config", "default"): default}
    named.update({("attention", "config", "per_role", role): _backend_of(spec) for role, spec in per_role.items()})
    for loc, name in named.items():
        if name is not None and name.upper() not in ATTENTION_BACKENDS:
            problems.append((loc, f"Unknown diffusion attention backend: '{name.upper()}'. "
                             f"Valid options are: {', '.join(ATTENTION_BACKENDS)}", None))
    chosen = _backend_of(per_role.get("self")) or default or flag  # what role 'self' resolves to, if explicit
    expected = attention.expect_backend
    if not problems and chosen is not None and expected is not None:
        logged = LOGGED_AS.get(chosen.upper(), chosen.upper())
        if logged != expected:
            problems.append((("attention", "expect_backend"), f"the arm selects {chosen} for role 'self', which the "
                             f"workers log as {logged!r}, so {expected!r} can never match", expected))
    return problems


# ---- quantization with DLO+AllGather (model_loader/diffusers_loader.py, quantization/factory.py)

def _method_name(spec: Any) -> str | None:
    if isinstance(spec, str):
        return None if spec.lower() == "none" else spec.lower()
    if isinstance(spec, Mapping):
        method = spec.get("method", spec.get("quant_method"))
        return method.lower() if isinstance(method, str) else None
    return None


def _online_method(quantization: Any, component: str) -> str | None:
    """The quantization method that applies to ``component``: global, or per module prefix with a default."""
    if isinstance(quantization, Mapping) and "method" not in quantization and "quant_method" not in quantization:
        values = quantization.values()
        if all(isinstance(v, (Mapping, str, type(None))) for v in values) and any(
            v is None or (isinstance(v, Mapping) and ("method" in v or "quant_method" in v)) for v in values
        ):
            prefix = QUANT_PREFIX[component]
            return _method_name(quantization[prefix] if prefix in quantization else quantization.get("default"))
    return _method_name(quantization)


def _quantization(arm: VllmArm, plan: OffloadPlan, group: int) -> list[Problem]:
    if arm.quantization is not None:
        unknown = quantization_problems(arm.quantization)
        if unknown:  # refused when the stage launches, before the AllGather rule could be reached
            return [(("quantization", *where), message, arm.quantization) for where, message in unknown]
    if arm.quantization is None or plan.strategy != DLO or group <= 1:
        return []
    methods = {ALLGATHER_UNSUPPORTED[method] for component in plan.allgather
               if (method := _online_method(arm.quantization, component)) in ALLGATHER_UNSUPPORTED}
    if not methods:
        return []
    message = ("DLO+AllGather supports online quantization only for per-tensor FP8, INT8, and MXFP8 linears "
               "(host-loaded unquantized fallback layers are also allowed); unsupported online methods: "
               f"{', '.join(sorted(methods))}. Use rank-local transfer for the affected component or disable "
               "online quantization.")
    return [(("quantization",), message, None)]


# ---- devices, passthrough, MiniMax-H3

def _devices(arm: VllmArm, world: int, non_dp: int) -> list[Problem]:
    problems: list[Problem] = []
    if world % non_dp:
        problems.append((("device_ids",), f"WORLD size ({world}) must be divisible by non-DP parallel size "
                         f"({non_dp}): usp {arm.usp} x ring {arm.ring} x cfg_parallel_size {arm.cfg_parallel_size} "
                         f"on {world} device(s)", None))
    listed = arm.env.get(DEVICE_ENV)
    ids = ",".join(map(str, arm.device_ids))
    if listed is not None and [part.strip() for part in listed.split(",") if part.strip()] != ids.split(","):
        problems.append((("env", DEVICE_ENV), f"must list the arm's device_ids ({ids}), the devices --num-gpus "
                         f"{world} counts; h3bench sets it from device_ids, so it can be left out", listed))
    for arg in arm.extra_args:
        flag = arg.split("=", 1)[0]
        if flag in BUILT_BY:
            problems.append((("extra_args",), f"{flag} is built from {BUILT_BY[flag]}: set that field instead", arg))
    return problems


def _minimax_h3(arm: VllmArm, world: int) -> list[Problem]:
    """The checks MiniMax-H3's pipeline and VAE make in every worker; the DiT group is the whole world."""
    problems: list[Problem] = []
    if arm.cfg_parallel_size != 1:
        problems.append((("cfg_parallel_size",), "MiniMax-H3 is CFG-distilled and has no negative branch; "
                         "cfg_parallel_size must be 1", arm.cfg_parallel_size))
    tp = arm.text_encoder_tp_size
    if tp > world:
        problems.append((("text_encoder_tp_size",),
                         f"text_encoder_tp_size must not exceed the DiT group size ({world}), got {tp}", None))
    elif 64 % tp or 8 % tp:
        problems.append((("text_encoder_tp_size",), "text_encoder_tp_size must divide both Qwen3-VL "
                         f"num_attention_heads (64) and num_key_value_heads (8), got {tp}", None))
    vae = arm.vae
    if vae.parallel_mode != "tile":
        problems.append((("vae", "parallel_mode"), "MiniMax H3 VAE supports its native tile parallel mode only, "
                         f"got {vae.parallel_mode!r}", None))
    if vae.patch_parallel_size not in (1, world):
        problems.append((("vae", "patch_parallel_size"), "MiniMax H3 native VAE patch parallelism currently "
                         "requires vae_patch_parallel_size=1 or the full DiT group size "
                         f"({world}), got {vae.patch_parallel_size}", None))
    return problems


def arm_problems(arm: VllmArm) -> list[Problem]:
    """Every rule the arm breaks, each at its field path (relative to the arm) with upstream's message."""
    world = len(arm.device_ids)
    sequence_parallel = arm.usp * arm.ring
    non_dp = sequence_parallel * arm.cfg_parallel_size
    data_parallel = world // non_dp if world % non_dp == 0 else 1
    offload_problems, plan = _offload(arm.offload)
    return [
        *_devices(arm, world, non_dp),
        *offload_problems,
        *_attention(arm),
        *_minimax_h3(arm, world),
        *_quantization(arm, plan, data_parallel if data_parallel > 1 else sequence_parallel),
    ]
