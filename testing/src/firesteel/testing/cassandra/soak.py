"""The Cassandra soak paths: many SIGKILL/restart cycles, beyond what CI runs.

Usage::

    python -m firesteel.testing.cassandra.soak {upsert,wal} --cycles N [--workdir DIR] [--seed S]

Both paths run :data:`SINK_JOB` (firesteel.files -> firesteel.cassandra, the
table :data:`SINK_TABLE`) in ``mode=upsert`` or
``mode=wal``, with a new random partition count (1-4) and another spelling of
the checkpoint folder (:class:`~firesteel.testing.checkpoint_spellings.Spellings`) on
every restart. The
cluster is :func:`~firesteel.testing.cassandra.cassandra_cluster`'s: the one
``FIRESTEEL_CASSANDRA_HOSTS`` names, else the test server in its own process.

Every cycle adds :data:`FILES_PER_CYCLE` Parquet files of sequence numbers
and starts the job armed with one kill (a named protocol point of the path,
or a random moment; :func:`firesteel.testing.soak.arm`); the next cycle's
start recovers it, and a last unarmed run reads everything. At the
end cassandra-driver (no firesteel code) reads the table, and the command
prints the counts of :func:`firesteel.testing.soak.counts` as one JSON line
(``wrong_body``: rows whose body or map is not their sequence number's), exiting 1
if anything was lost, duplicated or wrong.

The table is keyed by ``seq``, so a row written twice shows once: the test
server's count of writes per row (:mod:`~firesteel.testing.cassandra.tally`)
shows it. Both modes may write rows again after a crash (an idempotent sink
replays the batch it died in; the write-ahead log re-sends the segment it died
sending), never otherwise: ``rewritten_beyond_kills`` counts the batches with
a row written more than once beyond one per start that may have died (every
start but the last). A real cluster keeps no such count; there it is left out,
with a warning.
"""

from __future__ import annotations

import contextlib
import logging
import random
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from firesteel.cassandra.wal import MID_SEND
from firesteel.sinks.write_ahead import AFTER_SEND
from firesteel.testing.cassandra import HOSTS_ENV, cassandra_cluster, connect, tally
from firesteel.testing.checkpoint_spellings import Spellings
from firesteel.testing.soak import SavedRun, SoakError, SoakRun, counts, resumed_spellings, run_cli

logger = logging.getLogger(__name__)

SINK_JOB = Path(__file__).with_name("sink_job.py")
"""The job: ``sink_job.py SOURCE CHECKPOINT HOST PORT KEYSPACE TABLE MAX_FILES [MODE [N]]``."""
SINK_TABLE = "(seq bigint PRIMARY KEY, body text, attrs map<text, bigint>)"
"""Columns of the job's table in modes ``upsert`` and ``wal``."""


def row_is_right(row: Any) -> bool:
    """Whether a row of :data:`SINK_TABLE` holds what the job wrote for its ``seq``."""
    return row.body == f"body-{row.seq}" and row.attrs == {"seq": row.seq, "mod": row.seq % 7}


FILES_PER_CYCLE = 4
ROWS_PER_FILE = 50
FILES_PER_BATCH = "2"
KEYSPACE = "firesteel_soak"

POINTS = {
    "upsert": ("sink.after_write", "driver.before_commit", "driver.after_commit"),
    "wal": (MID_SEND.name, AFTER_SEND.name, "driver.mid_commit", "driver.after_commit"),
}
"""Protocol points a cycle of each path may kill at."""


