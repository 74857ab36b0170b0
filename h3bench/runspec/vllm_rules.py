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
- quantization with DLO+AllGather: ``model_loader/diffusers_loader.py``;
- quantization methods: ``quantization/factory.py`` (``build_quant_config``,
  run when the stage launches: vLLM-Omni's own builders, else vLLM's
  registry, ``QUANTIZATION_METHODS`` of the vLLM release of the same minor
  version, 0.30.0: ``vllm/model_executor/layers/quantization/__init__.py``).

This module holds the rules as data and parsers; :mod:`h3bench.runspec.vllm`
applies them to an arm when the spec loads. Upstream meets several of them
only in its workers, after they have spawned
and started loading; here they all fail when the spec loads. h3bench adds
its own where the spec itself could disagree with what is launched: the
devices against ``ASCEND_RT_VISIBLE_DEVICES``, flags passed through that a
field builds, and an expected attention backend the arm's own selection
rules out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from h3bench.runspec.base import Problem

__all__ = [
    "ALLGATHER_UNSUPPORTED",
    "ATTENTION_BACKENDS",
    "ATTENTION_LOG_NAMES",
    "BUILT_BY",
    "CACHE_BACKENDS",
    "CHECKED_AGAINST",
    "DEVICE_ENV",
    "DLO",
    "LOGGED_AS",
    "NO_OFFLOAD",
    "QUANT_PREFIX",
    "SUPPORTED_QUANTIZATION_METHODS",
    "TASK_TYPES",
    "VAE_PARALLEL_MODES",
    "OffloadPlan",
    "Problem",
    "invalid_choice",
    "parse_offload_config",
    "quantization_problems",
]

CHECKED_AGAINST = ("vllm-omni 0.30.0: PyPI wheel vllm_omni-0.30.0-py3-none-any.whl, "
                   "sha256 141cb0c7b9c07970e5c92a99aab9696e81682dbfa3d2bfcde359c3c1533385f4; its quantization "
                   "registry from vllm 0.30.0: PyPI wheel vllm-0.30.0-cp38-abi3-manylinux_2_28_x86_64.whl, "
                   "sha256 ef52ee58c410ead0b8afb190838fa4cbcb52075596f67862a03859d984966ac4")
DEVICE_ENV = "ASCEND_RT_VISIBLE_DEVICES"  # vllm-ascend's device control variable
TASK_TYPES = ("auto", "combined", "t2va", "fl2va", "ref2va")
VAE_PARALLEL_MODES = ("tile", "spatial_shard_height", "spatial_shard_width")
CACHE_BACKENDS = ("cache_dit", "tea_cache", "mag_cache", "sea_cache", "step_cache", "stepcache", "step_cache_dit")
# The registry's names, in its order, and the names the backends log (``get_name()``).
ATTENTION_BACKENDS = ("FLASH_ATTN", "TORCH_SDPA", "SAGE_ATTN", "SAGE_ATTN_3", "CUDNN_ATTN", "FLASHINFER_ATTN",
                      "FASTVIDEO_VSA", "FLASH_ATTN_HUB", "FLASH_ATTN_3_HUB", "TRTLLM_ATTN", "RAINFUSION_ATTN")
ATTENTION_LOG_NAMES = tuple("SDPA" if name == "TORCH_SDPA" else name for name in ATTENTION_BACKENDS)
# On NPU the hub kernels fall back to the local FLASH_ATTN (platforms/npu/platform.py).
LOGGED_AS = {"TORCH_SDPA": "SDPA", "FLASH_ATTN_HUB": "FLASH_ATTN", "FLASH_ATTN_3_HUB": "FLASH_ATTN"}

DLO = "distributed_layer_wise"
_OFFLOAD_FIELDS = ("mode", "components", "layer_options", "pin_memory")
_COMPONENTS = ("dit", "text_encoder")
QUANT_PREFIX = {"dit": "transformer", "text_encoder": "text_encoder"}
# Online methods DLO+AllGather cannot transport, with the NPU linear method upstream names.
ALLGATHER_UNSUPPORTED = {"mxfp4": "NPUMxfp4OnlineLinearMethod",
                          "mxfp4_dualscale": "NPUMxfp4DualScaleOnlineLinearMethod"}
