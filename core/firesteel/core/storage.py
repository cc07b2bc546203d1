"""Where firesteel's paths live: a location URI as a pyarrow filesystem and a path.

Every path firesteel touches (records beside Spark's checkpoint, file source
and sink folders, write-ahead segments, state snapshots) is resolved here, so a
location is spelled the way Spark users spell it and reaches the same object:

===========================  ==========================================
location                     filesystem
===========================  ==========================================
``/data/x``, ``file:/data/x`` the local filesystem
``s3://b/x``, ``s3a://b/x``  ``pyarrow.fs.S3FileSystem``, bucket ``b`` (``s3a``
                             and ``s3n`` are Hadoop's spellings of one object)
``gs://b/x``, ``gcs://b/x``  ``pyarrow.fs.GcsFileSystem``
``abfs[s]://c@acct.dfs...``  ``pyarrow.fs.AzureFileSystem``, container ``c``
``hdfs://``, ``viewfs://``   ``pyarrow.fs.HadoopFileSystem`` (needs libhdfs)
===========================  ==========================================

Settings use Hadoop's own names, so one configuration serves Spark and
firesteel: a sink or source option ``fs.s3a.endpoint`` and the session setting
``spark.hadoop.fs.s3a.endpoint`` mean the same, and Hadoop's per-bucket form
``fs.s3a.bucket.<bucket>.<setting>`` wins for that bucket. Read for S3:
``endpoint`` (``http://host:port`` or ``host:port``), ``endpoint.region``,
``access.key``, ``secret.key``, ``session.token``,
``connection.ssl.enabled``, ``connection.establish.timeout`` and
``connection.timeout`` (milliseconds), ``attempts.maximum``; without keys the
AWS SDK's own chain applies (``AWS_*`` variables, profiles, instance roles).
GCS: ``fs.gs.storage.root.url`` (an emulator's endpoint),
``fs.gs.auth.type=UNAUTHENTICATED``, ``fs.gs.project.id``. Azure:
``fs.azure.account.key.<account>.dfs.core.windows.net`` and, for an emulator,
``fs.azure.endpoint`` (``http://host:port``).

Secrets (keys, tokens) never leave :class:`StorageConfig`: its ``repr`` hides
them, and :class:`~firesteel.core.errors.StorageError` messages name the
setting to fix, never its value.
"""

from __future__ import annotations

import datetime
import functools
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pyarrow import fs

from firesteel.core.errors import ConfigError, StorageError
from firesteel.core.guarded_fs import guard, store_type, unguarded
from firesteel.core.options import is_secret
from firesteel.core.store_retry import DEFAULT_TIMEOUT_S as DEFAULT_RETRY_TIMEOUT_S
from firesteel.core.store_retry import SETTING_SUFFIX as RETRY_SETTING_SUFFIX
from firesteel.core.store_retry import StoreRetry

HADOOP_PREFIX = "spark.hadoop."
SETTING_PREFIX = "fs."
"""Every storage setting's prefix (Hadoop's names): the options that reach a store."""
S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})
GCS_SCHEMES = frozenset({"gs", "gcs"})
AZURE_SCHEMES = frozenset({"abfs", "abfss"})
HDFS_SCHEMES = frozenset({"hdfs", "viewfs"})
SCHEMES = ("file", *sorted(S3_SCHEMES | GCS_SCHEMES | AZURE_SCHEMES | HDFS_SCHEMES))
"""Every scheme a location may have (a path without one is local)."""
OBJECT_STORES = frozenset({"s3", "gcs", "abfs"})
"""pyarrow filesystem types whose uploads are atomic and which have no rename."""

CONNECT_TIMEOUT_S = 5.0
"""Default time to open a connection: an unreachable endpoint fails within seconds."""
REQUEST_TIMEOUT_S = 20.0
ATTEMPTS = 3


