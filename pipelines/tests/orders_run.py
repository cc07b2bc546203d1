"""Where the "orders" example pipeline is in this checkout (its inputs and checks are in
:mod:`firesteel.testing.pipelines.orders`)."""

from __future__ import annotations

from pathlib import Path

ORDERS_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pipelines" / "orders"
