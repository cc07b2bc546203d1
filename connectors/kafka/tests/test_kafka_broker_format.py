"""The KRaft cluster id the test broker formats its log dir with."""

import uuid
from collections.abc import Iterator

import pytest

from firesteel.testing import kafka as kafka_testing


def test_a_cluster_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    """kafka-storage.sh reads an id starting with ``-`` as an option (a CI run failed so)."""
    drawn: Iterator[uuid.UUID] = iter(
        [uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=b"\x10" + bytes(15))]
    )
    monkeypatch.setattr(kafka_testing.uuid, "uuid4", lambda: next(drawn))
    cluster_id = kafka_testing._cluster_id()
    assert cluster_id == "EAAAAAAAAAAAAAAAAAAAAA"
