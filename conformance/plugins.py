"""The entry points of the real-engine lane's two vLLM-Omni plugins.

:func:`conformance.realengine.plugin_dir` declares them.
They import nothing at module level: vLLM-Omni resolves its platform while
its own modules are still being imported, so a plugin module that imported
them first would be found half-initialised (a circular import).
"""

from __future__ import annotations

__all__ = ["cpu_platform", "tiny_h3"]


def cpu_platform() -> str:
    """``vllm_omni.platform_plugins``: the platform class to use (:mod:`conformance.cpu_platform`)."""
    return "conformance.cpu_platform.CpuOmniPlatform"


def tiny_h3() -> None:
    """``vllm_omni.general_plugins``: serve H3's arch key with :mod:`conformance.tiny_h3`."""
    from conformance.tiny_h3 import register

    register()
