"""A pipeline checked whole: its blueprint and its configuration in one report.

A blueprint problem does not hide the configuration's: the configuration is
checked against whatever the blueprint resolved (streamlets whose classes
load), so one run lists every problem, each with its file and line.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from firesteel.pipelines.blueprint import Blueprint
from firesteel.pipelines.config import PipelineConfig
from firesteel.pipelines.errors import BlueprintError, ConfigurationError
from firesteel.pipelines.verify import VerifiedBlueprint, verify_partly


def check_pipeline(
    blueprint: Blueprint, files: Sequence[str | Path] = (), arguments: Sequence[str] = ()
) -> tuple[VerifiedBlueprint, PipelineConfig]:
    """The verified blueprint and its configuration (files, then ``key=value`` arguments).

    Raises BlueprintError listing the blueprint's problems followed by the
    configuration's when the blueprint has any, else ConfigurationError listing the
    configuration's.
    """
    verified, blueprint_problems = verify_partly(blueprint)
    config, config_problems = PipelineConfig.read(verified, files, arguments)
    if blueprint_problems:
        raise BlueprintError([*blueprint_problems, *config_problems])
    if config_problems:
        raise ConfigurationError.listing(config_problems)
    return verified, config