@dataclass(frozen=True)
class StorageConfig:
    """Object-store settings, by Hadoop name (``fs.s3a.endpoint``). Hashable, picklable.

    Build it with :meth:`of` from sink or source options and the session's
    ``spark.hadoop.fs.*`` settings; a sink carries it to its tasks.
    """

    settings: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, *sources: Mapping[str, str]) -> StorageConfig:
        """The ``fs.*`` settings of ``sources``; a later source wins over an earlier one.

        Keys may carry Spark's ``spark.hadoop.`` prefix; other keys are ignored,
        so sink options and a whole Spark configuration can be passed as they are.
        """
        merged: dict[str, str] = {}
        for source in sources:
            for key, value in source.items():
                name = key[len(HADOOP_PREFIX) :] if key.startswith(HADOOP_PREFIX) else key
                if name.startswith(SETTING_PREFIX):
                    merged[name] = str(value)
        return cls(tuple(sorted(merged.items())))

    @classmethod
    def given(cls, settings: StorageConfig | Mapping[str, str] | None) -> StorageConfig:
        """``settings`` as a StorageConfig: a mapping is read by :meth:`of`, None is empty."""
        if isinstance(settings, StorageConfig):
            return settings
        return cls.of(settings or {})

    def under(self, session: Mapping[str, str]) -> StorageConfig:
        """These settings over ``session``'s (``spark.hadoop.fs.*``): where both set one,
        this one wins, as an option wins over a session setting."""
        return StorageConfig.of(session, dict(self.settings))

    def get(self, name: str, bucket: str = "") -> str | None:
        """Setting ``name`` (``fs.s3a.endpoint``), Hadoop's per-bucket form first."""
        values = dict(self.settings)
        if bucket:
            scheme, _, rest = name[len("fs.") :].partition(".")
            specific = values.get(f"fs.{scheme}.bucket.{bucket}.{rest}")
            if specific is not None:
                return specific
        return values.get(name)

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{key}={'***' if is_secret(key) else value}" for key, value in self.settings
        )
        return f"StorageConfig({shown})"


def session_settings(spark: Any) -> dict[str, str]:
    """The ``spark.hadoop.fs.*`` settings of a SparkSession, so one configuration serves
    Spark's own S3A connector and firesteel (read them with :meth:`StorageConfig.of`)."""
    return {
        key: str(value)
        for key, value in spark.conf.getAll.items()
        if key.startswith(f"{HADOOP_PREFIX}fs.")
    }


@dataclass(frozen=True)
class Location:
    """A resolved location: its filesystem, its path there, and how to name it to a user."""

    filesystem: fs.FileSystem
    path: str
    uri: str
    """The location as the user spelled it (no secrets: URIs carry none)."""
    setting_prefix: str
    """The settings that reach this store (``fs.s3a``), named in errors."""


def canonical(location: str) -> str:
    """One spelling per location: ``s3a://b/x/`` and ``s3://b/x`` give ``s3://b/x``.

    Local paths become absolute and symlink-free (``file:/chk``, ``/chk/`` and a
    link to it are one checkpoint).
    """
    scheme, rest = _split(location)
    if scheme in ("", "file"):
        return os.path.realpath(rest)
    if scheme in S3_SCHEMES:
        scheme = "s3"
    elif scheme in GCS_SCHEMES:
        scheme = "gs"
    elif scheme == "abfss":
        scheme = "abfs"
    return f"{scheme}://{rest.rstrip('/')}"


def resolve(location: str, config: StorageConfig | None = None) -> Location:
    """The filesystem and path of ``location``; raises ConfigError for an unknown scheme."""
    config = config or StorageConfig()
    scheme, rest = _split(location)
    if scheme in ("", "file"):
        local = fs.LocalFileSystem()
        return Location(guard(local), local.normalize_path(rest), location, "")
    netloc, _, key = rest.partition("/")
    if not netloc:
        msg = f"storage location {location!r} names no bucket or host after '{scheme}://'"
        raise ConfigError(msg)
    path = f"{netloc}/{key}".rstrip("/")
    if scheme in S3_SCHEMES:
        return _object_store(_s3(netloc, config), path, location, "fs.s3a", config)
    if scheme in GCS_SCHEMES:
        return _object_store(_gcs(config), path, location, "fs.gs", config)
    if scheme in AZURE_SCHEMES:
        container, _, account_host = netloc.partition("@")
        filesystem = _azure(account_host, config)
        return _object_store(
            filesystem, f"{container}/{key}".rstrip("/"), location, "fs.azure", config
        )
    filesystem, hdfs_path = fs.FileSystem.from_uri(location)
    return Location(guard(filesystem, scheme), hdfs_path, location, "fs.defaultFS")


