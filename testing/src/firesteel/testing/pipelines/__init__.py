"""Test tooling of ``firesteel-pipelines``: the "orders" pipeline's input and checks, its soak.

Needs the ``pipelines`` extra (``pip install firesteel-testing[pipelines]``).
"""
