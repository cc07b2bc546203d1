"""Sends moved onto the executors through Spark Connect: what a user gets wrong.

The fan-out itself runs on a standalone cluster in
``connectors/cassandra/tests/test_cassandra_wal.py``, killed in both re-send windows.
"""

from __future__ import annotations

import sys
import time

import pytest

from firesteel.core.errors import ConfigError, SinkError
from firesteel.sinks.fanout import CONNECT_PLUGIN, check_connect_url, run_on_executors
from firesteel.testing.ports import free_port


def _never() -> None:
    pytest.fail("a task ran although no server could run it")


def test_a_connect_server_that_is_not_running_is_named_with_the_settings_it_needs() -> None:
    url = f"sc://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(SinkError) as raised:
        run_on_executors(url, [_never], "orders batch 7")
    message = str(raised.value)
    assert message.startswith(f"orders batch 7: cannot reach Spark Connect at {url}")
    assert f"spark.plugins={CONNECT_PLUGIN}" in message
    assert "spark.connect.grpc.binding.port" in message
    # The client's own policy would retry for 10 minutes, holding the batch.
    assert time.monotonic() - started < 60


def test_nothing_to_send_needs_no_server() -> None:
    run_on_executors(f"sc://127.0.0.1:{free_port()}", [], "orders batch 8")


@pytest.mark.parametrize("url", ["localhost:15002", "http://localhost:15002", "sc://", ""])
def test_a_url_that_is_not_spark_connect_names_the_option(url: str) -> None:
    with pytest.raises(ConfigError, match=r"option 'send\.connect': .* not a Spark Connect URL"):
        check_connect_url(url, "send.connect")


def test_a_missing_connect_client_is_named_before_the_first_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pyspark.sql.connect.session", None)
    with pytest.raises(ConfigError, match=r"pip install 'firesteel\[connect\]'"):
        check_connect_url("sc://localhost:15002", "send.connect")
