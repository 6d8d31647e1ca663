"""The HTTP service: one warm :class:`~hybridsag.search.HybridSearch` behind FastAPI on uvicorn.

``create_app(settings, reconciler=...)`` builds the app; ``serve(settings, reconciler=...)``
runs it until SIGTERM or Ctrl-C (``hybridsag serve``). Needs the ``service`` extra:
``pip install 'hybridsag[service]'``.
"""

from hybridsag.errors import ConfigError

try:
    import fastapi  # noqa: F401
    import prometheus_client  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ConfigError(
        f"the HTTP service needs its extra ({exc.name} is missing): "
        "pip install 'hybridsag[service]'"
    ) from exc

from hybridsag.backend import ReconcileHooks
from hybridsag.service.app import create_app
from hybridsag.service.auth import Principal, TokenBook
from hybridsag.service.routing import API_PREFIX
from hybridsag.service.server import serve

__all__ = ["API_PREFIX", "Principal", "ReconcileHooks", "TokenBook", "create_app", "serve"]
