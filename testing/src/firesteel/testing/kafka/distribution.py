"""Find an Apache Kafka distribution for tests and benchmarks, downloading it once if need be.

:func:`find_kafka` answers the first of, in order:

1. ``KAFKA_HOME``, which must hold ``bin/kafka-server-start.sh`` (a wrong one is an
   error, never skipped over);
2. each folder of ``search`` that holds a distribution (the repository's test
   configuration and benchmarks pass :func:`beside_checkout`);
3. the release already unpacked in the cache (``FIRESTEEL_CACHE``, default
   ``~/.cache/firesteel``);
4. the release downloaded from ``FIRESTEEL_KAFKA_MIRROR`` (default the Apache
   archive) with its published SHA-512 checked, unpacked into the cache.

When none of them gives a distribution it raises :class:`KafkaUnavailableError`
saying what to set: the suite never falls back to a lesser broker.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CACHE_ENV",
    "DEFAULT_MIRROR",
    "KAFKA_HOME_ENV",
    "KAFKA_RELEASE",
    "MIRROR_ENV",
    "KafkaDistribution",
    "KafkaUnavailableError",
    "beside_checkout",
    "find_kafka",
    "parse_sha512",
]

_log = logging.getLogger(__name__)

KAFKA_HOME_ENV = "KAFKA_HOME"
"""An Apache Kafka 3.x distribution (``bin/kafka-server-start.sh``) to start a test broker from."""
MIRROR_ENV = "FIRESTEEL_KAFKA_MIRROR"
"""Base URL of an Apache Kafka release mirror (the layout of ``downloads.apache.org/kafka``)."""
CACHE_ENV = "FIRESTEEL_CACHE"
"""Folder of downloaded test tools; default ``~/.cache/firesteel``."""
DEFAULT_MIRROR = "https://archive.apache.org/dist/kafka"
KAFKA_RELEASE = ("3.9.1", "2.13")
"""The Kafka and Scala versions the suite is proven on, and the release a download fetches."""
DOWNLOAD_TIMEOUT = 60.0
"""Seconds a mirror may stay silent before the download is given up."""


class KafkaUnavailableError(RuntimeError):
    """No Apache Kafka distribution could be found or downloaded; the message says what to set."""


@dataclass(frozen=True)
class KafkaDistribution:
    """An unpacked Apache Kafka distribution and where it came from."""

    home: Path
    origin: str
    """``KAFKA_HOME``, ``found in <folder>``, ``cached`` or ``downloaded from <mirror>``."""

    @property
    def version(self) -> str:
        """The Kafka version its core jar names (``libs/kafka_<scala>-<version>.jar``)."""
        for jar in sorted((self.home / "libs").glob("kafka_*.jar")):
            found = re.fullmatch(r"kafka_[\d.]+-([\d.]+)\.jar", jar.name)
            if found:
                return found[1]
        return "unknown"

    def describe(self) -> str:
        """One line for the suite's header: version, origin and folder."""
        return f"Apache Kafka {self.version} ({self.origin}: {self.home})"


def _is_distribution(folder: Path) -> bool:
    return (folder / "bin" / "kafka-server-start.sh").is_file()


def _release_name() -> str:
    version, scala = KAFKA_RELEASE
    return f"kafka_{scala}-{version}"


def beside_checkout(checkout: Path) -> Path:
    """Where a machine that carries ``checkout`` beside a ``shared`` folder keeps the release."""
    return checkout.resolve().parent / "shared" / "kafka" / _release_name()


def parse_sha512(text: str, archive: str) -> str:
    """The hex digest of a ``.sha512`` file as Apache publishes them.

    Two layouts are in use: ``gpg --print-md`` (``name.tgz: 1A2B 3C4D ...``, upper case,
    in groups, wrapped over lines) and ``sha512sum`` (``1a2b3c4d...  name.tgz``).
    """
    stripped = text.strip()
    if stripped.startswith(f"{archive}:"):
        digest = re.sub(r"\s+", "", stripped[len(archive) + 1 :])
    else:
        digest = stripped.split()[0] if stripped else ""
    digest = digest.lower()
    if not re.fullmatch(r"[0-9a-f]{128}", digest):
        msg = f"{archive}.sha512 holds no SHA-512 digest: {stripped[:200]!r}"
        raise KafkaUnavailableError(msg)
    return digest


