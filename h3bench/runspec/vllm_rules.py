"""The rules vLLM-Omni applies to ``vllm serve MODEL --omni`` options, checked before launch.

Each rule is upstream's, in upstream's words, found by reading the
vLLM-Omni release named in :data:`CHECKED_AGAINST` (the commits the
campaign pins were not available to read):

- offload: ``diffusion/offloader/config.py`` (the ``diffusion_offload_config``
  schema, the legacy DLO flags against a config, resident layers);
- devices: ``diffusion/data.py`` (the device count against the non-data-
  parallel product);
- attention: ``diffusion/data.py`` (the backend flag against the config's
  default) and ``diffusion/attention/backends/registry.py`` (known names);
- MiniMax-H3: ``pipeline_minimax_h3.py`` (CFG parallel, text-encoder TP) and
  ``vae.py`` (VAE mode and patch-parallel size);
- quantization with DLO+AllGather: ``model_loader/diffusers_loader.py``.

Upstream meets several of them only in its workers, after they have spawned
and started loading; here they all fail when the spec loads. h3bench adds
its own where the spec itself could disagree with what is launched: the
devices against ``ASCEND_RT_VISIBLE_DEVICES``, flags passed through that a
field builds, and an expected attention backend the arm's own selection
rules out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from h3bench.runspec.vllm import Offload, VllmArm

__all__ = [
    "ATTENTION_BACKENDS",
    "ATTENTION_LOG_NAMES",
    "CACHE_BACKENDS",
    "CHECKED_AGAINST",
    "DEVICE_ENV",
    "TASK_TYPES",
    "VAE_PARALLEL_MODES",
    "OffloadPlan",
    "arm_problems",
    "invalid_choice",
    "parse_offload_config",
]

CHECKED_AGAINST = ("vllm-omni 0.30.0: PyPI wheel vllm_omni-0.30.0-py3-none-any.whl, "
                   "sha256 141cb0c7b9c07970e5c92a99aab9696e81682dbfa3d2bfcde359c3c1533385f4")
DEVICE_ENV = "ASCEND_RT_VISIBLE_DEVICES"  # vllm-ascend's device control variable
TASK_TYPES = ("auto", "combined", "t2va", "fl2va", "ref2va")
VAE_PARALLEL_MODES = ("tile", "spatial_shard_height", "spatial_shard_width")
CACHE_BACKENDS = ("cache_dit", "tea_cache", "mag_cache", "sea_cache", "step_cache", "stepcache", "step_cache_dit")
# The registry's names, in its order, and the names the backends log (``get_name()``).
ATTENTION_BACKENDS = ("FLASH_ATTN", "TORCH_SDPA", "SAGE_ATTN", "SAGE_ATTN_3", "CUDNN_ATTN", "FLASHINFER_ATTN",
                      "FASTVIDEO_VSA", "FLASH_ATTN_HUB", "FLASH_ATTN_3_HUB", "TRTLLM_ATTN", "RAINFUSION_ATTN")
ATTENTION_LOG_NAMES = tuple("SDPA" if name == "TORCH_SDPA" else name for name in ATTENTION_BACKENDS)
# On NPU the hub kernels fall back to the local FLASH_ATTN (platforms/npu/platform.py).
_LOGGED_AS = {"TORCH_SDPA": "SDPA", "FLASH_ATTN_HUB": "FLASH_ATTN", "FLASH_ATTN_3_HUB": "FLASH_ATTN"}

_DLO = "distributed_layer_wise"
_OFFLOAD_FIELDS = ("mode", "components", "layer_options", "pin_memory")
_COMPONENTS = ("dit", "text_encoder")
_QUANT_PREFIX = {"dit": "transformer", "text_encoder": "text_encoder"}
# Online methods DLO+AllGather cannot transport, with the NPU linear method upstream names.
_ALLGATHER_UNSUPPORTED = {"mxfp4": "NPUMxfp4OnlineLinearMethod",
                          "mxfp4_dualscale": "NPUMxfp4DualScaleOnlineLinearMethod"}
# Flags a field builds (or whose rules depend on one): refused in extra_args.
_BUILT_BY = {
    **dict.fromkeys(("--omni", "--host", "--port"), "the command itself"),
    "--task-type": "task_type", "--num-gpus": "device_ids",
    "--usp": "usp", "--ulysses-degree": "usp", "--ring": "ring", "--ring-degree": "ring",
    "--cfg-parallel-size": "cfg_parallel_size", "--text-encoder-tp-size": "text_encoder_tp_size",
    "--vae-parallel-mode": "vae.parallel_mode", "--vae-use-tiling": "vae.use_tiling",
    "--vae-patch-parallel-size": "vae.patch_parallel_size",
    "--enable-diffusion-pipeline-profiler": "profiler.pipeline", "--profiler-config": "profiler.torch_dir",
    **dict.fromkeys(("--enable-distributed-layerwise-offload", "--dlo-use-allgather", "--dlo-no-use-allgather",
                     "--dlo-resident-layers"), "offload.dlo"),
    "--diffusion-offload-config": "offload.config",
    "--enable-layerwise-offload": "offload.config (mode 'layer')",
    "--enable-cpu-offload": "offload.config (mode 'module')",
    "--diffusion-attention-backend": "attention.backend",
    **dict.fromkeys(("--diffusion-attention-config", "-dac"), "attention.config"),
    "--diffusion-quantization-config": "quantization",
    "--cache-backend": "cache.backend", "--cache-config": "cache.config",
}

Problem = tuple[tuple[str, ...], str, Any]


def invalid_choice(flag: str, value: str, choices: tuple[str, ...]) -> None:
    """Refuse ``value`` as argparse refuses a choice flag (upstream's parser, before anything starts)."""
    if value not in choices:
        raise ValueError(f"argument {flag}: invalid choice: {value!r} (choose from {', '.join(map(repr, choices))})")


# ---- offload (diffusion/offloader/config.py)

@dataclass(frozen=True)
class OffloadPlan:
    """What the offload options resolve to: upstream's strategy, and the components whose weights AllGather moves."""

    strategy: str  # "none", "model_level", "layer_wise" or "distributed_layer_wise"
    allgather: frozenset[str] = frozenset()


_NO_OFFLOAD = OffloadPlan("none")


def _one_of(value: Any, choices: tuple[str, ...], label: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{label} must be a string, got {type(value).__name__}")
    if value not in choices:
        raise ValueError(f"Unknown {label} {value!r}; choose from: {', '.join(choices)}")
    return value


def _components(value: Any) -> frozenset[str]:
    if isinstance(value, (str, Mapping)) or not isinstance(value, (list, tuple)):
        raise TypeError("diffusion_offload_config.components must be a non-empty list of component names")
    if not all(isinstance(item, str) for item in value):
        raise TypeError("offload component entries must be strings")
    if not value:
        raise ValueError("offload components must not be empty")
    unknown = sorted(set(value) - set(_COMPONENTS))
    if unknown:
        raise ValueError(f"Unknown diffusion offload component(s): {', '.join(unknown)}; "
                         f"choose from: {', '.join(_COMPONENTS)}")
    return frozenset(value)


def _layer_settings(component: str, value: Any) -> tuple[str | None, int]:
    """One component's ``(weight_transfer, resident_layers)``; no transfer means rank-local."""
    if not isinstance(value, Mapping):
        raise TypeError(f"diffusion_offload_config.layer_options[{component!r}] must be a mapping, "
                        f"got {type(value).__name__}")
    unknown = sorted(set(value) - {"weight_transfer", "resident_layers"})
    if unknown:
        raise ValueError(f"Unknown diffusion offload setting(s) for {component}: {', '.join(unknown)}; "
                         "choose from: weight_transfer, resident_layers")
    transfer = value.get("weight_transfer")
    if transfer is not None:
        transfer = _one_of(transfer, ("allgather", "rank-local"), "offload transfer")
    resident = value.get("resident_layers", 0)
    if type(resident) is not int or resident < 0:
        raise ValueError(f"resident_layers for {component} must be a non-negative integer")
    if resident and component != "dit":
        raise ValueError("resident_layers currently supports only the 'dit' component")
    return transfer, resident


def parse_offload_config(config: Mapping[str, Any]) -> OffloadPlan:
    """Resolve a ``diffusion_offload_config`` as upstream does; TypeError or ValueError with upstream's message."""
    unknown = sorted(set(config) - set(_OFFLOAD_FIELDS))
    if unknown:
        raise ValueError(f"Unknown diffusion_offload_config field(s): {', '.join(unknown)}; "
                         f"choose from: {', '.join(_OFFLOAD_FIELDS)}")
    for required in ("mode", "components"):
        if required not in config:
            raise ValueError(f"diffusion_offload_config requires {required!r}")
    mode = _one_of(config["mode"], ("module", "layer"), "diffusion offload mode")
    selected = _components(config["components"])
    options = config.get("layer_options", {})
    if not isinstance(options, Mapping):
        raise TypeError("diffusion_offload_config.layer_options must be a mapping")
    unselected = sorted(set(options) - selected)
    if unselected:
        raise ValueError("diffusion_offload_config.layer_options requires selecting the same component(s): "
                         + ", ".join(unselected))
    settings = {c: _layer_settings(c, options.get(c, {})) for c in _COMPONENTS if c in selected}
    pin_memory = config.get("pin_memory")
    if pin_memory is not None and not isinstance(pin_memory, bool):
        raise TypeError("diffusion_offload_config.pin_memory must be a bool")
    if mode == "module":
        if options:
            raise ValueError("diffusion_offload_config.layer_options requires mode='layer'; "
                             f"configured for: {', '.join(sorted(options))}")
        return OffloadPlan("model_level")
    transfer, resident = settings.get("dit", (None, 0))
    if resident and transfer == "allgather":
        raise ValueError("resident_layers requires dit.weight_transfer='rank-local'")
    if not any(t == "allgather" or r for t, r in settings.values()):
        return OffloadPlan("layer_wise")
    return OffloadPlan(_DLO, frozenset(c for c, (t, _) in settings.items() if t == "allgather"))


def _offload(offload: Offload) -> tuple[list[Problem], OffloadPlan]:
    dlo, config = offload.dlo, offload.config
    if config is None:
        if dlo is None:
            return [], _NO_OFFLOAD
        problems: list[Problem] = []
        if dlo.resident_layers and dlo.transfer == "allgather":
            problems.append((("offload", "dlo", "resident_layers"), "dlo_resident_layers requires the DiT DLO "
                             "transfer to be rank-local; set dlo_use_allgather=False", dlo.resident_layers))
        return problems, OffloadPlan(_DLO, frozenset({"dit"}) if dlo.transfer == "allgather" else frozenset())
    try:
        plan = parse_offload_config(config)
    except (TypeError, ValueError) as exc:
        return [(("offload", "config"), str(exc), None)], _NO_OFFLOAD
    if dlo is None:
        return [], plan
    # A config leaves the legacy tuning at its defaults; an explicit --dlo-use-allgather is that default.
    tuned = [name for name, changed in (("dlo_use_allgather", dlo.transfer != "allgather"),
                                        ("dlo_resident_layers", dlo.resident_layers > 0)) if changed]
    if tuned:
        message = "diffusion_offload_config cannot be combined with legacy DLO option(s): " + ", ".join(tuned)
        return [(("offload", "dlo"), message, None)], plan
    if plan.strategy != _DLO:
        message = (f"diffusion_offload_config cannot be combined with legacy enable_*_offload flags (the config "
                   f"resolves to {plan.strategy}, the flag to {_DLO})")
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
        logged = _LOGGED_AS.get(chosen.upper(), chosen.upper())
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
            prefix = _QUANT_PREFIX[component]
            return _method_name(quantization[prefix] if prefix in quantization else quantization.get("default"))
    return _method_name(quantization)


def _quantization(arm: VllmArm, plan: OffloadPlan, group: int) -> list[Problem]:
    if arm.quantization is None or plan.strategy != _DLO or group <= 1:
        return []
    methods = {_ALLGATHER_UNSUPPORTED[method] for component in plan.allgather
               if (method := _online_method(arm.quantization, component)) in _ALLGATHER_UNSUPPORTED}
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
        if flag in _BUILT_BY:
            problems.append((("extra_args",), f"{flag} is built from {_BUILT_BY[flag]}: set that field instead", arg))
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
