"""Fixtures of the RocksDB backend's tests: Spark's Python workers use this interpreter."""

from __future__ import annotations

from firesteel.testing.workerpython import use_worker_python

pytest_plugins = ["firesteel.testing.fixtures"]
"""The shared fixtures (the S3 server of the crash test's ``s3`` case)."""

# Spark starts its Python processes with PYSPARK_PYTHON / PYSPARK_DRIVER_PYTHON: this
# interpreter (it has firesteel installed), through a wrapper that keeps PySpark's zip
# copies off their path (firesteel.testing.workerpython).
use_worker_python()
