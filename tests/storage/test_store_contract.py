"""The ObjectStore contract, run against LocalStore (tmp_path) and S3Store (real moto HTTP server).

Tests taking the ``store`` fixture run once per back end; the rest cover one back end's extras.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import urllib.request
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from jobservice.settings import Settings
from jobservice.storage import (
    LocalStore,
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    S3Store,
    StoreUnavailable,
    make_store,
)
from jobservice.storage import s3 as s3_module
from jobservice.storage.local import CHUNK_SIZE
from tests.conftest import free_port

BIG_SIZE = 12 * 1024 * 1024 + 123  # > 2 parts of 5 MiB, and not a multiple of the part size


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@pytest.fixture(scope="module")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("big") / "source.mp4"
    path.write_bytes(os.urandom(BIG_SIZE))
    return path


# --- round trips ------------------------------------------------------------------------------
def test_put_file_get_file_big(store: ObjectStore, big_file: Path, tmp_path: Path) -> None:
    before = sha256(big_file)
    info = store.put_file("jobs/j1/outputs/video.mp4", big_file)
    assert info == ObjectInfo("jobs/j1/outputs/video.mp4", BIG_SIZE, "video/mp4")
    dest = store.get_file("jobs/j1/outputs/video.mp4", tmp_path / "new" / "dir" / "copy.mp4")
    assert dest == tmp_path / "new" / "dir" / "copy.mp4"
    assert sha256(dest) == before
    assert big_file.exists() and sha256(big_file) == before  # the caller's file is untouched


def test_put_file_get_file_small(store: ObjectStore, tmp_path: Path) -> None:
    src = tmp_path / "in.wav"
    src.write_bytes(b"RIFF....WAVEfmt small")
    assert store.put_file("jobs/j1/inputs/audio.wav", src).size == src.stat().st_size
    assert store.get_file("jobs/j1/inputs/audio.wav", tmp_path / "out.wav").read_bytes() == src.read_bytes()
    assert store.get_bytes("jobs/j1/inputs/audio.wav") == src.read_bytes()


def test_put_bytes_get_bytes_and_head(store: ObjectStore) -> None:
    data = b'{"ok": true, "frames": 120}'
    info = store.put_bytes("jobs/j1/report.json", data)
    assert info.size == len(data)
    assert store.get_bytes("jobs/j1/report.json") == data
    assert store.head("jobs/j1/report.json") == ObjectInfo(
        "jobs/j1/report.json", len(data), "application/json"
    )


def test_empty_object(store: ObjectStore) -> None:
    store.put_bytes("empty.bin", b"")
    assert store.head("empty.bin").size == 0
    assert store.get_bytes("empty.bin") == b""
    assert list(store.open_range("empty.bin")) == []


@pytest.mark.parametrize(
    ("ext", "expected"),
    [
        (".mp4", "video/mp4"),
        (".json", "application/json"),
        (".png", "image/png"),
        (".jpg", "image/jpeg"),
        (".webp", "image/webp"),
        (".wav", "audio/wav"),
        (".mp3", "audio/mpeg"),
        (".flac", "audio/flac"),
        (".ogg", "audio/ogg"),
        (".m4a", "audio/mp4"),
        (".unknownext", "application/octet-stream"),
    ],
)
def test_head_content_type_from_extension(store: ObjectStore, ext: str, expected: str) -> None:
    store.put_bytes(f"media/file{ext}", b"12345")
    assert store.head(f"media/file{ext}") == ObjectInfo(f"media/file{ext}", 5, expected)


def test_overwrite_replaces_content(store: ObjectStore, tmp_path: Path) -> None:
    store.put_bytes("a/report.json", b"x" * 1000)
    store.put_bytes("a/report.json", b"short")
    assert store.get_bytes("a/report.json") == b"short"
    assert store.head("a/report.json").size == 5
    src = tmp_path / "v.mp4"
    src.write_bytes(b"replaced by file")
    store.put_file("a/report.json", src)
    assert store.get_bytes("a/report.json") == b"replaced by file"


# --- existence, missing keys, deletion --------------------------------------------------------
def test_exists(store: ObjectStore) -> None:
    assert not store.exists("x/y.json")
    store.put_bytes("x/y.json", b"{}")
    assert store.exists("x/y.json")
    assert not store.exists("x")  # a "directory" is not an object


def test_missing_key_raises_object_not_found(store: ObjectStore, tmp_path: Path) -> None:
    store.put_bytes("present/one.txt", b"1")  # the bucket/root exists; only the key is missing
    with pytest.raises(ObjectNotFound):
        store.head("present/missing.txt")
    with pytest.raises(ObjectNotFound):
        store.get_bytes("present/missing.txt")
    with pytest.raises(ObjectNotFound):
        store.get_file("present/missing.txt", tmp_path / "dest.txt")
    assert not (tmp_path / "dest.txt").exists()
    with pytest.raises(ObjectNotFound):
        store.open_range("present/missing.txt", 0, 10)  # raised before iteration starts
    assert isinstance(ObjectNotFound("k"), KeyError)


def test_delete_is_idempotent(store: ObjectStore) -> None:
    store.put_bytes("d/one.txt", b"1")
    store.put_bytes("d/two.txt", b"2")
    store.delete("d/one.txt")
    store.delete("d/one.txt")
    store.delete("never/existed.txt")
    assert not store.exists("d/one.txt")
    assert store.get_bytes("d/two.txt") == b"2"


def test_delete_prefix(store: ObjectStore) -> None:
    for key in ["jobs/a/in.png", "jobs/a/out/video.mp4", "jobs/a/out/report.json", "jobs/ab/x", "jobs/b/y"]:
        store.put_bytes(key, key.encode())
    assert store.delete_prefix("jobs/a/") == 3
    assert [i.key for i in store.list("")] == ["jobs/ab/x", "jobs/b/y"]
    assert store.get_bytes("jobs/ab/x") == b"jobs/ab/x"
    assert store.delete_prefix("jobs/a/") == 0
    with pytest.raises(ValueError, match="empty"):
        store.delete_prefix("")


# --- listing and ranges -----------------------------------------------------------------------
def test_list_order_and_prefix_filter(store: ObjectStore) -> None:
    keys = ["b/z.txt", "a/c/d.bin", "a.txt", "a-1", "a/B.json", "a/b.json", "ab"]
    for n, key in enumerate(keys):
        store.put_bytes(key, b"x" * (n + 1))
    listed = list(store.list(""))
    # S3 order is UTF-8 byte order: '-' < '.' < '/' and upper case before lower case.
    assert [i.key for i in listed] == ["a-1", "a.txt", "a/B.json", "a/b.json", "a/c/d.bin", "ab", "b/z.txt"]
    assert {i.key: i.size for i in listed} == {key: n + 1 for n, key in enumerate(keys)}
    assert [i.key for i in store.list("a/")] == ["a/B.json", "a/b.json", "a/c/d.bin"]
    assert [i.key for i in store.list("a/b")] == ["a/b.json"]
    assert [i.key for i in store.list("a")] == [i.key for i in listed if i.key.startswith("a")]
    assert list(store.list("nothing/here/")) == []


def test_open_range(store: ObjectStore) -> None:
    data = os.urandom(2 * CHUNK_SIZE + 777)
    size = len(data)
    store.put_bytes("r/blob.bin", data)

    def read(start: int = 0, end: int | None = None) -> bytes:
        chunks = list(store.open_range("r/blob.bin", start, end))
        assert all(0 < len(c) <= CHUNK_SIZE for c in chunks)
        return b"".join(chunks)

    assert len(list(store.open_range("r/blob.bin"))) >= 3  # streamed, not one big read
    assert read() == data
    assert read(0, 0) == data[:1]
    assert read(1000, 200_000) == data[1000:200_001]
    assert read(CHUNK_SIZE - 5, CHUNK_SIZE + 5) == data[CHUNK_SIZE - 5 : CHUNK_SIZE + 6]
    assert read(size - 100) == data[-100:]
    assert read(size - 1, size - 1) == data[-1:]
    assert read(size - 10, size + 5000) == data[-10:]  # an end past the object is clipped
    assert read(size) == b""
    partial = store.open_range("r/blob.bin", 0)
    # Typed Iterator[bytes], but WSGI servers close() a body: it must be a closable generator.
    assert isinstance(partial, Generator)
    assert next(partial) == data[:CHUNK_SIZE]
    partial.close()  # a client that disconnects mid-stream; must not leak (warnings are errors)
    store.open_range("r/blob.bin", 5)  # created, never consumed
    with pytest.raises(ValueError):
        store.open_range("r/blob.bin", -1)
    with pytest.raises(ValueError):
        store.open_range("r/blob.bin", 10, 5)


# --- key safety, direct access, health --------------------------------------------------------
@pytest.mark.parametrize(
    "key", ["", "/etc/passwd", "../escape", "a/../../b", "a//b", "a/./b", "dir/", "a\\b", "nul\x00", "a/.."]
)
def test_unsafe_keys_rejected(store: ObjectStore, key: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        store.put_bytes(key, b"nope")
    with pytest.raises(ValueError):
        store.head(key)
    with pytest.raises(ValueError):
        store.get_file(key, tmp_path / "x")
    assert not (tmp_path / "escape").exists() and not (tmp_path / "b").exists()


def test_local_path_and_presigned_url(store: ObjectStore) -> None:
    data = os.urandom(50_000)
    store.put_bytes("jobs/j9/video.mp4", data)
    path = store.local_path("jobs/j9/video.mp4")
    url = store.presigned_url("jobs/j9/video.mp4", filename="my video.mp4")
    if isinstance(store, LocalStore):
        assert path is not None and path.read_bytes() == data
        assert path.is_relative_to(store.root)
        assert url is None
        return
    assert path is None
    assert url is not None and "X-Amz-Signature=" in url and "X-Amz-Expires=3600" in url
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.read() == data
        assert response.headers["Content-Disposition"] == 'attachment; filename="my video.mp4"'


def test_check_passes(store: ObjectStore) -> None:
    store.check()
    store.check()


# --- factory ----------------------------------------------------------------------------------
def test_make_store_builds_the_configured_backend(tmp_path: Path, moto_server: str) -> None:
    local = make_store(
        Settings(_env_file=None, storage_backend="local", storage_root=tmp_path / "objs")  # type: ignore[call-arg]
    )
    assert isinstance(local, LocalStore) and local.root == (tmp_path / "objs").resolve()
    default = make_store(Settings(_env_file=None, var_dir=tmp_path / "var"))  # type: ignore[call-arg]
    assert isinstance(default, LocalStore) and default.root == (tmp_path / "var" / "objects").resolve()
    remote = make_store(
        Settings(  # type: ignore[call-arg]  # _env_file: pydantic-settings' init argument, not a field
            _env_file=None,
            storage_backend="s3",
            s3_bucket="made-by-factory",
            s3_endpoint_url=moto_server,
            s3_access_key_id="testing",
            s3_secret_access_key=SecretStr("testing"),
        )
    )
    assert isinstance(remote, S3Store) and remote.bucket == "made-by-factory" and remote.backend == "s3"
    remote.put_bytes("k.txt", b"via factory")  # creates the bucket, proving the settings were wired
    assert remote.get_bytes("k.txt") == b"via factory"


# --- LocalStore specifics ---------------------------------------------------------------------
def test_local_check_fails_when_root_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a dir")
    with pytest.raises(StoreUnavailable):
        LocalStore(tmp_path / "file").check()
    with pytest.raises(StoreUnavailable):
        LocalStore(tmp_path / "file" / "below").check()
    fresh = LocalStore(tmp_path / "created" / "on" / "check")
    fresh.check()
    assert fresh.root.is_dir()


def test_local_layout_has_no_leftovers(local_store: LocalStore, big_file: Path) -> None:
    local_store.put_file("jobs/a/out/video.mp4", big_file)
    local_store.put_bytes("jobs/a/report.json", b"{}")
    local_store.put_bytes("jobs/b/report.json", b"{}")
    root = local_store.root
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) == [
        "jobs/a/out/video.mp4",
        "jobs/a/report.json",
        "jobs/b/report.json",
    ]  # no temp files survive a write
    (root / "jobs" / "b" / ".~jobservice-tmp-half-written").write_bytes(b"partial")
    assert [i.key for i in local_store.list("jobs/b/")] == [
        "jobs/b/report.json"
    ]  # in-flight writes are hidden
    local_store.delete_prefix("jobs/a/")
    assert not (root / "jobs" / "a").exists()  # empty directories are pruned
    (root / "jobs" / "b" / ".~jobservice-tmp-half-written").unlink()
    local_store.delete("jobs/b/report.json")
    assert not (root / "jobs").exists() and root.is_dir()


# --- S3Store specifics ------------------------------------------------------------------------
def test_s3_big_file_uses_multipart(s3_store: S3Store, s3_client: Any, big_file: Path) -> None:
    s3_store.put_file("big.mp4", big_file)
    head = s3_client.head_object(Bucket=s3_store.bucket, Key="big.mp4")
    assert head["ETag"].strip('"').endswith("-3")  # 5 MiB + 5 MiB + rest
    assert head["ContentType"] == "video/mp4"


def test_s3_explicit_content_type_is_stored(s3_store: S3Store) -> None:
    s3_store.put_bytes("blob", b"abc", content_type="text/csv")
    assert s3_store.head("blob").content_type == "text/csv"


def test_s3_delete_prefix_pages(s3_store: S3Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(s3_module, "_DELETE_BATCH", 3)
    for n in range(8):
        s3_store.put_bytes(f"p/{n}.txt", b"x")
    s3_store.put_bytes("q/keep.txt", b"keep")
    assert s3_store.delete_prefix("p/") == 8
    assert [i.key for i in s3_store.list("")] == ["q/keep.txt"]


def test_s3_region_bucket_creation(s3_settings: Settings, s3_client: Any) -> None:
    store = S3Store.from_settings(s3_settings.model_copy(update={"s3_region": "eu-west-1"}))
    store.check()
    location = s3_client.get_bucket_location(Bucket=store.bucket)["LocationConstraint"]
    assert location == "eu-west-1"
    store.check()  # the bucket now exists: no second create


def test_s3_missing_bucket_without_create(s3_settings: Settings) -> None:
    store = S3Store.from_settings(s3_settings.model_copy(update={"s3_create_bucket": False}))
    with pytest.raises(StoreUnavailable, match="does not exist"):
        store.check()
    with pytest.raises(StoreUnavailable):
        store.put_bytes("a.txt", b"x")


def test_s3_unreachable_endpoint() -> None:
    store = S3Store(
        "nowhere",
        endpoint_url=f"http://127.0.0.1:{free_port()}",  # nothing listens there
        access_key_id="testing",
        secret_access_key="testing",
        connect_timeout=0.5,
        read_timeout=0.5,
        max_attempts=1,
    )
    with pytest.raises(StoreUnavailable):
        store.check()
    with pytest.raises(StoreUnavailable):
        store.get_bytes("a.txt")


def test_s3_presign_uses_public_endpoint(s3_store: S3Store) -> None:
    s3_store.public_endpoint_url = "https://media.example.com:9443"
    url = s3_store.presigned_url("jobs/1/vidéo.mp4", expires_seconds=120, filename='ré"sumé.mp4')
    assert url.startswith(f"https://media.example.com:9443/{s3_store.bucket}/jobs/1/vid%C3%A9o.mp4?")
    assert "X-Amz-Expires=120" in url and "X-Amz-Algorithm=AWS4-HMAC-SHA256" in url
    assert "filename%2A%3DUTF-8" in url  # the non-ASCII name travels as RFC 5987 filename*


def _child_put(store: S3Store, parent_client_id: int, queue: Any) -> None:
    store.put_bytes("from-child.txt", b"child")
    queue.put(id(store._get_client(store.endpoint_url)) != parent_client_id)


# Python 3.12+ warns when forking a process that has threads (the moto server's).
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_s3_client_is_recreated_after_fork(s3_store: S3Store) -> None:
    s3_store.put_bytes("from-parent.txt", b"parent")
    parent_client_id = id(s3_store._get_client(s3_store.endpoint_url))
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_put, args=(s3_store, parent_client_id, queue))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    assert queue.get(timeout=5) is True
    assert s3_store.get_bytes("from-child.txt") == b"child"
    assert s3_store.get_bytes("from-parent.txt") == b"parent"  # the parent's client still works


# --- direct uploads: copy, and multipart uploads through URLs (S3) or put_part (local) ---------------
def _send_part(store: ObjectStore, key: str, upload_id: str, number: int, data: bytes) -> None:
    """A part as a client sends it: a plain HTTP PUT to the store's URL, or the API's put_part."""
    import io

    import requests

    url = store.part_url(key, upload_id, number, size=len(data), expires_seconds=600)
    if url is None:
        store.put_part(key, upload_id, number, io.BytesIO(data), len(data))
    else:
        assert requests.put(url, data=data, timeout=30).status_code == 200


def test_copy_inside_the_store(store: ObjectStore) -> None:
    store.put_bytes("uploads/a/image", b"portrait bytes")
    info = store.copy("uploads/a/image", "jobs/j/inputs/image.png")
    assert info.size == 14 and store.get_bytes("jobs/j/inputs/image.png") == b"portrait bytes"
    assert store.get_bytes("uploads/a/image") == b"portrait bytes"  # the source stays
    with pytest.raises(ObjectNotFound):
        store.copy("uploads/missing", "jobs/j/inputs/audio.wav")


def test_multipart_upload_parts_listed_joined_in_order(store: ObjectStore) -> None:
    part = 5 * 1024 * 1024  # S3's smallest part but the last
    data = os.urandom(part) + os.urandom(part) + b"tail"
    upload_id = store.start_upload("uploads/m/audio", content_type="audio/wav")
    _send_part(store, "uploads/m/audio", upload_id, 3, data[2 * part :])  # any order
    _send_part(store, "uploads/m/audio", upload_id, 1, data[:part])
    assert [p.number for p in store.list_parts("uploads/m/audio", upload_id)] == [1, 3]
    _send_part(store, "uploads/m/audio", upload_id, 2, data[part : 2 * part])
    parts = store.list_parts("uploads/m/audio", upload_id)
    assert [(p.number, p.size) for p in parts] == [(1, part), (2, part), (3, 4)]
    assert not store.exists("uploads/m/audio")  # nothing visible before it is finished
    info = store.finish_upload("uploads/m/audio", upload_id, parts)
    assert info.size == len(data)
    assert hashlib.sha256(store.get_bytes("uploads/m/audio")).digest() == hashlib.sha256(data).digest()
    assert [o.key for o in store.list("")] == ["uploads/m/audio"]  # no parts left to list


def test_aborted_upload_leaves_nothing(store: ObjectStore) -> None:
    upload_id = store.start_upload("uploads/x/image")
    _send_part(store, "uploads/x/image", upload_id, 1, b"partial")
    store.abort_upload("uploads/x/image", upload_id)
    store.abort_upload("uploads/x/image", upload_id)  # twice is fine
    with pytest.raises(ObjectNotFound):
        store.list_parts("uploads/x/image", upload_id)
    assert list(store.list("")) == []


def test_single_put_url(store: ObjectStore) -> None:
    import requests

    url = store.put_url("uploads/s/image", size=9, expires_seconds=600)
    if url is None:  # the local store has no URLs: the API takes the bytes (put_part)
        assert store.backend == "local"
        return
    assert "content-length" in url  # signed in: S3 refuses a body of another size
    assert requests.put(url, data=b"one piece", timeout=30).status_code == 200
    assert store.get_bytes("uploads/s/image") == b"one piece"