def _object_store(
    filesystem: fs.FileSystem, path: str, uri: str, prefix: str, config: StorageConfig
) -> Location:
    """An object-store location whose calls ride out an outage (see
    :mod:`firesteel.core.store_retry`) for its ``<prefix>.retry.timeout.ms``."""
    scheme = {"fs.s3a": "s3", "fs.gs": "gs", "fs.azure": "abfs"}[prefix]
    bare = Location(filesystem, path, uri, prefix)
    bucket = path.split("/", 1)[0]
    setting = f"{prefix}.{RETRY_SETTING_SUFFIX}"
    retry = StoreRetry(
        endpoint=_endpoint(bare, config),
        setting=setting,
        endpoint_setting=_endpoint_setting(bare),
        timeout_s=_seconds(config, setting, bucket, DEFAULT_RETRY_TIMEOUT_S),
    )
    explain = functools.partial(_explain, bare, config)
    return Location(guard(filesystem, scheme, retry, explain), path, uri, prefix)


def _explain(location: Location, config: StorageConfig, exc: OSError, what: str) -> StorageError:
    """A failure of ``what`` on ``location``'s store, with the setting to fix (picklable, as
    a partial: the guarded filesystem travels to tasks)."""
    failure = storage_error(exc, location, what, config)
    failure.errno = exc.errno
    return failure


def _split(location: str) -> tuple[str, str]:
    if location.startswith("file:"):
        return "file", "/" + location[len("file:") :].lstrip("/")
    if "://" not in location:
        return "", location
    scheme = urlsplit(location).scheme.lower()
    if scheme not in SCHEMES:
        msg = (
            f"storage location {location!r}: unknown scheme '{scheme}://'; firesteel reads and "
            f"writes local paths and {', '.join(s + '://' for s in SCHEMES)}"
        )
        raise ConfigError(msg)
    return scheme, location.split("://", 1)[1]


def _seconds(config: StorageConfig, name: str, bucket: str, default: float) -> float:
    value = config.get(name, bucket)
    if value is None:
        return default
    try:
        return float(value) / 1000
    except ValueError:
        msg = f"setting {name!r} must be a number of milliseconds, got {value!r}"
        raise ConfigError(msg) from None


@dataclass(frozen=True)
class S3Settings:
    """How to reach one S3 bucket, read from its Hadoop-named settings (see the module
    docs); every S3 client firesteel makes (pyarrow's, boto3's) is built from it."""

    endpoint_override: str | None
    """``host:port`` of the endpoint, None for AWS's own."""
    scheme: str | None
    region: str | None
    access_key: str | None
    secret_key: str | None
    session_token: str | None
    connect_timeout: float
    """Seconds."""
    request_timeout: float
    """Seconds."""
    attempts: int

    @property
    def endpoint_url(self) -> str | None:
        """``scheme://host:port`` of the endpoint, None for AWS's own."""
        return f"{self.scheme}://{self.endpoint_override}" if self.endpoint_override else None


