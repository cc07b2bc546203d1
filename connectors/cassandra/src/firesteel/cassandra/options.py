"""Options of ``df.writeStream.format("firesteel.cassandra")``."""

from __future__ import annotations

import dataclasses
from typing import Literal

from firesteel.core.spi import ConfigError, SinkOptions, check_ranges, option
from firesteel.sinks.spi import check_send_connect, send_connect_option

CONNECTOR = "firesteel.cassandra"
PASSTHROUGH = ("cassandra.",)
"""``cassandra.username`` / ``cassandra.password`` (plain-text auth), ``cassandra.connect.timeout``.

Values are never logged (``password`` marks a secret for :func:`firesteel.core.options.is_secret`).
"""

CONSISTENCY_LEVELS = (
    "one",
    "two",
    "three",
    "quorum",
    "all",
    "local_quorum",
    "each_quorum",
    "local_one",
    "any",
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CassandraSinkOptions(SinkOptions):
    """The sink's options (plus ``guarantee`` and ``sink.id`` from :class:`SinkOptions`)."""

    contact_points: str = option(required=True, doc="comma-separated hosts of the cluster")
    port: int = option(9042, doc="native protocol port")
    keyspace: str = option(required=True, doc="keyspace of the target table")
    table: str = option(required=True, doc="target table")
    mode: Literal["upsert", "wal"] = option(
        "upsert",
        doc="upsert: idempotent INSERTs from the tasks; wal: logged, sent once the batch commits",
    )
    write: Literal["insert", "increment", "append"] = option(
        "insert",
        doc="insert: every row is upserted; increment: a counter table, every non-key column "
        "is added to its counter (mode=wal only, at-least-once); append: every list or set "
        "column is appended to, the other columns are the primary key (a list needs mode=wal)",
    )
    committer_keyspace: str | None = option(
        None,
        doc="mode=wal: keyspace of the commit table (default: the sink's keyspace)",
    )
    committer_table: str = option(
        "firesteel_commits",
        doc="mode=wal: table recording the sent segments (created if missing)",
    )
    send_connect: str | None = send_connect_option("mode=wal")
    log_location: str | None = option(
        None,
        name="log.location",
        doc="mode=wal: where the write-ahead segments and plans go (default "
        "<checkpointLocation>/firesteel/wal): a local path or a URI (s3a://bucket/wal, gs://, "
        "abfs://), reached with the fs.* options (fs.s3a.endpoint, fs.s3a.access.key, ...)",
    )
    local_dc: str | None = option(None, name="local.dc", doc="data center for DC-aware routing")
    consistency: str = option("local_quorum", doc="write consistency level")
    ttl: int | None = option(None, doc="TTL in seconds for every written row", min=1)
    ttl_column: str | None = option(None, doc="int column holding a row's TTL (s)")
    timestamp_column: str | None = option(
        None,
        doc="column holding a row's write timestamp (µs or timestamp)",
    )
    nulls: Literal["unset", "tombstone"] = option(
        "unset", doc="unset: a null column is not written; tombstone: it deletes the cell"
    )
    max_in_flight: int = option(10, doc="concurrent requests per task (backpressure bound)", min=1)
    batch: Literal["none", "partition"] = option(
        "none",
        doc="none: one INSERT per row; partition: rows sharing a partition key are sent "
        "together in UNLOGGED batches of up to batch.rows",
    )
    batch_rows: int = option(32, doc="batch=partition: most rows in one UNLOGGED batch", min=1)
    retry_timeout_ms: int = option(
        30000,
        doc="how long failed idempotent writes are re-sent, with exponential backoff, after "
        "the driver's own attempts (0: fail at once)",
        min=0,
    )
    passthrough: dict[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        check_ranges(self)
        if self.consistency.lower() not in CONSISTENCY_LEVELS:
            valid = ", ".join(CONSISTENCY_LEVELS)
            msg = f"option 'consistency': {self.consistency!r} is not one of {valid}"
            raise ConfigError(msg)
        check_send_connect(
            self.send_connect,
            logs_ahead=self.mode == "wal",
            otherwise="mode=upsert writes from the executors already",
            use="mode=wal",
        )
        if self.write == "increment":
            self._check_increment()
        if self.ttl is not None and self.ttl_column is not None:
            msg = "options 'ttl' and 'ttl.column' exclude each other: give one"
            raise ConfigError(msg)

    def _check_increment(self) -> None:
        if self.mode != "wal":
            msg = (
                "option 'write': increment adds to counters, so every replay of a batch would "
                "add it again; mode=upsert replays batches after a crash. Use mode=wal, which "
                "re-sends only a segment a crash interrupted (at-least-once, see the README)"
            )
            raise ConfigError(msg)
        given = [
            name
            for name, value in (
                ("ttl", self.ttl),
                ("ttl.column", self.ttl_column),
                ("timestamp.column", self.timestamp_column),
            )
            if value is not None
        ]
        if given:
            msg = (
                f"option {given[0]!r} cannot be used with write=increment: Cassandra's "
                "counter updates take no TTL and no write timestamp"
            )
            raise ConfigError(msg)

    @property
    def hosts(self) -> list[str]:
        """The contact points as a list."""
        return [h.strip() for h in self.contact_points.split(",") if h.strip()]
