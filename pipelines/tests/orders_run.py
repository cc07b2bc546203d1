"""Running the "orders" example pipeline in tests: its inputs, what its outputs must hold."""

from __future__ import annotations

from pathlib import Path

from firesteel.testing.pipelines.orders import (
    expected_totals,
    final_totals,
    reason,
    repeated,
    rows,
    write_orders,
)

ORDERS_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pipelines" / "orders"

__all__ = [
    "ORDERS_EXAMPLE",
    "expected_totals",
    "final_totals",
    "reason",
    "repeated",
    "rows",
    "write_orders",
]
