"""One table of ``vllm serve MODEL --omni`` option combinations, each with what vLLM-Omni 0.30.0 does with it.

Every case changes the base command of MiniMax-H3 on eight 910B1 NPUs
(:data:`BASE_FLAGS`, the base serving of the campaign) by the flags it names,
appended (argparse keeps the last value). The outcome is upstream's, read
from the 0.30.0 wheel (``entrypoints/cli/serve.py``,
``diffusion/offloader/config.py``, ``diffusion/data.py``,
``engine/stage_init_utils.py``, MiniMax-H3's ``pipeline_minimax_h3.py`` and
``vae.py``, ``model_loader/diffusers_loader.py``, ``diffusion/cache/selector.py``):
accepted, or refused at a stage with upstream's message:

- ``A``: the parser, before anything starts (exit status 2);
- ``C``: the API server's config resolution, before any worker (exit 1);
- ``D``: the stage launch, still before any worker (exit 1);
- ``E``: every worker, after spawning, while it builds or loads the model.

``fields`` are the same options as a vllm arm of a RunSpec
(:class:`h3bench.runspec.VllmArm`), each replacing its key of
:data:`BASE_FIELDS`; ``None``
where the arm cannot say it (bad JSON, unknown flags, legacy flags the arm
writes as ``offload.config``). ``ours`` is h3bench's outcome where it differs
from upstream's on purpose (stricter); ``where`` is the arm's field that
h3bench's refusal names. ``env`` is the fake's environment beyond
``ASCEND_RT_VISIBLE_DEVICES=0,...,7``.

tests_unit/runspec/test_vllm_arms.py runs every case through h3bench's checks and
through the fake ``vllm`` (tests_unit/fakes/vllm), which models upstream on
its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BASE_FIELDS", "BASE_FLAGS", "CASES", "Case", "Outcome"]

BASE_FLAGS = (
    "--task-type", "ref2va", "--num-gpus", "8", "--usp", "8", "--ring", "1", "--cfg-parallel-size", "1",
    "--text-encoder-tp-size", "8", "--vae-parallel-mode", "tile", "--vae-use-tiling", "--vae-patch-parallel-size", "8",
)
BASE_FIELDS: dict[str, Any] = {
    "type": "vllm",
    "description": "one case of the option table",
    "task_type": "ref2va",
    "device_ids": list(range(8)),
    "usp": 8,
    "ring": 1,
    "text_encoder_tp_size": 8,
    "vae": {"parallel_mode": "tile", "use_tiling": True, "patch_parallel_size": 8},
}


@dataclass(frozen=True)
class Outcome:
    """Accepted (``stage`` None), or refused at ``stage`` with a message that contains ``message``.

    ``error`` is the exception type upstream raises at stages C to E.
    """

    stage: str | None = None
    message: str = ""
    error: str = "ValueError"

    @property
    def accepted(self) -> bool:
        return self.stage is None


ACCEPT = Outcome()


@dataclass(frozen=True)
class Case:
    id: str
    flags: tuple[str, ...]
    upstream: Outcome
    fields: dict[str, Any] | None
    where: str = ""
    ours: Outcome | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def combination(self) -> str:
        return " ".join(self.flags) + "".join(f" with {k}={v}" for k, v in self.env.items())


def js(value: Any) -> str:
    """A JSON flag value as the arm builds it: compact, keys in order."""
    return json.dumps(value, separators=(",", ":"))


DLO = ("--enable-distributed-layerwise-offload", "--dlo-use-allgather")
DLO_RANK_LOCAL = ("--enable-distributed-layerwise-offload", "--dlo-no-use-allgather")
LAYER = {"mode": "layer", "components": ["dit"]}  # rank-local by default: plain layer-wise, not DLO
MODULE = {"mode": "module", "components": ["dit"]}


def dit(**options: Any) -> dict[str, Any]:
    return {"mode": "layer", "components": ["dit"], "layer_options": {"dit": options}}


ALLGATHER = dit(weight_transfer="allgather")
TE_ALLGATHER = {"text_encoder": {"weight_transfer": "allgather"}}
TE_RESIDENT = {"mode": "layer", "components": ["dit", "text_encoder"],
               "layer_options": {"text_encoder": {"weight_transfer": "rank-local", "resident_layers": 2}}}
BOTH_ALLGATHER = {"mode": "layer", "components": ["dit", "text_encoder"], "pin_memory": True,
                  "layer_options": {"dit": {"weight_transfer": "allgather"}, **TE_ALLGATHER}}
RANK_LOCAL = dit(weight_transfer="rank-local")
BACKENDS = ("FLASH_ATTN, TORCH_SDPA, SAGE_ATTN, SAGE_ATTN_3, CUDNN_ATTN, FLASHINFER_ATTN, FASTVIDEO_VSA, "
            "FLASH_ATTN_HUB, FLASH_ATTN_3_HUB, TRTLLM_ATTN, RAINFUSION_ATTN")
MXFP4 = {"transformer": {"method": "mxfp4"}}
LEGACY_FLAGS = "diffusion_offload_config cannot be combined with legacy enable_*_offload flags"
LEGACY_DLO = "diffusion_offload_config cannot be combined with legacy DLO option(s): "
RESIDENT_ALLGATHER = "dlo_resident_layers requires the DiT DLO transfer to be rank-local; set dlo_use_allgather=False"
MUTUAL = "--diffusion-attention-backend is mutually exclusive with --diffusion-attention-config.default.backend."
DLO_QUANT = ("DLO+AllGather supports online quantization only for per-tensor FP8, INT8, and MXFP8 linears "
             "(host-loaded unquantized fallback layers are also allowed); unsupported online methods: "
             "NPUMxfp4OnlineLinearMethod. Use rank-local transfer for the affected component or disable "
             "online quantization.")
VAE_SIZE = ("MiniMax H3 native VAE patch parallelism currently requires vae_patch_parallel_size=1 or the full "
            "DiT group size (8), got 4")
DEVICES = "must list the arm's device_ids"


def refuse(stage: str, message: str, error: str = "ValueError") -> Outcome:
    return Outcome(stage, message, error)


def dlo(**options: Any) -> dict[str, Any]:
    return {"offload": {"dlo": options}}


def quant(config: Any, offload: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"quantization": config, **(offload or {})}


CASES = (
    # ---- offload (diffusion/offloader/config.py)
    Case("dlo-flag", DLO, ACCEPT, dlo()),
    Case("dlo-rank-local", DLO_RANK_LOCAL, ACCEPT, dlo(transfer="rank-local")),
    Case("dlo-flag+matching-config", (*DLO, "--diffusion-offload-config", js(ALLGATHER)), ACCEPT,
         {"offload": {"dlo": {}, "config": ALLGATHER}}),
    Case("layerwise-flag+layer-config", ("--enable-layerwise-offload", "--diffusion-offload-config", js(LAYER)),
         ACCEPT, None),
    Case("dlo-flag+layer-config", (*DLO, "--diffusion-offload-config", js(LAYER)), refuse("D", LEGACY_FLAGS),
         {"offload": {"dlo": {}, "config": LAYER}}, "offload"),
    Case("dlo-flag+module-config", (*DLO, "--diffusion-offload-config", js(MODULE)), refuse("D", LEGACY_FLAGS),
         {"offload": {"dlo": {}, "config": MODULE}}, "offload"),
    Case("dlo-rank-local+config", (*DLO_RANK_LOCAL, "--diffusion-offload-config", js(RANK_LOCAL)),
         refuse("D", LEGACY_DLO + "dlo_use_allgather"),
         {"offload": {"dlo": {"transfer": "rank-local"}, "config": RANK_LOCAL}}, "offload.dlo"),
    Case("dlo-rank-local-resident+config",
         (*DLO_RANK_LOCAL, "--dlo-resident-layers", "8", "--diffusion-offload-config", js(RANK_LOCAL)),
         refuse("D", LEGACY_DLO + "dlo_use_allgather, dlo_resident_layers"),
         {"offload": {"dlo": {"transfer": "rank-local", "resident_layers": 8}, "config": RANK_LOCAL}}, "offload.dlo"),
    Case("config-unknown-field", ("--diffusion-offload-config", js({**LAYER, "foo": 1})),
         refuse("C", "Unknown diffusion_offload_config field(s): foo; choose from: mode, components, layer_options, "
                "pin_memory"), {"offload": {"config": {**LAYER, "foo": 1}}}, "offload.config"),
    Case("config-unknown-setting", ("--diffusion-offload-config", js(dit(bar=1))),
         refuse("C", "Unknown diffusion offload setting(s) for dit: bar; choose from: weight_transfer, "
                "resident_layers"), {"offload": {"config": dit(bar=1)}}, "offload.config"),
    Case("config-unknown-component", ("--diffusion-offload-config", js({"mode": "layer", "components": ["vae"]})),
         refuse("C", "Unknown diffusion offload component(s): vae; choose from: dit, text_encoder"),
         {"offload": {"config": {"mode": "layer", "components": ["vae"]}}}, "offload.config"),
    Case("config-bad-transfer", ("--diffusion-offload-config", js(dit(weight_transfer="all_gather"))),
         refuse("C", "Unknown offload transfer 'all_gather'; choose from: allgather, rank-local"),
         {"offload": {"config": dit(weight_transfer="all_gather")}}, "offload.config"),
    Case("config-no-mode", ("--diffusion-offload-config", js({"components": ["dit"]})),
         refuse("C", "diffusion_offload_config requires 'mode'"),
         {"offload": {"config": {"components": ["dit"]}}}, "offload.config"),
    Case("config-module-with-layer-options",
         ("--diffusion-offload-config", js({**MODULE, "layer_options": {"dit": {}}})),
         refuse("C", "diffusion_offload_config.layer_options requires mode='layer'; configured for: dit"),
         {"offload": {"config": {**MODULE, "layer_options": {"dit": {}}}}}, "offload.config"),
    Case("config-components-a-string", ("--diffusion-offload-config", js({"mode": "layer", "components": "dit"})),
         refuse("C", "diffusion_offload_config.components must be a non-empty list of component names", "TypeError"),
         {"offload": {"config": {"mode": "layer", "components": "dit"}}}, "offload.config"),
    Case("config-components-empty", ("--diffusion-offload-config", js({"mode": "layer", "components": []})),
         refuse("C", "offload components must not be empty"),
         {"offload": {"config": {"mode": "layer", "components": []}}}, "offload.config"),
    Case("config-options-for-unselected", ("--diffusion-offload-config", js({**LAYER, "layer_options": TE_ALLGATHER})),
         refuse("C", "diffusion_offload_config.layer_options requires selecting the same component(s): text_encoder"),
         {"offload": {"config": {**LAYER, "layer_options": TE_ALLGATHER}}}, "offload.config"),
    Case("config-resident-text-encoder", ("--diffusion-offload-config", js(TE_RESIDENT)),
         refuse("C", "resident_layers currently supports only the 'dit' component"),
         {"offload": {"config": TE_RESIDENT}}, "offload.config"),
    Case("config-pin-memory-not-bool", ("--diffusion-offload-config", js({**LAYER, "pin_memory": "yes"})),
         refuse("C", "diffusion_offload_config.pin_memory must be a bool", "TypeError"),
         {"offload": {"config": {**LAYER, "pin_memory": "yes"}}}, "offload.config"),
    Case("config-both-allgather-pinned", ("--diffusion-offload-config", js(BOTH_ALLGATHER)), ACCEPT,
         {"offload": {"config": BOTH_ALLGATHER}}),
    Case("config-bad-json", ("--diffusion-offload-config", "{bad"),
         refuse("A", "argument --diffusion-offload-config: invalid loads value: '{bad'"), None),
    Case("config-rank-local-resident",
         ("--diffusion-offload-config", js(dit(weight_transfer="rank-local", resident_layers=8))), ACCEPT,
         {"offload": {"config": dit(weight_transfer="rank-local", resident_layers=8)}}),
    Case("config-allgather-resident",
         ("--diffusion-offload-config", js(dit(weight_transfer="allgather", resident_layers=8))),
         refuse("C", "resident_layers requires dit.weight_transfer='rank-local'"),
         {"offload": {"config": dit(weight_transfer="allgather", resident_layers=8)}}, "offload.config"),
    Case("dlo-allgather-resident", (*DLO, "--dlo-resident-layers", "8"), refuse("D", RESIDENT_ALLGATHER),
         dlo(resident_layers=8), "offload.dlo.resident_layers"),
    Case("dlo-rank-local-resident", (*DLO_RANK_LOCAL, "--dlo-resident-layers", "8"), ACCEPT,
         dlo(transfer="rank-local", resident_layers=8)),
    Case("resident-without-dlo-flag", ("--dlo-resident-layers", "2"), refuse("D", RESIDENT_ALLGATHER), None),
    # ---- devices (diffusion/data.py, engine/stage_init_utils.py)
    Case("usp3-on-8", ("--usp", "3"), refuse("C", "WORLD size (8) must be divisible by non-DP parallel size (3)"),
         {"usp": 3}, "device_ids"),
    Case("usp4-on-8-dp2", ("--usp", "4"), ACCEPT, {"usp": 4}),
    Case("4-of-8-visible", ("--num-gpus", "4", "--usp", "4", "--text-encoder-tp-size", "4",
                            "--vae-patch-parallel-size", "4"), ACCEPT,
         {"device_ids": [0, 1, 2, 3], "usp": 4, "text_encoder_tp_size": 4,
          "vae": {"use_tiling": True, "patch_parallel_size": 4}, "env": {"ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}},
         ours=refuse("load", DEVICES), where="env.ASCEND_RT_VISIBLE_DEVICES"),
    Case("4-devices", ("--num-gpus", "4", "--usp", "4", "--text-encoder-tp-size", "4",
                       "--vae-patch-parallel-size", "4"), ACCEPT,
         {"device_ids": [0, 1, 2, 3], "usp": 4, "text_encoder_tp_size": 4,
          "vae": {"use_tiling": True, "patch_parallel_size": 4}}, env={"ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3"}),
    Case("8-of-4-visible", (), refuse("D", "Stage 0 requires 8 device(s) based on parallel_config, but 4 device(s) "
                                          "are available: ['0', '1', '2', '3']"),
         {"env": {"ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3"}}, "env.ASCEND_RT_VISIBLE_DEVICES",
         ours=refuse("load", DEVICES), env={"ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3"}),
    # ---- attention (diffusion/data.py, attention/backends/registry.py)
    Case("backend+config-default", ("--diffusion-attention-backend", "FLASH_ATTN", "--diffusion-attention-config",
                                    js({"default": {"backend": "FLASH_ATTN"}})), refuse("C", MUTUAL),
         {"attention": {"backend": "FLASH_ATTN", "config": {"default": {"backend": "FLASH_ATTN"}}}},
         "attention.backend"),
    Case("backend+config-default-auto", ("--diffusion-attention-backend", "FLASH_ATTN",
                                         "--diffusion-attention-config", js({"default": "auto"})), ACCEPT,
         {"attention": {"backend": "FLASH_ATTN", "config": {"default": "auto"}}}),
    Case("backend+config-per-role", ("--diffusion-attention-backend", "FLASH_ATTN", "--diffusion-attention-config",
                                     js({"per_role": {"minimax_h3.token_refiner": "TORCH_SDPA"}})), ACCEPT,
         {"attention": {"backend": "FLASH_ATTN", "config": {"per_role": {"minimax_h3.token_refiner": "TORCH_SDPA"}}}}),
    Case("config-default-rainfusion", ("--diffusion-attention-config", js({"default": {"backend": "RAINFUSION_ATTN"}})),
         ACCEPT, {"attention": {"config": {"default": {"backend": "RAINFUSION_ATTN"}}}}),
    Case("backend-unknown", ("--diffusion-attention-backend", "foo"),
         refuse("E", f"Unknown diffusion attention backend: 'FOO'. Valid options are: {BACKENDS}"),
         {"attention": {"backend": "foo"}}, "attention.backend"),
    # ---- MiniMax-H3 (pipeline_minimax_h3.py, vae.py)
    Case("vae-patch-4-under-usp8", ("--vae-patch-parallel-size", "4"), refuse("E", VAE_SIZE),
         {"vae": {"use_tiling": True, "patch_parallel_size": 4}}, "vae.patch_parallel_size"),
    Case("vae-patch-1", ("--vae-patch-parallel-size", "1"), ACCEPT, {"vae": {"use_tiling": True}}),
    Case("vae-mode-bogus", ("--vae-parallel-mode", "bogus"),
         refuse("A", "argument --vae-parallel-mode: invalid choice: 'bogus'"),
         {"vae": {"parallel_mode": "bogus", "use_tiling": True, "patch_parallel_size": 8}}, "vae.parallel_mode"),
    Case("vae-mode-shard-height", ("--vae-parallel-mode", "spatial_shard_height"),
         refuse("E", "MiniMax H3 VAE supports its native tile parallel mode only, got 'spatial_shard_height'"),
         {"vae": {"parallel_mode": "spatial_shard_height", "use_tiling": True, "patch_parallel_size": 8}},
         "vae.parallel_mode"),
    Case("te-tp-3", ("--text-encoder-tp-size", "3"),
         refuse("E", "text_encoder_tp_size must divide both Qwen3-VL num_attention_heads (64) and "
                "num_key_value_heads (8), got 3"), {"text_encoder_tp_size": 3}, "text_encoder_tp_size"),
    Case("te-tp-16", ("--text-encoder-tp-size", "16"),
         refuse("E", "text_encoder_tp_size must not exceed the DiT group size (8), got 16"),
         {"text_encoder_tp_size": 16}, "text_encoder_tp_size"),
    Case("te-tp-4", ("--text-encoder-tp-size", "4"), ACCEPT, {"text_encoder_tp_size": 4}),
    Case("cfg-2-usp8", ("--cfg-parallel-size", "2"),
         refuse("C", "WORLD size (8) must be divisible by non-DP parallel size (16)"),
         {"cfg_parallel_size": 2}, "device_ids"),
    Case("cfg-2-usp4", ("--usp", "4", "--cfg-parallel-size", "2"),
         refuse("E", "MiniMax-H3 is CFG-distilled and has no negative branch; cfg_parallel_size must be 1"),
         {"usp": 4, "cfg_parallel_size": 2}, "cfg_parallel_size"),
    Case("cfg-1", ("--cfg-parallel-size", "1"), ACCEPT, {"cfg_parallel_size": 1}),
    Case("cfg-not-an-int", ("--cfg-parallel-size", "two"),
         refuse("A", "argument --cfg-parallel-size: invalid int value: 'two'"), None),
    Case("task-type-bogus", ("--task-type", "t2v"),
         refuse("E", "MiniMax-H3 task_type must be one of auto, combined, t2va, fl2va, or ref2va; got 't2v'"),
         {"task_type": "t2v"}, "task_type"),
    Case("task-type-any-case", ("--task-type", "Ref2VA"), ACCEPT, {"task_type": "Ref2VA"}),
    # ---- quantization with DLO+AllGather (model_loader/diffusers_loader.py)
    Case("mxfp4+dlo-allgather", (*DLO, "--diffusion-quantization-config", js(MXFP4)), refuse("E", DLO_QUANT),
         quant(MXFP4, dlo()), "quantization"),
    Case("mxfp4-global+dlo-allgather", (*DLO, "--diffusion-quantization-config", js({"method": "mxfp4"})),
         refuse("E", DLO_QUANT), quant({"method": "mxfp4"}, dlo()), "quantization"),
    Case("mxfp4+config-allgather", ("--diffusion-offload-config", js(ALLGATHER), "--diffusion-quantization-config",
                                    js(MXFP4)), refuse("E", DLO_QUANT),
         quant(MXFP4, {"offload": {"config": ALLGATHER}}), "quantization"),
    Case("mxfp4-text-encoder+config-text-encoder-allgather",
         ("--diffusion-offload-config", js(BOTH_ALLGATHER), "--diffusion-quantization-config",
          js({"text_encoder": {"method": "mxfp4"}})), refuse("E", DLO_QUANT),
         quant({"text_encoder": {"method": "mxfp4"}}, {"offload": {"config": BOTH_ALLGATHER}}), "quantization"),
    Case("mxfp4+dlo-rank-local", (*DLO_RANK_LOCAL, "--diffusion-quantization-config", js(MXFP4)), ACCEPT,
         quant(MXFP4, dlo(transfer="rank-local"))),
    Case("mxfp4-text-encoder+dlo-allgather",
         (*DLO, "--diffusion-quantization-config", js({"text_encoder": {"method": "mxfp4"}})), ACCEPT,
         quant({"text_encoder": {"method": "mxfp4"}}, dlo())),
    Case("mxfp4+no-offload", ("--diffusion-quantization-config", js(MXFP4)), ACCEPT, quant(MXFP4)),
    Case("mxfp8+dlo-allgather", (*DLO, "--diffusion-quantization-config", js({"transformer": {"method": "mxfp8"}})),
         ACCEPT, quant({"transformer": {"method": "mxfp8"}}, dlo())),
    Case("int8+dlo-allgather", (*DLO, "--diffusion-quantization-config", js({"method": "int8"})), ACCEPT,
         quant({"method": "int8"}, dlo())),
    Case("fp8+dlo-allgather", (*DLO, "--diffusion-quantization-config",
                               js({"method": "fp8", "activation_scheme": "dynamic"})), ACCEPT,
         quant({"method": "fp8", "activation_scheme": "dynamic"}, dlo())),
    # ---- quantization methods (quantization/factory.py build_quant_config, when the stage launches)
    Case("quant-unknown-int3", ("--diffusion-quantization-config", js("int3")),
         refuse("D", "Unknown quantization method: 'int3'. Supported: ['awq', 'auto_awq', 'fp8', "), quant("int3"),
         "quantization"),
    Case("quant-unknown-method", ("--diffusion-quantization-config", js({"method": "INT3"})),
         refuse("D", "Unknown quantization method: 'int3'. Supported: ['awq', "), quant({"method": "INT3"}),
         "quantization"),
    Case("quant-unknown-component", ("--diffusion-quantization-config",
                                     js({"transformer": {"method": "int3"}, "text_encoder": None})),
         refuse("D", "Unknown quantization method: 'int3'. Supported: ["),
         quant({"transformer": {"method": "int3"}, "text_encoder": None}), "quantization.transformer"),
    Case("quant-compressed-tensors", ("--diffusion-quantization-config", js("compressed-tensors")),
         refuse("D", "Unknown quantization method: 'compressed_tensors'."), quant("compressed-tensors"),
         "quantization"),
    Case("quant-no-method", ("--diffusion-quantization-config", js({"activation_scheme": "dynamic"})),
         refuse("D", "Dict quantization config must have a 'method' or 'quant_method' key"),
         quant({"activation_scheme": "dynamic"}), "quantization"),
    Case("quant-auto-round", ("--diffusion-quantization-config", js({"method": "Auto-Round", "bits": 4})), ACCEPT,
         quant({"method": "Auto-Round", "bits": 4})),
    Case("quant-none", ("--diffusion-quantization-config", js("none")), ACCEPT, quant("none")),
    Case("quant-fp8-per-block", ("--diffusion-quantization-config", js("fp8_per_block")), ACCEPT,
         quant("fp8_per_block")),
    Case("quant-modelopt-by-producer", ("--diffusion-quantization-config",
                                        js({"producer": {"name": "modelopt"}, "quant_algo": "NVFP4"})), ACCEPT,
         quant({"producer": {"name": "modelopt"}, "quant_algo": "NVFP4"})),
    # ---- cache (diffusion/cache/selector.py), profiler, parser
    Case("cache-unknown", ("--cache-backend", "foo"),
         refuse("E", "Unsupported cache backend: foo. Supported: 'cache_dit', 'tea_cache', 'mag_cache', "
                "'sea_cache', 'step_cache'"), {"cache": {"backend": "foo"}}, "cache.backend"),
    Case("cache-dit", ("--cache-backend", "cache_dit"), ACCEPT, {"cache": {"backend": "cache_dit"}}),
    Case("cache-config-bad-json", ("--cache-backend", "cache_dit", "--cache-config", "{bad"), ACCEPT, None),
    Case("torch-profiler", ("--enable-diffusion-pipeline-profiler", "--profiler-config",
                            js({"profiler": "torch", "torch_profiler_dir": "/tmp/h3-profile"})), ACCEPT,
         {"profiler": {"pipeline": True, "torch_dir": "/tmp/h3-profile"}}),
    Case("unknown-flag", ("--bogus-flag",), refuse("A", "unrecognized arguments: --bogus-flag"), None),
)
