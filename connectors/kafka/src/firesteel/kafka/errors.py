"""The errors of the Kafka connector, most specific last. Sink failures raise
:class:`firesteel.core.errors.SinkError`, but for brokers that do not answer, which the
source and the sinks alike report as :class:`UnreachableError` or :class:`OutageError`."""

from firesteel.core.spi import FiresteelError


class UnreachableError(FiresteelError):
    """No broker of ``kafka.bootstrap.servers`` answered (the message names the servers)."""


class OutageError(UnreachableError):
    """The brokers stayed unreachable longer than option ``retry.timeout.ms`` allows a running
    query to wait (the message names the servers and the setting)."""


class KafkaSourceError(FiresteelError):
    """The Kafka source could not learn or read what it needs (the message names the partition)."""


class DataLossError(KafkaSourceError):
    """Offsets a batch must read are gone (retention or topic deletion)."""
