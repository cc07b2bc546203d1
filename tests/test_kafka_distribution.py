"""The suite's Apache Kafka comes from KAFKA_HOME, a folder searched, the cache, or a checked
download from a mirror, here a local HTTP server serving a release archive; never from
nowhere."""

from __future__ import annotations

import hashlib
import http.server
import io
import tarfile
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from firesteel.testing.kafka.distribution import (
    CACHE_ENV,
    KAFKA_HOME_ENV,
    KAFKA_RELEASE,
    MIRROR_ENV,
    KafkaUnavailableError,
    find_kafka,
    parse_sha512,
)

VERSION, SCALA = KAFKA_RELEASE
NAME = f"kafka_{SCALA}-{VERSION}"
ARCHIVE = f"{NAME}.tgz"


def _release() -> bytes:
    """A release archive laid out as Apache's: the start script and the core jar."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for member, data, mode in [
            (
                f"{NAME}/bin/kafka-server-start.sh",
                b'#!/bin/sh\nexec java kafka.Kafka "$@"\n',
                0o755,
            ),
            (f"{NAME}/libs/{NAME}.jar", b"PK", 0o644),
        ]:
            info = tarfile.TarInfo(member)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _gpg_digest(data: bytes) -> str:
    """The digest in ``gpg --print-md SHA512`` layout, as the Kafka 3.x releases publish it."""
    hexed = hashlib.sha512(data).hexdigest().upper()
    groups = " ".join(hexed[i : i + 8] for i in range(0, len(hexed), 8))
    return f"{ARCHIVE}: {groups[:80]}\n{' ' * 20}{groups[80:]}\n"


class _Mirror:
    """A local HTTP server laid out as an Apache mirror; counts the archive's downloads."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.requests: list[str] = []
        mirror = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *_args: object) -> None:
                mirror.requests.append(self.path)

        self.server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), partial(Handler, directory=str(root))
        )
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def publish(self, archive: bytes, digest: str) -> None:
        folder = self.root / VERSION
        folder.mkdir(parents=True, exist_ok=True)
        (folder / ARCHIVE).write_bytes(archive)
        (folder / f"{ARCHIVE}.sha512").write_text(digest)


@pytest.fixture
def mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Mirror]:
    served = _Mirror(tmp_path / "mirror")
    served.root.mkdir()
    served.thread.start()
    monkeypatch.delenv(KAFKA_HOME_ENV, raising=False)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(MIRROR_ENV, served.url)
    yield served
    served.server.shutdown()
    served.server.server_close()


def test_a_release_is_downloaded_once_checked_and_then_found_in_the_cache(
    mirror: _Mirror, tmp_path: Path
) -> None:
    archive = _release()
    mirror.publish(archive, _gpg_digest(archive))

    found = find_kafka()
    assert found.home == tmp_path / "cache" / "kafka" / NAME
    assert found.origin == f"downloaded from {mirror.url}"
    assert found.version == VERSION
    assert (found.home / "bin" / "kafka-server-start.sh").stat().st_mode & 0o100
    assert f"/{VERSION}/{ARCHIVE}" in mirror.requests

    mirror.requests.clear()
    again = find_kafka()
    assert (again.home, again.origin, mirror.requests) == (found.home, "cached", [])


def test_a_release_failing_its_checksum_is_refused_and_nothing_is_cached(
    mirror: _Mirror, tmp_path: Path
) -> None:
    archive = _release()
    mirror.publish(archive[:-1] + bytes([archive[-1] ^ 0x5A]), _gpg_digest(archive))

    with pytest.raises(KafkaUnavailableError, match="failed its SHA-512 check") as refused:
        find_kafka()
    assert KAFKA_HOME_ENV in str(refused.value) and MIRROR_ENV in str(refused.value)
    assert not (tmp_path / "cache" / "kafka" / NAME).exists()


def test_an_unreachable_mirror_fails_at_once_saying_what_to_set(mirror: _Mirror) -> None:
    with pytest.raises(KafkaUnavailableError) as refused:
        find_kafka()
    message = str(refused.value)
    assert f"{mirror.url}/{VERSION}/{ARCHIVE}" in message
    for setting in (KAFKA_HOME_ENV, MIRROR_ENV, "FIRESTEEL_KAFKA_BOOTSTRAP"):
        assert setting in message


def test_kafka_home_wins_and_a_wrong_one_is_an_error(
    mirror: _Mirror, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "kafka-server-start.sh").write_text("#!/bin/sh\n")
    searched = tmp_path / "searched"
    (searched / "bin").mkdir(parents=True)
    (searched / "bin" / "kafka-server-start.sh").write_text("#!/bin/sh\n")

    assert find_kafka([tmp_path / "nothing", searched]).home == searched
    monkeypatch.setenv(KAFKA_HOME_ENV, str(home))
    assert (find_kafka([searched]).home, find_kafka().origin) == (home, KAFKA_HOME_ENV)
    monkeypatch.setenv(KAFKA_HOME_ENV, str(tmp_path / "nothing"))
    with pytest.raises(KafkaUnavailableError, match=r"KAFKA_HOME=.*nothing holds no bin"):
        find_kafka([searched])
    assert mirror.requests == []


def test_both_published_digest_layouts_are_read() -> None:
    data = b"release"
    digest = hashlib.sha512(data).hexdigest()
    assert parse_sha512(_gpg_digest(data), ARCHIVE) == digest
    assert parse_sha512(f"{digest}  {ARCHIVE}\n", ARCHIVE) == digest
    with pytest.raises(KafkaUnavailableError, match="holds no SHA-512 digest"):
        parse_sha512("<html>Not Found</html>", ARCHIVE)
