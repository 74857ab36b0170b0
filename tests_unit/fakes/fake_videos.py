"""A tiny /v1/videos server (FastAPI + uvicorn, vLLM-Omni's stack) for the client tests.

It returns one given MP4 for every request and answers like vLLM-Omni
(vLLM-Omni's entrypoints/openai/api_server.py). The prompt injects failures:

- ``status:<code>``: that HTTP status; 500 uses vLLM's ErrorResponse JSON
  (``error.message``), the others FastAPI's ``detail``;
- ``hang``: no answer for a minute;
- ``crash``: the server kills itself in the middle of the request;
- ``fail-job``: an async job that ends ``failed``.

``GET /_last_request`` returns what the last POST carried, so tests can check
the form as the server parsed it.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import signal
import time
import uuid
from pathlib import Path

import uvicorn
from fastapi import FastAPI, Form, HTTPException, Request, UploadFile
from fastapi.responses import FileResponse, JSONResponse, Response

STAGES = {
    "MiniMaxH3Pipeline.encode_prompt": 0.02,
    "MiniMaxH3Pipeline._encode_local_media": 0.03,
    "MiniMaxH3Pipeline.diffuse": 0.10,
    "MiniMaxH3Pipeline.denoise_step": 0.09,
    "MiniMaxH3Pipeline.decode": 0.04,
    "MiniMaxH3Pipeline.video_vae.decode_latent": 0.03,
    "MiniMaxH3Pipeline.audio_vae.decode_latent": 0.01,
    "MiniMaxH3Pipeline.post_decode": 0.05,  # step execution's: it runs decode (pipeline_minimax_h3.py)
}
SERVICE_S = 0.02 + 0.03 + 0.10 + 0.05  # the top-level stages: decode is inside post_decode


def build_app(model: str, mp4: Path) -> FastAPI:
    app = FastAPI()
    jobs: dict[str, dict] = {}
    last: dict = {}

    async def admit(form: dict, refs: list[UploadFile]) -> None:
        last.clear()
        last.update(form)
        last["references"] = [
            {"filename": r.filename, "content_type": r.content_type,
             "sha256": hashlib.sha256(await r.read()).hexdigest()}
            for r in refs
        ]
        try:
            json.loads(form["extra_params"] or "{}")
        except ValueError:
            raise HTTPException(400, detail="extra_params is not valid JSON") from None
        if form["model"] is not None and form["model"] != model:
            raise HTTPException(400, detail=f"model {form['model']!r} is not served here; this server serves {model!r}")
        prompt = form["prompt"]
        if prompt.startswith("status:"):
            code = int(prompt.partition(":")[2])
            if code == 500:
                raise _VllmError(f"injected failure {code}")
            raise HTTPException(code, detail=f"injected failure {code}")
        if prompt == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        if prompt == "hang":
            await asyncio.sleep(60)

    class _VllmError(Exception):
        pass

    @app.exception_handler(_VllmError)
    async def _vllm_error(request: Request, exc: _VllmError) -> JSONResponse:
        return JSONResponse({"error": {"message": str(exc), "type": "InternalServerError", "code": 500}}, 500)

    def form_dict(**fields: object) -> dict:
        return fields

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/_last_request")
    async def last_request() -> dict:
        return last

    @app.post("/v1/videos/sync")
    async def create_sync(
        prompt: str = Form(...),
        model: str | None = Form(None),
        width: str | None = Form(None),
        height: str | None = Form(None),
        fps: str | None = Form(None),
        num_inference_steps: str | None = Form(None),
        flow_shift: str | None = Form(None),
        seed: str | None = Form(None),
        extra_params: str | None = Form(None),
        input_references: list[UploadFile] | None = None,
    ) -> Response:
        form = form_dict(prompt=prompt, model=model, width=width, height=height, fps=fps,
                         num_inference_steps=num_inference_steps, flow_shift=flow_shift, seed=seed,
                         extra_params=extra_params)
        await admit(form, input_references or [])
        started = time.perf_counter()
        await asyncio.sleep(SERVICE_S)
        return FileResponse(
            mp4,
            media_type="video/mp4",
            headers={
                "X-Request-Id": f"video_sync-{uuid.uuid4().hex}",
                "X-Model": model or "fake-h3",
                "X-Inference-Time-S": f"{time.perf_counter() - started:.3f}",
                "X-Stage-Durations": json.dumps(STAGES, separators=(",", ":")),
                "X-Peak-Memory-MB": "1234.500",
            },
        )

    @app.post("/v1/videos")
    async def create_job(
        prompt: str = Form(...),
        model: str | None = Form(None),
        extra_params: str | None = Form(None),
        input_references: list[UploadFile] | None = None,
    ) -> dict:
        await admit(form_dict(prompt=prompt, model=model, extra_params=extra_params), input_references or [])
        job = {
            "id": f"video_gen_{uuid.uuid4().hex}",
            "object": "video",
            "status": "queued",
            "progress": 0,
            "model": model or "fake-h3",
            "prompt": prompt,
            "created_at": int(time.time()),
            "error": None,
        }
        jobs[job["id"]] = job

        async def run() -> None:
            job["status"] = "in_progress"
            started = time.perf_counter()
            await asyncio.sleep(SERVICE_S)
            if prompt == "fail-job":
                job.update(status="failed", error={"code": 500, "message": "worker raised: injected job failure"})
                return
            job.update(
                status="completed",
                progress=100,
                completed_at=int(time.time()),
                inference_time_s=round(time.perf_counter() - started, 3),
                stage_durations=STAGES,
                peak_memory_mb=1234.5,
            )

        job["_task"] = asyncio.create_task(run())
        return _public(job)

    @app.get("/v1/videos/{video_id}")
    async def retrieve(video_id: str) -> JSONResponse:
        job = jobs.get(video_id)
        if job is None:
            raise HTTPException(404, detail=f"video {video_id} not found")
        return JSONResponse(_public(job), status_code=500 if job["status"] == "failed" else 200)

    @app.get("/v1/videos/{video_id}/content")
    async def content(video_id: str) -> Response:
        job = jobs.get(video_id)
        if job is None or job["status"] in ("queued", "in_progress"):
            raise HTTPException(404, detail=f"video {video_id} is not available")
        if job["status"] == "failed":
            raise HTTPException(422, detail=f"video {video_id} failed")
        return FileResponse(mp4, media_type="video/mp4")

    return app


def _public(job: dict) -> dict:
    return {k: v for k, v in job.items() if not k.startswith("_")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", default="fake-h3")
    parser.add_argument("--mp4", type=Path, required=True)
    args = parser.parse_args()
    # A "hang" request in flight must not hold the shutdown for a minute.
    uvicorn.run(build_app(args.model, args.mp4), host=args.host, port=args.port, log_level="warning",
                timeout_graceful_shutdown=1)


if __name__ == "__main__":
    main()
