"""The "orders" example pipeline's input and what its outputs must hold (issue 50's user).

Orders ``o-00000``, ``o-00001``, ... each for one of :data:`CUSTOMERS`; a tenth of them in
dollars, a tenth above :data:`MAX_AMOUNT`, a tenth stale, so the ``validate`` streamlet
(configured ``currency = "EUR"``, ``max-amount = 500.0``, a ``max-age`` of a day or more)
rejects each for :func:`reason`. Outputs are read with pyarrow's dataset reader, never
firesteel's.
"""

from __future__ import annotations

import datetime
import json
from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds

CUSTOMERS = 3
MAX_AMOUNT = 500.0
STALE = "2020-01-01T00:00:00.000Z"


def order(index: int) -> dict[str, object]:
    """Order ``index``: a tenth of them in dollars, a tenth too large, a tenth stale."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    return {
        "order_id": f"o-{index:05d}",
        "customer": f"c{index % CUSTOMERS}",
        "amount": 900.0 if index % 10 == 5 else 10.0 + index,
        "currency": "USD" if index % 10 == 3 else "EUR",
        "placed_at": STALE if index % 10 == 7 else now,
    }


def reason(record: dict[str, object]) -> str | None:
    """Why the pipeline must reject ``record`` (the first rule it breaks), if it must."""
    if record["currency"] != "EUR":
        return "currency"
    if float(str(record["amount"])) > MAX_AMOUNT:
        return "amount"
    return "stale" if record["placed_at"] == STALE else None


def write_orders(folder: Path, first: int, count: int) -> list[dict[str, object]]:
    """Orders ``first`` to ``first + count - 1`` as one JSON-lines file, published whole."""
    folder.mkdir(parents=True, exist_ok=True)
    records = [order(i) for i in range(first, first + count)]
    hidden = folder / f".orders-{first:05d}.json"
    hidden.write_text("".join(json.dumps(r) + "\n" for r in records))
    hidden.rename(folder / f"orders-{first:05d}.json")
    return records


def rows(folder: Path) -> list[dict[str, object]]:
    """The Parquet rows in ``folder`` (pyarrow's reader, not firesteel's)."""
    if not any(folder.glob("*.parquet")):
        return []
    return ds.dataset(folder, format="parquet").to_table().to_pylist()


def expected_totals(orders: list[dict[str, object]]) -> dict[str, tuple[int, float]]:
    """Each customer's valid orders: their number and amount."""
    totals: dict[str, tuple[int, float]] = {}
    for record in orders:
        if reason(record) is None:
            count, amount = totals.get(str(record["customer"]), (0, 0.0))
            totals[str(record["customer"])] = (count + 1, amount + float(str(record["amount"])))
    return totals


def final_totals(totals: list[dict[str, object]]) -> dict[str, tuple[int, float]]:
    """Each customer's latest total in the egress's rows."""
    latest: dict[str, tuple[int, float]] = {}
    for row in totals:
        count = int(str(row["orders"]))
        if count > latest.get(str(row["customer"]), (0, 0.0))[0]:
            latest[str(row["customer"])] = (count, float(str(row["amount"])))
    return latest


def repeated(totals: list[dict[str, object]], rejected: list[dict[str, object]]) -> list[object]:
    """Rows written twice: a (customer, count) total or a rejected order."""
    twice: Counter[object] = Counter((r["customer"], r["orders"]) for r in totals)
    twice.update(r["order_id"] for r in rejected)
    return [key for key, n in twice.items() if n > 1]
