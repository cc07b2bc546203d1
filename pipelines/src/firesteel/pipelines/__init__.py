"""Pipelines of streamlets wired by blueprints, as Cloudflow had them, for PySpark.

The published API: streamlets and their ports and parameters, blueprints and
their verification, and the configuration model. See the distribution's README.
"""

from firesteel.pipelines.blueprint import Blueprint, load_blueprint, parse_blueprint
from firesteel.pipelines.check import check_pipeline
from firesteel.pipelines.config import Checkpointing, PipelineConfig, StreamletConfig
from firesteel.pipelines.errors import BlueprintError, ConfigurationError, Problem
from firesteel.pipelines.parameters import (
    BooleanParameter,
    ConfigParameter,
    DoubleParameter,
    DurationParameter,
    IntegerParameter,
    MemorySizeParameter,
    StringParameter,
)
from firesteel.pipelines.partitioners import round_robin
from firesteel.pipelines.ports import AvroCodec, Inlet, JsonCodec, Outlet, StreamletShape
from firesteel.pipelines.streamlet import Streamlet, StreamletContext, StreamletLogic
from firesteel.pipelines.verify import VerifiedBlueprint, verify

__all__ = [
    "AvroCodec",
    "Blueprint",
    "BlueprintError",
    "BooleanParameter",
    "Checkpointing",
    "ConfigParameter",
    "ConfigurationError",
    "DoubleParameter",
    "DurationParameter",
    "Inlet",
    "IntegerParameter",
    "JsonCodec",
    "MemorySizeParameter",
    "Outlet",
    "PipelineConfig",
    "Problem",
    "Streamlet",
    "StreamletConfig",
    "StreamletContext",
    "StreamletLogic",
    "StreamletShape",
    "StringParameter",
    "VerifiedBlueprint",
    "check_pipeline",
    "load_blueprint",
    "parse_blueprint",
    "round_robin",
    "verify",
]
