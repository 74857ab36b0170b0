"""A CPU platform for vLLM-Omni's diffusion engine, as an out-of-tree platform plugin (conformance environment only).

vLLM-Omni 0.30.0 has no CPU platform for diffusion. Its platform detection
(``vllm_omni/platforms/__init__.py``, ``resolve_current_omni_platform_cls_qualname``)
knows CUDA, ROCm, NPU, XPU and MUSA, and on a machine with none of them
falls back to ``UnspecifiedOmniPlatform`` (``vllm_omni/platforms/interface.py``),
whose ``set_device``, ``synchronize`` and memory queries raise
``NotImplementedError``: the diffusion worker fails at its first line of
device setup (``vllm_omni/diffusion/worker/diffusion_worker.py``,
``init_device``: ``current_omni_platform.set_device``). vLLM's own CPU
platform (``vllm/platforms/cpu.py``, chosen by ``VLLM_TARGET_DEVICE=cpu``)
is not consulted there: the worker asks ``current_omni_platform``.

Upstream's seam for a platform it does not ship is the entry-point group
``vllm_omni.platform_plugins`` (``vllm_omni/plugins/__init__.py``): an
out-of-tree plugin wins over the built-in detection in every process
(API server, engine, workers). :class:`CpuOmniPlatform` is that plugin for a
CPU: vLLM's ``CpuPlatform`` (``dist_backend = "gloo"``, memory from the OS)
with the Omni methods the diffusion path calls filled in the obvious way for
a CPU (no streams to synchronise, no cache to empty, no allocator
statistics, no inductor), and upstream's ``TORCH_SDPA`` attention
dispatched for a CPU (:class:`conformance.cpu_attention.CpuSDPABackend`).
Everything else the real engine runs is upstream's.

This module is imported while vLLM-Omni resolves its platform, so it imports
nothing that asks for the platform at import time (the attention backends
do): the backend is named by path and imported later.

The entry point is :func:`conformance.plugins.cpu_platform`;
:mod:`conformance.realengine` writes the ``.dist-info`` that
declares it and puts it on ``PYTHONPATH``.
"""

# vLLM and vLLM-Omni exist only in the conformance environment, not where h3bench is type-checked.
# mypy: disable-error-code="import-not-found"

from __future__ import annotations

from typing import Any

import psutil
import torch
from vllm.platforms.cpu import CpuPlatform
from vllm_omni.platforms.interface import OmniPlatform, OmniPlatformEnum

__all__ = ["CpuOmniPlatform"]


class CpuOmniPlatform(OmniPlatform, CpuPlatform):
    """vLLM's CPU platform with vLLM-Omni's diffusion interfaces (see the module docstring)."""

    _omni_enum = OmniPlatformEnum.OOT

    @classmethod
    def get_torch_device(cls, local_rank: int | None = None) -> torch.device:
        return torch.device("cpu")

    @classmethod
    def get_device_count(cls) -> int:
        return 1

    @classmethod
    def get_device_version(cls) -> str | None:
        return None

    @classmethod
    def is_initialized(cls) -> bool:
        return True

    @classmethod
    def current_device(cls) -> int:
        return 0

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        return None  # one device: nothing to select

    @classmethod
    def synchronize(cls) -> None:
        return None  # CPU work is synchronous

    @classmethod
    def empty_cache(cls) -> None:
        return None

    @classmethod
    def reset_peak_memory_stats(cls, device: torch.device | None = None) -> None:
        return None

    @classmethod
    def max_memory_allocated(cls, device: torch.device | None = None) -> int:
        return 0  # no allocator statistics on a CPU: upstream then reports peak_memory_mb 0

    @classmethod
    def max_memory_reserved(cls, device: torch.device | None = None) -> int:
        return 0

    @classmethod
    def get_free_memory(cls, device: torch.device | None = None) -> int:
        return int(psutil.virtual_memory().available)

    @classmethod
    def get_device_memory(cls, device: torch.device | None = None) -> tuple[int, int]:
        memory = psutil.virtual_memory()
        return int(memory.available), int(memory.total)

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return int(psutil.virtual_memory().total)

    @classmethod
    def supports_torch_inductor(cls) -> bool:
        return False

    @classmethod
    def supports_diffusion_dense_flash_attention(cls) -> bool:
        return False

    @classmethod
    def get_default_stage_config_path(cls) -> str:
        return "vllm_omni/model_executor/stage_configs"

    @classmethod
    def get_diffusion_attn_backend_cls(cls, selected_backend: str | None, head_size: int,
                                       allow_trtllm_default: bool = False) -> str:
        from vllm_omni.diffusion.attention.backends.registry import DiffusionAttentionBackendEnum

        if selected_backend is not None and selected_backend.upper() != "TORCH_SDPA":
            name = selected_backend.upper()
            cls.validate_diffusion_attn_backend(name)  # upstream's message for a backend this platform cannot run
            return str(DiffusionAttentionBackendEnum[name].get_path())
        return "conformance.cpu_attention.CpuSDPABackend"

    @classmethod
    def get_profiler_cls(cls) -> str:
        return "vllm_omni.profiler.omni_torch_profiler.OmniTorchProfilerWrapper"

    @classmethod
    def create_autocast_context(cls, *, device_type: str, dtype: torch.dtype, enabled: bool = True) -> Any:
        # H3 decodes under FP16 autocast on accelerators; CPU autocast takes only bfloat16.
        return super().create_autocast_context(device_type="cpu", dtype=torch.bfloat16, enabled=enabled)
