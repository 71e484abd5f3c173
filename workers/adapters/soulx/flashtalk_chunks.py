"""Chunks from a FlashTalk resident into the video: ask for each, check it, read its frames.

The resident writes each chunk's new frames as raw RGB to a file and answers with its path and
telemetry; the adapter keeps frames up to the audio's length and records the chunk figures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from jobservice.reports.run_report import ChunkTelemetry
from workers.adapters.base import AdapterError, RunContext
from workers.adapters.processes.resident_client import ResidentGone, ResidentWorker
from workers.adapters.soulx.flashtalk_checkout import check_chunk


def stream_chunks(
    resident: ResidentWorker,
    *,
    ctx: RunContext,
    chunks: int,
    per_chunk: int,
    keep: int,
    size: tuple[int, int],
    chunk_timeout: float,
) -> int:
    """Generate ``chunks`` chunks into ``ctx``, keeping ``keep`` frames in all; returns the frames kept."""
    height, width = size
    emitted = 0
    for index in range(chunks):
        ctx.check_cancel()
        answer = request_chunk(resident, index, ctx, chunk_timeout)
        check_chunk(answer, per_chunk, ctx)
        frames = read_frames(Path(answer["path"]), int(answer["frames"]), height, width)
        frames = frames[: keep - emitted]
        ctx.emit_frames(frames)
        emitted += len(frames)
        ctx.record_chunk(
            ChunkTelemetry(
                index=index,
                frames=int(answer["frames"]),
                audio_embedding_ms=float(answer.get("audio_embedding_ms", 0.0)),
                core_ms=float(answer.get("core_ms", 0.0)),
                copy_ms=float(answer.get("copy_ms", 0.0)),
                total_ms=float(answer.get("total_ms", 0.0)),
            )
        )
        ctx.progress((index + 1) / chunks)
    return emitted


def request_chunk(
    resident: ResidentWorker, index: int, ctx: RunContext, chunk_timeout: float
) -> dict[str, Any]:
    """Ask for chunk ``index`` and check that the answer is that chunk."""
    answer = resident.request(
        {"op": "chunk", "index": index},
        timeout=chunk_timeout,
        check_cancel=ctx.check_cancel,
        during=f"chunk {index}",
    )
    if answer.get("event") != "chunk" or int(answer.get("index", -1)) != index:
        raise ResidentGone("model_crashed", f"the resident answered {answer!r} to chunk {index}")
    return answer


def read_frames(path: Path, count: int, height: int, width: int) -> np.ndarray:
    """A chunk's raw RGB frames [N, H, W, 3] written by the resident (and deleted once read)."""
    try:
        data = np.fromfile(path, dtype=np.uint8)
    except OSError as exc:
        raise AdapterError("model_error", f"the chunk file {path} cannot be read: {exc}") from exc
    finally:
        path.unlink(missing_ok=True)
    if data.size != count * height * width * 3:
        raise AdapterError(
            "model_error", f"chunk {path.name} holds {data.size} bytes, not {count}x{height}x{width}x3"
        )
    return data.reshape(count, height, width, 3)
