"""The Kafka soak paths: many SIGKILL/restart cycles, beyond what CI runs.

Usage::

    python -m firesteel.testing.kafka.soak {map,map-write-ahead,state} --cycles N [--workdir DIR]
        [--seed S]
    python -m firesteel.testing.kafka.soak {map,map-write-ahead,state} --resume --workdir DIR

- ``map``: Kafka -> map -> Kafka exactly-once, ``exactly.once.mode=in-task``
  (``scripts/map_job.py``);
- ``map-write-ahead``: the same job in the default ``exactly.once.mode=write-ahead``,
  with ``repartition(n)`` before the sink and n drawn anew (1-4) on every start;
- ``state``: Kafka -> keyed rank per key (filesystem backend) -> Kafka
  exactly-once, ``exactly.once.mode=in-task`` (``scripts/state_job.py``).

The broker is :func:`~firesteel.testing.kafka.kafka_cluster`'s: the cluster
``FIRESTEEL_KAFKA_BOOTSTRAP`` names, else a real Apache Kafka broker
(:func:`~firesteel.testing.kafka.distribution.find_kafka`; its data in ``WORKDIR/broker``,
so a paused run resumes on a restarted broker with its topics and transactions: see
``--pause`` in :mod:`firesteel.testing.soak`). Every path runs in the default
configuration (consumer-group markers only).

Every cycle produces :data:`RECORDS_PER_CYCLE` sequence-numbered records
across the input partitions and starts the job armed with one kill (a named
protocol point of the path, or a random moment;
:func:`firesteel.testing.soak.arm`); the next cycle's start recovers it, and
a last unarmed run reads everything. ``map`` and ``state`` never change the partition
count between restarts: the in-task mode keys its markers by Spark partition (see the
README); ``map-write-ahead`` changes it on every start.
The checkpoint and state folders are spelled otherwise on every start
(:class:`~firesteel.testing.checkpoint_spellings.Spellings`). At
the end a plain ``read_committed`` consumer (the broker's own isolation, no
firesteel code) reads the output topic, and the command prints the counts of
:func:`firesteel.testing.soak.counts` as one JSON line, exiting 1 if anything
was lost, duplicated or (``state``) ranked wrongly.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from firesteel.testing.checkpoint_spellings import Spellings
from firesteel.testing.kafka import (
    create_topic,
    kafka_cluster,
    produce,
    read_committed,
)
from firesteel.testing.kafka.scripts import script
from firesteel.testing.soak import SavedRun, SoakError, SoakRun, counts, resumed_spellings, run_cli

RECORDS_PER_CYCLE = 240
PARTITIONS = 3

POINTS = {
    "map-write-ahead": (
        "sink.after_write",
        "sink.after_pre_commit",
        "driver.before_commit",
        "kafka.after_produce",
        "kafka.before_commit_transaction",
        "kafka.after_commit_transaction",
        "wal.after_send",
        "driver.mid_commit",
        "driver.after_commit",
    ),
    "map": (
        "kafka.after_produce",
        "kafka.after_flush",
        "kafka.before_commit_transaction",
        "kafka.after_commit_transaction",
        "sink.after_pre_commit",
        "driver.before_commit",
        "driver.after_commit",
    ),
    "state": (
        "state.after_snapshot",
        "kafka.after_produce",
        "kafka.before_commit_transaction",
        "kafka.after_commit_transaction",
        "driver.after_commit",
    ),
}
"""Protocol points a cycle of each path may kill at."""


class KafkaSoak:
    """Topics, input and the final count of one Kafka soak run (a :class:`SoakRun`)."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        workdir: Path,
        rng: random.Random,
        saved: SavedRun | None = None,
    ) -> None:
        self.name = name
        self.bootstrap = bootstrap
        self.rng = rng
        self.checkpoint = workdir / "ck"
        self.checkpoints = Spellings(self.checkpoint)
        self.states = Spellings(workdir / "state")
        resumed_spellings(saved, checkpoint=self.checkpoints, state=self.states)
        if saved is None:
            self.source = create_topic(bootstrap, PARTITIONS)
            self.target = create_topic(bootstrap, PARTITIONS)
            self.records = 0
        else:
            self.source, self.target = saved.name("source"), saved.name("target")
            self.records = saved.number("records")
            self._check_topics()

    def _check_topics(self) -> None:
        """A resumed run's topics must still be on the broker."""
        from confluent_kafka.admin import AdminClient

        listed = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=30).topics
        missing = [t for t in (self.source, self.target) if t not in listed]
        if missing:
            msg = (
                f"the paused run's topics {missing} are not on the broker at {self.bootstrap}; "
                "resume on the broker of its --workdir (KAFKA_HOME) or the cluster it ran on"
            )
            raise SoakError(msg)

    def saved(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "target": self.target,
            "records": self.records,
            "checkpoint_starts": self.checkpoints.starts,
            "state_starts": self.states.starts,
        }

    @property
    def job(self) -> Path:
        return script(f"{self.name.removesuffix('-write-ahead')}_job")

    def feed(self) -> None:
        start, self.records = self.records, self.records + RECORDS_PER_CYCLE
        for partition in range(PARTITIONS):
            values = [str(i).encode() for i in range(start + partition, self.records, PARTITIONS)]
            produce(self.bootstrap, self.source, values, partition=partition)

    def args(self, run: int) -> list[str]:
        """Every start spells the checkpoint (and state) folder otherwise than the last."""
        common = [self.bootstrap, self.source, self.target, self.checkpoints.next()]
        if self.name == "map-write-ahead":
            partitions = str(self.rng.randint(1, 4))
            return [*common, "exactly-once", "write-ahead", partitions, "driver"]
        if self.name == "map":
            return [*common, "exactly-once", "in-task", "0", "driver"]
        return [*common, self.states.next(), "in-task"]

    @property
    def points(self) -> tuple[str, ...]:
        return POINTS[self.name]

    def check(self) -> dict[str, int]:
        output = read_committed(self.bootstrap, self.target)
        values = [(record.value or b"").decode() for record in output]
        expected = range(self.records)
        if self.name != "state":
            return counts((int(v.removeprefix("out-")) for v in values), expected, misranked=0)
        ranked = [value.split(":") for value in values]
        seqs = [int(seq) for seq, _, _ in ranked]
        return counts(seqs, expected, misranked=misranked_per_partition(ranked))


