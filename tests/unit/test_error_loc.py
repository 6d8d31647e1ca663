"""Every hybridsag error carries ``loc``, where the bad value is in a request (FastAPI's
``detail[].loc``): given when raised, else the class's ``default_loc``, else None. The service's
error body reads it, and the client sets it from the body of a 4xx."""

from __future__ import annotations

from hybridsag.ab.online import UnknownQueryError
from hybridsag.errors import ForbiddenError, HybridSagError, InputError, OverloadError


def test_loc_is_the_one_given_else_the_class_default_else_none() -> None:
    assert HybridSagError("x").loc is None
    assert OverloadError("busy", retry_after_s=2.0).loc is None
    assert InputError("bad", loc=("body", 0, "_id")).loc == ["body", 0, "_id"]
    assert ForbiddenError("no", loc=["query", "tenant"]).loc == ["query", "tenant"]
    assert UnknownQueryError("unknown query id 'q'").loc == ["body", "query_id"]
    assert UnknownQueryError("elsewhere", loc=["path", "id"]).loc == ["path", "id"]


def test_each_error_has_its_own_list() -> None:
    first, second = UnknownQueryError("a"), UnknownQueryError("b")
    assert first.loc is not None and second.loc is not None
    first.loc.append("extra")
    assert second.loc == ["body", "query_id"]
    assert UnknownQueryError.default_loc == ("body", "query_id")
