"""``firesteel pipeline verify BLUEPRINT [--conf FILE]... [key=value]... [--show STREAMLET]``.

Verifies the blueprint and its configuration, reporting every problem at once,
then prints each streamlet with its ports, topics and guarantee (and, with
``--show``, one streamlet's effective configuration, secrets masked).
"""

from __future__ import annotations

import argparse
import json
import sys

from firesteel.pipelines.blueprint import load_blueprint
from firesteel.pipelines.config import PipelineConfig
from firesteel.pipelines.errors import BlueprintError, ConfigurationError
from firesteel.pipelines.verify import VerifiedBlueprint, verify


def _topology(verified: VerifiedBlueprint, config: PipelineConfig) -> str:
    lines = [f"blueprint {verified.blueprint.name}: {len(verified.streamlets)} streamlets"]
    for name, cls in verified.streamlets.items():
        guarantee = config.streamlet(name).checkpointing.guarantee
        lines.append(f"  {name} ({verified.blueprint.streamlets[name]}), {guarantee}")
        for inlet in cls.shape.inlets:
            lines.append(
                f"    <- {inlet.name} [{inlet.codec.format}] from topic "
                f"{verified.topic_of(name, inlet.name)}"
            )
        for outlet in cls.shape.outlets:
            topic = verified.topic_of(name, outlet.name) or "(not connected)"
            lines.append(f"    -> {outlet.name} [{outlet.codec.format}] to topic {topic}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Run ``firesteel pipeline ...``; returns the exit code."""
    parser = argparse.ArgumentParser(prog="firesteel pipeline")
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("verify", help="verify a blueprint and its configuration")
    check.add_argument("blueprint", help="the blueprint file (HOCON)")
    check.add_argument("--conf", action="append", default=[], help="a configuration file")
    check.add_argument("--show", help="print this streamlet's effective configuration")
    check.add_argument("settings", nargs="*", help="key=value settings (win over files)")
    args = parser.parse_args(argv)
    try:
        verified = verify(load_blueprint(args.blueprint))
        config = PipelineConfig.load(verified, args.conf, args.settings)
    except (BlueprintError, ConfigurationError) as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    sys.stdout.write(_topology(verified, config) + "\n")
    if args.show:
        if args.show not in verified.streamlets:
            sys.stderr.write(f"no streamlet {args.show!r} in the blueprint\n")
            return 1
        sys.stdout.write(json.dumps(config.effective(args.show), indent=2, default=str) + "\n")
    return 0
