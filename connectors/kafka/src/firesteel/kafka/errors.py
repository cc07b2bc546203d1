"""The errors of the Kafka connector, most specific last; sink failures raise
:class:`firesteel.core.errors.SinkError`."""

from firesteel.core.spi import FiresteelError


class UnreachableError(FiresteelError):
    """No broker of ``kafka.bootstrap.servers`` answered (the message names the servers)."""


class KafkaSourceError(FiresteelError):
    """The Kafka source could not learn or read what it needs (the message names the partition)."""


class DataLossError(KafkaSourceError):
    """Offsets a batch must read are gone (retention or topic deletion)."""
