"""Security job: run queries whose options carry secrets; print progress and errors.

Usage: secrets_job.py <bootstrap> <input topic> <output topic> <checkpoint dir> <secret>
The test greps everything this process and Spark print for ``<secret>``.
"""

from __future__ import annotations

import json
import sys

from firesteel.testing.jobs import job_session


def main() -> None:
    bootstrap, source, target, checkpoint, secret = sys.argv[1:6]
    secrets = {
        "kafka.sasl.username": "firesteel",
        "kafka.sasl.password": secret,
        "kafka.ssl.key.password": secret,
        "kafka.sasl.oauthbearer.client.secret": secret,
    }
    spark = job_session("kafka-secrets-job")

    def run(protocol: str, suffix: str) -> None:
        reader = (
            spark.readStream.format("firesteel.kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("kafka.security.protocol", protocol)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .option("checkpointLocation", f"{checkpoint}/{suffix}")
        )
        for key, value in secrets.items():
            reader = reader.option(key, value)
        writer = (
            reader.load()
            .select("key", "value")
            .writeStream.format("firesteel.kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("kafka.security.protocol", protocol)
            .option("topic", target)
            .option("guarantee", "exactly-once")
            .option("checkpointLocation", f"{checkpoint}/{suffix}")
            .trigger(availableNow=True)
        )
        for key, value in secrets.items():
            writer = writer.option(key, value)
        query = writer.start()
        try:
            query.awaitTermination()
        except Exception as exc:  # the failure text itself is what the test inspects
            print(f"QUERY FAILED: {exc!r}")
        for progress in query.recentProgress:
            print("PROGRESS:", getattr(progress, "json", progress))
        print("STATUS:", json.dumps(query.status))

    # Secrets set but unused (plaintext broker): the query runs.
    run("plaintext", "ok")
    # SASL against a broker that does not offer it: the query fails.
    run("sasl_plaintext", "fail")
    spark.stop()


if __name__ == "__main__":
    main()
