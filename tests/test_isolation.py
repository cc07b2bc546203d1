"""The suite's isolation check (:mod:`firesteel.testing.isolation`) sees and puts back what a
test leaves changed in the state the tests of a process share."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from firesteel.testing.isolation import _Process, _restore_process, _restore_spark, _Spark


def test_a_changed_environment_directory_and_log_level_are_named_and_put_back(
    tmp_path: Path,
) -> None:
    level = logging.getLogger("firesteel").level
    before = _Process()
    os.environ["FIRESTEEL_ISOLATION_PROBE"] = "1"
    os.chdir(tmp_path)
    logging.getLogger("firesteel").setLevel(logging.DEBUG)
    changed = _restore_process(before)
    assert len(changed) == 3, changed
    assert "environment variable FIRESTEEL_ISOLATION_PROBE: None -> '1'" in changed
    assert "FIRESTEEL_ISOLATION_PROBE" not in os.environ
    assert os.getcwd() == before.cwd
    assert logging.getLogger("firesteel").level == level
    assert _restore_process(before) == []


def test_a_changed_spark_session_is_named_and_put_back(spark: Any) -> None:
    before = _Spark.read(spark)
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "7")
    spark.conf.set("spark.sql.session.timeZone", "Asia/Tokyo")
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", "isolation-probe")
    spark.sparkContext.addJobTag("isolation-probe")
    clone = spark.newSession()
    clone.createDataFrame([(1,)], "n int")  # makes the clone the thread's active session
    query = spark.readStream.format("rate").load().writeStream.format("noop").start()
    changed = _restore_spark(before)
    text = "\n".join(changed)
    assert "Spark setting spark.sql.shuffle.partitions: " in text
    assert "spark.sql.session.timeZone" in text
    assert "local property spark.scheduler.pool: None -> 'isolation-probe'" in text
    assert "job tags: [] -> [isolation-probe]" in text
    assert "the thread's active Spark session" in text
    assert "PySpark's active session" in text
    assert not query.isActive and not spark.streams.active
    assert spark.conf.get("spark.sql.shuffle.partitions") == partitions
    assert spark.sparkContext.getLocalProperty("spark.scheduler.pool") is None
    assert _restore_spark(before) == []
