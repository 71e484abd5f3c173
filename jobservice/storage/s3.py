"""The object store on S3 or an S3-compatible server (MinIO, moto) via boto3.

The boto3 client is created lazily and once per process: Celery workers fork, and a client
(with its pooled sockets) must never be shared across a fork.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import boto3
from boto3.exceptions import Boto3Error
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError

from jobservice.storage.base import (
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    StoredPart,
    StoreFull,
    StoreUnavailable,
)
from jobservice.storage.local import CHUNK_SIZE, clamp_range, guess_content_type, validate_key
from jobservice.storage.retry import retrying

if TYPE_CHECKING:
    from jobservice.settings import Settings

log = logging.getLogger(__name__)

_MIB = 1024 * 1024
# S3's DeleteObjects limit; a module constant so tests can shrink it to exercise paging.
_DELETE_BATCH = 1000
_NOT_FOUND_CODES = frozenset({"404", "NoSuchKey", "NotFound"})
_NO_BUCKET_CODES = frozenset({"404", "NoSuchBucket", "NotFound"})
_NO_UPLOAD_CODES = frozenset({"404", "NoSuchUpload", "NotFound"})
# Out of room (MinIO, Ceph and friends; AWS itself never fills): not worth retrying.
_FULL_CODES = frozenset({"XMinioStorageFull", "InsufficientStorage", "StorageFull", "QuotaExceeded", "507"})
# Worth another try after a pause (besides every 5xx).
_TRANSIENT_CODES = frozenset({"SlowDown", "RequestTimeout", "RequestTimeTooSkewed", "InternalError", "503"})
# Joining a multipart upload or copying a large object inside S3 may take minutes before S3 answers
# (AWS documents minutes for CompleteMultipartUpload); these calls wait this long.
SLOW_CALL_SECONDS = 900.0
# A bucket the service creates gets a lifecycle rule aborting multipart uploads left this long.
ABORT_MULTIPART_AFTER_DAYS = 1

# One boto3 Session per process, shared by every store: a Session caches the parsed service
# model, so later clients cost ~10 ms instead of ~300 ms. Sessions are not thread-safe, hence
# the lock around client creation.
_SESSION_LOCK = threading.Lock()
_SESSION: tuple[int, boto3.session.Session] | None = None


def _session() -> boto3.session.Session:
    """This process's shared Session (call with _SESSION_LOCK held)."""
    global _SESSION
    if _SESSION is None or _SESSION[0] != os.getpid():
        _SESSION = (os.getpid(), boto3.session.Session())
    return _SESSION[1]


def _reset_lock_after_fork() -> None:
    # A parent thread may have held the lock at fork time; the child would wait forever.
    global _SESSION_LOCK
    _SESSION_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_reset_lock_after_fork)


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


@contextlib.contextmanager
def _translate(key: str | None = None) -> Iterator[None]:
    """Turn boto errors into the store's exceptions (missing key vs store unusable)."""
    try:
        yield
    except ParamValidationError:
        raise  # a programming error, not an outage
    except ClientError as exc:
        code = _error_code(exc)
        if key is not None and code in _NOT_FOUND_CODES:
            raise ObjectNotFound(key) from exc
        if code in _FULL_CODES:
            raise StoreFull(f"S3 has no room ({code}): {exc}") from exc
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        transient = code in _TRANSIENT_CODES or status >= 500
        raise StoreUnavailable(
            f"S3 refused the request ({code or 'unknown error'}): {exc}", transient=transient
        ) from exc
    except Boto3Error as exc:  # S3UploadFailedError carries the server's code in its text only
        if any(code in str(exc) for code in _FULL_CODES - {"507"}):
            raise StoreFull(f"S3 has no room: {exc}") from exc
        raise StoreUnavailable(f"S3 upload failed: {exc}") from exc
    except BotoCoreError as exc:
        raise StoreUnavailable(f"S3 is unreachable: {exc}") from exc


