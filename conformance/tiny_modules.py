"""The tiny networks of :mod:`conformance.tiny_h3`'s pipeline: a joint video/audio DiT, the two decoders and
the two encoders, random-weight torch modules sized by its ``CONFIG`` (conformance environment only).

The DiT's attention is vLLM-Omni's own ``Attention`` layer, so the engine's attention backend runs.
"""

# vLLM-Omni exists only in the conformance environment, which mypy does not see.
# mypy: disable-error-code="import-not-found"
from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["TinyAudioDecoder", "TinyDiT", "TinyMediaEncoder", "TinyTextEncoder", "TinyVideoDecoder"]


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
