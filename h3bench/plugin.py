"""The h3bench pytest plugin: options, hooks, fixtures and assertion helpers."""

from __future__ import annotations
