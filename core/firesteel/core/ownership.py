"""Sink ownership: a sink id, or an operator's state, belongs to the Spark query that
first wrote it.

Spark's query id (``<checkpoint>/metadata``) is kept across restarts and new in
a new checkpoint. A second query writing under the same sink id (another
checkpoint, or a deleted and recreated one) starts its batch ids again at 0, so
it would skip the owner's committed batches or write them all again; the
sink (or backend) refuses it before it writes anything, naming the fix. Where
the owner is recorded is the sink's business (an owner record beside the
output, a column of a commit table, a field of the operator record); the
decision and its words are this module's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from firesteel.core.durable import create_record, read_record, write_record
from firesteel.core.errors import ConfigError
from firesteel.core.storage import StorageConfig

logger = logging.getLogger(__name__)

OWNER_KIND = "sink-owner"
OWNER_FORMAT_VERSION = 1


@dataclass(frozen=True)
class Ownership:
    """The claim of query ``query_id`` on ``subject``.

    ``subject`` names what is owned (``"firesteel.files: sink 'orders' in /out"``);
    ``remedy`` is the fix the error names. ``query_id`` None (no Spark
    checkpoint, e.g. a sink driven by hand) claims nothing and is never refused.
    """

    subject: str
    query_id: str | None
    remedy: str

    def check(self, owner: str | None) -> None:
        """Accept an unrecorded owner or this query; otherwise raise a
        :class:`~firesteel.core.errors.ConfigError` (the fix is the query's configuration)."""
        if not owner or not self.query_id or owner == self.query_id:
            return
        msg = (
            f"{self.subject} belongs to Spark query {owner}, and this is query "
            f"{self.query_id} (another checkpoint, or a deleted and recreated one): its "
            f"batch ids start again at 0, so it would write the owner's batches again or "
            f"skip them. {self.remedy}"
        )
        raise ConfigError(msg)

    def claim(
        self,
        record: str | Path,
        *,
        owner_committed: Callable[[], bool],
        config: StorageConfig | None = None,
    ) -> None:
        """Own the durable owner record at ``record`` (a local path or a URI).

        The first query to claim records itself (one small read per later
        start). Another query is refused (:meth:`check`) once the recorded
        owner has committed a batch (``owner_committed``); an owner that never
        committed one is replaced. ``config`` reaches an object store (``fs.s3a.*``).
        """
        if self.query_id is None:
            return
        content = {"query_id": self.query_id}
        try:
            owner = read_record(record, OWNER_KIND, (OWNER_FORMAT_VERSION,), config)["query_id"]
        except FileNotFoundError:
            # Spark builds a sink several times per batch: creating the record costs
            # two fsyncs, so it is created once and read afterwards.
            create_record(record, OWNER_KIND, OWNER_FORMAT_VERSION, content, config)
            owner = read_record(record, OWNER_KIND, (OWNER_FORMAT_VERSION,), config)["query_id"]
        if owner == self.query_id:
            return
        if not owner_committed():
            logger.warning(
                "%s: query %s never committed a batch; query %s takes it over",
                self.subject,
                owner,
                self.query_id,
            )
            write_record(record, OWNER_KIND, OWNER_FORMAT_VERSION, content, config)
            return
        self.check(owner)
