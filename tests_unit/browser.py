"""Load a local HTML page in Debian's headless Chromium and report what a reader would notice.

It speaks the Chrome DevTools Protocol over ``--remote-debugging-pipe``
(NUL-terminated JSON messages; Chromium reads commands on fd 3 and writes on
fd 4), with the standard library only: no port to race for and no driver.
One :func:`load` opens the page, waits for its load event and a short
settling time, then collects console messages, uncaught exceptions, error
log entries (such as a file that failed to load), images that did not
decode, the figures on the page, and a full-page PNG screenshot.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["PageLoad", "find_chromium", "load"]

# Debian's /usr/bin/chromium is a shell wrapper; the binary behind it takes the flags as given.
_CANDIDATES = ("/usr/lib/chromium/chromium", "chromium", "chromium-browser")
_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
    "--no-default-browser-check", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--disable-extensions", "--mute-audio", "--hide-scrollbars", "--remote-debugging-pipe",
)
# Puts the two pipe ends on fds 3 and 4, then becomes Chromium. (Popen's preexec_fn runs before it closes
# the descriptors not in pass_fds, so it cannot do this.)
_TRAMPOLINE = ("import os, sys; r, w = int(sys.argv[1]), int(sys.argv[2]); os.dup2(r, 3); os.dup2(w, 4); "
               "os.execv(sys.argv[3], sys.argv[3:])")
_PAGE_FACTS = """(() => ({
  broken: [...document.images].filter(i => !i.complete || i.naturalWidth === 0)
            .map(i => (i.getAttribute('src') || '').slice(0, 80)),
  figures: [...document.querySelectorAll('figure[id]')].map(f => {
    const shown = f.querySelector('img, svg'); const box = shown ? shown.getBoundingClientRect() : null;
    return {id: f.id, drawn: !!box && box.width > 0 && box.height > 0};
  }),
  sections: [...document.querySelectorAll('section[id]')].map(s => s.id),
  height: Math.ceil(document.documentElement.scrollHeight),
}))()"""


def find_chromium() -> str | None:
    """The Chromium binary, or None when it is not installed."""
    for name in _CANDIDATES:
        path = name if os.path.isabs(name) else shutil.which(name)
        if path and os.access(path, os.X_OK):
            return path
    return None


@dataclass(frozen=True)
class PageLoad:
    """What loading one page showed."""

    loaded: bool
    console_errors: tuple[str, ...]  # console.error/assert calls and uncaught exceptions
    log_errors: tuple[str, ...]  # the browser's own error entries: failed loads, blocked requests
    broken_images: tuple[str, ...]
    figures: dict[str, bool]  # figure id → drawn with a non-empty box
    sections: tuple[str, ...]
    screenshot: bytes

    @property
    def problems(self) -> list[str]:
        found = [] if self.loaded else ["the page did not fire its load event"]
        found += [f"console: {text}" for text in self.console_errors]
        found += [f"log: {text}" for text in self.log_errors]
        found += [f"broken image: {src}" for src in self.broken_images]
        found += [f"figure not drawn: {name}" for name, drawn in self.figures.items() if not drawn]
        return found


class _Pipe:
    """A Chromium process and its DevTools pipe."""

    def __init__(self, binary: str, profile: str, width: int) -> None:
        to_browser, self._from_us = os.pipe()
        self._to_us, from_browser = os.pipe()
        argv = [binary, *_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},1000", "about:blank"]
        self.process = subprocess.Popen(
            [sys.executable, "-c", _TRAMPOLINE, str(to_browser), str(from_browser), *argv],
            pass_fds=(to_browser, from_browser), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def _receive(self, deadline: float) -> dict[str, Any] | None:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._to_us], [], [], left)[0]:
                return None
            chunk = os.read(self._to_us, 1 << 20)
            if not chunk:
                raise RuntimeError(f"chromium closed its DevTools pipe (exit code {self.process.poll()})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, session: str | None = None, timeout: float = 60, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._from_us, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while (reply := self._receive(deadline)) is not None:
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)
        raise TimeoutError(f"no answer to {method} within {timeout} s")

    def wait_for(self, method: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == method for e in self.events):
            event = self._receive(deadline)
            if event is None:
                return False
            self.events.append(event)
        return True

    def settle(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (event := self._receive(deadline)) is not None:
            self.events.append(event)

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=10)
        except (RuntimeError, TimeoutError, OSError):
            pass
        for fd in (self._from_us, self._to_us):
            os.close(fd)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _params(events: list[dict[str, Any]], method: str) -> list[dict[str, Any]]:
    return [e["params"] for e in events if e.get("method") == method]


def load(page: Path, *, width: int = 1280, timeout: float = 90, settle: float = 1.0) -> PageLoad:
    """Open ``page`` (a local file) in headless Chromium and collect what went wrong on it."""
    binary = find_chromium()
    if binary is None:
        raise FileNotFoundError("chromium is not installed (apt-get install -y chromium)")
    profile = tempfile.mkdtemp(prefix="h3bench-chromium-")
    browser = _Pipe(binary, profile, width)
    try:
        target = browser.call("Target.createTarget", url="about:blank")["targetId"]
        session = browser.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            browser.call(f"{domain}.enable", session=session)
        browser.call("Emulation.setDeviceMetricsOverride", session=session, width=width, height=1000,
                     deviceScaleFactor=1, mobile=False)
        navigation = browser.call("Page.navigate", session=session, url=page.resolve().as_uri())
        loaded = not navigation.get("errorText") and browser.wait_for("Page.loadEventFired", timeout)
        browser.settle(settle)
        facts = browser.call("Runtime.evaluate", session=session, expression=_PAGE_FACTS,
                             returnByValue=True)["result"]["value"]
        browser.call("Emulation.setDeviceMetricsOverride", session=session, width=width, height=facts["height"],
                     deviceScaleFactor=1, mobile=False)
        shot = browser.call("Page.captureScreenshot", session=session, format="png", captureBeyondViewport=True,
                            timeout=timeout)
    finally:
        browser.close()
        shutil.rmtree(profile, ignore_errors=True)
    events = browser.events
    console = [" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", ()))
               for p in _params(events, "Runtime.consoleAPICalled") if p.get("type") in ("error", "assert")]
    console += [p["exceptionDetails"].get("exception", {}).get("description") or p["exceptionDetails"].get("text", "")
                for p in _params(events, "Runtime.exceptionThrown")]
    log = [f"{p['entry'].get('source')}: {p['entry'].get('text')} {p['entry'].get('url', '')}".rstrip()
           for p in _params(events, "Log.entryAdded") if p["entry"].get("level") == "error"]
    return PageLoad(
        loaded=bool(loaded),
        console_errors=tuple(console),
        log_errors=tuple(log),
        broken_images=tuple(facts["broken"]),
        figures={f["id"]: f["drawn"] for f in facts["figures"]},
        sections=tuple(facts["sections"]),
        screenshot=base64.b64decode(shot["data"]),
    )