def s3_settings(bucket: str, config: StorageConfig) -> S3Settings:
    """``config``'s settings for ``bucket`` (its per-bucket form first); raises ConfigError
    naming a half-given key pair."""
    endpoint = config.get("fs.s3a.endpoint", bucket)
    endpoint_override = scheme = None
    if endpoint:
        parsed = urlsplit(endpoint if "://" in endpoint else f"//{endpoint}")
        ssl = config.get("fs.s3a.connection.ssl.enabled", bucket)
        endpoint_override = parsed.netloc
        scheme = parsed.scheme or ("http" if ssl == "false" else "https")
    access = config.get("fs.s3a.access.key", bucket)
    secret = config.get("fs.s3a.secret.key", bucket)
    if (access or secret) and not (access and secret):
        msg = (
            f"bucket {bucket!r}: set both fs.s3a.access.key and fs.s3a.secret.key "
            "(options or spark.hadoop.fs.s3a.*), or neither to use the AWS credential chain"
        )
        raise ConfigError(msg)
    attempts = config.get("fs.s3a.attempts.maximum", bucket)
    return S3Settings(
        endpoint_override=endpoint_override,
        scheme=scheme,
        region=config.get("fs.s3a.endpoint.region", bucket) or config.get("fs.s3a.region", bucket),
        access_key=access,
        secret_key=secret,
        session_token=config.get("fs.s3a.session.token", bucket) if access else None,
        connect_timeout=_seconds(
            config, "fs.s3a.connection.establish.timeout", bucket, CONNECT_TIMEOUT_S
        ),
        request_timeout=_seconds(config, "fs.s3a.connection.timeout", bucket, REQUEST_TIMEOUT_S),
        attempts=int(attempts) if attempts else ATTEMPTS,
    )


@functools.lru_cache(maxsize=64)
def _s3(bucket: str, config: StorageConfig) -> fs.S3FileSystem:
    settings = s3_settings(bucket, config)
    kwargs: dict[str, object] = {}
    if settings.endpoint_override:
        kwargs["endpoint_override"] = settings.endpoint_override
        kwargs["scheme"] = settings.scheme
    if settings.region:
        kwargs["region"] = settings.region
    if settings.access_key:
        kwargs["access_key"] = settings.access_key
        kwargs["secret_key"] = settings.secret_key
    if settings.session_token:
        kwargs["session_token"] = settings.session_token
    # allow_delayed_open: an upload smaller than a part is one PUT, not the three
    # requests of a multipart upload (object stores bill per request).
    return fs.S3FileSystem(
        allow_delayed_open=True,
        connect_timeout=settings.connect_timeout,
        request_timeout=settings.request_timeout,
        retry_strategy=fs.AwsStandardS3RetryStrategy(max_attempts=settings.attempts),
        **kwargs,
    )


@functools.lru_cache(maxsize=16)
def _gcs(config: StorageConfig) -> fs.GcsFileSystem:
    kwargs: dict[str, object] = {}
    endpoint = config.get("fs.gs.storage.root.url")
    if endpoint:
        parsed = urlsplit(endpoint)
        kwargs["endpoint_override"] = parsed.netloc
        kwargs["scheme"] = parsed.scheme or "https"
    if (config.get("fs.gs.auth.type") or "").upper() == "UNAUTHENTICATED":
        kwargs["anonymous"] = True
    project = config.get("fs.gs.project.id")
    if project:
        kwargs["project_id"] = project
    return fs.GcsFileSystem(
        retry_time_limit=datetime.timedelta(seconds=REQUEST_TIMEOUT_S), **kwargs
    )


@functools.lru_cache(maxsize=16)
def _azure(account_host: str, config: StorageConfig) -> fs.AzureFileSystem:
    account = account_host.split(".", 1)[0]
    if not account:
        msg = (
            f"an abfs location needs 'container@account.dfs.core.windows.net', got {account_host!r}"
        )
        raise ConfigError(msg)
    kwargs: dict[str, object] = {"account_name": account}
    key = config.get(f"fs.azure.account.key.{account_host}") or config.get(
        f"fs.azure.account.key.{account}.dfs.core.windows.net"
    )
    if key:
        kwargs["account_key"] = key
    endpoint = config.get("fs.azure.endpoint")
    if endpoint:
        parsed = urlsplit(endpoint)
        authority = f"{parsed.netloc}{parsed.path}".rstrip("/")
        kwargs["blob_storage_authority"] = authority
        kwargs["dfs_storage_authority"] = authority
        kwargs["blob_storage_scheme"] = parsed.scheme or "https"
        kwargs["dfs_storage_scheme"] = parsed.scheme or "https"
    return fs.AzureFileSystem(**kwargs)


_REACHED: set[tuple[str, str]] = set()
"""(endpoint, bucket) pairs that answered :func:`check_location` in this process."""
_PATIENT: ContextVar[bool] = ContextVar("firesteel_patient_checks", default=False)


