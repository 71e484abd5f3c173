"""Previews while a job renders: the encoder's MPEG-TS copy remuxed into an MP4 that plays, with
video and audio covering the chunks written so far (or video alone, for a text2video model); and the
publisher that stores them."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from jobservice.catalog import ValidationPolicy
from jobservice.media.probe import probe_media
from jobservice.storage import LocalStore
from tests.validation.conftest import ffmpeg, moving_frames
from workers.run.preview import PreviewPublisher
from workers.video import StreamingEncoder
from workers.video.preview import PreviewError, build_preview

W = H = 128
FPS = 25
CHUNK = 28  # the reference talking head's new frames per chunk


@pytest.fixture
def tone(tmp_path: Path) -> Path:
    path = tmp_path / "tone.wav"
    ffmpeg("-f", "lavfi", "-i", "sine=frequency=330:sample_rate=16000:duration=12", str(path))
    return path


def encoder(tmp_path: Path, policy: ValidationPolicy, audio: Path, frames: int) -> StreamingEncoder:
    return StreamingEncoder(
        out_path=tmp_path / "out.mp4",
        width=W,
        height=H,
        fps=FPS,
        policy=policy,
        audio_path=audio,
        duration_s=frames / FPS,
        preview_path=tmp_path / "preview.ts",
    )


def test_each_preview_plays_with_video_and_audio_of_the_chunks_so_far(
    tmp_path: Path, policy: ValidationPolicy, tone: Path
) -> None:
    total = 5 * CHUNK
    with encoder(tmp_path, policy, tone, total) as enc:
        for chunk in range(5):
            enc.write(moving_frames(chunk * CHUNK, CHUNK, W, H))
            time.sleep(0.3)  # the encoder's pace: it holds no frame back (zerolatency)
            made = build_preview(tmp_path / "preview.ts", tmp_path / f"preview-{chunk}.mp4")
            facts = probe_media(made, count_frames=True)
            rendered = (chunk + 1) * CHUNK / FPS
            assert facts.video is not None and facts.audio is not None, facts
            assert (facts.video.width, facts.video.height) == (W, H)
            assert facts.video.codec_name == "h264" and facts.audio.codec_name == "aac"
            # Every frame written so far but the last few still in the encoder and the muxer (a
            # packet of MPEG-TS ends at the next one): 1 to 3 frames on a loaded two-core machine.
            decoded = facts.video.nb_read_frames
            assert decoded is not None and (chunk + 1) * CHUNK - 4 <= decoded <= (chunk + 1) * CHUNK
            assert facts.duration_s is not None and abs(facts.duration_s - rendered) < 0.2, facts
            assert facts.audio.duration_s is not None and abs(facts.audio.duration_s - rendered) < 0.25
        result = enc.finish()
    # The final video is untouched by the preview copy.
    assert result.frames_written == total and result.decoded_frames == total
    final = probe_media(result.path)
    assert final.video is not None and final.audio is not None
    assert final.duration_s is not None and abs(final.duration_s - total / FPS) < 0.1


def test_a_video_only_stream_gives_video_only_previews_whose_record_matches_the_file(
    tmp_path: Path, policy: ValidationPolicy
) -> None:
    """A text2video model has no audio: its frames alone go through the tee, the remux and the probe,
    and each record's ``frames`` and ``seconds`` are those of the file stored (the span so far)."""
    chunk, fps = 16, 16  # the reference text2video's decode chunk, at its default frame rate
    store = LocalStore(tmp_path / "store")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    records: list[dict[str, Any]] = []
    publisher = PreviewPublisher(
        store=store,
        key_of=lambda name: f"jobs/t2v/{name}",
        announce=records.append,
        folder=scratch,
        interval=0.2,
        record={"attempt": 1, "try": 1},
    )
    total = 6 * chunk
    enc = StreamingEncoder(
        out_path=scratch / "out.mp4",
        width=W,
        height=H,
        fps=fps,
        policy=policy,
        duration_s=total / fps,
        preview_path=publisher.ts_path,
    )
    with enc:
        publisher.start()
        for k in range(6):
            enc.write(moving_frames(k * chunk, chunk, W, H))
            publisher.frames_out((k + 1) * chunk)
            time.sleep(0.3)  # a chunk's decode: the publisher keeps up
        summary = publisher.close()
        result = enc.finish()
    assert summary["failures"] == 0 and summary["published"] == len(records) >= 2, summary
    kept = {info.key for info in store.list("jobs/t2v/")}
    checked = 0
    for record in records:
        if record["key"] not in kept:
            continue  # an older one, deleted as newer ones came
        facts = probe_media(store.local_path(record["key"]) or Path("missing"), count_frames=True)
        assert facts.video is not None and facts.audio is None, facts
        assert facts.video.codec_name == "h264" and (facts.video.width, facts.video.height) == (W, H)
        assert facts.video.nb_read_frames == record["frames"] and 0 < record["frames"] <= total
        # The span it covers: its frames at the clip's rate, as the file says.
        assert facts.duration_s is not None and abs(facts.duration_s - record["seconds"]) < 0.01
        assert abs(record["seconds"] - record["frames"] / fps) < 0.01, record
        checked += 1
    assert checked == min(3, len(records))
    # The final video is untouched by the preview copy.
    assert result.frames_written == result.decoded_frames == total
    final = probe_media(result.path)
    assert final.video is not None and final.audio is None
    assert final.duration_s is not None and abs(final.duration_s - total / fps) < 0.1


