"""Upstream's ``TORCH_SDPA`` diffusion attention, dispatched for a CPU (conformance environment only).

:class:`conformance.cpu_platform.CpuOmniPlatform` names
:class:`CpuSDPABackend` for ``TORCH_SDPA`` (and by default). Its own module,
because importing an attention backend asks for the current platform, which
the platform's module must not do while it is being resolved.
"""

# vLLM and vLLM-Omni exist only in the conformance environment, not where h3bench is type-checked.
# mypy: disable-error-code="import-not-found"

from __future__ import annotations

from typing import Any

import torch
from vllm_omni.diffusion.attention.backends.sdpa import SDPABackend, SDPAImpl

__all__ = ["CpuSDPABackend", "CpuSDPAImpl"]


class CpuSDPAImpl(SDPAImpl):
    """Upstream's SDPA attention, dispatched for a CPU.

    ``AttentionImpl.forward`` (``diffusion/attention/backends/abstract.py``)
    dispatches on the platform enum to ``forward_cuda``, ``forward_npu`` ...
    and raises for any other platform, an out-of-tree one included; SDPA's
    CUDA and XPU paths are the same plain ``torch`` call, which a CPU runs.
    """

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_metadata: Any = None,
                ) -> torch.Tensor:
        return self._forward_impl(query, key, value, attn_metadata, mask_mode="broadcast_k")


class CpuSDPABackend(SDPABackend):
    """``TORCH_SDPA`` with :class:`CpuSDPAImpl` (its name, and so the workers' log, stays ``SDPA``)."""

    @staticmethod
    def get_impl_cls() -> type[SDPAImpl]:
        return CpuSDPAImpl
