"""Create an S3 object only while its key is free: the conditional PUT (``If-None-Match: *``).

pyarrow's filesystems have no create-if-absent on object stores. Amazon S3
(since August 2024) and the S3-compatible servers that implement conditional
writes refuse a PUT carrying ``If-None-Match: *`` when the key exists (412
Precondition Failed), so of two writers racing for one name exactly one wins,
as a hard link does on local disk. :func:`conditional_create` sends that PUT
through boto3 (``pip install 'firesteel[s3]'``), built from the same
Hadoop-named settings as pyarrow's client (:func:`~firesteel.core.storage.s3_settings`):
one request, where a HEAD then a PUT through pyarrow cost three (its HEAD of a
missing key is followed by a one-key listing).

Without boto3, or against a server that answers 501 Not Implemented, it
returns None and :func:`~firesteel.core.durable.create_record` falls back to a
HEAD then a PUT, logging a warning once per process: two writers racing there
can both succeed, and the later one's object stays.

A PUT whose answer was lost is sent again, by the client's retries and, while
the endpoint stays away, by the location's outage window
(:mod:`firesteel.core.store_retry`, ``fs.s3a.retry.timeout.ms``); if the first
one was applied, the retry meets a 412. So a 412 is answered by reading the
object: when it holds exactly the bytes being created, this call created it
(an extra GET, paid only when the key was taken).
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

from firesteel.core.errors import StorageError
from firesteel.core.guarded_fs import retry_of
from firesteel.core.storage import Location, StorageConfig, s3_settings, storage_error

logger = logging.getLogger(__name__)

CONFLICT_RETRIES = 5
"""PUTs sent again while S3 answers 409 ConditionalRequestConflict (another conditional
write of the key in flight), 50 ms apart, doubling."""

_CREATED = 201
"""Not S3's answer to a PUT: :func:`conditional_create`'s word for "a retried PUT of
ours was there"."""
_NOT_FOUND = 404
_SERVER_ERROR = 500
_PRECONDITION_FAILED = 412
_CONFLICT = 409
_NOT_IMPLEMENTED = 501


def conditional_create(location: Location, data: bytes, config: StorageConfig) -> bool | None:
    """Create the object of the ``s3://`` ``location`` with ``data`` unless its key exists.

    True: this call created it; False: another writer's object is there; None:
    no conditional PUT here (boto3 is not installed, or the server answers 501),
    so the caller decides. Unreachable endpoints, missing buckets and refused
    credentials raise :class:`~firesteel.core.errors.StorageError` naming the
    setting to fix.
    """
    bucket, _, key = location.path.partition("/")
    client = _client(bucket, config)
    if client is None:
        _warn_once(bucket, "boto3 is not installed (pip install 'firesteel[s3]')")
        return None
    from botocore.exceptions import BotoCoreError, ClientError

    retry = retry_of(location.filesystem)
    where = f"create s3://{location.path}"

    def put() -> int | None:
        refused = _put(client, bucket, key, data)
        if refused == _PRECONDITION_FAILED:
            return _CREATED if _holds(client, bucket, key, data) else _PRECONDITION_FAILED
        return refused

    attempt = 0
    while True:
        try:
            refused = retry.run(put, where, _transient) if retry else put()
        except (ClientError, BotoCoreError) as exc:
            raise storage_error(OSError(str(exc)), location, "create", config) from None
        if refused is None or refused == _CREATED:
            return True
        if refused == _PRECONDITION_FAILED:
            return False
        if refused == _CONFLICT:
            if attempt == CONFLICT_RETRIES:
                msg = (
                    f"storage location {location.uri!r}: cannot create: another writer's "
                    f"conditional write of it stayed in flight through {attempt + 1} attempts"
                )
                raise StorageError(msg)
            time.sleep(0.05 * 2**attempt)
            attempt += 1
            continue
        _warn_once(bucket, "the server does not implement conditional writes")
        return None


def _transient(exc: BaseException) -> bool:
    """Whether botocore's ``exc`` says the endpoint was away, dropped the connection, timed
    out or answered with a server error: the same request may succeed later."""
    from botocore.exceptions import ClientError, ConnectionError, HTTPClientError

    if isinstance(exc, ConnectionError | HTTPClientError):
        return True
    return isinstance(exc, ClientError) and (_status(exc) or 0) >= _SERVER_ERROR


def _status(exc: Any) -> int | None:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if status is not None else None


def _put(client: Any, bucket: str, key: str, data: bytes) -> int | None:
    """PUT ``data`` at ``key`` unless the key exists: None when stored, else the refusal's
    status (412 the key exists, 409 a conditional write of it in flight, 501 unsupported);
    any other failure raises botocore's error."""
    from botocore.exceptions import ClientError

    try:
        client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
    except ClientError as exc:
        status = _status(exc)
        if status in (_PRECONDITION_FAILED, _CONFLICT, _NOT_IMPLEMENTED):
            return status
        raise
    return None


def _holds(client: Any, bucket: str, key: str, data: bytes) -> bool:
    """Whether the object at ``key`` holds exactly ``data`` (written by a retried PUT); False
    when it is gone again (its writer deleted it: still not this call's)."""
    from botocore.exceptions import ClientError

    try:
        body = client.get_object(Bucket=bucket, Key=key)["Body"]
    except ClientError as exc:
        if _status(exc) == _NOT_FOUND:
            return False
        raise
    try:
        return bool(body.read() == data)
    finally:
        body.close()


@functools.lru_cache(maxsize=64)
def _client(bucket: str, config: StorageConfig) -> Any:
    """A boto3 S3 client for ``bucket`` (cached: making one costs ~0.3 s), None without boto3."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        return None
    settings = s3_settings(bucket, config)
    return boto3.session.Session().client(
        "s3",
        endpoint_url=settings.endpoint_url,
        region_name=settings.region,
        aws_access_key_id=settings.access_key,
        aws_secret_access_key=settings.secret_key,
        aws_session_token=settings.session_token,
        config=Config(
            connect_timeout=settings.connect_timeout,
            read_timeout=settings.request_timeout,
            retries={"max_attempts": settings.attempts, "mode": "standard"},
            # pyarrow addresses a custom endpoint by path (http://host/bucket/key), which
            # also serves endpoints named by IP address; AWS's own takes virtual hosts.
            s3={"addressing_style": "path" if settings.endpoint_override else "auto"},
        ),
    )


@functools.cache
def _warn_once(bucket: str, reason: str) -> None:
    logger.warning(
        "firesteel: %s: records created in bucket %s fall back to a HEAD then a PUT, which "
        "two writers racing for one name can both pass",
        reason,
        bucket,
    )
