"""Thin adapters between firesteel's roles and Spark's Python Data Source API.

Spark's camelCase method names stay in this package; everything else is snake_case.
"""
