"""The HTTP client every talk with a server goes through: no proxies from the environment, one TLS context.

Proxies would add hops to the measured E2E. httpx builds and loads a TLS context for each client it makes (about
20 ms of CPU), although a server on 127.0.0.1 speaks plain HTTP; a campaign opens several clients a block, so
they share the one httpx would build.
"""

from __future__ import annotations

import functools
import ssl
from typing import Any

import httpx


@functools.cache
def _tls() -> ssl.SSLContext:
    return httpx.create_ssl_context(trust_env=False)


def client(**options: Any) -> httpx.Client:
    """An ``httpx.Client`` with ``options`` (base_url, timeout) that ignores proxy settings."""
    return httpx.Client(trust_env=False, verify=_tls(), **options)