# vLLM 0.30.0's registry (QuantizationMethods), in its order; vLLM-Omni warns unless vLLM's minor version is its own.
VLLM_QUANTIZATION_METHODS = (
    "awq", "auto_awq", "fp8", "fbgemm_fp8", "fp_quant", "modelopt", "modelopt_fp4", "modelopt_mxfp8",
    "modelopt_mixed", "auto_gptq", "gptq", "gptq_marlin", "awq_marlin", "humming", "compressed-tensors",
    "experts_int8", "quark", "moe_wna16", "torchao", "inc", "mxfp4", "gpt_oss_mxfp4", "deepseek_v4_fp8", "online",
    "fp8_per_tensor", "fp8_per_block", "fp8_per_channel", "int8_per_channel_weight_only", "nvfp4_per_token", "mxfp8",
)
# vLLM-Omni's own builders (factory.py ``_OVERRIDES``), looked up first.
OMNI_QUANTIZATION_METHODS = ("int8", "bitsandbytes", "mxfp8", "mxfp4", "mxfp4_dualscale", "svdquant", "inc",
                             "auto-round", "auto_round", "torchao", "torchao_float8_weight_only")
# The list upstream's refusal prints (``SUPPORTED_QUANTIZATION_METHODS``): vLLM's, then Omni's new names.
SUPPORTED_QUANTIZATION_METHODS = tuple(dict.fromkeys(VLLM_QUANTIZATION_METHODS + OMNI_QUANTIZATION_METHODS))
_MODELOPT_METHODS = ("modelopt", "modelopt_fp4", "modelopt_mixed")
_MODELOPT_ALGOS = ("FP8", "FP8_PER_CHANNEL_PER_TOKEN", "NVFP4", "MIXED_PRECISION")

# Flags a field builds (or whose rules depend on one): refused in extra_args.
BUILT_BY = {
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


NO_OFFLOAD = OffloadPlan("none")


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
    return OffloadPlan(DLO, frozenset(c for c, (t, _) in settings.items() if t == "allgather"))


# ---- quantization methods (quantization/factory.py)

def _normalized(method: Any) -> str:
    return str(method).lower().replace("-", "_")


def _unknown_method(method: Any) -> str | None:
    """Upstream's refusal of a method name that neither vLLM-Omni's builders nor vLLM's registry knows.

    Upstream normalizes first (lower case, ``-`` to ``_``) and then looks the
    name up as it is, so a name with a hyphen in vLLM's list
    (``compressed-tensors``) is refused too, as upstream refuses it.
    """
    name = _normalized(method)
    if name in OMNI_QUANTIZATION_METHODS or name in VLLM_QUANTIZATION_METHODS:
        return None
    return f"Unknown quantization method: {name!r}. Supported: {list(SUPPORTED_QUANTIZATION_METHODS)!r}"


def _modelopt(config: Mapping[str, Any]) -> bool:
    """Whether upstream resolves this config as a ModelOpt one (its method name is then not looked up)."""
    nested = config.get("quantization")
    algo = str((nested if isinstance(nested, Mapping) else config).get("quant_algo", "")).upper()
    method = config.get("method", config.get("quant_method"))
    producer = config.get("producer")
    modelopt = (method is not None and _normalized(method) in _MODELOPT_METHODS) or (
        isinstance(producer, Mapping) and str(producer.get("name", "")).lower() == "modelopt")
    return modelopt and algo in _MODELOPT_ALGOS


def _method_config(config: Mapping[str, Any], where: tuple[str, ...]) -> list[tuple[tuple[str, ...], str]]:
    if _modelopt(config):
        return []
    method = config.get("method", config.get("quant_method"))
    problem = _unknown_method(method) if method is not None else None
    return [(where, problem)] if problem else []


def quantization_problems(spec: Any) -> list[tuple[tuple[str, ...], str]]:
    """What ``build_quant_config`` refuses in ``--diffusion-quantization-config``: (path inside it, upstream's message).

    A string is one method (``"none"`` is no quantization); a mapping is a
    per-component config (module prefixes, each a method, a config or None)
    when no key names a method and at least one value is None or a config
    with a method, else one config, which must name its method.
    """
    if isinstance(spec, str):
        problem = None if spec.lower() == "none" else _unknown_method(spec)
        return [((), problem)] if problem else []
    if not isinstance(spec, Mapping):
        return []
    values = spec.values()
    per_component = "method" not in spec and "quant_method" not in spec and all(
        isinstance(v, (Mapping, str, type(None))) for v in values) and any(
        v is None or (isinstance(v, Mapping) and ("method" in v or "quant_method" in v)) for v in values)
    if not per_component:
        if _modelopt(spec) or "method" in spec or "quant_method" in spec:
            return _method_config(spec, ())
        return [((), "Dict quantization config must have a 'method' or 'quant_method' key or be a per-component "
                     "config with component prefixes as keys.")]
    found: list[tuple[tuple[str, ...], str]] = []
    for prefix, value in spec.items():
        if isinstance(value, str):
            problem = _unknown_method(value)
            found += [((prefix,), problem)] if problem else []
        elif isinstance(value, Mapping):
            if "method" not in value and "quant_method" not in value:
                found.append(((prefix,), f"Component '{prefix}' config dict must have a 'method' or 'quant_method' "
                              "key"))
            else:
                found += _method_config(value, (prefix,))
    return found
