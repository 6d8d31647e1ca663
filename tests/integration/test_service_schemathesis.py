"""Schemathesis (property-based testing from the OpenAPI schema) against a real uvicorn serving
the sample corpus on 127.0.0.1.

Every operation gets valid and invalid requests (invalid only for the writes, whose valid
requests would change the index on purpose); for each: no 5xx, every answer conforms to the
schema, and every 4xx names the bad field (``detail[].loc`` and ``msg``). After the run the index
is unchanged: the same resource and chunk counts, and a reconcile plan with nothing to do.
Examples per operation are bounded (``MAX_EXAMPLES``) and generation is deterministic
(``derandomize``), driven through schemathesis' Python API (``APIOperation.as_strategy``).

Each case is judged by the request the server receives, not by the values generated: the
bearer token is schemathesis' own OpenAPI-aware auth (a case that negates the ``Authorization``
header keeps its missing or bad header), and a case's path, query and JSON body are read back
from the request as serialised (``Case.as_transport_kwargs``, prepared by requests) before
schemathesis revalidates it (``Case.meta``). An invalid part that does not survive serialisation
(a query value ``{}`` or ``[]`` is not sent; ``5`` for a string goes as ``"5"``) makes a valid
request, checked as one; a valid request that would change the index (a write's, or one naming an
indexed resource to delete, disable or enable) is checked and never sent.

Examples are the same in every run: every module of the code is imported before fuzzing (see
:func:`~tests.code_modules.import_every_module`), the schema is loaded with an explicit config
(no ``schemathesis.toml`` found in the working directory), no example database.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, event, given, settings
from prometheus_client.parser import text_string_to_metric_families
from schemathesis import GenerationMode
from schemathesis.checks import positive_data_acceptance
from schemathesis.config import SchemathesisConfig

from hybridsag.search import HybridSearch
from tests.code_modules import import_every_module
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
        STATE["ids"] = {r.record.resource_id for r in hs.list_resources()}
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
#: Operations whose schema-valid requests may break a rule JSON Schema cannot state (a folder
#: manifest listing one path twice): a 422 naming the field is the right answer there too.
BEYOND_SCHEMA = {("/v1/sync", "POST")}
CASES = [(path, method, mode) for (path, method), modes in OPERATIONS.items() for mode in modes]
#: Operations whose every valid request writes: fuzzed with invalid requests only.
WRITES = {op for op, modes in OPERATIONS.items() if modes == (GenerationMode.NEGATIVE,)}
#: Operations that change the resource their valid request names, when the index holds it.
RESOURCE_WRITES = {
    ("/v1/resources/{resource_id}", "DELETE"),
    ("/v1/resources/{resource_id}/disable", "POST"),
    ("/v1/resources/{resource_id}/enable", "POST"),
}
#: The keyword arguments of ``requests.Request`` that a serialised case may carry.
REQUEST_FIELDS = ("method", "url", "headers", "files", "data", "params", "auth", "cookies", "json")


@pytest.fixture(scope="module")
def api_schema(service_url: str) -> Any:
    import_every_module()
    config = SchemathesisConfig.from_dict({"auth": {"openapi": {"HTTPBearer": {"bearer": ADMIN}}}})
    schema = schemathesis.openapi.from_url(f"{service_url}/openapi.json", config=config)
    STATE["openapi"] = httpx.get(f"{service_url}/openapi.json", timeout=60).json()
    return schema


def test_every_operation_is_fuzzed(api_schema: Any) -> None:
    found = {
        (op.path, op.method.upper())
        for result in api_schema.get_all_operations()
        if (op := result.ok()) is not None
    }
    assert found == set(OPERATIONS)


def test_fuzzing_imports_every_module_first(api_schema: Any) -> None:
    """What Hypothesis draws depends on the local modules imported; all are, before fuzzing."""
    assert set(import_every_module()) <= set(sys.modules)


def array_parameters(path: str, method: str) -> set[str]:
    """The query parameters of an operation that the schema declares as arrays."""
    operation = STATE["openapi"]["paths"][path][method.lower()]
    return {
        p["name"]
        for p in operation.get("parameters", [])
        if p["in"] == "query" and p["schema"].get("type") == "array"
    }


def read_as_sent(case: Any, path: str, method: str) -> dict[str, str] | None:
    """Set the case's query and JSON body to what the server reads off the request as
    serialised (schemathesis then revalidates the case on its next ``case.meta``); returns the
    path parameters the server reads, or None when the path as serialised is no URL of the
    operation (a ``#`` or ``?`` in a path parameter cut it short: another route's request).
    Path parameters stay as generated (schemathesis keeps them percent-encoded), and a body that
    is no JSON document too (the server cannot read it either)."""
    kwargs = case.as_transport_kwargs()
    prepared = requests.Request(**{k: v for k, v in kwargs.items() if k in REQUEST_FIELDS}).prepare()
    url = urlsplit(prepared.url)
    template = re.escape(path)
    for name in case.path_parameters or {}:
        template = template.replace(re.escape("{" + name + "}"), f"(?P<{name}>.+?)")
    found = re.search(rf"{template}\Z", unquote(url.path), re.DOTALL)
    if found is None:
        return None
    values: dict[str, list[str]] = {}
    for name, value in parse_qsl(url.query, keep_blank_values=True):
        values.setdefault(name, []).append(value)
    arrays = array_parameters(path, method)
    query = {n: v if n in arrays or len(v) > 1 else v[0] for n, v in values.items()}
    if query != (case.query or {}):
        case.query = query
    if prepared.body and prepared.headers.get("Content-Type", "").startswith("application/json"):
        try:
            body = json.loads(prepared.body)
        except ValueError:  # no JSON document (or not UTF-8)
            body = case.body
        if body != case.body:
            case.body = body
    return found.groupdict()


def would_write(case: Any, path: str, method: str, path_parameters: dict[str, str]) -> bool:
    """Whether sending the case could change the index: it is a write's, or names an indexed
    resource to delete, disable or enable, and no part of it that is read back as sent (query,
    headers, body) is invalid; an invalid path parameter may not survive serialisation (``5``
    goes as ``"5"``), so it does not count."""
    if (path, method) not in WRITES and not (
        (path, method) in RESOURCE_WRITES and path_parameters["resource_id"] in STATE["ids"]
    ):
        return False
    return not any(
        info.mode.is_negative
        for location, info in case.meta.components.items()
        if location != "path"  # a str enum: schemathesis' ParameterLocation.PATH
    )


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


def fuzz_case(case: Any, path: str, method: str) -> None:
    """Judge one generated case by the request as serialised: sent and validated (no 5xx,
    schema conformance, a 4xx names its field, an invalid request is refused and a valid one is
    not), unless it is another route's or could write (checked, not sent)."""
    path_parameters = read_as_sent(case, path, method)
    if path_parameters is None:
        event("the path as serialised is another route's: not sent")
        return
    if would_write(case, path, method, path_parameters):
        event("a request that could write: checked, not sent")
        return
    case.call_and_validate(
        additional_checks=[names_the_field],
        excluded_checks=[positive_data_acceptance]
        if (path, method) in NAMES_STATE | BEYOND_SCHEMA
        else [],
        timeout=60,
    )


#: The Hypothesis settings of every fuzzing run: bounded, derandomized, no example database.
FUZZ_SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


@pytest.mark.parametrize(("path", "method", "mode"), CASES, ids=[f"{m} {p} {g.name.lower()}" for p, m, g in CASES])
def test_fuzz(api_schema: Any, path: str, method: str, mode: GenerationMode) -> None:
    operation = api_schema[path][method]

    @FUZZ_SETTINGS
    @given(case=operation.as_strategy(generation_mode=mode))
    def fuzz(case: Any) -> None:
        fuzz_case(case, path, method)

    fuzz()


@pytest.mark.parametrize(("path", "method"), sorted(RESOURCE_WRITES))
def test_invalid_requests_naming_an_indexed_resource_never_change_it(
    api_schema: Any, service_url: str, path: str, method: str
) -> None:
    """Invalid requests to delete, disable or enable ``README.md``, which the index holds: a
    missing or bad token stays missing or bad (401), an invalid query is refused (422), and one
    whose invalid part does not survive serialisation is checked, never sent; after them all
    ``README.md`` is still there and ready."""
    operation = api_schema[path][method]

    @FUZZ_SETTINGS
    @given(
        case=operation.as_strategy(
            generation_mode=GenerationMode.NEGATIVE, path_parameters={"resource_id": "README.md"}
        )
    )
    def fuzz(case: Any) -> None:
        fuzz_case(case, path, method)

    fuzz()
    with httpx.Client(base_url=service_url, headers=AUTH, timeout=60) as c:
        r = c.get("/v1/resources/README.md")
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "ready"


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
