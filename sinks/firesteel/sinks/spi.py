"""The sink-framework interface a connector extends: the write-ahead-log sink.

Built on :mod:`firesteel.core.spi`, which a connector imports beside this
module. A :class:`WriteAheadSink` (Flink's GenericWriteAheadSink) logs each
task's records beside the query's checkpoint
(:func:`firesteel.core.layout.write_ahead_log`), and once the
batch is **committed** sends them with ``send_values``; a
:class:`CheckpointCommitter` records each sent (sink, batch, partition), so a
retry re-sends at most the one segment whose send was not yet recorded, and
never a recorded one (:class:`FileCheckpointCommitter`: marker files beside
the checkpoint). A sink declares its ``send.connect`` option with
:func:`send_connect_option` and checks it with :func:`check_send_connect`.
"""

from firesteel.sinks.committers import CheckpointCommitter, FileCheckpointCommitter
from firesteel.sinks.fanout import check_connect_url, check_send_connect, send_connect_option
from firesteel.sinks.write_ahead import WriteAheadSink

__all__ = [
    "CheckpointCommitter",
    "FileCheckpointCommitter",
    "WriteAheadSink",
    "check_connect_url",
    "check_send_connect",
    "send_connect_option",
]
