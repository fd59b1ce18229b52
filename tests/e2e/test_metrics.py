"""A real head serves /metrics: its controller feeds the histograms, a scraper needs a user token."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.headproc import HeadProcess, wait_state

pytestmark = pytest.mark.e2e


def test_a_real_head_serves_metrics(head: HeadProcess) -> None:
    with head.client() as c:
        c.set_project("vision", 0, None, 1)
        job = c.submit(command=["true"], gpus=1, project="vision")
        wait_state(c, int(job["id"]), ("succeeded",))
    response = httpx.get(f"{head.url}/metrics", headers={"Authorization": f"Bearer {head.token()}"})
    assert response.status_code == 200, response.text
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }
    assert samples[("gpupool_jobs", (("project", "vision"), ("state", "succeeded")))] == 1
    assert samples[("gpupool_nodes", (("state", "up"),))] == 2
    assert (
        sum(v for (name, labels), v in samples.items() if name == "gpupool_gpus" and ("state", "free") in labels) == 8
    )
    assert samples[("gpupool_scheduler_cycle_seconds_count", ())] >= 1
    assert samples[("gpupool_pending_seconds_count", ())] == 1

    assert httpx.get(f"{head.url}/metrics").status_code == 401
    join = (head.data_dir / "join-token").read_text().strip()
    assert httpx.get(f"{head.url}/metrics", headers={"Authorization": f"Bearer {join}"}).status_code == 403
