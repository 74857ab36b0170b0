"""A tiny H3-shaped diffusion pipeline for vLLM-Omni's real engine on a CPU (conformance environment only).

MiniMax-H3's real pipeline (``vllm_omni/diffusion/models/minimax_h3/``) cannot
be built without its checkpoint: the video and audio VAEs are the
checkpoint's own modelling code (``vae.py``: ``auto_map.AutoModel`` loaded
with ``get_class_from_dynamic_module``), absent from the wheel, and the
Qwen3-VL tokenizer and processor are the checkpoint's files. So this module
keeps every part of H3's *request path* that the wheel does have and
replaces only the networks with the smallest real torch modules:

- the request goes through H3's task check (``MiniMaxH3Pipeline._resolve_task``,
  called on this pipeline) and upstream's H3 preprocessing,
  ``prepare_encoder_inputs`` (``vllm_omni/model_executor/models/minimax_h3/encoder_processing.py``):
  the duration, reference and canvas checks with upstream's messages, the
  reference video decoded and resampled, and the output shape (``17n+5``
  frames at 24 FPS, ``round(40 * frames / 24)`` audio latents);
- the denoise loop takes its sigmas from upstream's H3 schedule
  (``minimax_h3_time_shift_sigmas``, ``time_request.py``) and runs one
  forward of :class:`TinyDiT` (attention through upstream's ``Attention``
  layer, so the platform's backend selection is upstream's) per step, in
  request mode (``forward``) or, as a CPU needs, driven step by step by the
  engine's scheduler (H3's step contract: ``prepare_encode``,
  ``denoise_step``, ``step_scheduler``, ``post_decode``);
- the decoded frames and waveform go through upstream's H3 output path
  (``_prepare_minimax_h3_video_output`` and the post-process function
  ``get_minimax_h3_post_process_func``: uint8 ``(B, T, H, W, C)`` frames,
  32 kHz stereo audio, 24 FPS), which the serving layer muxes to MP4;
- the stage timings come from upstream's ``DiffusionPipelineProfilerMixin``
  over H3's own profiler targets (``MiniMaxH3Pipeline._PROFILER_TARGETS``),
  so the keys are ``MiniMaxH3Pipeline.<method>`` as on an NPU.

The class is registered under the arch key ``MiniMaxH3Pipeline`` through
upstream's out-of-tree hook, ``register_diffusion_model``
(``vllm_omni/diffusion/registry.py``: "replace an existing built-in pipeline
with a platform-optimised implementation (same model_arch key)"), so the
serving layer applies H3's request contract (``diffusion/model_metadata.py``).
Its name is H3's so that the profiler's keys are.

The weights are random, drawn from a seed by :func:`write_checkpoint`, and
loaded by upstream's ``DiffusersPipelineLoader`` from ``Ref2VA/transformer``
like any checkpoint. ``vae_use_tiling`` (``--vae-use-tiling``, set on
``pipeline.vae`` by upstream's ``initialize_model``) makes the video decoder
decode overlapping tiles, as H3's tiled VAE does: the same frames, several
times the decode work (:class:`TinyVideoDecoder`).

Run ``python -m conformance.tiny_h3 DIR [--seed N]`` in the
conformance environment to write a checkpoint.
"""

# vLLM and vLLM-Omni exist only in the conformance environment, not where h3bench is type-checked.
# mypy: disable-error-code="import-not-found"

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from conformance.tiny_modules import (
    TinyAudioDecoder,
    TinyDiT,
    TinyMediaEncoder,
    TinyTextEncoder,
    TinyVideoDecoder,
)

__all__ = ["CONFIG", "MiniMaxH3Pipeline", "TinyDiT", "register", "write_checkpoint"]

ARCH = "MiniMaxH3Pipeline"
PARTITION = "Ref2VA"
# The networks' sizes: small enough for two CPU cores, large enough that each denoise step and the decode cost
# measurable time. ``latent`` cells are 16x16 pixels, as H3's (``latent_h = height // 16``).
CONFIG: dict[str, int] = {
    "hidden": 64, "heads": 4, "layers": 2, "video_channels": 8, "audio_channels": 8, "decoder_channels": 64,
    "text_tokens": 64, "patch": 16, "audio_samples_per_latent": 800, "tile_cells": 1, "tile_overlap": 2,
}


def _upstream_h3() -> Any:
    from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3

    return pipeline_minimax_h3


