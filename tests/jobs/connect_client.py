"""A Spark Connect client, as a user runs one: ``python connect_client.py <url> <workdir> <step>``.

``start``: registers firesteel, starts a files -> files exactly-once query on a
processing-time trigger and, beside it, a keyed-state query restored from a
savepoint bootstrapped from a DataFrame (``restore_from``); prints the first
query's id once both are through their input, and waits to be killed. On the way it
checks the event-time arguments (Spark's ``withWatermark`` refused, firesteel's own
accepted), which read the input's plan. ``resume``
(a new client on the same session id, given in ``url``): stops that query and
restarts it from its checkpoint with ``availableNow``. Each step prints one JSON
line per result.
"""

import datetime
import json
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from firesteel.backends import FilesystemBackend
from firesteel.core import CheckpointNotFoundError, ConfigError, read_guarantee, register
from firesteel.state import BoundedOutOfOrderness, stateful
from firesteel.state.savepoint import bootstrap
from firesteel.testing.processors import RankPerKey

url, workdir, step = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
spark = SparkSession.builder.remote(url).getOrCreate()
SAVED = {"k0": 5, "k1": 7, "k2": 9}
"""The counts the savepoint starts each key at."""


def say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def files_query(trigger: dict[str, object]):  # type: ignore[no-untyped-def]
    events = spark.readStream.format("firesteel.files").load(str(workdir / "in"))
    return (
        events.writeStream.format("firesteel.files")
        .option("path", str(workdir / "out"))
        .option("guarantee", "exactly-once")
        .option("checkpointLocation", str(workdir / "ck"))
        .trigger(**trigger)
        .start()
    )


def restored_ranks():  # type: ignore[no-untyped-def]
    rows = [(key, "count", value) for key, value in SAVED.items()]
    counts = spark.createDataFrame(rows, "key string, state string, value long")
    savepoint = str(workdir / "savepoint")
    bootstrap(counts, savepoint, operator="ranks", key=["key"], states=[RankPerKey.count])
    events = spark.readStream.format("firesteel.files").load(str(workdir / "more"))
    ranked = stateful(
        events,
        key="key",
        processor=RankPerKey(),
        output_schema="seq long, key string, rank long",
        backend=FilesystemBackend(str(workdir / "state")),
        name="ranks",
        restore_from=savepoint,
    )
    return (
        ranked.writeStream.format("firesteel.files")
        .option("path", str(workdir / "ranks"))
        .option("checkpointLocation", str(workdir / "ck-ranks"))
        .trigger(availableNow=True)
        .start()
    )


def event_time_checks() -> dict[str, str]:
    """Build (not start) event-time operators: the plan check runs on the client."""
    events = spark.readStream.format("firesteel.files").load(str(workdir / "more"))
    timed = events.withColumn("ts", F.timestamp_seconds("seq"))
    common = {
        "key": "key",
        "processor": RankPerKey(),
        "output_schema": "seq long, key string, rank long",
        "backend": FilesystemBackend(str(workdir / "state-et")),
        "event_time": "ts",
        "watermark": BoundedOutOfOrderness(datetime.timedelta(seconds=10)),
    }
    stateful(timed, **common)
    try:
        stateful(timed.withWatermark("ts", "1 minute"), **common)
    except ConfigError as exc:
        return {"accepted": "event_time", "refused": str(exc)}
    return {"accepted": "event_time", "refused": ""}


if step == "start":
    say(registered=register(spark))
    try:
        read_guarantee(str(workdir / "not-a-checkpoint"))
    except CheckpointNotFoundError as exc:
        say(unseen=str(exc))
    say(event_time=event_time_checks())
    query = files_query({"processingTime": "500 milliseconds"})
    ranks = restored_ranks()
    query.processAllAvailable()
    ranks.awaitTermination()
    say(query=query.id, guarantee=read_guarantee(str(workdir / "ck")))
    time.sleep(600)
elif step == "resume":
    register(spark)
    running = spark.streams.get(json.loads((workdir / "query.json").read_text())["query"])
    say(found=running is not None and running.isActive)
    running.stop()
    files_query({"availableNow": True}).awaitTermination()
    say(done=True)
