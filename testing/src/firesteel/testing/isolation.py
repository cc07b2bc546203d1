"""A test leaves the state it shares with the tests after it as it found it.

A pytest plugin (``pytest_plugins = ["firesteel.testing.isolation"]``): around every
test it records what the tests of one process share, and after the test it puts
back whatever changed and fails the test, naming what it left changed. An order
dependence then shows in the test that leaks, in any order, instead of in whichever
test happens to run after it (the suite runs in random order: ``pytest-randomly``).

Recorded for every test: the environment variables, the working directory and the
levels of Python's loggers that exist before it. Where the process has a Spark session,
also the session's SQL settings (``spark.conf``), the calling thread's local properties (a job
description, a scheduler pool) and job tags, its active and default session (Spark
resolves a Python data source by name in the *active* session), the level of Spark's
own log, and the streaming queries running. A query left running is stopped.

Only cheap reads: a few Py4J calls per test, the settings compared as one string
unless they differ.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

OWN_VARIABLES = frozenset({"PYTEST_CURRENT_TEST"})
"""Environment variables pytest itself changes at every step of a test."""


def _logger_levels() -> dict[str, int]:
    loggers = logging.Logger.manager.loggerDict.items()
    levels = {name: lg.level for name, lg in loggers if isinstance(lg, logging.Logger)}
    levels[""] = logging.getLogger().level
    return levels


@dataclass
class _Process:
    """What every test of a process shares, Spark apart."""

    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    cwd: str = field(default_factory=os.getcwd)
    levels: dict[str, int] = field(default_factory=_logger_levels)


def _restore_process(before: _Process) -> list[str]:
    """Put back what changed since ``before``; one line per change."""
    changed: list[str] = []
    now = dict(os.environ)
    for name in sorted((set(before.environ) | set(now)) - OWN_VARIABLES):
        if before.environ.get(name) != now.get(name):
            changed.append(
                f"environment variable {name}: {before.environ.get(name)!r} -> {now.get(name)!r}"
            )
    for name in (set(now) - set(before.environ)) - OWN_VARIABLES:
        del os.environ[name]
    os.environ.update({k: v for k, v in before.environ.items() if k not in OWN_VARIABLES})
    cwd = os.getcwd()
    if cwd != before.cwd:
        changed.append(f"working directory: {before.cwd} -> {cwd}")
        os.chdir(before.cwd)
    levels = _logger_levels()
    # A logger made during the test is left alone: libraries set their loggers' levels
    # when first imported (PySpark's Spark Connect client does), the same in any order.
    for name, was in before.levels.items():
        level = levels.get(name, was)
        if level != was:
            changed.append(
                f"level of logger {name or 'root'}: "
                f"{logging.getLevelName(was)} -> {logging.getLevelName(level)}"
            )
            logging.getLogger(name or None).setLevel(was)
    return changed


class _Snapshot:
    """A map read through Spark as one string (one Py4J call), turned into a dict only when
    the string is one not seen last time: the settings of a shared session seldom change."""

    def __init__(self) -> None:
        self.text: str | None = None
        self.items: dict[str, str] = {}

    def read(self, text: str, items: Any) -> dict[str, str]:
        if text != self.text:
            self.text, self.items = text, items()
        return self.items


_CONF = _Snapshot()
_PROPERTIES = _Snapshot()


class _Handles:
    """The JVM objects one session's reads go through, looked up once per session: a Py4J
    lookup of a class by its dotted name costs a round trip per dot."""

    def __init__(self, session: Any) -> None:
        from pyspark.sql import SparkSession

        jvm = session.sparkContext._jvm
        self.session = session
        self.conf = session.conf._jconf
        self.jsc = session.sparkContext._jsc
        self.context = self.jsc.sc()
        self.sessions = SparkSession._get_j_spark_session_class(jvm)
        self.log = jvm.org.apache.logging.log4j.LogManager.getRootLogger()


_HANDLES: dict[int, _Handles] = {}


def _handles(session: Any) -> _Handles:
    handles = _HANDLES.get(id(session))
    if handles is None or handles.session is not session:
        handles = _HANDLES[id(session)] = _Handles(session)
    return handles


@dataclass
class _Spark:
    """What the tests of a process share through its Spark session."""

    session: Any
    conf: dict[str, str]
    local_properties: dict[str, str]
    job_tags: str
    active: Any
    """The thread's active session as Spark's ``Option`` (compared with ``equals``)."""
    default: Any
    python_active: Any
    log_level: str

    @classmethod
    def read(cls, session: Any) -> _Spark:
        from pyspark.sql import SparkSession

        handles = _handles(session)
        properties = handles.context.getLocalProperties()
        return cls(
            session=session,
            conf=_CONF.read(handles.conf.getAll().toString(), lambda: dict(session.conf.getAll)),
            local_properties=_PROPERTIES.read(
                properties.toString(),
                lambda: {k: properties.getProperty(k) for k in properties.stringPropertyNames()},
            ),
            job_tags=handles.jsc.getJobTags().toString(),
            active=handles.sessions.getActiveSession(),
            default=handles.sessions.getDefaultSession(),
            python_active=SparkSession._activeSession,
            log_level=handles.log.getLevel().toString(),
        )


def _shared_session() -> Any:
    """The process's running classic Spark session, or None (never starts one)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    session = SparkSession._instantiatedSession
    if session is None or SparkContext._active_spark_context is None:
        return None
    return session


