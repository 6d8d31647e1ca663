"""The checks ``hybridsag doctor`` shows, in process and through a service.

Each check is a name -> ``"ok: <detail>"`` or ``"failed: <Type>: <why>"`` (:func:`checked`):
a failed check is reported, never raised. :func:`local_health` opens the data dir's parts and
checks each; :func:`remote_health` asks a running service; :func:`service_answers` is the one
check of a data dir a running service holds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hybridsag.errors import ForbiddenError, ServiceError

if TYPE_CHECKING:
    from hybridsag.client import ServiceClient
    from hybridsag.components import Components
    from hybridsag.settings import Settings

__all__ = ["checked", "local_health", "remote_health", "service_answers"]


def checked(name: str, fn: Callable[[], str], out: dict[str, str]) -> bool:
    """Run one health check into ``out``: ``"ok: <detail>"``, or ``"failed: <Type>: <why>"``;
    True when it passed."""
    try:
        out[name] = f"ok: {fn()}"
        return True
    except Exception as exc:  # noqa: BLE001 - a health check reports every failure
        out[name] = f"failed: {type(exc).__name__}: {exc}"
        return False


def service_answers(url: str) -> str:
    """That the service at ``url`` answers ``/healthz`` (ServiceError otherwise)."""
    import httpx

    try:
        response = httpx.get(f"{url}/healthz", timeout=5.0)
    except httpx.HTTPError as exc:
        raise ServiceError(f"no answer from {url}/healthz: {exc}") from None
    if response.status_code != 200:
        raise ServiceError(f"{url}/healthz answered HTTP {response.status_code}")
    return "answers /healthz"


def local_health(s: Settings, components: Callable[[], Components]) -> dict[str, str]:
    """The checks of a data dir no service holds, over the parts ``components()`` opens: the
    store (opening it is the first check; the others run only when it passes), the judge, the
    embedding model (its files and what the index recorded; nothing is embedded), Milvus
    (opened from the recorded dimension), the lexical index and the fusion."""
    checks: dict[str, str] = {}
    parts: Any = None

    def store() -> str:
        nonlocal parts
        parts = components()
        c = parts.store.counts()
        return (
            f"{s.store_display}: {c['resources']} resources, {c['chunks']} chunks, "
            f"tokenizer {parts.tokenizer.fingerprint()}"
        )

    def judge() -> str:
        built = parts.judge()
        return f"{s.judge.name} ({type(built).__name__}); on failure: {s.judge.on_failure}"

    def model() -> str:
        from hybridsag.vectors.embedder_common import resolve_model

        if s.embedding.model == "none":
            return "dense path off (embedding.model = 'none')"
        source = resolve_model(s.embedding.model)
        stored = parts.store.get_meta("embedding_model"), parts.store.get_meta("embedding_dimension")
        recorded = (
            f"index built with {stored[0]!r}, {stored[1]}-d" if stored[0] else "no vectors recorded yet"
        )
        kind = parts.embedding_backend()
        if s.embedding.backend != kind:
            kind = f"{kind}, as embedding.backend = {s.embedding.backend!r} chose"
        return f"{s.embedding.model} ({kind}): files at {source}; {recorded}"

    def milvus() -> str:
        if s.embedding.model == "none":
            return "dense path off"
        where = s.milvus.uri or f"Milvus Lite at {s.milvus_lite_path}"
        index = parts.stored_dense_index()
        if index is None:
            return f"{where}: no vectors recorded for this data dir yet"
        return f"{where}: {index.describe()}"

    def lexical() -> str:
        return parts.lexical.describe()  # Milvus: connects, checks a server's version (2.5+)

    def fusion() -> str:
        f = s.fusion
        weights = getattr(getattr(parts.judge(), "weights", None), "source", None)
        text = f"{f.method} fusion, trust step {'on' if f.trust else 'off'}"
        if f.trust:
            text += f" (model: {parts.trust_model().source})"
        return text + f"; judge {s.judge.name}" + (f" with weights: {weights}" if weights else "")

    if checked("store", store, checks):
        for name, fn in (
            ("judge", judge),
            ("embedding model", model),
            ("milvus", milvus),
            ("lexical index", lexical),
            ("fusion", fusion),
        ):
            checked(name, fn, checks)
    return checks


def remote_health(url: str, open_client: Callable[[], ServiceClient]) -> dict[str, str]:
    """The checks of the service at ``url`` through ``open_client()`` (a new client each time,
    closed here): that it answers and its version (``service``), the token's name, role and
    tenant (``token``), and ``/readyz``: each component's check when the token may see them (an
    admin's, or ``server.public_metrics``), else ready or not."""
    from hybridsag import __version__

    checks: dict[str, str] = {}
    me: dict[str, Any] = {}

    def service() -> str:
        with open_client() as client:
            me.update(client.whoami())
        theirs = me.get("version")
        also = "" if theirs == __version__ else f" (this client: {__version__})"
        return f"{url}: hybridsag {theirs}{also}"

    def token() -> str:
        scope = "every tenant" if me["tenant"] is None else f"tenant {me['tenant']!r}"
        acl = f", ACL tags {', '.join(me['acl'])}" if me.get("acl") else ""
        return f"{me['name']!r}, role {me['role']} ({scope}{acl})"

    if not checked("service", service, checks):
        return checks
    checked("token", token, checks)
    with open_client() as client:
        try:
            status, body = client.readiness()
        except ForbiddenError:  # the detail needs an admin token: ready or not is public
            status, body = client.readiness(token=False)
    if status not in (200, 503):
        checks["ready"] = f"failed: /readyz answered HTTP {status}"
        return checks
    for name, text in (body.get("checks") or {}).items():
        ok = text.startswith(("ok", "off"))
        checks[name] = text if ok else f"failed: {text.removeprefix('failed: ')}"
    if body.get("ready"):
        checks["ready"] = "ok: ready" + (
            "" if body.get("checks") else " (each component's check needs an admin token)"
        )
    else:
        checks["ready"] = "failed: not ready"
    return checks

