"""A redeployment is checked against the schemas earlier deployments wrote into each topic."""

from __future__ import annotations

from pathlib import Path

import pytest

from firesteel.pipelines import BlueprintError, parse_blueprint, verify
from firesteel.pipelines.redeploy import check_recorded_schemas, record_schemas

FIRST = """
blueprint {
  streamlets { readings = pipeline_streamlets.Ingress, metrics = pipeline_streamlets.Metrics }
  topics { readings { producers = [readings.out], consumers = [metrics.in] } }
}
"""
WIDER_PRODUCER_STRICT_CONSUMER = """
blueprint {
  streamlets {
    readings = pipeline_streamlets.IngressV2
    strict = pipeline_streamlets.StrictMetrics
  }
  topics { readings { producers = [readings.out], consumers = [strict.in] } }
}
"""
WIDER_PRODUCER_SAME_CONSUMER = """
blueprint {
  streamlets { readings = pipeline_streamlets.IngressV2, metrics = pipeline_streamlets.Metrics }
  topics { readings { producers = [readings.out], consumers = [metrics.in] } }
}
"""


def test_a_consumer_that_cannot_read_older_records_is_refused(tmp_path: Path) -> None:
    first = verify(parse_blueprint(FIRST, "v1.conf"))
    check_recorded_schemas(first, tmp_path)
    record_schemas(first, tmp_path)

    strict = verify(parse_blueprint(WIDER_PRODUCER_STRICT_CONSUMER, "v2.conf"))
    with pytest.raises(BlueprintError, match=r"strict.in cannot read the records readings.out"):
        check_recorded_schemas(strict, tmp_path)

    compatible = verify(parse_blueprint(WIDER_PRODUCER_SAME_CONSUMER, "v2.conf"))
    check_recorded_schemas(compatible, tmp_path)
    record_schemas(compatible, tmp_path)
    recorded = sorted(p.name for p in (tmp_path / "schemas" / "readings").glob("*.avsc"))
    assert recorded == ["readings.out.1.avsc", "readings.out.avsc"]
    with pytest.raises(BlueprintError, match=r"strict\.in cannot read"):
        check_recorded_schemas(strict, tmp_path)
