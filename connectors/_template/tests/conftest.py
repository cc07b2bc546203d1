"""Fixtures of the template connector's tests: firesteel-testing's pytest plugin.

It gives ``spark`` (one ``local[2]`` session per test process, every installed
connector registered), the crash harness and the servers the tests use.
"""

pytest_plugins = ["firesteel.testing.fixtures"]