@contextmanager
def patient_checks(patient: bool = True) -> Iterator[None]:
    """Inside, :func:`check_location` rides out an outage even on a bucket's first check in
    this process: for a query that has committed a batch (its store answered before), in
    the new Python process Spark starts to build its writer for every batch."""
    token = _PATIENT.set(patient)
    try:
        yield
    finally:
        _PATIENT.reset(token)


def check_location(location: Location, config: StorageConfig | None = None) -> None:
    """Fail fast, naming the culprit, when ``location``'s store cannot be used.

    Reaches the store once (the bucket or container of an object-store
    location): a missing bucket, refused credentials or an unreachable endpoint
    raise :class:`StorageError` naming the URI and the setting to fix. Local
    and HDFS locations are not checked here (their errors already name the path).

    The first check of a bucket in a process is not retried, so a mistyped
    endpoint is named at once; once the bucket has answered, or inside
    :func:`patient_checks` (a query that has committed a batch), a check rides
    out an outage like every other call (:mod:`firesteel.core.store_retry`): a
    query survives an outage, a query started during one fails at once.
    """
    if store_type(location.filesystem) not in OBJECT_STORES:
        return
    bucket = location.path.split("/", 1)[0]
    reached = (_endpoint(location, config), bucket)
    patient = reached in _REACHED or _PATIENT.get()
    checker = location.filesystem if patient else unguarded(location.filesystem)
    try:
        info = checker.get_file_info(bucket)
    except OSError as exc:
        raise storage_error(exc, location, "reach", config) from None
    _REACHED.add(reached)
    if info.type == fs.FileType.NotFound:
        msg = (
            f"storage location {location.uri!r}: bucket {bucket!r} does not exist at "
            f"{_endpoint(location, config)}: create it, or fix the location or "
            f"{_endpoint_setting(location)}"
        )
        raise StorageError(msg)


def _endpoint_setting(location: Location) -> str:
    """The setting naming the endpoint of ``location``'s store (``fs.s3a.endpoint``)."""
    return {"fs.s3a": "fs.s3a.endpoint", "fs.gs": "fs.gs.storage.root.url"}.get(
        location.setting_prefix, "fs.azure.endpoint"
    )


def _endpoint(location: Location, config: StorageConfig | None) -> str:
    bucket = location.path.split("/", 1)[0]
    value = (config or StorageConfig()).get(_endpoint_setting(location), bucket)
    return f"endpoint {value}" if value else "the store's default endpoint"


REFUSED_CREDENTIALS = (
    "ACCESS_DENIED",
    "INVALID_ACCESS_KEY_ID",
    "SIGNATURE_DOES_NOT_MATCH",
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "403",
)
UNREACHABLE = ("NETWORK_CONNECTION", "curlCode", "Could not connect", "Couldn't connect")


def storage_error(
    exc: OSError, location: Location, action: str, config: StorageConfig | None = None
) -> StorageError:
    """``exc`` (from pyarrow) as a StorageError naming the location and the setting to fix;
    a StorageError already naming them (:mod:`firesteel.core.guarded_fs`) is returned as is."""
    if isinstance(exc, StorageError):
        return exc
    text = str(exc)
    prefix = location.setting_prefix
    if "NO_SUCH_BUCKET" in text or "NoSuchBucket" in text:
        hint = (
            "the bucket does not exist: create it, or fix the location or "
            f"{_endpoint_setting(location)}"
        )
    elif any(marker in text for marker in REFUSED_CREDENTIALS):
        hint = (
            f"the store refused the credentials: check {prefix}.access.key and "
            f"{prefix}.secret.key (options or spark.hadoop.{prefix}.*)"
            if prefix == "fs.s3a"
            else f"the store refused the credentials: check the {prefix}.* settings"
        )
    elif any(marker in text for marker in UNREACHABLE):
        setting = _endpoint_setting(location)
        hint = f"cannot reach {_endpoint(location, config)}: check {setting}"
    else:
        # The first line of pyarrow's error, without its request id.
        hint = (text.splitlines()[0] if text else "").split(" (Request ID")[0]
    return StorageError(f"storage location {location.uri!r}: cannot {action}: {hint}")
