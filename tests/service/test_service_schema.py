"""Schemathesis against the served OpenAPI spec: no generated request, valid or not, gets a 5xx."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")
schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402
from servicekit import Service, service_process  # noqa: E402

EXAMPLES = 40  # per operation; keeps the whole file well under a minute


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    # one worker and a short queue: generated jobs that happen to be valid cannot pile up work
    with service_process(tmp_path_factory.mktemp("schema"), "--workers", "1", "--queue-limit", "2", "--seeds", "1",
                         "--timeout", "20") as running:
        yield running


@pytest.fixture(scope="module")
def api_schema(service: Service) -> object:
    schema = schemathesis.openapi.from_url(f"{service.url}/openapi.json",
                                           headers={"Authorization": f"Bearer {service.token}"})
    schema.config.generation.update(max_examples=EXAMPLES, modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
    return schema


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors(case: schemathesis.Case, service: Service) -> None:
    for token in (service.token, "not-the-token"):
        response = case.call(base_url=service.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert response.status_code < 500, (case.method, case.path, response.status_code, response.text[:500])
        if token != service.token and case.path != "/v1/health":
            assert response.status_code >= 400, "a wrong token must never get an answer"  # 401, or 405/413/422
