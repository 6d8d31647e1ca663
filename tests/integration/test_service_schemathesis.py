"""Schemathesis (property-based testing from the OpenAPI schema) against a real uvicorn serving
the sample corpus on 127.0.0.1.

Every operation gets valid and invalid requests (invalid only for ``POST /v1/resources``, whose
valid requests would change the index on purpose); for each: no 5xx, every answer conforms to
the schema, and every 4xx names the bad field (``detail[].loc`` and ``msg``). After the run the
index is unchanged: the same resource and chunk counts, and a reconcile plan with nothing to do.
Examples per operation are bounded (``MAX_EXAMPLES``) and generation is deterministic
(``derandomize``), driven through schemathesis' Python API (``APIOperation.as_strategy``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from prometheus_client.parser import text_string_to_metric_families
from schemathesis import GenerationMode
from schemathesis.checks import positive_data_acceptance

from hybridsag.search import HybridSearch
from tests.servicesupport import ADMIN, running_service
from tests.settings_support import clean_env_settings

ROOT = Path(__file__).resolve().parents[2]
MAX_EXAMPLES = 40
AUTH = {"Authorization": f"Bearer {ADMIN}"}
STATE: dict[str, Any] = {}


@pytest.fixture(scope="module")
def service_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("fuzz") / "data"
    settings = clean_env_settings(
        data_dir=data,
        embedding={"model": "none"},
        server={"token": ADMIN, "reconciler": False, "max_batch": 20, "max_top_k": 50},
    )
    with HybridSearch(settings) as hs:
        hs.ingest_folder(ROOT / "samples" / "corpus")
        STATE["counts"] = hs.counts()
    with running_service(settings) as url:
        yield url


#: Every operation of the API with the generation modes it is fuzzed with: valid and invalid
#: requests; valid only where an operation takes no parameter (nothing to make invalid);
#: invalid only for the ingest (valid ones would change the index on purpose).
OPERATIONS: dict[tuple[str, str], tuple[GenerationMode, ...]] = {
    (path, "GET"): (GenerationMode.POSITIVE,)
    for path in ("/healthz", "/readyz", "/metrics", "/v1/audit/latest", "/v1/whoami")
}
OPERATIONS |= {
    (path, method): (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    for path, method in (
        ("/v1/search", "POST"),
        ("/v1/resources", "GET"),
        ("/v1/resources/{resource_id}", "GET"),
        ("/v1/resources/{resource_id}", "DELETE"),
        ("/v1/resources/{resource_id}/disable", "POST"),
        ("/v1/resources/{resource_id}/enable", "POST"),
        ("/v1/reconcile", "POST"),
    )
}
OPERATIONS |= {
    (path, method): (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    for path, method in (
        ("/v1/experiments/{name}", "GET"),
        ("/v1/experiments/{name}/start", "POST"),
        ("/v1/experiments/{name}/stop", "POST"),
        ("/v1/experiments/{name}/report", "GET"),
        ("/v1/experiments/{name}/chart", "GET"),
        ("/v1/feedback", "POST"),
    )
}
OPERATIONS[("/v1/experiments", "GET")] = (GenerationMode.POSITIVE,)
OPERATIONS[("/v1/resources", "POST")] = (GenerationMode.NEGATIVE,)
OPERATIONS[("/v1/experiments", "POST")] = (GenerationMode.NEGATIVE,)  # valid ones define some
# folder sync: a manifest only reads (valid ones too); an upload or a commit would write
OPERATIONS[("/v1/sync", "POST")] = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
OPERATIONS[("/v1/sync/files", "PUT")] = (GenerationMode.NEGATIVE,)
OPERATIONS[("/v1/sync/commit", "POST")] = (GenerationMode.NEGATIVE,)
# exclusions: listing them only reads; lifting one (include) writes
OPERATIONS[("/v1/exclusions", "GET")] = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
OPERATIONS[("/v1/resources/{resource_id}/include", "POST")] = (GenerationMode.NEGATIVE,)
#: Operations whose schema-valid requests may name state that does not exist (an experiment,
#: a query id): a 422 naming the field is the right answer there, not a rejected valid request.
NAMES_STATE = {
    ("/v1/search", "POST"),
    ("/v1/feedback", "POST"),
    *((p, m) for p, m in OPERATIONS if p.startswith("/v1/experiments/{name}")),
}
CASES = [(path, method, mode) for (path, method), modes in OPERATIONS.items() for mode in modes]


@pytest.fixture(scope="module")
def api_schema(service_url: str) -> Any:
    return schemathesis.openapi.from_url(f"{service_url}/openapi.json")


def test_every_operation_is_fuzzed(api_schema: Any) -> None:
    found = {
        (op.path, op.method.upper())
        for result in api_schema.get_all_operations()
        if (op := result.ok()) is not None
    }
    assert found == set(OPERATIONS)


def names_the_field(ctx: Any, response: Any, case: Any) -> bool | None:
    """A 4xx answer says what was wrong and where: ``detail`` entries with ``loc`` and ``msg``."""
    if not 400 <= response.status_code < 500:
        return None
    body = response.json()
    detail = body.get("detail")
    assert isinstance(detail, list) and detail, f"4xx without a detail list: {body}"
    for entry in detail:
        assert entry.get("msg"), f"4xx entry without a message: {entry}"
        if response.status_code not in (429, 503):
            assert entry.get("loc"), f"4xx entry without a field: {entry}"
    return True


@pytest.mark.parametrize(("path", "method", "mode"), CASES, ids=[f"{m} {p} {g.name.lower()}" for p, m, g in CASES])
def test_fuzz(api_schema: Any, path: str, method: str, mode: GenerationMode) -> None:
    operation = api_schema[path][method]

    @settings(
        max_examples=MAX_EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def fuzz(case: Any) -> None:
        case.call_and_validate(
            headers=AUTH,
            additional_checks=[names_the_field],
            excluded_checks=[positive_data_acceptance] if (path, method) in NAMES_STATE else [],
            timeout=60,
        )

    fuzz()


@pytest.mark.parametrize(
    ("method", "url", "loc"),
    [
        ("GET", "/v1/resources/README.md?tenant=a%1Fb", ["query", "tenant"]),
        ("DELETE", "/v1/resources/README.md?tenant=a%1Fb", ["query", "tenant"]),
        ("POST", "/v1/resources/README.md/disable?tenant=a%1Fb", ["query", "tenant"]),
        ("GET", "/v1/resources/a%1Fb", ["path", "resource_id"]),
        ("POST", "/v1/resources/a%1Fb/enable", ["path", "resource_id"]),
        ("POST", "/v1/resources/a%1Fb/include", ["path", "resource_id"]),
    ],
)
def test_a_key_separator_in_a_resource_address_is_a_422_naming_its_field(
    service_url: str, method: str, url: str, loc: list[str]
) -> None:
    """A tenant or id holding the store's key separator names no resource: the schema says so
    (found by the fuzzing: a schema-valid tenant was refused with ``loc: ["body"]``)."""
    with httpx.Client(base_url=service_url, headers=AUTH, timeout=60) as c:
        r = c.request(method, url)
        schema = c.get("/openapi.json").json()
    assert r.status_code == 422, r.text
    assert [e["loc"][:2] for e in r.json()["detail"]] == [loc]
    operation = schema["paths"]["/v1/resources/{resource_id}"]["get"]
    declared = {p["name"]: p["schema"] for p in operation["parameters"]}
    assert declared["resource_id"]["pattern"] == "^[^\\x1f]*$"
    assert declared["tenant"]["anyOf"][0]["pattern"] == "^[^\\x1f]*$"


def test_index_unchanged_after_fuzzing(service_url: str) -> None:
    with httpx.Client(base_url=service_url, headers=AUTH, timeout=60) as c:
        sizes = {
            sample.labels["kind"]: int(sample.value)
            for family in text_string_to_metric_families(c.get("/metrics").text)
            if family.name == "hybridsag_index_size"
            for sample in family.samples
        }
        assert sizes == STATE["counts"]
        plan = c.post("/v1/reconcile", json={}).json()
        assert plan["ok"] is True
        assert set(plan["counts_before"].values()) == {0}
