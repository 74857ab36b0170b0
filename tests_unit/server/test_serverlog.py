"""h3bench.server.log: the attention backend a vLLM-Omni server's workers resolved, read from its log."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from h3bench.errors import AttentionBackendError
from h3bench.server.log import attention_backends, read_attention_backends, require_attention_backend

ROOT = Path(__file__).resolve().parents[2]
FAKE_VLLM = Path(__file__).parents[1] / "fakes" / "vllm"
CYAN, RESET = "\x1b[36m", "\x1b[0m"


def worker_line(rank: int, backend: str, role: str = "self", via: str = "platform default", category: str = "") -> str:
    """One worker's line as vLLM-Omni writes it, coloured (selector.py logs once per process and role)."""
    role_text = f"role={role!r}" + (f" (role_category={category!r})" if category else "")
    return (f"{CYAN}(DiffusionWorker_SP{rank} pid={4000 + rank}){RESET} INFO 08-22 12:00:0{rank} [selector.py:94] "
            f"Resolved diffusion attention backend '{backend}' for {role_text} via {via}")


def test_every_worker_naming_the_same_backend_for_role_self_gives_that_backend():
    lines = [worker_line(rank, "FLASH_ATTN") for rank in range(8)]
    lines += [worker_line(rank, "SDPA", role="minimax_h3.token_refiner", category="self") for rank in range(8)]
    lines.append("INFO 08-22 12:00:09 [api_server.py] Starting vLLM API server (pure diffusion mode)")
    found = attention_backends("\n".join(lines))
    # The token refiner's own backend is another role: only the DiT's blocks (role 'self') count.
    assert found.used == ("FLASH_ATTN",) and found.via == ("platform default",)


def test_workers_that_disagree_are_all_reported():
    text = "\n".join([worker_line(0, "FLASH_ATTN"), worker_line(1, "SDPA"), worker_line(2, "FLASH_ATTN")])
    assert attention_backends(text).used == ("FLASH_ATTN", "SDPA")


def test_a_log_without_the_line_names_no_backend(tmp_path: Path):
    assert attention_backends("INFO nothing about attention\n").used == ()
    assert read_attention_backends(tmp_path / "missing.log").used == ()


def test_the_expected_backend_passes_when_every_worker_used_it_and_fails_otherwise(tmp_path: Path):
    log = tmp_path / "server.log"
    log.write_text("\n".join(worker_line(rank, "FLASH_ATTN", via="attention_config.default") for rank in range(4)))
    assert require_attention_backend("FLASH_ATTN", log).used == ("FLASH_ATTN",)
    assert require_attention_backend(None, log).used == ("FLASH_ATTN",)  # nothing expected: only recorded
    with pytest.raises(AttentionBackendError, match="used attention backend FLASH_ATTN .* expects SDPA") as caught:
        require_attention_backend("SDPA", log)
    assert caught.value.expected == "SDPA" and caught.value.used == ("FLASH_ATTN",)
    log.write_text(worker_line(0, "FLASH_ATTN") + "\n" + worker_line(1, "SDPA"))
    with pytest.raises(AttentionBackendError, match="FLASH_ATTN, SDPA .*picks FLASH_ATTN only where mindiesd"):
        require_attention_backend("FLASH_ATTN", log)
    log.write_text("no such line\n")
    with pytest.raises(AttentionBackendError, match="names no attention backend for role 'self'"):
        require_attention_backend("FLASH_ATTN", log)


@pytest.mark.parametrize(
    ("flags", "mindiesd", "used", "via"),
    [
        ((), "1", "FLASH_ATTN", "platform default"),
        ((), "0", "SDPA", "platform default"),
        (("--diffusion-attention-backend", "TORCH_SDPA"), "1", "SDPA", "attention_config.default"),
        (("--diffusion-attention-config", '{"per_role":{"self":"FLASH_ATTN_HUB"}}'), "0", "FLASH_ATTN",
         "attention_config.per_role['self']"),
    ],
)
def test_the_fake_vllm_logs_the_backend_as_upstream_chooses_it(flags, mindiesd, used, via):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FAKE_VLLM_DRY_RUN": "1", "FAKE_VLLM_MINDIESD": mindiesd,
           "ASCEND_RT_VISIBLE_DEVICES": "0,1"}
    done = subprocess.run([sys.executable, str(FAKE_VLLM), "serve", "m", "--omni", "--usp", "2", *flags],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "\x1b[36m" in done.stderr, "coloured, as vLLM-Omni logs even when piped"
    found = attention_backends(done.stderr)
    assert (found.used, found.via) == ((used,), (via,))
