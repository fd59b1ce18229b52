"""GET /metrics: the Prometheus scrape target (series in ``api/prometheus.py``).

Authenticated like the rest of the API: a scraper sends a bearer token of any user role (a join
token is refused), set with ``authorization: {credentials_file: ...}`` in its scrape config
(``deploy/prometheus.yml``).
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CollectorRegistry

from gpupool.api import prometheus
from gpupool.api.deps import Caller

router = APIRouter(tags=["metrics"])


@router.get("/metrics", response_class=Response)
def metrics(request: Request, who: Caller) -> Response:
    registry: CollectorRegistry = request.app.state.metrics
    return Response(prometheus.render(registry), media_type=prometheus.CONTENT_TYPE)
