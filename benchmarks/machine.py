"""A description of the machine a benchmark ran on, stored beside its figures."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from typing import Any

_PACKAGES = ("firesteel", "pyspark", "pyarrow", "pandas", "confluent-kafka", "rocksdict")


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _cpu_model() -> str:
    # platform.processor() is empty on most Linux systems; /proc/cpuinfo names the CPU.
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def load() -> float | None:
    """The one-minute load average now (None where the OS has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def describe() -> dict[str, Any]:
    """Cores, memory, CPU, OS, Python and the versions of the packages measured."""
    memory = _memory_bytes()
    try:
        usable_cores: int | None = len(os.sched_getaffinity(0))
    except AttributeError:
        usable_cores = os.cpu_count()
    return {
        "cores": os.cpu_count(),
        "usable_cores": usable_cores,
        "memory_gb": round(memory / 2**30, 1) if memory else None,
        "cpu": _cpu_model(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "python_implementation": sys.implementation.name,
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "packages": {name: v for name in _PACKAGES if (v := _version(name)) is not None},
    }


def summary(machine: dict[str, Any]) -> str:
    """One line for the console and the report."""
    packages = ", ".join(f"{k} {v}" for k, v in machine.get("packages", {}).items())
    load = machine.get("load_average")
    load_text = f"; load {load[0]:.1f}" if load else ""
    return (
        f"{machine.get('cores')} cores, {machine.get('memory_gb')} GB, {machine.get('cpu')}; "
        f"{machine.get('os')}; Python {machine.get('python')}; {packages}{load_text}"
    )
