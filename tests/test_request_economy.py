"""Requests per micro-batch on an object store stay flat, counted at the S3 server.

Thirty-six tiny batches of the write-ahead-log sink (segments, plans and commit
markers on S3), of keyed-state snapshots (filesystem and RocksDB backends), of
the file sink writing to S3 and of the file source reading new files from S3
(``cleanup=archive``) against the moto server; its request log gives each
batch's LIST / GET / HEAD / PUT / DELETE / POST count
(:mod:`firesteel.testing.store_requests`). After a warm-up (the retained versions
filling up), no batch of the last twelve costs more than the
most expensive of twelve earlier ones, and the twelve cost at most a tenth
and one request per batch more in all (periodic work, a full snapshot or a
RocksDB compaction, need not fall evenly into the two windows). A
component that listed everything ever written would add requests every batch.
``benchmarks/requests.py`` runs the same over 2,000 batches.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from firesteel.core.durable import read_record, write_record
from firesteel.core.storage import StorageConfig
from firesteel.testing.s3 import KINDS, RequestLog, S3Server
from firesteel.testing.store_requests import (
    files_sink_batches,
    files_source_batches,
    state_batches,
    wal_batches,
)

BATCHES = 36
EARLY = slice(6, 18)
LATE = slice(24, 36)


def _assert_flat(counts: list[Counter[str]], early_window: slice = EARLY) -> None:
    assert len(counts) == BATCHES
    for kind in (*KINDS, None):
        per_batch = [sum(c.values()) if kind is None else c[kind] for c in counts]
        early, late = per_batch[early_window], per_batch[LATE]
        assert max(late) <= max(early), (kind or "all requests", per_batch)
        # Periodic work need not fall evenly into two windows of twelve: a full snapshot
        # every 5 batches, a RocksDB compaction every 7th here (one in the first window,
        # two in the last): a tenth, plus one request per batch, of slack.
        assert sum(late) <= sum(early) * 1.1 + len(late), (kind or "all requests", per_batch)
    assert sum(counts[-1].values()) > 0, "nothing reached the server"


def test_write_ahead_log_requests_per_batch_stay_flat(s3_server: S3Server, tmp_path: Path) -> None:
    counts = wal_batches(s3_server, tmp_path, BATCHES)
    _assert_flat(counts)
    # Two segments written and read, a plan, two commit markers: nothing of earlier batches.
    assert counts[-1]["PUT"] <= 8, counts[-1]


@pytest.mark.parametrize("kind", ["filesystem", "rocksdb"])
def test_state_snapshot_requests_per_batch_stay_flat(
    s3_server: S3Server, tmp_path: Path, kind: str
) -> None:
    options = {"retain": 3, **({"full_snapshot_every": 5} if kind == "filesystem" else {})}
    _assert_flat(state_batches(s3_server, kind, tmp_path, BATCHES, **options))


def test_file_sink_requests_per_batch_stay_flat(s3_server: S3Server, tmp_path: Path) -> None:
    counts = files_sink_batches(s3_server, tmp_path, BATCHES)
    # Warm-up: the first manifest compaction (batch 9) has no earlier compact record to
    # read; every later one (19, 29) reads it and the ten manifests since.
    _assert_flat(counts, slice(12, 24))
    # The write probe, two pending uploads, the manifest, two server-side copies that
    # publish the files (a copy is a PUT), and the four zero-byte folder markers pyarrow
    # puts after deletes (``_firesteel/``, the batch's pending folder twice, the sink's):
    # nothing of earlier batches.
    assert counts[-1]["PUT"] <= 10, counts[-1]


def test_file_source_requests_per_batch_stay_flat(s3_server: S3Server, tmp_path: Path) -> None:
    counts = files_source_batches(s3_server, tmp_path, BATCHES, "archive")
    _assert_flat(counts)
    # The input prefix and the error-count folder listed once each; the other six are
    # the one-key listings pyarrow sends after a HEAD finds no object (the next log
    # segment, each archive target). The log is read by number, never listed.
    assert counts[-1]["LIST"] <= 8, counts[-1]


def test_a_large_record_is_read_with_one_get(s3_server: S3Server) -> None:
    # The file sink's compact manifest holds every batch ever committed (about 700 KB
    # after 2,000 batches of two files): read as a stream, pyarrow fetched it in 256 KiB
    # GETs, so the requests of every tenth batch grew with the stream's age.
    bucket = s3_server.create_bucket("economy-large-record")
    config = StorageConfig.of({}, s3_server.settings())
    location = f"s3a://{bucket}/record.json"
    content = ["x" * 100] * 7_000
    write_record(location, "large", 1, content, config)
    log = RequestLog(s3_server, bucket)
    log.mark()
    assert read_record(location, "large", (1,), config) == content
    assert log.take() == Counter({"HEAD": 1, "GET": 1})
