"""A peer's own virtual environment, created from PyPI on first use and reused after.

Peers (Quix Streams, PyFlink) are never dependencies of firesteel: each lives in
``~/.cache/firesteel/peers/<package>-<version>`` (``$FIRESTEEL_CACHE_DIR/peers/...``
when that is set: an empty folder there shows what a fresh machine does), made with
``python -m venv`` and ``pip install <package>==<version>``. A folder is reused only
when the install finished (its ``installed`` marker names the requirement), so an
interrupted install is redone instead of half-used.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from firesteel.testing.jvm import cache_dir

logger = logging.getLogger(__name__)

CACHE = cache_dir() / "peers"
MARKER = "installed"
INSTALL_TIMEOUT_S = 1800


class PeerInstallError(RuntimeError):
    """A peer's virtual environment could not be created or its package installed."""


@dataclass(frozen=True)
class PeerEnv:
    """Where a peer's package is installed and how its jobs are run."""

    package: str
    """The PyPI distribution, e.g. ``quixstreams``."""
    version: str
    """Pinned, so every run measures the same peer."""
    root: Path = CACHE

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def folder(self) -> Path:
        return self.root / f"{self.package}-{self.version}"

    @property
    def python(self) -> Path:
        return self.folder / "bin" / "python"

    def installed(self) -> bool:
        """Whether a finished install of exactly this requirement is in :attr:`folder`."""
        marker = self.folder / MARKER
        return (
            self.python.exists()
            and marker.exists()
            and marker.read_text(encoding="utf-8").strip() == self.requirement
        )

    def ensure(self) -> Path:
        """The environment's interpreter, creating the environment first when needed."""
        if self.installed():
            return self.python
        logger.warning("creating %s for %s (minutes, once)", self.folder, self.requirement)
        log = self.root / f"{self.package}-{self.version}.log"
        self.root.mkdir(parents=True, exist_ok=True)
        commands = [
            [sys.executable, "-m", "venv", "--clear", str(self.folder)],
            [str(self.python), "-m", "pip", "install", "--quiet", self.requirement],
        ]
        with log.open("w", encoding="utf-8") as out:
            for command in commands:
                done = subprocess.run(
                    command,
                    check=False,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=INSTALL_TIMEOUT_S,
                )
                if done.returncode != 0:
                    msg = (
                        f"`{' '.join(command)}` failed ({done.returncode}); its output is in {log}"
                    )
                    raise PeerInstallError(msg)
        (self.folder / MARKER).write_text(self.requirement, encoding="utf-8")
        return self.python


QUIX = PeerEnv("quixstreams", "3.28.1")
PYFLINK = PeerEnv("apache-flink", "2.3.0")


def quix_command(
    workload: str, bootstrap: str, source: str, target: str, state_dir: Path, *extra: str
) -> list[str]:
    """``quix_job.py`` (``identity`` or ``count``) run by Quix Streams' own interpreter."""
    script = Path(__file__).resolve().parent / "quix_job.py"
    command = [str(QUIX.python), str(script), workload, bootstrap, source, target]
    return [*command, str(state_dir), *extra]