def misranked_per_partition(ranked: list[list[str]]) -> int:
    """Output records (``[seq, key, rank]``) ranked wrongly by the ``state`` path.

    Kafka orders records within an input partition only (seq ``n`` is in
    partition ``n % PARTITIONS``), so a key's ranks follow its seqs within each
    partition, not across them. Wrong: per key, a rank that is not one of
    exactly 1..n (a state update lost or applied twice repeats or skips one);
    per key and input partition, a rank not above the one of the seq before it.
    """
    ranks: dict[str, list[int]] = {}
    chains: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for seq_text, key, rank_text in ranked:
        seq, rank = int(seq_text), int(rank_text)
        ranks.setdefault(key, []).append(rank)
        chains.setdefault((key, seq % PARTITIONS), []).append((seq, rank))
    wrong = sum(len(got) - len(set(got) & set(range(1, len(got) + 1))) for got in ranks.values())
    for chain in chains.values():
        chain.sort()
        wrong += sum(1 for before, after in itertools.pairwise(chain) if after[1] <= before[1])
    return wrong


@contextlib.contextmanager
def _kafka_run(
    name: str, workdir: Path, rng: random.Random, saved: SavedRun | None
) -> Iterator[SoakRun]:
    with kafka_cluster(workdir / "broker") as bootstrap:
        yield KafkaSoak(name, bootstrap, workdir, rng, saved)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docs)."""
    return run_cli("python -m firesteel.testing.kafka.soak", list(POINTS), _kafka_run, argv)


if __name__ == "__main__":
    sys.exit(main())
