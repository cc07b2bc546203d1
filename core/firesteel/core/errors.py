"""Exception types. Every error names the option, record, file or part at fault."""

from __future__ import annotations


class FiresteelError(Exception):
    """Base class of every error firesteel raises on purpose."""


class ConfigError(FiresteelError, ValueError):
    """An option is unknown, missing, or has a value that cannot work."""


class GuaranteeError(FiresteelError):
    """The parts of a query cannot deliver the delivery guarantee it asks for."""


class CheckpointCorruptError(FiresteelError):
    """A durable artifact (manifest, snapshot, log segment) failed its integrity check."""


class CheckpointNotFoundError(FiresteelError, FileNotFoundError):
    """A location holds no Spark checkpoint, or none this process can see: a Spark Connect
    client sees its own files, while the query's paths are the server's."""


class IncompatibleFormatError(CheckpointCorruptError):
    """A durable artifact was written by a format version this release cannot read."""


class RecordError(FiresteelError):
    """A record could not be read or converted; the message names its file/partition and line."""


class SourceChangedError(FiresteelError):
    """Input that a committed batch already read has changed since (size or mtime differ)."""


class StorageError(FiresteelError, OSError):
    """A store cannot be used (missing bucket, refused credentials, unreachable endpoint).

    The message names the location and the setting to fix, never a secret's value.
    """


class SinkError(FiresteelError):
    """A sink could not write or commit; the message names the sink and batch."""


class MissingDependencyError(FiresteelError, ImportError):
    """An optional package is not installed; the message says what to pip install."""

    def __init__(self, package: str, distribution: str) -> None:
        super().__init__(
            f"Package `{package}` is missing: run `pip install {distribution}` to fix it"
        )


class ProcessorError(FiresteelError):
    """A stateful operator's processor raised; the message names the operator, key and batch."""


class OutputSchemaError(RecordError):
    """A processor's output does not match the declared output schema; names the column."""
