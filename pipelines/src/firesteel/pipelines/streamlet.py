"""Streamlets: small streaming programs with a declared shape, wired by a blueprint.

A streamlet class declares, as class attributes, everything a blueprint needs
before anything runs: its :class:`~firesteel.pipelines.ports.StreamletShape`
(named, typed inlets and outlets), its configuration parameters, a
description and labels. Verification instantiates the class to read them, so
a streamlet holds no state: its work happens in the logic that
:meth:`Streamlet.create_logic` returns at run time, in the process that runs
the streamlet::

    class Metrics(Streamlet):
        shape = StreamletShape(inlets=[Inlet("in", readings)], outlets=[Outlet("out", metrics)])
        parameters = (IntegerParameter("window-minutes", "window length", default=5),)
        description = "per-sensor metrics"

        def create_logic(self, context: StreamletContext) -> StreamletLogic:
            return MetricsLogic(context)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

from firesteel.pipelines.parameters import ConfigParameter
from firesteel.pipelines.ports import StreamletShape


class StreamletContext(Protocol):
    """What a runtime gives a streamlet's logic: its session, configuration and ports."""

    @property
    def spark(self) -> Any:
        """The streamlet's SparkSession (runtime configuration applied)."""

    @property
    def blueprint(self) -> str:
        """The name of the blueprint (pipeline) this streamlet runs in."""

    @property
    def streamlet(self) -> str:
        """The streamlet's name in the blueprint."""

    @property
    def config(self) -> Mapping[str, Any]:
        """The streamlet's parameter values, parsed (key -> value)."""

    @property
    def trigger(self) -> Mapping[str, Any]:
        """Keyword arguments of ``DataStreamWriter.trigger`` for this streamlet's queries."""

    def checkpoint_location(self, query: str | None = None) -> str:
        """Where query ``query`` keeps its checkpoint: the query writing an outlet is named
        after it; the default is the streamlet's main query (its only outlet's, else
        ``main``), which an egress writing elsewhere uses."""

    def query_name(self, query: str | None = None) -> str:
        """Query ``query``'s name in Spark, ``<pipeline>.<streamlet>.<query>`` (default: the
        main query): an egress writing elsewhere names its query with it."""

    def read_stream(self, inlet: str, query: str | None = None) -> Any:
        """A streaming DataFrame of ``inlet``'s records, decoded by its codec, for query
        ``query`` (default: the main query; a Kafka inlet keeps its start in its checkpoint)."""

    def write_stream(self, df: Any, outlet: str, **options: str) -> Any:
        """Start writing ``df`` to ``outlet`` exactly-once; returns the StreamingQuery."""


class StreamletLogic(ABC):
    """A streamlet's run-time work: starts the streaming queries it needs."""

    def __init__(self, context: StreamletContext) -> None:
        self.context = context

    @abstractmethod
    def run(self) -> Sequence[Any]:
        """Start this streamlet's streaming queries and return them."""


class Streamlet(ABC):
    """Base class of every streamlet; see the module docs."""

    shape: ClassVar[StreamletShape] = StreamletShape()
    parameters: ClassVar[Sequence[ConfigParameter]] = ()
    description: ClassVar[str] = ""
    labels: ClassVar[Sequence[str]] = ()

    @abstractmethod
    def create_logic(self, context: StreamletContext) -> StreamletLogic:
        """The logic that runs this streamlet (called only at run time)."""

    @classmethod
    def parameter(cls, key: str) -> ConfigParameter | None:
        """The parameter called ``key``, if declared."""
        return next((p for p in cls.parameters if p.key == key), None)
