"""``ServiceClient``: the HTTP service's operations over httpx, for the CLI and for scripts;
``AsyncServiceClient``: its search over ``httpx.AsyncClient`` (the async retrievers use it).

Answers come back as the same dicts the Python API's ``as_dict()`` gives; error answers become
the library's exceptions again (422 -> InputError, 404 -> NotFoundError, 401 -> AuthError,
403 -> ForbiddenError, 409 -> ConsistencyError, 429 -> OverloadError, 5xx or no answer ->
ServiceError), each with the service's message. Needs only httpx (no torch, no model), so a
CLI search through a running service costs milliseconds.

>>> with ServiceClient("http://127.0.0.1:8765", token="...") as c:   # doctest: +SKIP
...     c.search("E-1234", top_k=3)["results"][0]["resource_id"]
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
from hybridsag.output.budget import DEFAULT_BUDGET
from hybridsag.errors import (
    AuthError,
    ConsistencyError,
    ForbiddenError,
    IngestError,
    InputError,
    NotFoundError,
    OverloadError,
    ServiceError,
)
from hybridsag.jsondepth import MAX_JSON_DEPTH, too_deep
from hybridsag.ingest.progress import IngestProgress, as_progress
from hybridsag.request import FeedbackOptions, ListingOptions, SearchOptions, options_of

__all__ = ["JSONL_KEYS", "AsyncServiceClient", "ServiceClient", "search_body"]

#: Keys of an ``index --jsonl`` line that the service takes (others, such as a ``source_uri``
#: naming a file on the client's machine, stay behind).
JSONL_KEYS = ("_id", "id", "resource_id", "title", "text", "metadata", "tenant", "acl", "format")


def _message(response: httpx.Response) -> tuple[str, list[Any]]:
    """The service's error text and the ``loc`` of its first entry."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        return response.text[:500] or response.reason_phrase, []
    if isinstance(detail, list) and detail:
        parts = []
        for d in detail:
            loc = ".".join(str(x) for x in d.get("loc", []))
            parts.append(f"{loc}: {d.get('msg')}" if loc else str(d.get("msg")))
        return "; ".join(parts), list(detail[0].get("loc", []))
    return str(detail), []


#: Where the CLI's client token comes from, as a refused token's error names it.
CLI_TOKEN_SOURCE = "set HYBRIDSAG_SERVER__CLIENT_TOKEN"


def _raise_for(response: httpx.Response, token_source: str = CLI_TOKEN_SOURCE) -> None:
    """The error of a failed answer; a 401 names ``token_source``, where the token came from
    (the CLI's setting, a framework adapter's ``token=`` argument)."""
    if response.is_success:
        return
    text, loc = _message(response)
    status = response.status_code
    where = f"{response.request.method} {response.request.url.path}"
    if status == 404:
        raise NotFoundError(text)
    if status in (400, 413, 422):
        raise InputError(f"{where}: {text}", loc=loc)
    if status == 401:
        raise AuthError(f"{where}: {text} ({token_source})")
    if status == 403:
        raise ForbiddenError(f"{where}: {text}")
    if status == 409:
        raise ConsistencyError(text)
    if status == 429:
        retry = float(response.headers.get("retry-after", "1") or 1)
        raise OverloadError(f"{where}: {text}", retry_after_s=retry)
    raise ServiceError(f"{where}: HTTP {status}: {text}")


def search_body(query: str, options: SearchOptions | None = None, **keywords: Any) -> dict[str, Any]:
    """The JSON body of ``POST /v1/search`` for ``query`` and ``options``; an option left None
    (or empty) is left out, so the service's default holds.

    Args:
        query: The query (the service checks it).
        options: The search's options (:class:`~hybridsag.request.SearchOptions`), checked
            when built; None: every one at the service's default. ``explain`` is always sent;
            filters' tuples are sent as lists.
        keywords: Fields of :class:`~hybridsag.request.SearchOptions`, which build it (or
            replace those fields of ``options``).

    Raises:
        QueryValueError: a bad option, as :class:`~hybridsag.request.SearchOptions` names it.
    """
    o = options_of(SearchOptions, options, keywords)
    filters = {k: list(v) if isinstance(v, tuple) else v for k, v in dict(o.filters).items()}
    body: dict[str, Any] = {"query": query, "explain": o.explain}
    for key, value in (
        ("top_k", o.top_k),
        ("paths", list(o.paths) if o.paths else None),
        ("filters", filters or None),
        ("include_stale", o.include_stale),
        ("judge_order", o.judge_order),
        ("weights", dict(o.weights) if o.weights else None),
        ("min_confidence", o.min_confidence),
    ):
        if value is not None:
            body[key] = value
    return body