def _changed(before: dict[str, str], now: dict[str, str], what: str) -> list[tuple[str, str]]:
    """``(key, line)`` for each key whose value differs between ``before`` and ``now``."""
    return [
        (key, f"{what} {key}: {before.get(key)!r} -> {now.get(key)!r}")
        for key in sorted(set(before) | set(now))
        if before.get(key) != now.get(key)
    ]


def _restore_spark(before: _Spark) -> list[str]:
    """Put back what changed in the session since ``before``; one line per change."""
    from pyspark.sql import SparkSession

    session = before.session
    context = session.sparkContext
    changed: list[str] = []
    for query in session.streams.active:
        changed.append(f"streaming query {query.name or query.id} left running (stopped now)")
        query.stop()
    now = _Spark.read(session)
    for key, line in _changed(before.conf, now.conf, "Spark setting"):
        changed.append(line)
        if key in before.conf:
            session.conf.set(key, before.conf[key])
        else:
            session.conf.unset(key)
    for key, line in _changed(before.local_properties, now.local_properties, "local property"):
        changed.append(line)
        context.setLocalProperty(key, before.local_properties.get(key))
    if now.job_tags != before.job_tags:
        changed.append(f"job tags: {before.job_tags} -> {now.job_tags}")
        context.clearJobTags()
        for tag in before.job_tags.strip("[]").split(", "):
            if tag:
                context.addJobTag(tag)
    sessions = _handles(session).sessions
    if not now.active.equals(before.active):
        changed.append(f"the thread's active Spark session: {before.active} -> {now.active}")
        if before.active.isDefined():
            sessions.setActiveSession(before.active.get())
        else:
            sessions.clearActiveSession()
    if not now.default.equals(before.default):
        changed.append(f"the default Spark session: {before.default} -> {now.default}")
        if before.default.isDefined():
            sessions.setDefaultSession(before.default.get())
        else:
            sessions.clearDefaultSession()
    if now.python_active is not before.python_active:
        changed.append("PySpark's active session (SparkSession._activeSession) is another")
        SparkSession._activeSession = before.python_active
    if now.log_level != before.log_level:
        changed.append(f"Spark's log level: {before.log_level} -> {now.log_level}")
        context.setLogLevel(before.log_level)
    return changed


@pytest.fixture(autouse=True)
def _shared_state_restored(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails a test that leaves shared state changed, after putting the state back."""
    process = _Process()
    session = _shared_session()
    spark = _Spark.read(session) if session is not None else None
    yield
    changed = _restore_process(process)
    if spark is not None and _shared_session() is spark.session:
        changed += _restore_spark(spark)
    if changed:
        lines = "\n  ".join(changed)
        pytest.fail(
            f"{request.node.nodeid} left state the next test shares changed "
            f"(put back now):\n  {lines}",
            pytrace=False,
        )
