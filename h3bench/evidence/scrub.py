"""Secrets kept out of everything h3bench records: argv, environments, command lines, server logs, manifests.

A value is secret when its name looks like a token, key, secret, password or
credential (:func:`secret_name`: ``HF_TOKEN``, ``--api-key``,
``AWS_SECRET_ACCESS_KEY``, ``"password"``, an ``Authorization`` header),
when it is the user info of a URL (``https://user:pass@host``), or when it is
a value already known to be secret (the secret-named variables of this
process's environment and of a server's own argv and environment) wherever
it appears. Each is replaced by ``***`` and the first 12 hex digits of its
SHA-256, so that two runs can still be compared without the value being
recorded; a masked value is left as it is, so scrubbing twice changes nothing.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["MASK", "Scrubber", "mask", "secret_name"]

MASK = "***"
_MASKED = re.compile(r"\*\*\*[0-9a-f]{12}")
_NOUNS = ("token", "key", "secret", "password", "passwd", "passphrase", "credential", "credentials", "auth",
          "authorization", "apikey", "cookie")
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/\s@:]+(?::[^/\s@]*)?)@")
_FLAG = re.compile(r"(?<![\w-])(?P<name>--?[A-Za-z][\w-]*)(?P<sep>=|\s+)(?P<q>[\"']?)(?P<value>[^\s\"',;)\]}]+)(?P=q)")
_ASSIGN = re.compile(
    r"(?P<q>[\"']?)(?P<name>[A-Za-z_][\w.-]*)(?P=q)(?P<sep>\s*[=:]\s*)(?P<vq>[\"']?)"
    r"(?P<scheme>(?:Bearer|Basic|token)\s+)?(?P<value>[^\s\"',;&}\]]+)"
)
_KNOWN_MIN_LENGTH = 6  # shorter values ("1", "true") would mask ordinary text


def mask(value: str) -> str:
    """``***`` and the first 12 hex digits of the value's SHA-256 (a masked value stays as it is)."""
    if _MASKED.fullmatch(value):
        return value
    return MASK + hashlib.sha256(value.encode("utf-8", "surrogateescape")).hexdigest()[:12]


def secret_name(name: str) -> bool:
    """Whether a variable, flag or key of this name holds a secret; its last word decides.

    ``HF_TOKEN``, ``--api-key``, ``db.password`` and ``apikey`` are secret;
    ``max_tokens``, ``num_key_value_heads`` and ``TOKENIZERS_PARALLELISM`` are not.
    """
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    if not words:
        return False
    last = words[-1]
    return last in _NOUNS or last.endswith(("token", "secret", "password", "apikey", "credential", "credentials"))


def _mask_value(match: re.Match[str]) -> str:
    """The match with its ``value`` group masked, when its ``name`` group is a secret's name."""
    if not secret_name(match.group("name")):
        return match.group(0)
    start, end = (i - match.start() for i in match.span("value"))
    whole = match.group(0)
    return whole[:start] + mask(match.group("value")) + whole[end:]


class Scrubber:
    """Masks secrets in text, argv, environments and JSON records.

    Parameters
    ----------
    known
        Values that are secret wherever they appear.
    environ
        Also treat the values of this process's secret-named environment variables as known.
    """

    def __init__(self, known: Iterable[str] = (), *, environ: bool = True) -> None:
        values = set(known)
        if environ:
            values.update(v for k, v in os.environ.items() if secret_name(k))
        # Longest first, so that a secret containing another is masked whole.
        self.known = tuple(sorted((v for v in values if len(v) >= _KNOWN_MIN_LENGTH and not _MASKED.fullmatch(v)),
                                  key=len, reverse=True))

    @classmethod
    def for_command(cls, argv: Sequence[str], env: Mapping[str, str]) -> Scrubber:
        """A scrubber that also knows the secrets of a server's own argv and environment."""
        known = [v for k, v in env.items() if secret_name(k)]
        for i, arg in enumerate(argv):
            flag, eq, value = arg.partition("=")
            if flag.startswith("-") and secret_name(flag):
                if eq:
                    known.append(value)
                elif i + 1 < len(argv):
                    known.append(argv[i + 1])
        return cls(known)

    def text(self, text: str) -> str:
        """Mask every secret in free text (a log line, a message, a command line)."""
        text = _URL_USERINFO.sub(lambda m: m.group("scheme") + mask(m.group("userinfo")) + "@", text)
        for value in self.known:
            if value in text:
                text = text.replace(value, mask(value))
        text = _FLAG.sub(_mask_value, text)
        return _ASSIGN.sub(_mask_value, text)

    def argv(self, argv: Sequence[str]) -> list[str]:
        """An argv with the values of secret flags (``--hf-token X``, ``--api-key=X``) and secrets in text masked."""
        out: list[str] = []
        hide_next = False
        for arg in argv:
            if hide_next:
                out.append(mask(arg))
                hide_next = False
                continue
            flag, eq, value = arg.partition("=")
            if flag.startswith("-") and secret_name(flag):
                out.append(f"{flag}={mask(value)}" if eq else arg)
                hide_next = not eq
            else:
                out.append(self.text(arg))
        return out

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        """An environment with the values of secret-named variables masked, and secrets in the others."""
        return {k: mask(v) if secret_name(k) else self.text(v) for k, v in env.items()}

    def record(self, value: Any) -> Any:
        """A JSON value with every secret masked: secret-named keys, argv-like string lists, and text."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {k: mask(v) if isinstance(v, str) and isinstance(k, str) and secret_name(k) else self.record(v)
                    for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            if value and all(isinstance(item, str) for item in value):
                return self.argv(value)
            return [self.record(item) for item in value]
        return value

    def file(self, path: Path) -> None:
        """Mask every secret in a text file (a server log in scratch), rewriting it in place."""
        data = path.read_bytes().decode("utf-8", "surrogateescape")
        scrubbed = "".join(self.text(line) for line in data.splitlines(keepends=True))
        if scrubbed != data:
            path.write_bytes(scrubbed.encode("utf-8", "surrogateescape"))