def _content_disposition(filename: str) -> str:
    """An ``attachment`` header value that is safe for any filename (RFC 6266 / 5987)."""
    ascii_name = re.sub(r'[^\x20-\x7e]|["\\]', "_", filename) or "download"
    value = f'attachment; filename="{ascii_name}"'
    if ascii_name != filename:
        value += f"; filename*=UTF-8''{quote(filename, safe='')}"
    return value


class S3Store(ObjectStore):
    """An ObjectStore in one S3 bucket."""

    backend = "s3"

    def __init__(
        self,
        bucket: str,
        *,
        endpoint_url: str | None = None,
        public_endpoint_url: str | None = None,
        region: str = "us-east-1",
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        presign_seconds: int = 3600,
        multipart_threshold_mb: int = 16,
        create_bucket: bool = True,
        connect_timeout: float = 5.0,
        read_timeout: float = 60.0,
        max_attempts: int = 3,
    ) -> None:
        """Describe the bucket and how to reach it; nothing is contacted until first use.

        Credentials left as None fall back to boto3's usual chain (env, profile, IAM role).
        """
        self.bucket = bucket
        self.endpoint_url = endpoint_url
        self.public_endpoint_url = public_endpoint_url
        self.region = region
        self.presign_seconds = presign_seconds
        self.create_bucket = create_bucket
        self._access_key_id = access_key_id
        self._secret_access_key = secret_access_key
        self._config = Config(
            region_name=region,
            signature_version="s3v4",  # without it presigned URLs on custom endpoints are SigV2
            s3={"addressing_style": "path"},  # virtual-host style breaks on IPs/localhost/MinIO
            # Only send checksums S3 demands: some S3-compatible servers reject the newer headers.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            retries={"max_attempts": max_attempts, "mode": "standard"},
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
        )
        self._slow_config = self._config.merge(Config(read_timeout=max(read_timeout, SLOW_CALL_SECONDS)))
        part = multipart_threshold_mb * _MIB
        self._transfer = TransferConfig(multipart_threshold=part, multipart_chunksize=part, max_concurrency=4)
        self._pid = -1
        self._clients: dict[str, Any] = {}
        self._bucket_ready = False

    @classmethod
    def from_settings(cls, settings: Settings) -> S3Store:
        """Build the store from the ``s3_*`` settings."""
        secret = settings.s3_secret_access_key
        return cls(
            settings.s3_bucket,
            endpoint_url=settings.s3_endpoint_url,
            public_endpoint_url=settings.s3_public_endpoint_url,
            region=settings.s3_region,
            access_key_id=settings.s3_access_key_id,
            secret_access_key=secret.get_secret_value() if secret is not None else None,
            presign_seconds=settings.s3_presign_seconds,
            multipart_threshold_mb=settings.s3_multipart_threshold_mb,
            create_bucket=settings.s3_create_bucket,
        )

    def __repr__(self) -> str:
        return f"S3Store(bucket={self.bucket!r}, endpoint_url={self.endpoint_url!r})"

    # --- clients ----------------------------------------------------------------------------
    def _get_client(self, endpoint_url: str | None, *, slow: bool = False) -> Any:
        """This process's client for ``endpoint_url`` (``slow``: for calls S3 may take minutes to
        answer); recreated after a fork."""
        pid = os.getpid()
        if pid != self._pid:
            self._clients = {}  # inherited clients share pooled sockets with the parent
            self._pid = pid
        name = (endpoint_url or "") + ("#slow" if slow else "")
        client = self._clients.get(name)
        if client is None:
            with _SESSION_LOCK:
                client = self._clients.get(name) or _session().client(
                    "s3",
                    endpoint_url=endpoint_url,
                    region_name=self.region,
                    aws_access_key_id=self._access_key_id,
                    aws_secret_access_key=self._secret_access_key,
                    config=self._slow_config if slow else self._config,
                )
            self._clients[name] = client
        return client

    def _client(self, *, slow: bool = False) -> Any:
        """The client for data operations, with the bucket ensured on first use."""
        client = self._get_client(self.endpoint_url, slow=slow)
        if not self._bucket_ready:
            self._ensure_bucket(client)
        return client

    def _ensure_bucket(self, client: Any) -> None:
        """Check the bucket exists, creating it when allowed; remembers success."""
        with _translate():
            try:
                client.head_bucket(Bucket=self.bucket)
            except ClientError as exc:
                if _error_code(exc) not in _NO_BUCKET_CODES:
                    raise
                if not self.create_bucket:
                    raise StoreUnavailable(f"bucket {self.bucket!r} does not exist") from exc
                self._create_bucket(client)
        self._bucket_ready = True

    def _create_bucket(self, client: Any) -> None:
        kwargs: dict[str, Any] = {"Bucket": self.bucket}
        # us-east-1 rejects an explicit LocationConstraint; every other region requires one.
        if self.region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": self.region}
        try:
            client.create_bucket(**kwargs)
        except ClientError as exc:
            # Another process may have won the race to create it.
            if _error_code(exc) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise
            return  # the process that created it sets its lifecycle
        self._abort_abandoned_uploads(client)

    def _abort_abandoned_uploads(self, client: Any) -> None:
        """On a bucket we created: S3 aborts multipart uploads left unfinished (a killed upload's
        parts are invisible to listings but billed) after ABORT_MULTIPART_AFTER_DAYS."""
        rule = {
            "ID": "jobservice-abort-incomplete-multipart-uploads",
            "Status": "Enabled",
            "Filter": {"Prefix": ""},
            "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": ABORT_MULTIPART_AFTER_DAYS},
        }
        try:
            client.put_bucket_lifecycle_configuration(
                Bucket=self.bucket, LifecycleConfiguration={"Rules": [rule]}
            )
        except (ClientError, BotoCoreError) as exc:  # some S3-compatible servers have no lifecycle API
            log.warning("bucket %s: could not set the multipart-upload lifecycle rule: %s", self.bucket, exc)

    # --- contract ---------------------------------------------------------------------------
    def put_file(self, key: str, path: Path, *, content_type: str | None = None) -> ObjectInfo:
        """Upload ``path`` (multipart above the configured threshold)."""
        validate_key(key)
        ctype = content_type or guess_content_type(key)
        size = Path(path).stat().st_size

        def upload() -> None:
            with _translate(key):
                self._client().upload_file(
                    str(path), self.bucket, key, ExtraArgs={"ContentType": ctype}, Config=self._transfer
                )

        retrying(upload, what=f"uploading {key}")
        return ObjectInfo(key=key, size=size, content_type=ctype)

    def put_bytes(self, key: str, data: bytes, *, content_type: str | None = None) -> ObjectInfo:
        """Store a small object from memory in one PutObject."""
        validate_key(key)
        ctype = content_type or guess_content_type(key)

        def put() -> None:
            with _translate(key):
                self._client().put_object(Bucket=self.bucket, Key=key, Body=data, ContentType=ctype)

        retrying(put, what=f"uploading {key}")
        return ObjectInfo(key=key, size=len(data), content_type=ctype)

    def get_file(self, key: str, dest: Path) -> Path:
        """Download to ``dest`` (ranged parallel GETs for big objects) and return ``dest``."""
        validate_key(key)
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        # s3transfer writes to a temp name beside dest and renames it, so dest is never partial.
        with _translate(key):
            self._client().download_file(self.bucket, key, str(dest), Config=self._transfer)
        return dest

    def get_bytes(self, key: str) -> bytes:
        """Read a small object into memory."""
        validate_key(key)
        with _translate(key):
            with contextlib.closing(self._client().get_object(Bucket=self.bucket, Key=key)["Body"]) as body:
                data: bytes = body.read()
        return data

    def head(self, key: str) -> ObjectInfo:
        """Size and stored content type of ``key``; raises ObjectNotFound."""
        validate_key(key)
        with _translate(key):
            meta = self._client().head_object(Bucket=self.bucket, Key=key)
        return ObjectInfo(key=key, size=int(meta["ContentLength"]), content_type=meta.get("ContentType"))

    def delete(self, key: str) -> None:
        """Delete ``key``; S3 answers success for a missing key too."""
        validate_key(key)
        with _translate(key):
            self._client().delete_object(Bucket=self.bucket, Key=key)

    def delete_prefix(self, prefix: str) -> int:
        """Delete every key starting with ``prefix`` (must be non-empty) in batches; returns the count."""
        if not prefix:
            raise ValueError("refusing to delete the whole store: prefix is empty")
        client = self._client()
        count = 0
        with _translate():
            paginator = client.get_paginator("list_objects_v2")
            pages = paginator.paginate(
                Bucket=self.bucket, Prefix=prefix, PaginationConfig={"PageSize": _DELETE_BATCH}
            )
            # Deleting a page before fetching the next is safe: continuation is by key, not offset.
            for page in pages:
                if not (keys := [{"Key": item["Key"]} for item in page.get("Contents", [])]):
                    continue
                response = client.delete_objects(Bucket=self.bucket, Delete={"Objects": keys, "Quiet": True})
                errors = response.get("Errors", [])
                if errors:
                    raise StoreUnavailable(f"S3 failed to delete {len(errors)} objects: {errors[0]}")
                count += len(keys)
        return count

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Objects whose key starts with ``prefix``, in key order (content_type is not listed)."""
        client = self._client()
        with _translate():
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                for item in page.get("Contents", []):
                    yield ObjectInfo(
                        key=item["Key"], size=int(item["Size"]), modified=item.get("LastModified")
                    )

    def open_range(self, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """Stream bytes ``start..end`` (inclusive, clipped to the object) in CHUNK_SIZE pieces.

        The HEAD happens now, so ObjectNotFound is raised before iteration; the GET is only
        sent once the iterator is consumed, so an abandoned iterator holds no connection.
        """
        span = clamp_range(start, end, self.head(key).size)
        if span is None:
            return iter(())
        return self._stream(key, *span)

    def _stream(self, key: str, first: int, last: int) -> Iterator[bytes]:
        with _translate(key):
            response = self._client().get_object(Bucket=self.bucket, Key=key, Range=f"bytes={first}-{last}")
            # Closing the body when the consumer stops early returns nothing half-read to the pool.
            with contextlib.closing(response["Body"]) as body:
                yield from body.iter_chunks(CHUNK_SIZE)

    def presigned_url(
        self, key: str, *, expires_seconds: int | None = None, filename: str | None = None
    ) -> str:
        """A SigV4 GET URL for ``key``, on the public endpoint when one is configured.

        With ``filename`` the response carries ``Content-Disposition: attachment`` so
        browsers save the file under that name. The key's existence is not checked.
        """
        validate_key(key)
        params: dict[str, str] = {"Bucket": self.bucket, "Key": key}
        if filename:
            params["ResponseContentDisposition"] = _content_disposition(filename)
        # Signing is offline, but the host is part of the signature: sign with the endpoint
        # the client will actually contact.
        client = self._get_client(self.public_endpoint_url or self.endpoint_url)
        with _translate(key):
            url: str = client.generate_presigned_url(
                "get_object", Params=params, ExpiresIn=expires_seconds or self.presign_seconds
            )
        return url

    def copy(self, source: str, key: str) -> ObjectInfo:
        """A server-side copy (multipart copy for large objects): no byte passes through here."""
        validate_key(source)
        validate_key(key)

        def copy() -> None:
            with _translate(source):
                self._client(slow=True).copy(
                    {"Bucket": self.bucket, "Key": source}, self.bucket, key, Config=self._transfer
                )

        retrying(copy, what=f"copying {source} to {key}")
        return self.head(key)

    # --- direct uploads: presigned URLs, so the bytes go from the client to S3 -------------------
    def _presign(self, method: str, params: dict[str, Any], expires_seconds: int) -> str:
        client = self._get_client(self.public_endpoint_url or self.endpoint_url)
        with _translate(params["Key"]):
            url: str = client.generate_presigned_url(method, Params=params, ExpiresIn=expires_seconds)
        return url

    def put_url(self, key: str, *, size: int, expires_seconds: int) -> str:
        """A presigned PutObject URL for ``key`` (the bucket made first, if it may be); the length
        is signed in, so S3 refuses a body of any other size."""
        validate_key(key)
        self._client()
        params = {"Bucket": self.bucket, "Key": key, "ContentLength": size}
        return self._presign("put_object", params, expires_seconds)

    def start_upload(self, key: str, *, content_type: str | None = None) -> str:
        """CreateMultipartUpload; returns S3's upload id."""
        validate_key(key)
        with _translate(key):
            answer = self._client().create_multipart_upload(
                Bucket=self.bucket, Key=key, ContentType=content_type or guess_content_type(key)
            )
        return str(answer["UploadId"])

    def part_url(self, key: str, upload_id: str, number: int, *, size: int, expires_seconds: int) -> str:
        """A presigned UploadPart URL for part ``number``, its length signed in."""
        validate_key(key)
        params = {
            "Bucket": self.bucket,
            "Key": key,
            "UploadId": upload_id,
            "PartNumber": number,
            "ContentLength": size,
        }
        return self._presign("upload_part", params, expires_seconds)

    def list_parts(self, key: str, upload_id: str) -> builtins.list[StoredPart]:
        """ListParts, every page; ObjectNotFound when S3 knows no such upload."""
        validate_key(key)
        parts: builtins.list[StoredPart] = []
        try:
            with _translate():
                pages = self._client().get_paginator("list_parts")
                for page in pages.paginate(Bucket=self.bucket, Key=key, UploadId=upload_id):
                    parts.extend(
                        StoredPart(number=int(p["PartNumber"]), size=int(p["Size"]), etag=str(p["ETag"]))
                        for p in page.get("Parts", [])
                    )
        except StoreUnavailable as exc:
            cause = exc.__cause__
            if isinstance(cause, ClientError) and _error_code(cause) in _NO_UPLOAD_CODES:
                raise ObjectNotFound(upload_id) from cause
            raise
        return sorted(parts, key=lambda p: p.number)

    def finish_upload(self, key: str, upload_id: str, parts: builtins.list[StoredPart]) -> ObjectInfo:
        """CompleteMultipartUpload with ``parts``' numbers and ETags."""
        validate_key(key)
        listed = [{"PartNumber": p.number, "ETag": p.etag} for p in parts]
        try:
            with _translate(key):
                self._client(slow=True).complete_multipart_upload(
                    Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": listed}
                )
        except StoreUnavailable as failed:
            # A try that timed out may have finished on the server, so that the retry found no
            # such upload: the object is there whole.
            try:
                info = self.head(key)
            except ObjectNotFound:
                raise failed from None
            if info.size != sum(p.size for p in parts):
                raise
            return info
        return self.head(key)

    def abort_upload(self, key: str, upload_id: str) -> None:
        """AbortMultipartUpload; an upload S3 no longer knows is not an error."""
        validate_key(key)
        try:
            with _translate():
                self._client().abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
        except StoreUnavailable as exc:
            cause = exc.__cause__
            if not (isinstance(cause, ClientError) and _error_code(cause) in _NO_UPLOAD_CODES):
                raise

    def check(self) -> None:
        """HEAD the bucket (creating it if allowed); raises StoreUnavailable for /readyz."""
        self._ensure_bucket(self._get_client(self.endpoint_url))
