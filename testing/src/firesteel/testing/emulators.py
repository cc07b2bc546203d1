"""Google Cloud Storage and Azure Blob Storage emulators as processes, for the storage tests.

* :class:`GcsEmulator`: ``gcp-storage-emulator`` (PyPI, a dependency of
  ``firesteel-testing``), in memory; objects are read back over its JSON API
  with ``urllib``, not through pyarrow or firesteel.
* :class:`Azurite`: Microsoft's Azure Storage emulator (npm ``azurite``, which
  ``make install`` installs into ``.azurite/`` where npm exists); found through
  ``FIRESTEEL_AZURITE`` (the ``azurite-blob`` command), ``PATH`` or
  ``./.azurite``. It speaks the Blob API only (no hierarchical namespace), as
  pyarrow's own Azure tests use it; objects are read back with pyarrow's
  ``AzureFileSystem`` directly.

Both are started on a free port and stopped by PID
(:class:`~firesteel.testing.servers.ServerProcess`).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import urllib.parse
import urllib.request
from pathlib import Path

from pyarrow import fs

from firesteel.core.errors import MissingDependencyError
from firesteel.testing.servers import ServerProcess

GCS_PROJECT = "firesteel-test"
AZURITE_ENV = "FIRESTEEL_AZURITE"
AZURITE_VERSION = "3.37.0"
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_HOST = f"{AZURITE_ACCOUNT}.dfs.core.windows.net"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
"""Azurite's well-known development account key (public, in Microsoft's documentation)."""


class EmulatorNotInstalledError(FileNotFoundError):
    """An emulator that is not a Python package is not installed; says how to install it."""


class GcsEmulator(ServerProcess):
    """``gcp-storage-emulator`` in memory; :meth:`settings` are the ``fs.gs.*`` options."""

    name = "GCS emulator"
    probe = "/storage/v1/b"

    def command(self) -> list[str]:
        command = shutil.which("gcp-storage-emulator", path=str(Path(sys.executable).parent))
        if command is None:
            package, distribution = "gcp-storage-emulator", "firesteel-testing"
            raise MissingDependencyError(package, distribution)
        return [command, "start", "--host", "127.0.0.1", "--port", str(self.port), "--in-memory"]

    def settings(self) -> dict[str, str]:
        """Options (Hadoop's names) that reach this emulator."""
        return {
            "fs.gs.storage.root.url": self.endpoint,
            "fs.gs.auth.type": "UNAUTHENTICATED",
            "fs.gs.project.id": GCS_PROJECT,
        }

    def create_bucket(self, name: str) -> str:
        """Create bucket ``name`` through the JSON API; returns it."""
        request = urllib.request.Request(
            f"{self.endpoint}/storage/v1/b?project={GCS_PROJECT}",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10):
            return name

    def read(self, bucket: str, key: str) -> bytes:
        """An object's bytes through the JSON API (not pyarrow's client, not firesteel's)."""
        quoted = urllib.parse.quote(key, safe="")
        url = f"{self.endpoint}/storage/v1/b/{bucket}/o/{quoted}?alt=media"
        with urllib.request.urlopen(url, timeout=10) as response:
            return bytes(response.read())


class Azurite(ServerProcess):
    """Azurite's Blob service; :meth:`settings` are the ``fs.azure.*`` options."""

    name = "Azurite"

    def command(self) -> list[str]:
        local = Path.cwd() / ".azurite" / "node_modules" / ".bin" / "azurite-blob"
        command = os.environ.get(AZURITE_ENV) or shutil.which("azurite-blob")
        if command is None and local.exists():
            command = str(local)
        if command is None:
            msg = (
                f"Azurite is not installed: `make install` installs it where npm exists "
                f"(npm install --prefix .azurite azurite@{AZURITE_VERSION}), or set "
                f"{AZURITE_ENV} to an azurite-blob command"
            )
            raise EmulatorNotInstalledError(msg)
        data = self.workdir / "data"
        return [
            command,
            *("--blobHost", "127.0.0.1", "--blobPort", str(self.port)),
            *("--location", str(data), "--skipApiVersionCheck", "--loose"),
        ]

    def settings(self) -> dict[str, str]:
        """Options (Hadoop's names) that reach this emulator."""
        return {
            "fs.azure.endpoint": self.endpoint,
            f"fs.azure.account.key.{AZURITE_HOST}": AZURITE_KEY,
        }

    def client(self) -> fs.AzureFileSystem:
        """pyarrow's Azure client of this emulator, configured here, not by firesteel."""
        authority = self.endpoint.removeprefix("http://")
        return fs.AzureFileSystem(
            account_name=AZURITE_ACCOUNT,
            account_key=AZURITE_KEY,
            blob_storage_authority=authority,
            dfs_storage_authority=authority,
            blob_storage_scheme="http",
            dfs_storage_scheme="http",
        )

    def create_bucket(self, name: str) -> str:
        """Create container ``name``; returns it."""
        self.client().create_dir(name)
        return name

    def read(self, bucket: str, key: str) -> bytes:
        """An object's bytes (pyarrow's client, not firesteel's)."""
        with self.client().open_input_stream(f"{bucket}/{key}") as stream:
            return bytes(stream.read())
