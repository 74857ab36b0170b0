"""Checkpoint content identity: per-file SHA-256 in parallel, one identity, a cache that makes a repeat free."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from h3bench.errors import UsageError
from h3bench.evidence.codec import to_json
from h3bench.host import checkpoint
from h3bench.host.checkpoint import CheckpointFile, content_identity


@pytest.fixture
def model(tmp_path: Path) -> Path:
    root = tmp_path / "MiniMax-H3"
    (root / "transformer").mkdir(parents=True)
    (root / "transformer" / "model-00001.safetensors").write_bytes(os.urandom(3 << 20) + b"a")
    (root / "transformer" / "model-00002.safetensors").write_bytes(b"b" * 1000)
    (root / "config.json").write_text('{"model": "h3"}')
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / ".cache" / "huggingface").mkdir(parents=True)
    (root / ".cache" / "huggingface" / "x.lock").write_text("")
    return root


def identity(root: Path, cache: Path, **kwargs) -> checkpoint.CheckpointIdentity:
    return content_identity(root, cache=cache, progress=None, **kwargs)


def test_every_file_hashed_into_one_identity_over_the_sorted_manifest(model: Path, tmp_path: Path) -> None:
    result = identity(model, tmp_path / "cache.json")
    names = [f.name for f in result.files]
    assert names == ["config.json", "transformer/model-00001.safetensors", "transformer/model-00002.safetensors"]
    for f in result.files:
        data = (model / f.name).read_bytes()
        assert f == CheckpointFile(f.name, len(data), hashlib.sha256(data).hexdigest())
    assert result.manifest.splitlines()[0] == f"{result.files[0].sha256}  15  config.json"
    assert result.identity == "sha256:" + hashlib.sha256(result.manifest.encode()).hexdigest()
    assert result.total_bytes == result.hashed_bytes == sum(f.size for f in result.files)
    assert to_json(result)["files"][2] == {"name": names[2], "size": 1000, "sha256": hashlib.sha256(b"b" * 1000).hexdigest()}


def test_the_identity_changes_with_any_byte_or_name(model: Path, tmp_path: Path) -> None:
    before = identity(model, tmp_path / "cache.json").identity
    (model / "config.json").write_text('{"model": "h4"}')  # same size, other bytes
    changed = identity(model, tmp_path / "cache.json").identity
    assert changed != before
    (model / "config.json").rename(model / "config2.json")
    assert identity(model, tmp_path / "cache.json").identity not in (before, changed)


def test_a_repeat_run_reads_nothing_and_a_touched_file_is_read_again(model: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache.json"
    first = identity(model, cache, workers=1)
    again = identity(model, cache, workers=4)
    assert again.identity == first.identity and again.hashed_bytes == 0
    shard = model / "transformer" / "model-00002.safetensors"
    os.utime(shard, ns=(shard.stat().st_atime_ns, shard.stat().st_mtime_ns + 1))
    assert identity(model, cache).hashed_bytes == 1000
    cache.write_text("not json")  # a broken cache costs time, never correctness
    assert identity(model, cache).identity == first.identity


def test_progress_is_shown_while_files_are_read(model: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(checkpoint, "_PROGRESS_EVERY_S", 0.0)
    lines: list[str] = []
    content_identity(model, cache=tmp_path / "cache.json", progress=lines.append)
    assert lines and lines[-1].startswith(f"h3bench: hashing checkpoint {model}: 0.0 of 0.0 GB (100%), ")
    assert lines[-1].endswith(" GB/s")


def test_a_model_that_is_not_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is not a directory"):
        content_identity(tmp_path / "MiniMaxAI/MiniMax-H3", cache=tmp_path / "c.json", progress=None)