def _profiler_mixin() -> type:
    from vllm_omni.diffusion.profiler.diffusion_pipeline_profiler import DiffusionPipelineProfilerMixin

    return DiffusionPipelineProfilerMixin


class MiniMaxH3Pipeline(nn.Module, _profiler_mixin()):  # type: ignore[misc]
    """H3's request path with the smallest real networks (see the module docstring)."""

    supports_request_cancellation: ClassVar[bool] = True
    supports_step_execution: ClassVar[bool] = True
    dummy_run_num_frames: ClassVar[int] = 0  # H3's: no warm-up request at start-up
    support_image_input: ClassVar[bool] = True
    support_audio_input: ClassVar[bool] = True
    support_audio_output: ClassVar[bool] = True
    _dit_modules: ClassVar[list[str]] = ["transformer"]
    _encoder_modules: ClassVar[list[str]] = ["text_encoder"]
    _vae_modules: ClassVar[list[str]] = ["video_vae", "audio_vae"]

    def __init__(self, *, od_config: Any, prefix: str = "") -> None:
        from vllm_omni.diffusion.distributed.utils import get_local_device
        from vllm_omni.diffusion.model_loader.diffusers_loader import DiffusersPipelineLoader

        del prefix
        super().__init__()
        self.od_config = od_config
        self.device = get_local_device()
        root = Path(str(od_config.model))
        model_path = root if root.name == PARTITION else root / PARTITION
        config = {**CONFIG, **json.loads((model_path / "transformer" / "config.json").read_text(encoding="utf-8"))}
        self.config = config
        # What upstream's H3 reads from its release metadata and upstream's _resolve_task then checks.
        release = json.loads((model_path / "model_index.json").read_text(encoding="utf-8"))["_minimax_h3"]
        self.partition = str(release["partition"]).lower()
        self.supported_tasks = frozenset(str(task).lower() for task in release["tasks"])
        self._fasth3 = None
        self.text_encoder = TinyTextEncoder(config)
        self.media_encoder = TinyMediaEncoder(config)
        self.transformer = TinyDiT(config)
        self.video_vae = TinyVideoDecoder(config)
        self.audio_vae = TinyAudioDecoder(config)
        self.vae = self.video_vae  # upstream's initialize_model sets vae.use_tiling from --vae-use-tiling
        self.weights_sources = [DiffusersPipelineLoader.ComponentSource(
            model_or_path=str(model_path), subfolder="transformer", revision=None, prefix="", fall_back_to_pt=False)]
        targets = list(_upstream_h3().MiniMaxH3Pipeline._PROFILER_TARGETS)
        self.setup_diffusion_pipeline_profiler(  # type: ignore[operator]  # the mixin is vLLM-Omni's, unseen by mypy
            profiler_targets=targets, enable_diffusion_pipeline_profiler=od_config.enable_diffusion_pipeline_profiler)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        params = dict(self.named_parameters())
        loaded = set()
        for name, tensor in weights:
            if name in params:
                with torch.no_grad():
                    params[name].copy_(tensor.to(params[name].dtype))
                loaded.add(name)
        return loaded

    # ---- the stages H3's profiler times (same names, same order)

    def encode_prompt(self, prepared: Any) -> torch.Tensor:
        return self.text_encoder(prepared.prompt)

    def _encode_local_media(self, media: Any) -> torch.Tensor:
        audios = [waveform for item in (*media.video_audios, *media.audios) if item is not None
                  for waveform in [item[0]]]
        return self.media_encoder((*media.images, *media.videos), audios)

    def _prepare(self, prompt: Any, sampling: Any) -> dict[str, Any]:
        """Upstream's H3 preprocessing, the encoders, the initial noise and H3's sigmas: one request's denoise inputs."""
        from vllm_omni.diffusion.cancellation import check_request_cancellation
        from vllm_omni.diffusion.models.minimax_h3.time_request import minimax_h3_time_shift_sigmas
        from vllm_omni.model_executor.models.minimax_h3.encoder_processing import prepare_encoder_inputs

        extra = sampling.extra_args or {}
        multi_modal_data = prompt.get("multi_modal_data") if isinstance(prompt, dict) else None
        # H3's own order: the partition's task first (pipeline_minimax_h3.py _resolve_task), then the preprocessing.
        task = _upstream_h3().MiniMaxH3Pipeline._resolve_task(
            self, extra.get("task"), multi_modal_data, audio_mode=extra.get("audio_mode", "native"))
        prepared = prepare_encoder_inputs(prompt, sampling, task=task)  # H3's checks (400s) and output shape
        media = prepared.media
        check_request_cancellation()
        text = self.encode_prompt(prepared)
        context = torch.cat([text, self._encode_local_media(media).to(text.dtype)], 1)
        seed = sampling.seed if sampling.seed is not None else int(torch.randint(0, 2**31 - 1, ()).item())
        generator = torch.Generator().manual_seed(int(seed))
        cv, ca = self.config["video_channels"], self.config["audio_channels"]
        latent_h, latent_w = media.height // 16, media.width // 16
        shift = extra.get("flow_shift") or getattr(sampling, "flow_shift", None) or 12.0
        return {
            "context": context,
            "video": torch.randn(1, media.latent_t * latent_h * latent_w, cv, generator=generator),
            "audio": torch.randn(1, 2 * media.audio_t, ca, generator=generator),
            "sigmas": minimax_h3_time_shift_sigmas(num_steps=int(sampling.num_inference_steps or 50),
                                                   shift_scale=float(shift)),
            "shape": {"height": media.height, "width": media.width, "latent_t": media.latent_t,
                      "latent_h": latent_h, "latent_w": latent_w, "audio_t": media.audio_t},
        }

    def diffuse(self, inputs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole denoise loop (request mode): one DiT forward and one Euler step per sigma pair."""
        from vllm_omni.diffusion.cancellation import check_request_cancellation

        video, audio, sigmas = inputs["video"], inputs["audio"], inputs["sigmas"]
        with torch.no_grad():
            for sigma, next_sigma in itertools.pairwise(sigmas):
                check_request_cancellation()
                v_video, v_audio = self.transformer(video, audio, inputs["context"], float(sigma))
                video = video + (next_sigma - sigma) * v_video
                audio = audio + (next_sigma - sigma) * v_audio
        return video, audio

    def decode(self, video: torch.Tensor, audio: torch.Tensor, shape: dict[str, int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Denoised tokens to frames ``(1, 3, frames, H, W)`` and waveform ``(1, 2, samples)``."""
        cv, ca = self.config["video_channels"], self.config["audio_channels"]
        video_latent = video.view(1, shape["latent_t"], shape["latent_h"], shape["latent_w"], cv).permute(0, 4, 1, 2, 3)
        audio_latent = audio.view(2, shape["audio_t"], ca).transpose(1, 2)
        with torch.no_grad():
            frames = self.video_vae.decode_latent(video_latent)[..., :shape["height"], :shape["width"]].contiguous()
            waveform = self.audio_vae.decode_latent(audio_latent)
        return frames, waveform

    def _output(self, frames: torch.Tensor, waveform: torch.Tensor) -> Any:
        from vllm_omni.diffusion.data import DiffusionOutput

        h3 = _upstream_h3()
        return DiffusionOutput(output=(h3._prepare_minimax_h3_video_output(frames), waveform),
                               post_process_func=h3.get_minimax_h3_post_process_func(self.od_config),
                               stage_durations=self.stage_durations if hasattr(self, "_stage_durations") else {})

    def forward(self, request: Any) -> Any:
        """Request mode: the whole request in one call."""
        from vllm_omni.errors import OmniClientError

        if len(request.prompts) != 1:
            raise OmniClientError("MiniMax H3 supports one request at a time")
        inputs = self._prepare(request.prompts[0], request.sampling_params)
        video, audio = self.diffuse(inputs)
        return self._output(*self.decode(video, audio, inputs["shape"]))

    # ---- step execution (--step-execution): the engine's scheduler drives the loop one denoise step at a time

    def prepare_encode(self, state: Any, **kwargs: Any) -> Any:
        inputs = self._prepare(state.prompt, state.sampling)
        state.timesteps = torch.tensor([1.0 - sigma for sigma in inputs["sigmas"][:-1]], dtype=torch.float32)
        state.step_index = 0
        state.latents = inputs["video"]
        state.do_true_cfg = False
        state.extra.update(h3bench_inputs=inputs, h3bench_audio=inputs["audio"])
        return state

    def denoise_step(self, input_batch: Any, *, states: Any = None, **kwargs: Any) -> torch.Tensor:
        velocities = []
        with torch.no_grad():
            for state in list(states if states is not None else input_batch.states):
                inputs = state.extra["h3bench_inputs"]
                sigma = float(inputs["sigmas"][state.step_index])
                v_video, v_audio = self.transformer(state.latents, state.extra["h3bench_audio"], inputs["context"], sigma)
                state.extra["h3bench_audio_velocity"] = v_audio
                velocities.append(v_video)
        return torch.cat(velocities)

    def step_scheduler(self, state: Any, noise_pred: torch.Tensor, **kwargs: Any) -> None:
        sigmas = state.extra["h3bench_inputs"]["sigmas"]
        delta = sigmas[state.step_index + 1] - sigmas[state.step_index]
        state.latents = state.latents + delta * noise_pred
        state.extra["h3bench_audio"] = state.extra["h3bench_audio"] + delta * state.extra.pop("h3bench_audio_velocity")
        state.step_index += 1

    def post_decode(self, state: Any, **kwargs: Any) -> Any:
        inputs = state.extra["h3bench_inputs"]
        return self._output(*self.decode(state.latents, state.extra["h3bench_audio"], inputs["shape"]))


def get_minimax_h3_post_process_func(od_config: Any) -> Any:
    """Upstream's H3 post-process function (the registry looks it up in this module by H3's name)."""
    return _upstream_h3().get_minimax_h3_post_process_func(od_config)


def register() -> None:
    """Serve this class under H3's arch key (the ``vllm_omni.general_plugins`` entry point calls it)."""
    from vllm_omni.diffusion.registry import register_diffusion_model

    register_diffusion_model(ARCH, __name__, "MiniMaxH3Pipeline",
                             post_process_func_name="get_minimax_h3_post_process_func")


def write_checkpoint(root: Path, *, seed: int = 0) -> Path:
    """Write a tiny random-weight checkpoint in H3's layout (``model_index.json``, ``Ref2VA/...``); return ``root``."""
    from safetensors.torch import save_file

    partition = root / PARTITION
    (partition / "transformer").mkdir(parents=True, exist_ok=True)
    index = {"_class_name": ARCH, "_diffusers_version": "0.36.0"}
    (root / "model_index.json").write_text(json.dumps(index, indent=1), encoding="utf-8")
    release = {**index, "_minimax_h3": {"partition": "ref2va", "tasks": ["ref2va"]},
               "_h3bench": {"kind": "tiny random-weight stand-in for the networks", "seed": seed}}
    (partition / "model_index.json").write_text(json.dumps(release, indent=1), encoding="utf-8")
    (partition / "transformer" / "config.json").write_text(json.dumps(CONFIG, indent=1), encoding="utf-8")
    torch.manual_seed(seed)
    modules = {"text_encoder": TinyTextEncoder(CONFIG), "media_encoder": TinyMediaEncoder(CONFIG),
               "transformer": _plain_dit(CONFIG), "video_vae": TinyVideoDecoder(CONFIG),
               "audio_vae": TinyAudioDecoder(CONFIG)}
    tensors = {f"{name}.{key}": value.detach().contiguous() for name, module in modules.items()
               for key, value in module.state_dict().items()}
    save_file(tensors, str(partition / "transformer" / "diffusion_pytorch_model.safetensors"))
    return root


def _plain_dit(config: dict[str, int]) -> nn.Module:
    """TinyDiT's parameters without upstream's attention layer (which needs the engine's config to exist)."""
    hidden = config["hidden"]

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.qkv = nn.LayerNorm(hidden), nn.Linear(hidden, 3 * hidden)
            self.proj, self.norm2 = nn.Linear(hidden, hidden), nn.LayerNorm(hidden)
            self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))

    dit = nn.Module()
    dit.video_in = nn.Linear(config["video_channels"], hidden)
    dit.audio_in = nn.Linear(config["audio_channels"], hidden)
    dit.time = nn.Linear(hidden, hidden)
    dit.blocks = nn.ModuleList(Block() for _ in range(config["layers"]))
    dit.video_out = nn.Linear(hidden, config["video_channels"])
    dit.audio_out = nn.Linear(hidden, config["audio_channels"])
    return dit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.tiny_h3",
                                     description="write a tiny random-weight H3-layout checkpoint")
    parser.add_argument("root", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    write_checkpoint(args.root, seed=args.seed)
    print(args.root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