def _fetch(url: str, target: Path) -> None:
    with (
        urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as response,
        target.open("wb") as out,
    ):
        shutil.copyfileobj(response, out, 1 << 20)


def _sha512(path: Path) -> str:
    digest = hashlib.sha512()
    with path.open("rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download(mirror: str, cache: Path) -> Path:
    """Download, check and unpack the release into ``cache``; return its folder."""
    version, _scala = KAFKA_RELEASE
    name = _release_name()
    archive = f"{name}.tgz"
    url = f"{mirror.rstrip('/')}/{version}/{archive}"
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".kafka-download-", dir=cache) as scratch:
        local = Path(scratch) / archive
        _log.info("downloading %s", url)
        try:
            _fetch(f"{url}.sha512", local.with_suffix(".tgz.sha512"))
            _fetch(url, local)
        except (urllib.error.URLError, OSError) as e:
            msg = f"cannot download {url}: {e}"
            raise KafkaUnavailableError(msg) from e
        expected = parse_sha512(local.with_suffix(".tgz.sha512").read_text(), archive)
        actual = _sha512(local)
        if actual != expected:
            msg = (
                f"{url} failed its SHA-512 check (published {expected[:16]}..., "
                f"downloaded {actual[:16]}...): the mirror serves a damaged or different file"
            )
            raise KafkaUnavailableError(msg)
        unpacked = Path(scratch) / "unpacked"
        with tarfile.open(local) as tar:
            tar.extractall(unpacked, filter="data")
        if not _is_distribution(unpacked / name):
            msg = f"{url} unpacked to no {name}/bin/kafka-server-start.sh"
            raise KafkaUnavailableError(msg)
        final = cache / name
        try:
            (unpacked / name).rename(final)
        except OSError:
            # Another process unpacked the same checked release first: use that one.
            if not _is_distribution(final):
                raise
    return final


def find_kafka(search: Sequence[Path] = ()) -> KafkaDistribution:
    """The Apache Kafka distribution to start test brokers from (see the module docs)."""
    home = os.environ.get(KAFKA_HOME_ENV)
    if home:
        if not _is_distribution(Path(home)):
            msg = (
                f"{KAFKA_HOME_ENV}={home} holds no bin/kafka-server-start.sh: point it at an "
                "unpacked Apache Kafka 3.x distribution, or unset it to use the cache or a download"
            )
            raise KafkaUnavailableError(msg)
        return KafkaDistribution(Path(home).resolve(), KAFKA_HOME_ENV)
    for folder in search:
        if _is_distribution(folder):
            return KafkaDistribution(folder.resolve(), f"found in {folder.parent}")
    cache = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "firesteel") / "kafka"
    if _is_distribution(cache / _release_name()):
        return KafkaDistribution(cache / _release_name(), "cached")
    mirror = os.environ.get(MIRROR_ENV) or DEFAULT_MIRROR
    try:
        return KafkaDistribution(_download(mirror, cache), f"downloaded from {mirror}")
    except KafkaUnavailableError as e:
        msg = (
            f"no Apache Kafka for the tests: {e}. Set {KAFKA_HOME_ENV} to an unpacked Apache "
            f"Kafka 3.x distribution, or {MIRROR_ENV} to a mirror reachable from here that serves "
            f"{KAFKA_RELEASE[0]}/{_release_name()}.tgz and its .sha512 (it is downloaded once "
            f"into {cache}), or FIRESTEEL_KAFKA_BOOTSTRAP to a running cluster"
        )
        raise KafkaUnavailableError(msg) from e
