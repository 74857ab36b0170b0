"""pytester restores sys.modules after each test: what it drops must not break the modules that stay.

httpx imports httpcore when its first client is made. If that happened in a
pytester test, httpcore was dropped afterwards while httpx kept mapping the
errors of the dropped module, and every later connection error escaped as a
raw ``httpcore.ConnectError`` (tests_unit/conftest.py imports httpcore first).
"""

from __future__ import annotations

import httpx
import pytest

from h3bench.server.ports import LOCALHOST, find_free_port


def _refused() -> None:
    with httpx.Client(trust_env=False) as client:
        client.get(f"http://{LOCALHOST}:{find_free_port(LOCALHOST)}/health", timeout=5)


def test_a_pytester_test_may_make_the_first_http_client(pytester):
    with pytest.raises(httpx.ConnectError):
        _refused()


def test_a_later_client_still_raises_httpx_errors():
    with pytest.raises(httpx.ConnectError):
        _refused()