def _agent_body(
    query: str, options: SearchOptions | None, budget: int, keywords: Mapping[str, Any]
) -> dict[str, Any]:
    """The body of ``POST /v1/search`` with ``format: "agent"``: no ``why`` is worded."""
    body = search_body(query, options, **{**keywords, "explain": False})
    body.update(format="agent", budget=budget)
    return body


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _timeout(timeout: float) -> httpx.Timeout:
    return httpx.Timeout(timeout, connect=min(timeout, 10.0))


class ServiceClient:
    """A client of one running service at ``url`` with a bearer ``token``; ``token_source``
    says where the token came from, as an AuthError names it (default: the CLI's setting).

    Args:
        url: The service's root URL (a trailing ``/`` is dropped).
        token: The bearer token; None: no ``Authorization`` header (a service with
            ``server.auth = false``).
        timeout: Seconds a request may take (connecting: at most 10 of them).
        transport: An httpx transport to send through instead of the network (tests, a
            proxy).
        token_source: Where ``token`` came from, as an AuthError names it.
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = 120.0,
        transport: httpx.BaseTransport | None = None,
        token_source: str = CLI_TOKEN_SOURCE,
    ) -> None:
        self.url = url.rstrip("/")
        self._token_source = token_source
        self._http = httpx.Client(
            base_url=self.url, headers=_headers(token), timeout=_timeout(timeout), transport=transport
        )

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        if method == "POST" and "json" not in kwargs and "content" not in kwargs:
            # a POST without a body says it is JSON too: a service with auth off refuses an
            # untyped one (what a page in a browser could send)
            kwargs["headers"] = {"Content-Type": "application/json", **kwargs.get("headers", {})}
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ServiceError(f"no answer from the service at {self.url}: {exc}") from exc
        _raise_for(response, self._token_source)
        return response

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._request(method, path, **kwargs).json()

    # -- operations ---------------------------------------------------------------------------

    def search(
        self, query: str, options: SearchOptions | None = None, **keywords: Any
    ) -> dict[str, Any]:
        """``POST /v1/search``: the response as ``SearchResponse.as_dict()`` gives it (with
        ``min_confidence``, no results when its ``confidence`` is below it). The service checks
        the options again and forces a tenant token's tenant and tags into the filters.

        Args:
            query: The query.
            options: The search's options (:class:`~hybridsag.request.SearchOptions`); a field
                left None takes the service's setting, and ``top_k`` is refused over the
                service's ``server.max_top_k``.
            keywords: Fields of :class:`~hybridsag.request.SearchOptions`, which build it (or
                replace those fields of ``options``): ``c.search(q, top_k=3)``.

        Raises:
            QueryValueError: a bad option, refused before it is sent.
            InputError: a bad argument (HTTP 422).
            AuthError, ForbiddenError: a token refused (401, 403).
            OverloadError: too many searches in flight (429); ``retry_after_s`` says when.
            ServiceError: no answer, or a 5xx.
        """
        return self._call("POST", "/v1/search", json=search_body(query, options, **keywords))

    def search_agent(
        self,
        query: str,
        options: SearchOptions | None = None,
        *,
        budget: int = DEFAULT_BUDGET,
        **keywords: Any,
    ) -> str:
        """``POST /v1/search`` with ``format: "agent"``: the agent text of at most ``budget``
        characters (``SearchResponse.as_agent_text``).

        Args:
            query: As in :meth:`search`.
            options: As in :meth:`search` (``explain`` is not sent: agent text words no
                ``why``).
            budget: Characters of the text at most
                (:data:`~hybridsag.output.budget.MIN_BUDGET`..:data:`~hybridsag.output.budget.MAX_BUDGET`).
            keywords: As in :meth:`search`.

        Raises:
            QueryValueError: bad options; InputError (a budget out of range too), AuthError,
                ForbiddenError, OverloadError and ServiceError as :meth:`search`.
        """
        body = _agent_body(query, options, budget, keywords)
        return self._request("POST", "/v1/search", json=body).text

    def ingest(self, resources: Sequence[Mapping[str, Any]], *, mode: str | None = None) -> dict[str, Any]:
        """``POST /v1/resources``: one batch; the ingest report.

        Args:
            resources: The resources, each a mapping of ``resource_id`` (or ``id``/``_id``),
                ``text`` and optionally ``title``, ``metadata``, ``tenant``, ``acl``,
                ``format``.
            mode: ``"sag"`` or ``"passage"`` chunking; None: the service's ``chunking.mode``.

        Raises:
            InputError: the batch refused (its ``loc`` names the bad item), or over
                ``server.max_batch``.
            AuthError, ForbiddenError, OverloadError, ServiceError: as the service answers.
        """
        params = {"mode": mode} if mode else None
        return self._call("POST", "/v1/resources", json=list(resources), params=params)

    def ingest_jsonl(
        self,
        path: Path,
        *,
        mode: str | None = None,
        batch_size: int = 256,
        progress: Callable[[int], None] | None = None,
    ) -> dict[str, Any]:
        """Send a JSONL file in batches; bad lines (not JSON, or refused by the service) are
        reported by ``file:line`` as ``index --jsonl`` does in-process, the rest is ingested.

        Args:
            path: The JSONL file (as :meth:`hybridsag.search.HybridSearch.ingest_jsonl` reads;
                only :data:`JSONL_KEYS` are sent).
            mode: As in :meth:`ingest`.
            batch_size: Lines a request.
            progress: Called with the number of lines each batch ingested.

        Returns:
            The summed ingest report (``indexed``, ``unchanged``, ``chunks``, ``vectors``,
            ``errors``, ``warnings``, ``seconds``).

        Raises:
            IngestError: ``path`` does not exist.
            InputError: a batch refused for something no line is named for.
            AuthError, ForbiddenError, OverloadError, ServiceError: as the service answers.
        """
        total: dict[str, Any] = {
            "indexed": 0, "unchanged": 0, "chunks": 0, "vectors": 0, "errors": {}, "warnings": [],
            "seconds": 0.0,
        }
        for batch in self._jsonl_batches(Path(path), batch_size, total["errors"]):
            while batch:
                try:
                    report = self.ingest([obj for _, obj in batch], mode=mode)
                except InputError as exc:
                    loc = exc.loc or []
                    if len(loc) >= 2 and loc[0] == "body" and isinstance(loc[1], int):
                        where, _ = batch.pop(loc[1])
                        total["errors"][where] = str(exc)
                        continue
                    raise
                for key in ("indexed", "unchanged", "chunks", "vectors", "seconds"):
                    total[key] += report[key]
                total["errors"].update(report["errors"])
                total["warnings"].extend(report.get("warnings", []))
                if progress is not None:
                    progress(len(batch))
                break
        total["seconds"] = round(total["seconds"], 4)
        return total

    @staticmethod
    def _jsonl_batches(
        path: Path, batch_size: int, errors: dict[str, str]
    ) -> Iterator[list[tuple[str, dict[str, Any]]]]:
        if not path.is_file():
            raise IngestError(f"JSONL file {path} does not exist")
        batch: list[tuple[str, dict[str, Any]]] = []
        with path.open("rb") as fh:
            for lineno, raw in enumerate(fh, start=1):
                where = f"{path}:{lineno}"
                if not raw.strip():
                    continue
                depth = too_deep(raw)
                if depth is not None:  # the service would refuse the whole batch for it
                    errors[where] = (
                        f"the JSON nests {depth} levels deep; at most {MAX_JSON_DEPTH} are accepted"
                    )
                    continue
                try:
                    obj = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, ValueError) as exc:
                    errors[where] = f"not JSON: {exc}"
                    continue
                if not isinstance(obj, dict):
                    errors[where] = f"a line must be a JSON object, got {type(obj).__name__}"
                    continue
                kept = {k: obj[k] for k in JSONL_KEYS if k in obj}
                for key in ("_id", "id", "resource_id"):
                    if isinstance(kept.get(key), int) and not isinstance(kept[key], bool):
                        kept[key] = str(kept[key])
                if isinstance(kept.get("acl"), str):
                    kept["acl"] = [kept["acl"]]
                batch.append((where, kept))
                if len(batch) >= batch_size:
                    yield batch
                    batch = []
        if batch:
            yield batch

    def sync_folder(
        self,
        path: Path,
        *,
        tenant: str | None = None,
        acl: Sequence[str] = (),
        prune: bool = True,
        progress: IngestProgress | Callable[[int], None] | None = None,
    ) -> dict[str, Any]:
        """Sync a folder (or one file) on this machine into the service, as ``hybridsag
        --server URL index DIR`` does; returns the ingest report an in-process index gives,
        plus ``sync``: ``files`` in the manifest, ``uploaded``, ``requests`` and
        ``bytes_sent`` (request bodies).

        The folder is scanned with the rules of an in-process index
        (:func:`hybridsag.ingest.sources.scan_folder`: suffixes, hidden files, ``.gitignore``,
        symlinks) and each file hashed; the manifest goes to ``POST /v1/sync``; only the files
        the service needs are read again and sent (``PUT /v1/sync/files``, each within
        ``server.max_body_bytes``: a larger one is reported as skipped); ``POST
        /v1/sync/commit`` then prunes what the folder no longer holds (a file that still
        exists is kept, even when it is now ignored or unreadable, as in-process; nothing for
        one file, or a folder that holds no file). An unchanged folder costs the manifest and
        the commit. A sync that stopped part way (the network, Ctrl-C) is completed by the
        next one, which sends only the rest. The ids are those of an in-process index of the
        folder (:mod:`hybridsag.ingest.manifest`). ``tenant``: None for the token's own (``""``
        for an admin); ``acl``: the resources' ACL tags. ``progress`` ticks once per file.

        Args:
            path: The folder, or one file, on this machine.
            tenant: The tenant the resources land in; None: the token's own (``""`` for an
                admin).
            acl: The ACL tags every resource gets.
            prune: Delete the resources whose files the folder no longer holds (never for one
                file).
            progress: An :class:`~hybridsag.ingest.progress.IngestProgress`, or a callable
                given the number of files done.

        Raises:
            IngestError: ``path`` does not exist, or is a file of a kind that is not indexed.
            InputError, AuthError, ForbiddenError, OverloadError, ServiceError: as the service
                answers (a manifest over ``server.max_body_bytes``: InputError).
        """
        from hybridsag.ingest.sources import (
            SourceErrors,
            hash_regular,
            read_regular,
            scan_folder,
        )

        started = time.perf_counter()
        errors = SourceErrors()
        scan = scan_folder(Path(path), errors, converts=True)
        root = scan.folder.parent if scan.single_file else scan.folder
        prune = prune and not scan.single_file
        ticks = as_progress(progress)
        ticks.start(len(scan.files))
        entries: list[dict[str, Any]] = []
        unhashed: list[str] = []
        for file in scan.files:
            rel = file.relative_to(root).as_posix()
            try:
                sha, st = hash_regular(file, within=root)
            except OSError as exc:
                errors.add(rel, f"unreadable: {exc.strerror}")
                unhashed.append(rel)
                continue
            except IngestError as exc:
                errors.add(rel, str(exc))
                unhashed.append(rel)
                continue
            entries.append(
                {"path": rel, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha}
            )
        if unhashed:
            ticks.prepared(len(unhashed), 0)
        stats = {"files": len(entries), "uploaded": 0, "requests": 0, "bytes_sent": 0}

        def post(route: str, body: Mapping[str, Any]) -> Any:
            data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            stats["requests"] += 1
            stats["bytes_sent"] += len(data)
            return self._call(
                "POST", route, content=data, headers={"Content-Type": "application/json"}
            )

        scope = {} if tenant is None else {"tenant": tenant}
        need = post(
            "/v1/sync",
            {"root": str(root), **scope, "acl": list(acl), "prune": prune, "files": entries},
        )
        report: dict[str, Any] = {
            "indexed": 0, "unchanged": need["unchanged"], "chunks": 0, "vectors": 0,
            "errors": {**errors.errors, **need["errors"]}, "warnings": [], "seconds": 0.0,
            "root": need["id_root"], "pruned": [], "notes": list(need["notes"]),
            "excluded": list(need.get("excluded", [])),
        }
        ticks.prepared(len(entries) - len(need["need"]), 0)
        params: dict[str, Any] = {"root": str(root), **scope, "acl": list(acl)}
        for rel in need["need"]:
            try:
                data, _ = read_regular(
                    root / rel, within=root, max_bytes=need["max_upload_bytes"],
                    limit_name="server.max_body_bytes",
                )
            except (OSError, IngestError) as exc:
                why = f"unreadable: {exc.strerror}" if isinstance(exc, OSError) else str(exc)
                report["errors"][rel] = why
                ticks.prepared(1, 0)
                continue
            stats["requests"] += 1
            stats["bytes_sent"] += len(data)
            done = self._call(
                "PUT",
                "/v1/sync/files",
                params={**params, "path": rel, "sha256": hashlib.sha256(data).hexdigest()},
                content=data,
                headers={"Content-Type": "application/octet-stream"},
            )
            stats["uploaded"] += 1
            for key in ("indexed", "unchanged", "chunks", "vectors"):
                report[key] += done[key]
            report["errors"].update(done["errors"])
            report["warnings"].extend(done["warnings"])
            ticks.prepared(1, done["chunks"])
        kept = [e["path"] for e in entries] + unhashed
        kept += [p for p in need["held"] if os.path.lexists(root / p)]
        commit = post("/v1/sync/commit", {"root": str(root), **scope, "prune": prune, "paths": kept})
        report["pruned"] = commit["pruned"]
        report["warnings"].extend(commit["warnings"])
        report["seconds"] = round(time.perf_counter() - started, 4)
        report["sync"] = stats
        return report

    def list_resources(
        self, options: ListingOptions | None = None, *, cursor: str | None = None, **keywords: Any
    ) -> dict[str, Any]:
        """``GET /v1/resources``: one page, ``{"resources": [...], "next_cursor"}`` (pass
        ``next_cursor`` back as ``cursor`` for the next page; None after the last). A
        tenant-scoped token lists its own tenant only; an admin every tenant's, or ``tenant``'s.

        Args:
            options: What to list (:class:`~hybridsag.request.ListingOptions`: ``tenant``, an
                admin's filter; ``status``; an id ``prefix``; ``limit``, at most this many on
                the page); None: the service's first page of everything the token sees.
            cursor: The ``next_cursor`` of the page before; None: the first page.
            keywords: Fields of :class:`~hybridsag.request.ListingOptions`, which build it.
        """
        o = options_of(ListingOptions, options, keywords)
        params = {
            k: v
            for k, v in (
                ("tenant", o.tenant), ("status", o.status), ("prefix", o.prefix),
                ("limit", o.limit), ("cursor", cursor),
            )
            if v is not None
        }  # fmt: skip
        return self._call("GET", "/v1/resources", params=params)

    def resource(self, resource_id: str, *, tenant: str | None = None) -> dict[str, Any]:
        """``GET /v1/resources/{id}`` of ``tenant`` (None: the token's own, or ``""`` for an
        admin); NotFoundError when missing or out of scope.

        Args:
            resource_id: The resource's id.
            tenant: Its tenant; None: the token's own (``""`` for an admin).
        """
        return self._call(
            "GET", f"/v1/resources/{_quote(resource_id)}", params=_tenant_param(tenant)
        )

    def delete(self, resource_id: str, *, tenant: str | None = None) -> dict[str, Any]:
        """``DELETE /v1/resources/{id}`` of ``tenant`` (as :meth:`resource`); NotFoundError
        when missing or out of scope.

        Args:
            resource_id: The resource's id.
            tenant: Its tenant, as in :meth:`resource`.
        """
        return self._call(
            "DELETE", f"/v1/resources/{_quote(resource_id)}", params=_tenant_param(tenant)
        )

    def set_enabled(
        self, resource_id: str, enabled: bool, *, tenant: str | None = None
    ) -> dict[str, Any]:
        """``POST /v1/resources/{id}/enable`` or ``/disable`` of ``tenant`` (as
        :meth:`resource`).

        Args:
            resource_id: The resource's id.
            enabled: True enables it, False disables it.
            tenant: Its tenant, as in :meth:`resource`.
        """
        action = "enable" if enabled else "disable"
        return self._call(
            "POST",
            f"/v1/resources/{_quote(resource_id)}/{action}",
            params=_tenant_param(tenant),
        )

    def exclusions(
        self, *, tenant: str | None = None, resource_id: str | None = None
    ) -> list[dict[str, Any]]:
        """``GET /v1/exclusions``: the folder files deleted while they stay on disk, kept out
        of their folders' index (a tenant-scoped token's own; for an admin ``tenant`` narrows),
        of id ``resource_id`` when given.

        Args:
            tenant: Only this tenant's (an admin's filter).
            resource_id: Only the file of this id.
        """
        params = {k: v for k, v in (("tenant", tenant), ("resource_id", resource_id)) if v is not None}
        return self._call("GET", "/v1/exclusions", params=params)  # type: ignore[no-any-return]

    def include(self, resource_id: str, *, tenant: str | None = None) -> dict[str, Any]:
        """``POST /v1/resources/{id}/include`` of ``tenant`` (as :meth:`resource`): the
        exclusion lifted and the file indexed again; the ingest report. NotFoundError when
        that id is not excluded.

        Args:
            resource_id: The excluded file's resource id.
            tenant: Its tenant, as in :meth:`resource`.
        """
        return self._call(
            "POST", f"/v1/resources/{_quote(resource_id)}/include", params=_tenant_param(tenant)
        )

    def reconcile(self, *, dry_run: bool = True, force: bool = False) -> dict[str, Any]:
        """``POST /v1/reconcile``: the audit report; ConsistencyError when refused.

        Args:
            dry_run: Only plan the repairs (True) or apply them (False).
            force: Apply a plan the mass-delete guard refuses (``consistency.max_delete_share``,
                a folder root emptied); a plan that would wipe the vectors from an empty store
                is refused even so.
        """
        return self._call("POST", "/v1/reconcile", json={"apply": not dry_run, "force": force})

    def audit_latest(self) -> dict[str, Any]:
        """``GET /v1/audit/latest``; NotFoundError when no report exists yet."""
        return self._call("GET", "/v1/audit/latest")

    def ready(self) -> dict[str, Any]:
        """``GET /readyz``; ServiceError while the service is not ready."""
        return self._call("GET", "/readyz")

    def readiness(self, *, token: bool = True) -> tuple[int, dict[str, Any]]:
        """``GET /readyz`` with the client's token (or, ``token=False``, without one): the
        status (200 ready, 503 not) and the body, each check's result in ``checks`` when the
        token may see them. AuthError/ForbiddenError for a token that may not.

        Args:
            token: Send the client's token (True) or none (False).
        """
        headers = None if token else {"Authorization": ""}
        try:
            response = self._http.get("/readyz", headers=headers)
        except httpx.HTTPError as exc:
            raise ServiceError(f"no answer from the service at {self.url}: {exc}") from exc
        if response.status_code != 503:
            _raise_for(response, self._token_source)
        try:
            body = response.json()
        except ValueError:
            body = {}
        return response.status_code, body if isinstance(body, dict) else {}

    def whoami(self) -> dict[str, Any]:
        """``GET /v1/whoami``: the token's ``name``, ``role``, ``tenant`` (None: every
        tenant's, an admin) and ``acl``, and the service's ``version``."""
        return self._call("GET", "/v1/whoami")

    # -- A/B experiments (hybridsag.ab) ---------------------------------------------------------

    def experiments(self) -> list[dict[str, Any]]:
        """``GET /v1/experiments``: every experiment with its arms and state."""
        return self._call("GET", "/v1/experiments")

    def experiment(self, name: str) -> dict[str, Any]:
        """``GET /v1/experiments/{name}``; NotFoundError for an unknown experiment.

        Args:
            name: The experiment's name.
        """
        return self._call("GET", f"/v1/experiments/{_quote(name)}")

    def define_experiment(self, definition: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /v1/experiments`` (an admin token): the new experiment's state.

        Args:
            definition: The experiment, with the keys of
                :class:`~hybridsag.settings.ExperimentSettings`.
        """
        return self._call("POST", "/v1/experiments", json=dict(definition))

    def set_experiment_active(self, name: str, active: bool) -> dict[str, Any]:
        """``POST /v1/experiments/{name}/start`` or ``/stop`` (an admin token).

        Args:
            name: The experiment's name.
            active: True starts it, False stops it.
        """
        action = "start" if active else "stop"
        return self._call("POST", f"/v1/experiments/{_quote(name)}/{action}")

    def experiment_report(self, name: str, *, tenant: str | None = None) -> dict[str, Any]:
        """``GET /v1/experiments/{name}/report`` of ``tenant``'s traffic (None: the token's
        tenant, or every tenant's for an admin; naming one is an admin's); NotFoundError for an
        unknown experiment.

        Args:
            name: The experiment's name.
            tenant: Whose traffic; None: the token's tenant (every tenant's for an admin).
        """
        return self._call(
            "GET", f"/v1/experiments/{_quote(name)}/report", params=_tenant_param(tenant)
        )

    def feedback(
        self, query_id: str, options: FeedbackOptions | None = None, **keywords: Any
    ) -> dict[str, Any]:
        """``POST /v1/feedback`` on a result of a search answered under an experiment.

        Args:
            query_id: The ``query_id`` the search's response carried.
            options: Which result and what the user did
                (:class:`~hybridsag.request.FeedbackOptions`: its ``position`` or
                ``chunk_id``, and ``kind``); None: built from ``keywords``.
            keywords: Fields of :class:`~hybridsag.request.FeedbackOptions`, which build it
                (``feedback(qid, position=1)``).
        """
        o = options_of(FeedbackOptions, options, keywords)
        body: dict[str, Any] = {"query_id": query_id, "kind": o.kind}
        if o.position is not None:
            body["position"] = o.position
        if o.chunk_id is not None:
            body["chunk_id"] = o.chunk_id
        return self._call("POST", "/v1/feedback", json=body)