class CassandraSoak:
    """Input files, restarts and the final count of one Cassandra soak run (a :class:`SoakRun`)."""

    def __init__(
        self,
        mode: str,
        address: tuple[str, int],
        workdir: Path,
        rng: random.Random,
        saved: SavedRun | None = None,
    ) -> None:
        self.mode = mode
        self.host, self.port = address
        self.rng = rng
        self.source = workdir / "in"
        self.checkpoint = workdir / "ck"
        self.checkpoints = Spellings(self.checkpoint)
        resumed_spellings(saved, checkpoint=self.checkpoints)
        self.source.mkdir(parents=True, exist_ok=saved is not None)
        if saved is not None:
            self.table, self.files = saved.name("table"), saved.number("files")
            self._check_table()
            return
        self.table = f"soak_{mode}_{rng.randrange(1 << 30)}"
        self.files = 0
        with self._session() as session:
            session.execute(
                f"CREATE KEYSPACE IF NOT EXISTS {KEYSPACE} WITH replication = "
                "{'class': 'SimpleStrategy', 'replication_factor': 1}"
            )
            session.execute(f"CREATE TABLE {KEYSPACE}.{self.table} {SINK_TABLE}")

    @contextlib.contextmanager
    def _session(self) -> Iterator[Any]:
        session: Any = connect(self.host, self.port)
        try:
            yield session
        finally:
            session.cluster.shutdown()

    def _check_table(self) -> None:
        """A resumed run's table must still be on the cluster (the test server keeps none)."""
        with self._session() as session:
            keyspace = session.cluster.metadata.keyspaces.get(KEYSPACE)
        if keyspace is None or self.table not in keyspace.tables:
            msg = (
                f"the paused run's table {KEYSPACE}.{self.table} is not on the cluster at "
                f"{self.host}:{self.port}; the test server keeps its tables in memory, so resume "
                f"only a soak that ran on the cluster {HOSTS_ENV} names"
            )
            raise SoakError(msg)

    def saved(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "files": self.files,
            "checkpoint_starts": self.checkpoints.starts,
        }

    @property
    def job(self) -> Path:
        return SINK_JOB

    def feed(self) -> None:
        for _ in range(FILES_PER_CYCLE):
            start = self.files * ROWS_PER_FILE
            seqs = pa.array(range(start, start + ROWS_PER_FILE), pa.int64())
            pq.write_table(pa.table({"seq": seqs}), self.source / f"part-{self.files:07d}.parquet")
            self.files += 1

    def args(self, run: int) -> list[str]:
        """A new partition count, and the checkpoint spelled otherwise than the last start."""
        return [
            str(self.source),
            self.checkpoints.next(),
            self.host,
            str(self.port),
            KEYSPACE,
            self.table,
            FILES_PER_BATCH,
            self.mode,
            str(self.rng.randint(1, 4)),
        ]

    @property
    def points(self) -> tuple[str, ...]:
        return POINTS[self.mode]

    def check(self) -> dict[str, int]:
        with self._session() as session:
            rows = list(session.execute(f"SELECT seq, body, attrs FROM {KEYSPACE}.{self.table}"))
            rewritten = self._rewritten_batches(session)
        wrong = sum(1 for r in rows if not row_is_right(r))
        expected = range(self.files * ROWS_PER_FILE)
        if rewritten is None:
            return counts((r.seq for r in rows), expected, wrong_body=wrong)
        beyond = max(0, len(rewritten) - (self.checkpoints.starts - 1))
        return counts(
            (r.seq for r in rows), expected, wrong_body=wrong, rewritten_beyond_kills=beyond
        )

    def _rewritten_batches(self, session: Any) -> set[int] | None:
        """Batches (by input order) with a row the server wrote more than once; None on a
        real cluster, which counts nothing."""
        from cassandra import InvalidRequest

        try:
            written = tally.write_counts(session, KEYSPACE, self.table)
        except InvalidRequest as exc:  # no such table: not the test server
            logger.warning(
                "the cluster at %s:%d keeps no count of writes (%s): re-sends are not checked",
                self.host,
                self.port,
                exc,
            )
            return None
        per_batch = int(FILES_PER_BATCH) * ROWS_PER_FILE
        seqs = (int.from_bytes(key[0], "big", signed=True) for key, n in written.items() if n > 1)
        return {seq // per_batch for seq in seqs}


@contextlib.contextmanager
def _cassandra_run(
    mode: str, workdir: Path, rng: random.Random, saved: SavedRun | None
) -> Iterator[SoakRun]:
    with cassandra_cluster() as address:
        yield CassandraSoak(mode, address, workdir, rng, saved)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docs)."""
    return run_cli("python -m firesteel.testing.cassandra.soak", list(POINTS), _cassandra_run, argv)


if __name__ == "__main__":
    sys.exit(main())
