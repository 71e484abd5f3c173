"""Stand-ins for model servers, each a werkzeug app on a free port in a thread of the test.

* ``FakeVllmOmni``: vLLM-Omni's video API (POST /v1/videos, GET /v1/videos/{id}, /content,
  DELETE, POST /v1/videos/sync) with its multipart form, its answers and headers, one model per
  instance. Records every request; tracks how many generations ran at once.

The OmniRT tests run the real ``omnirt serve`` (tests/standins/omnirt_real.py).

``mode`` picks what the next generation does: ok, oom, reject, hang, timeout (sync 504), black.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Self

from werkzeug import Request, Response
from werkzeug.serving import make_server
from werkzeug.wrappers import Response as WResponse

from tests.standins.common import make_video


class _Server:
    def __init__(self, folder: Path, port: int = 0) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.requests: list[dict[str, Any]] = []
        self.mode = "ok"
        self.lock = threading.Lock()
        self._server = make_server("127.0.0.1", port, self._wsgi, threaded=True)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()

    def _wsgi(self, environ: Any, start_response: Any) -> Any:
        request = Request(environ)
        response = self.handle(request)
        return response(environ, start_response)

    def handle(self, request: Request) -> Response:  # pragma: no cover - overridden
        raise NotImplementedError

    @staticmethod
    def json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
        return WResponse(json.dumps(body), status=status, mimetype="application/json", headers=headers)


class FakeVllmOmni(_Server):
    """One vllm-omni serve instance serving ``model``."""

    def __init__(
        self,
        folder: Path,
        *,
        model: str = "Wan2.1-T2V-1.3B-Diffusers",
        gen_seconds: float = 0.3,
        port: int = 0,
    ) -> None:
        super().__init__(folder, port)
        self.model = model
        self.gen_seconds = gen_seconds
        self.videos: dict[str, dict[str, Any]] = {}
        self.deleted: list[str] = []
        self.active = 0
        self.max_active = 0

    def handle(self, request: Request) -> Response:
        path, method = request.path, request.method
        if method == "GET" and path == "/health":  # vLLM's readiness: 200 once the model is loaded
            return WResponse("", status=200)
        if method == "POST" and path in ("/v1/videos", "/v1/videos/sync"):
            form = request.form.to_dict()
            self.requests.append(
                {
                    "path": path,
                    "form": form,
                    "content_type": request.mimetype,
                    "auth": request.headers.get("Authorization"),
                }
            )
            if form.get("model") not in (None, self.model):
                return self.json({"error": {"message": f"model {form['model']} is not served here"}}, 400)
            if self.mode == "reject":
                return self.json(
                    {"error": {"code": "invalid_request", "message": "num_frames must be 4k+1"}}, 422
                )
            if path.endswith("/sync"):
                return self._sync(form)
            video_id = f"video_gen_{uuid.uuid4().hex[:12]}"
            video: dict[str, Any] = {
                "id": video_id,
                "object": "video",
                "model": self.model,
                "status": "queued",
                "progress": 0,
                "prompt": form["prompt"],
            }
            self.videos[video_id] = video
            threading.Thread(target=self._generate, args=(video, form, self.mode), daemon=True).start()
            return self.json(video)
        parts = path.strip("/").split("/")
        if len(parts) >= 3 and parts[:2] == ["v1", "videos"]:
            if parts[2] not in self.videos:
                return self.json({"error": {"message": "not found"}}, 404)
            video = self.videos[parts[2]]
            if method == "DELETE":
                self.deleted.append(video["id"])
                video["status"] = "failed"
                video["error"] = {"code": "cancelled", "message": "deleted"}
                return self.json({"id": video["id"], "deleted": True, "object": "video.deleted"})
            if len(parts) == 4 and parts[3] == "content":
                if video["status"] == "failed":
                    return self.json({"error": video.get("error")}, 422)
                if video["status"] != "completed":
                    return self.json({"error": {"message": "Generation is still in-progress"}}, 404)
                return WResponse(Path(video["file"]).read_bytes(), mimetype="video/mp4")
            status = 500 if video["status"] == "failed" else 200
            return self.json({k: v for k, v in video.items() if k != "file"}, status)
        return self.json({"error": {"message": f"no route {method} {path}"}}, 404)

    def _render(self, form: dict[str, str], black: bool) -> Path:
        out = self.folder / f"{uuid.uuid4().hex[:8]}.mp4"
        make_video(
            out,
            width=int(form["width"]),
            height=int(form["height"]),
            fps=float(form["fps"]),
            frames=int(form["num_frames"]),
            black=black,
        )
        return out

    def _busy(self, delta: int) -> None:
        with self.lock:
            self.active += delta
            self.max_active = max(self.max_active, self.active)

    def _generate(self, video: dict[str, Any], form: dict[str, str], mode: str) -> None:
        self._busy(+1)
        try:
            video["status"] = "in_progress"
            started = time.perf_counter()
            for step in range(5):
                if video["status"] == "failed":
                    return  # deleted
                video["progress"] = step * 20
                time.sleep(self.gen_seconds / 5)
            while mode == "hang" and video["status"] != "failed":
                time.sleep(0.1)  # the server swallowed an OOM and stays in_progress (vllm-omni #2327)
            if video["status"] == "failed":
                return
            if mode == "oom":
                video.update(
                    status="failed",
                    error={
                        "code": "internal_error",
                        "message": "CUDA out of memory. Tried to allocate 3.2 GiB",
                    },
                )
                return
            video["file"] = str(self._render(form, black=mode == "black"))
            video.update(
                status="completed",
                progress=100,
                inference_time_s=round(time.perf_counter() - started, 3),
                stage_durations={
                    "MiniMaxH3Pipeline.diffuse": 1.75,
                    "vae.decode": 0.25,
                    "queue_wait_ms": 12.5,
                },
                peak_memory_mb=4096.5,
            )
        finally:
            self._busy(-1)

    def _sync(self, form: dict[str, str]) -> Response:
        self._busy(+1)
        try:
            time.sleep(self.gen_seconds)
            if self.mode == "timeout":
                return self.json({"detail": "Video generation timed out after 600s"}, 504)
            if self.mode == "oom":
                return self.json({"error": {"message": "CUDA out of memory"}}, 500)
            data = self._render(form, black=self.mode == "black").read_bytes()
            headers = {
                "X-Request-Id": f"video_sync-{uuid.uuid4().hex[:8]}",
                "X-Model": self.model,
                "X-Inference-Time-S": "2.5",
                "X-Stage-Durations": json.dumps({"diffuse": 1.75, "vae.decode": 0.25}),
                "X-Peak-Memory-MB": "4096.5",
            }
            return WResponse(data, mimetype="video/mp4", headers=headers)
        finally:
            self._busy(-1)