class AsyncServiceClient:
    """The search of :class:`ServiceClient` over ``httpx.AsyncClient``: one request on the event
    loop, no thread. Errors map as :class:`ServiceClient`'s do.

    Args:
        url: As in :class:`ServiceClient`.
        token: As in :class:`ServiceClient`.
        timeout: As in :class:`ServiceClient`.
        transport: An httpx async transport to send through instead of the network.
        token_source: As in :class:`ServiceClient`.

    >>> async with AsyncServiceClient("http://127.0.0.1:8765", token="...") as c:  # doctest: +SKIP
    ...     (await c.search("E-1234", top_k=3))["results"][0]["resource_id"]
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = 120.0,
        transport: httpx.AsyncBaseTransport | None = None,
        token_source: str = CLI_TOKEN_SOURCE,
    ) -> None:
        self.url = url.rstrip("/")
        self._token_source = token_source
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=_headers(token), timeout=_timeout(timeout), transport=transport
        )

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncServiceClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _post(self, path: str, body: Mapping[str, Any]) -> httpx.Response:
        try:
            response = await self._http.post(path, json=body)
        except httpx.HTTPError as exc:
            raise ServiceError(f"no answer from the service at {self.url}: {exc}") from exc
        _raise_for(response, self._token_source)
        return response

    async def search(
        self, query: str, options: SearchOptions | None = None, **keywords: Any
    ) -> dict[str, Any]:
        """``POST /v1/search``, as :meth:`ServiceClient.search`.

        Args:
            query: As in :meth:`ServiceClient.search`.
            options: As in :meth:`ServiceClient.search`.
            keywords: As in :meth:`ServiceClient.search`.

        Raises:
            QueryValueError: bad options; InputError, AuthError, ForbiddenError,
                OverloadError and ServiceError as :meth:`ServiceClient.search`.
        """
        response = await self._post("/v1/search", search_body(query, options, **keywords))
        return response.json()  # type: ignore[no-any-return]

    async def search_agent(
        self,
        query: str,
        options: SearchOptions | None = None,
        *,
        budget: int = DEFAULT_BUDGET,
        **keywords: Any,
    ) -> str:
        """``POST /v1/search`` with ``format: "agent"``, as :meth:`ServiceClient.search_agent`.

        Args:
            query: As in :meth:`ServiceClient.search`.
            options: As in :meth:`ServiceClient.search_agent`.
            budget: As in :meth:`ServiceClient.search_agent`.
            keywords: As in :meth:`ServiceClient.search`.

        Raises:
            QueryValueError: bad options; InputError, AuthError, ForbiddenError,
                OverloadError and ServiceError as :meth:`ServiceClient.search`.
        """
        return (await self._post("/v1/search", _agent_body(query, options, budget, keywords))).text


def _tenant_param(tenant: str | None) -> dict[str, str]:
    """The ``tenant`` query parameter of a ``/v1/resources/{id}`` call (none for None)."""
    return {} if tenant is None else {"tenant": tenant}


def _quote(resource_id: str) -> str:
    from urllib.parse import quote

    return quote(resource_id, safe="")
