"""The pipelines' soak command arms only declared points, at queries the orders pipeline has."""

from __future__ import annotations

from orders_run import ORDERS_EXAMPLE

from firesteel.pipelines.runner import load
from firesteel.testing.pipelines.soak import COMMIT_POINTS, EXAMPLE
from firesteel.testing.points import check_point


def test_every_point_the_orders_soak_arms_is_declared_and_aimed_at_a_query_of_the_pipeline() -> (
    None
):
    assert EXAMPLE == ORDERS_EXAMPLE
    verified, _ = load(EXAMPLE / "blueprint.conf", [str(EXAMPLE / "local.conf")], [])
    streamlets = set(verified.streamlets)
    for pairs in COMMIT_POINTS.values():
        for point, query in pairs:
            assert check_point(point) == point
            pipeline, streamlet, _ = query.split(".")
            assert (pipeline, streamlet in streamlets) == (verified.blueprint.name, True)