def test_nothing_encoded_yet_is_an_error_not_a_file(tmp_path: Path) -> None:
    with pytest.raises(PreviewError):
        build_preview(tmp_path / "preview.ts", tmp_path / "p.mp4")
    (tmp_path / "preview.ts").write_bytes(b"not a transport stream")
    with pytest.raises(PreviewError, match="ffmpeg exited"):
        build_preview(tmp_path / "preview.ts", tmp_path / "p.mp4")
    assert not (tmp_path / "p.mp4").exists()


def test_publisher_stores_previews_at_its_pace_and_keeps_the_last_three(
    tmp_path: Path, policy: ValidationPolicy, tone: Path
) -> None:
    store = LocalStore(tmp_path / "store")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    records: list[dict[str, Any]] = []
    announced = threading.Event()

    def announce(record: dict[str, Any]) -> None:
        records.append(record)
        announced.set()

    publisher = PreviewPublisher(
        store=store,
        key_of=lambda name: f"jobs/j1/{name}",
        announce=announce,
        folder=scratch,
        interval=0.3,
        record={"attempt": 1, "try": 1},
    )
    total = 8 * CHUNK
    enc = StreamingEncoder(
        out_path=scratch / "out.mp4",
        width=W,
        height=H,
        fps=FPS,
        policy=policy,
        audio_path=tone,
        duration_s=total / FPS,
        preview_path=publisher.ts_path,
    )
    with enc:
        publisher.start()
        first_out = time.monotonic()
        enc.write(moving_frames(0, CHUNK, W, H))
        publisher.frames_out(CHUNK)
        assert announced.wait(5.0), "the first chunk's preview never came"
        first_delay = time.monotonic() - first_out
        for chunk in range(1, 8):
            enc.write(moving_frames(chunk * CHUNK, CHUNK, W, H))
            publisher.frames_out((chunk + 1) * CHUNK)
            time.sleep(0.2)
        summary = publisher.close()
        enc.finish()
    # The first goes out at once (no interval to wait), the later ones at most every 0.3 s.
    assert first_delay < 2.0
    assert 4 <= summary["published"] == len(records) < 8
    assert [r["number"] for r in records] == list(range(1, len(records) + 1))
    first = records[0]
    assert CHUNK - 4 <= first["frames"] <= CHUNK and first["state"] == "ready" and first["attempt"] == 1
    stamps = [r["published_at"] for r in records]
    assert stamps == sorted(stamps)
    assert summary["first_delay_ms"] is not None and summary["failures"] == 0
    kept = sorted(info.key for info in store.list("jobs/j1/"))
    last = len(records)
    assert kept == sorted({f"jobs/j1/preview-{n}.mp4" for n in (last - 2, last - 1, last) if n >= 1})
    latest = probe_media(store.local_path(records[-1]["key"]) or Path("missing"))
    assert latest.video is not None and latest.audio is not None
    assert latest.video.nb_frames == records[-1]["frames"]
    assert latest.duration_s is not None and abs(latest.duration_s - records[-1]["seconds"]) < 0.01
