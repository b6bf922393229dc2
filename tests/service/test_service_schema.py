"""Schemathesis against the served OpenAPI spec: no generated request, valid or not, gets a 5xx.

Cases come from schemathesis's strategies and run under Hypothesis directly, not through schemathesis's
pytest plugin: that plugin reaches into pytest's internals and broke on a pytest minor release."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")
schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402
from servicekit import Service, service_process  # noqa: E402

EXAMPLES = 40  # per operation and generation mode; keeps the whole file well under a minute


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    # one worker and a short queue: generated jobs that happen to be valid cannot pile up work
    with service_process(tmp_path_factory.mktemp("schema"), "--workers", "1", "--queue-limit", "2", "--seeds", "1",
                         "--timeout", "20") as running:
        yield running


def operations(service: Service) -> list[object]:
    schema = schemathesis.openapi.from_url(f"{service.url}/openapi.json",
                                           headers={"Authorization": f"Bearer {service.token}"})
    return [result.ok() for result in schema.get_all_operations()]


def assert_no_server_error(case: schemathesis.Case, service: Service) -> None:
    for token in (service.token, "not-the-token"):
        response = case.call(base_url=service.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert response.status_code < 500, (case.method, case.path, response.status_code, response.text[:500])
        if token != service.token and case.path != "/v1/health":
            assert response.status_code >= 400, "a wrong token must never get an answer"  # 401, or 405/413/422


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=lambda m: m.value)
def test_no_server_errors(mode: GenerationMode, service: Service) -> None:
    found = operations(service)
    assert {op.path for op in found} >= {"/v1/jobs", "/v1/health"}  # the spec really was read
    tried = []
    for operation in found:
        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def check(case: schemathesis.Case) -> None:
            assert_no_server_error(case, service)

        try:
            check()
        except Unsatisfiable:  # nothing about this operation can be invalid (no parameters, no body)
            assert mode is GenerationMode.NEGATIVE, f"no valid request for {operation.label}"
            continue
        tried.append(operation.label)
    assert any("/v1/jobs" in label for label in tried), tried
