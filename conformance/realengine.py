"""vLLM-Omni's real diffusion engine on a CPU: the plugins, the tiny checkpoint, the ``vllm serve`` command.

``./dev conformance --engine-mode real`` and the arms of
``fixtures/runspecs/conformance-real.toml`` start upstream's own server,
``vllm serve MODEL --omni``, from the conformance environment. Three things
make it run on a machine without an accelerator, and nothing else is
replaced:

- two entry points (:mod:`conformance.plugins`), declared by a
  ``.dist-info`` that :func:`plugin_dir` writes and ``PYTHONPATH`` carries
  into every process the server spawns: ``vllm_omni.platform_plugins`` →
  :mod:`conformance.cpu_platform` (vLLM-Omni has no CPU platform)
  and ``vllm_omni.general_plugins`` → :func:`conformance.tiny_h3.register`
  (H3's arch key served by the tiny H3-shaped pipeline);
- a random-weight checkpoint in H3's layout (:func:`ensure_checkpoint`),
  written once per engine, seed and version of :mod:`~conformance.tiny_h3`;
- the flags a CPU needs (:data:`CPU_FLAGS`): ``--step-execution``, because
  request mode hands every output to a thread that needs an accelerator
  stream (``diffusion/worker/diffusion_worker.py``, ``_async_output_loop``);
  with it ``--default-sampling-params`` giving H3's default of 50 steps,
  because step execution's scheduler needs the step count of every request
  (``diffusion/sched/step_scheduler.py``, ``_get_total_steps``: an
  ``assert``, a 500 with an empty message for a request without
  ``num_inference_steps``), where request mode takes the pipeline's
  default; and ``--distributed-executor-backend mp``, so that the model
  runs in a spawned worker process as on an NPU host (one device alone would
  run it inside the API server, ``diffusion/executor/abstract.py``);

and the environment :data:`LANE_ENV` (``VLLM_TARGET_DEVICE=cpu`` selects
vLLM's CPU platform, whose memory queries the worker's loader uses).

``python -m conformance.realengine serve MODEL ARGS...`` is the
launcher a RunSpec arm names (``launcher = ["{python}", "-m",
"conformance.realengine"]``): it replaces itself (``exec``, same
process id) with the environment's ``vllm serve``, after turning the model
name :data:`TINY_MODEL` into the checkpoint's path (``$H3BENCH_TINY_CHECKPOINT``,
which the lane sets to the checkpoint it wrote, else this checkout's
:func:`checkpoint_dir`); the served model name stays :data:`TINY_MODEL`
(``--served-model-name``, in the arm's flags).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from conformance.envbuild import DEFAULT_ENGINE, REPO_ROOT, environment_root, server_command
from conformance.serve import ENGINE_ENV
from h3bench.errors import H3BenchError, UsageError

__all__ = ["CHECKPOINT_ENV", "CPU_FLAGS", "LANE_ENV", "TINY_MODEL", "CheckpointError", "checkpoint_dir",
           "ensure_checkpoint", "main", "plugin_dir", "serve_command", "serve_env"]

TINY_MODEL = "h3bench/tiny-h3"
CHECKPOINT_ENV = "H3BENCH_TINY_CHECKPOINT"  # the checkpoint a lane wrote, for the servers it and its campaign start
CPU_FLAGS = ("--step-execution", "--default-sampling-params", '{"0": {"num_inference_steps": 50}}',
             "--distributed-executor-backend", "mp")
LANE_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_WORKER_MULTIPROC_METHOD": "spawn", "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1"}
_DIST = "h3bench_conformance_cpu-0.dist-info"
_ENTRY_POINTS = """[vllm_omni.platform_plugins]
h3bench_cpu = conformance.plugins:cpu_platform

