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

Run ``python -m h3bench.conformance.tiny_h3 DIR [--seed N]`` in the
conformance environment to write a checkpoint.
"""

# vLLM and vLLM-Omni exist only in the conformance environment, not where h3bench is type-checked.
# mypy: disable-error-code="import-not-found"

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["CONFIG", "MiniMaxH3Pipeline", "TinyDiT", "register", "write_checkpoint"]

ARCH = "MiniMaxH3Pipeline"
PARTITION = "Ref2VA"
# The networks' sizes: small enough for two CPU cores, large enough that each denoise step and the decode cost
# measurable time. ``latent`` cells are 16x16 pixels, as H3's (``latent_h = height // 16``).
CONFIG: dict[str, int] = {
    "hidden": 64, "heads": 4, "layers": 2, "video_channels": 8, "audio_channels": 8, "decoder_channels": 64,
    "text_tokens": 64, "patch": 16, "audio_samples_per_latent": 800, "tile_cells": 1, "tile_overlap": 2,
}


def _timestep_embedding(sigma: float, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    angles = sigma * 1000.0 * freqs
    return torch.cat([torch.cos(angles), torch.sin(angles)])


class _Block(nn.Module):
    def __init__(self, hidden: int, heads: int, prefix: str) -> None:
        from vllm_omni.diffusion.attention.layer import Attention

        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.attn = Attention(num_heads=heads, head_size=hidden // heads, causal=False,
                              softmax_scale=(hidden // heads) ** -0.5, prefix=f"{prefix}.attn")
        self.proj = nn.Linear(hidden, hidden)
        self.norm2 = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, hidden = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(batch, tokens, 3, self.heads, hidden // self.heads).unbind(2)
        x = x + self.proj(self.attn(q, k, v).reshape(batch, tokens, hidden))
        return x + self.mlp(self.norm2(x))


class TinyDiT(nn.Module):
    """Joint video/audio denoiser over H3's latent grid: one token per video latent cell and per audio latent."""

    def __init__(self, config: dict[str, int]) -> None:
        super().__init__()
        hidden = config["hidden"]
        self.hidden = hidden
        self.video_in = nn.Linear(config["video_channels"], hidden)
        self.audio_in = nn.Linear(config["audio_channels"], hidden)
        self.time = nn.Linear(hidden, hidden)
        self.blocks = nn.ModuleList(_Block(hidden, config["heads"], f"transformer.blocks.{i}")
                                    for i in range(config["layers"]))
        self.video_out = nn.Linear(hidden, config["video_channels"])
        self.audio_out = nn.Linear(hidden, config["audio_channels"])

    def forward(self, video: torch.Tensor, audio: torch.Tensor, context: torch.Tensor, sigma: float,
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Velocities for ``video`` (1, N, Cv) and ``audio`` (1, M, Ca) given ``context`` (1, K, hidden)."""
        dtype = self.video_in.weight.dtype
        t = self.time(_timestep_embedding(sigma, self.hidden).to(dtype))
        n, m = video.shape[1], audio.shape[1]
        x = torch.cat([self.video_in(video.to(dtype)) + t, self.audio_in(audio.to(dtype)) + t, context.to(dtype)], 1)
        for block in self.blocks:
            x = block(x)
        return self.video_out(x[:, :n]).float(), self.audio_out(x[:, n:n + m]).float()


class TinyVideoDecoder(nn.Module):
    """Latent cells to pixels: each cell spread over its 16x16 pixels, a 3x3 blur, then a per-pixel MLP.

    ``use_tiling`` decodes tiles of ``tile_cells`` cells with ``tile_overlap``
    cells of context on each side and keeps each tile's centre, as a tiled
    VAE does. The blur sees one pixel around each output pixel, far less than
    one cell of context, so the tiled frames are the untiled ones; the
    context costs the decode work: with 1-cell tiles and 2 cells of context,
    17 times the pixels of a 128x96 canvas (6x8 cells).
    """

    _FRAMES_AT_ONCE = 16  # bounds the activations' memory (a 128x96 frame is 12 288 pixels)

    def __init__(self, config: dict[str, int]) -> None:
        super().__init__()
        c = config["decoder_channels"]
        self.net = nn.Sequential(nn.Linear(config["video_channels"], c), nn.GELU(), nn.Linear(c, c), nn.GELU(),
                                 nn.Linear(c, 3))
        self.patch = config["patch"]
        self.tile, self.overlap = config["tile_cells"], config["tile_overlap"]
        self.use_tiling = False
        self.use_slicing = False

    def _decode(self, latent: torch.Tensor) -> torch.Tensor:
        """(T, C, h, w) latent frames to (T, 3, 16h, 16w) pixels in [0, 1]."""
        dtype = next(self.net.parameters()).dtype
        out = []
        for chunk in latent.split(self._FRAMES_AT_ONCE):
            pixels = chunk.repeat_interleave(self.patch, -2).repeat_interleave(self.patch, -1)
            pixels = F.avg_pool2d(pixels, 3, stride=1, padding=1, count_include_pad=False)
            out.append(torch.sigmoid(self.net(pixels.permute(0, 2, 3, 1).to(dtype)).float()).permute(0, 3, 1, 2))
        return torch.cat(out)

    def _decode_tiled(self, latent: torch.Tensor) -> torch.Tensor:
        _, _, h, w = latent.shape
        p = self.patch
        out = torch.empty(latent.shape[0], 3, h * p, w * p)
        for top in range(0, h, self.tile):
            for left in range(0, w, self.tile):
                y0, x0 = max(top - self.overlap, 0), max(left - self.overlap, 0)
                y1, x1 = min(top + self.tile + self.overlap, h), min(left + self.tile + self.overlap, w)
                tile = self._decode(latent[:, :, y0:y1, x0:x1])
                keep_h, keep_w = min(self.tile, h - top), min(self.tile, w - left)
                out[:, :, top * p:(top + keep_h) * p, left * p:(left + keep_w) * p] = tile[
                    :, :, (top - y0) * p:(top - y0 + keep_h) * p, (left - x0) * p:(left - x0 + keep_w) * p]
        return out

    def decode_latent(self, latent: torch.Tensor) -> torch.Tensor:
        """(1, C, T_latent, h, w) to (1, 3, frames, 16h, 16w), ``frames`` by H3's rule from ``T_latent``."""
        from vllm_omni.diffusion.models.minimax_h3.time_request import minimax_h3_frame_count_from_video_latent_t

        frames = minimax_h3_frame_count_from_video_latent_t(int(latent.shape[2]))
        # Each output frame takes the latent frame that covers it (H3's VAE upsamples time by about 17/5).
        index = torch.div(torch.arange(frames) * latent.shape[2], frames, rounding_mode="floor")
        per_frame = latent[0].permute(1, 0, 2, 3)[index]
        decoded = self._decode_tiled(per_frame) if self.use_tiling else self._decode(per_frame)
        return decoded.permute(1, 0, 2, 3).unsqueeze(0)


class TinyAudioDecoder(nn.Module):
    """Audio latents to 800 samples each, one channel per latent row (H3: 32 kHz stereo, 800 samples a latent)."""

    def __init__(self, config: dict[str, int]) -> None:
        super().__init__()
        self.net = nn.Linear(config["audio_channels"], config["audio_samples_per_latent"])

    def decode_latent(self, latent: torch.Tensor) -> torch.Tensor:
        """(2, C, T) to (1, 2, 800 T) in [-0.5, 0.5], the layout of H3's ``MiniMaxH3AudioVAE.decode_latent``."""
        waveform = 0.5 * torch.tanh(self.net(latent.transpose(1, 2).to(self.net.weight.dtype)).float())
        return waveform.reshape(latent.shape[0], 1, -1).permute(1, 0, 2).contiguous()


class TinyTextEncoder(nn.Module):
    """The prompt's UTF-8 bytes, embedded (at most ``text_tokens`` of them)."""

    def __init__(self, config: dict[str, int]) -> None:
        super().__init__()
        self.tokens = config["text_tokens"]
        self.embed = nn.Embedding(256, config["hidden"])
        self.proj = nn.Linear(config["hidden"], config["hidden"])

    def forward(self, prompt: str) -> torch.Tensor:
        ids = torch.tensor(list(prompt.encode("utf-8")[: self.tokens]) or [0], dtype=torch.long)
        return self.proj(self.embed(ids)).unsqueeze(0)


class TinyMediaEncoder(nn.Module):
    """References to context tokens: each reference video's mean frame per latent cell, each audio's RMS envelope."""

    def __init__(self, config: dict[str, int]) -> None:
        super().__init__()
        self.patch = config["patch"]
        self.video = nn.Linear(3, config["hidden"])
        self.audio = nn.Linear(1, config["hidden"])

    def forward(self, videos: Iterable[torch.Tensor], audios: Iterable[torch.Tensor]) -> torch.Tensor:
        dtype = self.video.weight.dtype
        tokens = [torch.zeros(1, 1, self.video.out_features, dtype=dtype)]
        for frames in videos:  # H3's layout: (T, H, W, 3) or (H, W, 3) uint8, references rescaled to a 768 short edge
            sparse = frames.reshape(-1, *frames.shape[-3:])[::8, ::16, ::16]  # a few pixels; a float copy would be GBs
            mean = sparse.float().mean(0).permute(2, 0, 1).unsqueeze(0) / 255.0
            cells = F.adaptive_avg_pool2d(mean, (4, 4)).flatten(2).transpose(1, 2)
            tokens.append(self.video(cells.to(dtype)))
        for waveform in audios:  # (channels, samples)
            envelope = waveform.float().pow(2).mean(0).reshape(-1)[:16000 * 8]
            chunks = F.adaptive_avg_pool1d(envelope.view(1, 1, -1), 16).sqrt().view(1, 16, 1)
            tokens.append(self.audio(chunks.to(dtype)))
        return torch.cat(tokens, 1)


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
    parser = argparse.ArgumentParser(prog="python -m h3bench.conformance.tiny_h3",
                                     description="write a tiny random-weight H3-layout checkpoint")
    parser.add_argument("root", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    write_checkpoint(args.root, seed=args.seed)
    print(args.root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
