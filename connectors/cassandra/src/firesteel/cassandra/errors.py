"""Errors of the Cassandra connector, each naming the option, column, row or host at fault."""

from __future__ import annotations

from firesteel.core.spi import ConfigError


class CassandraSchemaError(ConfigError):
    """The DataFrame does not fit the table: a missing table or column, or a wrong type."""


class CassandraUnreachableError(ConnectionError):
    """No contact point answered; names the hosts and port tried."""


class CassandraRecordError(ValueError):
    """A row cannot be written (e.g. a null primary-key value); names the column and row."""


class CassandraLookupError(RuntimeError):
    """A lookup failed after the driver's retries, with ``on_error="fail"``; names table, key."""