[vllm_omni.general_plugins]
h3bench_tiny_h3 = conformance.plugins:tiny_h3
"""
_METADATA = "Metadata-Version: 2.1\nName: h3bench-conformance-cpu\nVersion: 0\n"
_TINY_SOURCES = [Path(__file__).with_name(name) for name in ("tiny_h3.py", "tiny_modules.py")]


class CheckpointError(H3BenchError):
    """The tiny checkpoint could not be written (``log_tail=``)."""

    def __init__(self, message: str, *, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


def plugin_dir(engine: str = DEFAULT_ENGINE, *, root: Path | None = None) -> Path:
    """The directory whose ``.dist-info`` declares the two entry points (written when missing or different)."""
    base = (root or environment_root(engine)) / "plugins"
    dist = base / _DIST
    for name, text in (("METADATA", _METADATA), ("entry_points.txt", _ENTRY_POINTS)):
        path = dist / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            dist.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    return base


def serve_env(engine: str = DEFAULT_ENGINE, *, root: Path | None = None) -> dict[str, str]:
    """What the server's environment adds: this checkout and the plugins on ``PYTHONPATH``, and :data:`LANE_ENV`."""
    return {"PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(plugin_dir(engine, root=root))]), **LANE_ENV}


def checkpoint_dir(engine: str = DEFAULT_ENGINE, *, seed: int = 0, root: Path | None = None) -> Path:
    """Where the checkpoint of this engine, seed and version of ``tiny_h3.py`` and its networks lives."""
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in _TINY_SOURCES) + f"\0{seed}".encode()).hexdigest()[:12]
    return (root or environment_root(engine)) / f"tiny-h3-{digest}"


def ensure_checkpoint(engine: str = DEFAULT_ENGINE, *, seed: int = 0, root: Path | None = None) -> Path:
    """The tiny checkpoint, written by the conformance environment's Python on first use.

    Raises
    ------
    UsageError
        The environment is not built.
    CheckpointError
        Writing it failed (the log's tail is in the message).
    """
    target = checkpoint_dir(engine, seed=seed, root=root)
    if (target / "Ref2VA" / "transformer" / "diffusion_pytorch_model.safetensors").is_file():
        return target
    python = server_command(engine, root=root)[0][0]
    scratch = Path(tempfile.mkdtemp(prefix=".tiny-h3-", dir=target.parent))
    try:
        result = subprocess.run([python, "-m", "conformance.tiny_h3", str(scratch), "--seed", str(seed)],
                                env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **LANE_ENV}, capture_output=True,
                                text=True, check=False)
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).splitlines()[-20:])
            raise CheckpointError(f"writing the tiny checkpoint failed (exit code {result.returncode}):\n{tail}",
                                  log_tail=tail)
        scratch.rename(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def serve_command(engine: str = DEFAULT_ENGINE, *args: str, root: Path | None = None) -> tuple[list[str], dict[str, str]]:
    """``vllm serve ARGS`` in the environment, :data:`TINY_MODEL` as the model turned into the checkpoint's path.

    Raises
    ------
    UsageError
        The environment, or the checkpoint, is missing.
    """
    python = Path(server_command(engine, root=root)[0][0])
    argv = list(args)
    if len(argv) >= 2 and argv[0] == "serve" and argv[1] == TINY_MODEL:
        chosen = os.environ.get(CHECKPOINT_ENV)
        checkpoint = Path(chosen) if chosen else checkpoint_dir(engine, root=root)
        if not checkpoint.is_dir():
            raise UsageError(f"the tiny checkpoint is not written ({checkpoint}); run ./dev conformance "
                             f"--engine-mode real --engine {engine} first")
        argv[1] = str(checkpoint)
    return [str(python.with_name("vllm")), *argv], serve_env(engine, root=root)


def main(argv: list[str] | None = None) -> int:
    """Exec the environment's ``vllm`` with ``argv`` (engine: ``$H3BENCH_CONFORMANCE_ENGINE``, else the default)."""
    args = list(sys.argv[1:] if argv is None else argv)
    engine = os.environ.get(ENGINE_ENV) or DEFAULT_ENGINE
    try:
        command, env = serve_command(engine, *args)
    except UsageError as exc:
        print(f"conformance.realengine: error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(command[0], command, {**os.environ, **env})
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
