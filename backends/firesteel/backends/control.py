"""The driver's side of ``firesteel savepoint stop``: stop requests acted on between batches.

A :class:`QueryControl` listener is added to a session the first time a stateful
operator is built from it (:meth:`~firesteel.state.backend.StateBackend.on_built`), and
knows every state location that session's operators use. After each batch of any query
(``onQueryProgress``, and ``onQueryIdle`` for a query waiting for input) it reads the
query's stop request (:mod:`firesteel.core.control`: one small read per batch); when
there is one, a thread of its own takes it, stops the query once its running batch has
finished and takes the savepoint of the last committed batch
(:func:`~firesteel.backends.savepoint.stop_with_savepoint`), then answers. The work
runs outside the listener so Spark's listener bus is never held up by a savepoint.
When a query stops, the listener removes its operators' metrics hand-over folders
(:func:`~firesteel.core.metrics.task.remove_handovers`) on the driver's disk, where a
local-mode query's tasks wrote them.

The listener needs the query's checkpoint location, which only a classic session can
tell: a Spark Connect client hides the query's JVM object, so there the request is not
seen (the requester times out and withdraws it); call
:func:`~firesteel.backends.savepoint.stop_with_savepoint` with ``checkpoint=`` in the
client instead.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import TYPE_CHECKING

from pyspark.sql.streaming.listener import StreamingQueryListener

from firesteel.backends.savepoint import stop_with_savepoint
from firesteel.backends.storage import SnapshotStorage
from firesteel.core.control import StopRequest, answer_stop, pending_stop, take_stop
from firesteel.core.metrics.progress import checkpoint_of
from firesteel.core.metrics.task import remove_handovers
from firesteel.core.spi import ConfigError
from firesteel.core.toolkit import StorageConfig, read_query_id

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.listener import (
        QueryIdleEvent,
        QueryProgressEvent,
        QueryStartedEvent,
        QueryTerminatedEvent,
    )

__all__ = ["QueryControl", "accept_stop_requests"]

logger = logging.getLogger(__name__)


class QueryControl(StreamingQueryListener):
    """Acts on ``firesteel savepoint stop`` requests for the queries of one session and
    removes a stopped query's hand-over folders."""

    def __init__(self, spark: SparkSession) -> None:
        self.session = spark
        self.operators: dict[tuple[str, StorageConfig], set[str]] = {}
        """The stateful operators built from the session, by state location."""
        self.checkpoints: dict[str, str | None] = {}
        self.stopping: set[str] = set()
        self._lock = threading.Lock()

    def add_operator(self, location: str, storage: StorageConfig, operator: str) -> None:
        """Remember that ``operator`` keeps its state at ``location``."""
        with self._lock:
            self.operators.setdefault((location, storage), set()).add(operator)

    def _checkpoint(self, query_id: str) -> str | None:
        if query_id in self.checkpoints:
            return self.checkpoints[query_id]
        query = self.session.streams.get(query_id)
        if query is None:
            return None
        try:
            checkpoint: str | None = checkpoint_of(query)
        except ConfigError as exc:
            logger.warning("firesteel: stop requests for query %s are not seen: %s", query_id, exc)
            checkpoint = None
        self.checkpoints[query_id] = checkpoint
        return checkpoint

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        # The query is active while start() waits for this event, so it tells its checkpoint.
        self._look(str(event.id))

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        self._look(str(event.progress.id))

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        self._look(str(event.id))

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        self.checkpoints.pop(str(event.id), None)
        try:
            remove_handovers(str(event.id))
        except Exception:
            logger.exception("firesteel: hand-over folders of query %s", event.id)

    def _look(self, query_id: str) -> None:
        try:
            checkpoint = self._checkpoint(query_id)
            if checkpoint is None or query_id in self.stopping:
                return
            request = pending_stop(checkpoint)
            if request is None:
                return
            self.stopping.add(query_id)
            threading.Thread(
                target=self._stop,
                args=(query_id, checkpoint, request),
                name=f"firesteel-stop-{query_id}",
                daemon=True,
            ).start()
        except Exception:
            # A listener must not fail Spark's listener bus; the requester times out.
            logger.exception("firesteel: stop requests of query %s", query_id)

    def _stop(self, query_id: str, checkpoint: str, request: StopRequest) -> None:
        # Taken first: a driver that dies while stopping must not stop the restarted query.
        take_stop(checkpoint, request)
        logger.info("firesteel: stop request %s for query %s", request.id, query_id)
        try:
            query = self.session.streams.get(query_id)
            if query is None:
                msg = f"query {query_id} ended before its stop request was acted on"
                raise ConfigError(msg)
            location, storage, operators = self._state_of(checkpoint)
            taken = stop_with_savepoint(
                query,
                location,
                request.target,
                checkpoint=checkpoint,
                operators=operators,
                storage=storage,
            )
        except Exception as exc:
            logger.exception("firesteel: stop request %s for query %s", request.id, query_id)
            answer_stop(checkpoint, request, error=f"{type(exc).__name__}: {exc}")
        else:
            answer_stop(checkpoint, request, batch=taken.batch)
        finally:
            self.stopping.discard(query_id)

    def _state_of(self, checkpoint: str) -> tuple[str, StorageConfig, list[str]]:
        """The one state location holding operators written by the query of ``checkpoint``."""
        query = read_query_id(checkpoint)
        with self._lock:
            known = {place: sorted(names) for place, names in self.operators.items()}
        found = {}
        for (location, storage), names in known.items():
            mine = [
                name
                for name in names
                if (SnapshotStorage(location, name, config=storage).read_metadata() or {}).get(
                    "query_id"
                )
                == query
            ]
            if mine:
                found[(location, storage)] = mine
        if len(found) != 1:
            places = ", ".join(location for location, _ in found) or "none"
            msg = (
                f"query {query} keeps stateful operator state in {len(found)} locations "
                f"({places}); a savepoint is of one: take them with `firesteel savepoint "
                "create` per location"
            )
            raise ConfigError(msg)
        [((location, storage), operators)] = found.items()
        return location, storage, operators


_INSTALLED: weakref.WeakKeyDictionary[SparkSession, QueryControl] = weakref.WeakKeyDictionary()
_INSTALL_LOCK = threading.Lock()


def accept_stop_requests(
    spark: SparkSession, location: str, operator: str, storage: StorageConfig | None = None
) -> QueryControl:
    """Have ``spark`` act on stop requests, ``operator``'s state being at ``location``
    (the session's one :class:`QueryControl`, added to it on the first call)."""
    with _INSTALL_LOCK:
        listener = _INSTALLED.get(spark)
        if listener is None:
            listener = _INSTALLED[spark] = QueryControl(spark)
            spark.streams.addListener(listener)
    listener.add_operator(location, storage or StorageConfig(), operator)
    return listener
