"""The "orders" pipeline: five streamlets, JSON in, two Avro outlets, keyed state, two egresses.

``orders`` reads JSON-lines orders from a folder (parameter ``input-dir``)
onto a JSON port whose records carry a timestamp (``placed_at``);
``validate`` splits them onto two Avro outlets, ``valid`` and ``rejected``
(with the reason), by its parameters ``max-amount`` (a double),
``currency`` (a string that must be three capital letters) and ``max-age``
(a duration: an order placed longer ago than that is stale); ``totals``
keeps each customer's order count and amount in keyed state; ``store-totals``
and ``store-rejected`` write Parquet files to their ``output-dir``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql.types import DoubleType, StringType, StructField, StructType, TimestampType

from firesteel.backends import FilesystemBackend
from firesteel.pipelines import (
    AvroCodec,
    DoubleParameter,
    DurationParameter,
    Inlet,
    JsonCodec,
    Outlet,
    Streamlet,
    StreamletContext,
    StreamletLogic,
    StreamletShape,
    StringParameter,
)
from firesteel.state import KeyedProcessor, KeyState, ValueStateDescriptor, stateful

ORDER = StructType(
    [
        StructField("order_id", StringType(), False),
        StructField("customer", StringType(), False),
        StructField("amount", DoubleType(), False),
        StructField("currency", StringType(), False),
        StructField("placed_at", TimestampType(), False),
    ]
)
VALID = {
    "type": "record",
    "name": "ValidOrder",
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "customer", "type": "string"},
        {"name": "amount", "type": "double"},
    ],
}
REJECTED = {
    "type": "record",
    "name": "RejectedOrder",
    "fields": [{"name": "order_id", "type": "string"}, {"name": "reason", "type": "string"}],
}
TOTAL = {
    "type": "record",
    "name": "CustomerTotal",
    "fields": [
        {"name": "customer", "type": "string"},
        {"name": "orders", "type": "long"},
        {"name": "amount", "type": "double"},
    ],
}


class Orders(Streamlet):
    """Ingress: every JSON-lines file of orders dropped into ``input-dir``."""

    shape = StreamletShape(outlets=[Outlet("out", JsonCodec(ORDER, "Order"), key="order_id")])
    parameters = (StringParameter("input-dir", "folder of JSON-lines orders"),)
    description = "orders from files"

    def create_logic(self, context: StreamletContext) -> StreamletLogic:
        return OrdersLogic(context)


class OrdersLogic(StreamletLogic):
    def run(self) -> Sequence[Any]:
        orders = (
            self.context.spark.readStream.format("firesteel.files")
            .schema(ORDER)
            .option("format", "json")
            .load(str(Path(self.context.config["input-dir"]).resolve()))
        )
        return [self.context.write_stream(orders, "out")]


class Validate(Streamlet):
    """Processor: valid orders to ``valid``, the others to ``rejected`` with the reason."""

    shape = StreamletShape(
        inlets=[Inlet("in", JsonCodec(ORDER, "Order"))],
        outlets=[
            Outlet("valid", AvroCodec(VALID), key="customer"),
            Outlet("rejected", AvroCodec(REJECTED), key="order_id"),
        ],
    )
    parameters = (
        DoubleParameter("max-amount", "the largest amount an order may have", default=1000.0),
        StringParameter(
            "currency", "the only currency accepted", default="EUR", pattern="[A-Z]{3}"
        ),
        DurationParameter("max-age", "an order placed longer ago is stale", default="7 days"),
    )
    description = "order validation"

    def create_logic(self, context: StreamletContext) -> StreamletLogic:
        return ValidateLogic(context)


class ValidateLogic(StreamletLogic):
    def run(self) -> Sequence[Any]:
        from pyspark.sql import functions as F

        config = self.context.config
        max_age = int(config["max-age"].total_seconds())
        orders = self.context.read_stream("in").withColumn(
            "reason",
            F.when(F.col("currency") != config["currency"], F.lit("currency"))
            .when(F.col("amount") > config["max-amount"], F.lit("amount"))
            .when(
                F.col("placed_at") < F.current_timestamp() - F.expr(f"INTERVAL {max_age} SECONDS"),
                F.lit("stale"),
            ),
        )
        return [
            self.context.write_stream(orders.where("reason IS NULL"), "valid"),
            self.context.write_stream(orders.where("reason IS NOT NULL"), "rejected"),
        ]


class CustomerTotal(KeyedProcessor):
    """Per customer: how many valid orders so far, and their amount."""

    orders = ValueStateDescriptor("orders", int)
    amount = ValueStateDescriptor("amount", float)

    def process(self, key: Any, rows: Any, state: KeyState) -> Iterator[dict[str, Any]]:
        orders = state.value(self.orders)
        amount = state.value(self.amount)
        orders.update((orders.value() or 0) + rows.num_rows)
        amount.update((amount.value() or 0.0) + sum(rows.column("amount").to_pylist()))
        yield {"customer": key[0], "orders": orders.value(), "amount": amount.value()}


class Totals(Streamlet):
    """Processor with keyed state: each customer's running order count and amount."""

    shape = StreamletShape(
        inlets=[Inlet("in", AvroCodec(VALID))],
        outlets=[Outlet("out", AvroCodec(TOTAL), key="customer")],
    )
    description = "running totals per customer"

    def create_logic(self, context: StreamletContext) -> StreamletLogic:
        return TotalsLogic(context)


class TotalsLogic(StreamletLogic):
    def run(self) -> Sequence[Any]:
        state = self.context.checkpoint_location("out") + "-state"
        totals = stateful(
            self.context.read_stream("in"),
            key="customer",
            processor=CustomerTotal(),
            output_schema="customer string, orders long, amount double",
            backend=FilesystemBackend(f"file://{state}"),
            name="customer-totals",
        )
        return [self.context.write_stream(totals, "out")]


class ParquetEgress(StreamletLogic):
    """Egress logic: the inlet's records to Parquet files in ``output-dir``, exactly-once."""

    def run(self) -> Sequence[Any]:
        query = (
            self.context.read_stream("in")
            .writeStream.queryName(self.context.query_name())
            .format("firesteel.files")
            .option("path", str(Path(self.context.config["output-dir"]).resolve()))
            .option("guarantee", "exactly-once")
            .option("checkpointLocation", self.context.checkpoint_location())
            .trigger(**self.context.trigger)
            .start()
        )
        return [query]


class StoreTotals(Streamlet):
    """Egress: customer totals to Parquet files."""

    shape = StreamletShape(inlets=[Inlet("in", AvroCodec(TOTAL))])
    parameters = (StringParameter("output-dir", "folder the totals go to"),)
    description = "totals to files"

    def create_logic(self, context: StreamletContext) -> StreamletLogic:
        return ParquetEgress(context)


class StoreRejected(Streamlet):
    """Egress: rejected orders to Parquet files."""

    shape = StreamletShape(inlets=[Inlet("in", AvroCodec(REJECTED))])
    parameters = (StringParameter("output-dir", "folder the rejected orders go to"),)
    description = "rejected orders to files"

    def create_logic(self, context: StreamletContext) -> StreamletLogic:
        return ParquetEgress(context)
