"""Errors of the Cassandra connector, each naming the option, column, row or host at fault.

Each is a :class:`~firesteel.core.errors.FiresteelError`, so one ``except``
catches every firesteel error, and keeps the builtin base it had before
(``ConnectionError``, ``ValueError``, ``RuntimeError``) for callers that catch that.
"""

from __future__ import annotations

from firesteel.core.errors import ConfigError, FiresteelError, RecordError


class CassandraSchemaError(ConfigError):
    """The DataFrame does not fit the table: a missing table or column, or a wrong type."""


class CassandraUnreachableError(FiresteelError, ConnectionError):
    """No contact point answered; names the hosts and port tried."""


class CassandraRecordError(RecordError, ValueError):
    """A row cannot be written (e.g. a null primary-key value); names the column and row."""


class CassandraLookupError(FiresteelError, RuntimeError):
    """A lookup failed after the driver's retries, with ``on_error="fail"``; names table, key."""
