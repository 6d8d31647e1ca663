"""What a backend and the service need of the reconciler, and where it is found.

This package never imports ``hybridsag.consistency``: that package publishes its
:class:`ReconcileHooks` under the entry-point group :data:`RECONCILER_GROUP` (pyproject.toml),
which :func:`load_reconcile_hooks` loads (:class:`~hybridsag.backend.local.LocalBackend` on its
first reconcile; the ``serve`` command hands the same implementation to the service).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from hybridsag.errors import ConfigError

if TYPE_CHECKING:
    from hybridsag.search import HybridSearch
    from hybridsag.settings import Settings

__all__ = ["RECONCILER_GROUP", "ReconcileHooks", "load_reconcile_hooks"]

#: Entry-point group of the reconciler (:class:`ReconcileHooks`): ``hybridsag.consistency``
#: publishes its ``ServiceReconciler`` there, so that this package need not import it.
RECONCILER_GROUP = "hybridsag.reconciler"


class ReconcileHooks(Protocol):
    """What a backend and the service need of the reconciler (``hybridsag.consistency``
    provides one under :data:`RECONCILER_GROUP`).

    ``run`` plans (and with ``dry_run=False`` applies) over ``search`` and returns the audit
    report, raising ``ConsistencyError`` when refused (lease held, mass-delete guard); ``latest``
    is the newest audit report under the settings' reports dir (with ``path`` and ``skipped``),
    ``NotFoundError`` naming what it skipped when there is none; ``start_schedule`` starts the ``consistency.cron`` job over ``search`` (the same
    lease as every other reconcile), ``next_run`` says when it runs next (ISO time) and
    ``stop_schedule`` stops it.
    """

    def run(self, search: HybridSearch, *, dry_run: bool, force: bool) -> dict[str, Any]: ...

    def latest(self, settings: Settings) -> dict[str, Any]: ...

    def start_schedule(self, search: HybridSearch) -> None: ...

    def next_run(self) -> str | None: ...

    def stop_schedule(self) -> None: ...


def load_reconcile_hooks() -> ReconcileHooks:
    """The reconciler published under :data:`RECONCILER_GROUP` (the first by name), built
    with no arguments.

    Raises:
        ConfigError: none is installed (``hybridsag.consistency`` is part of the package, so
            this means a broken install), or it fails to load.
    """
    from importlib.metadata import entry_points

    found = sorted(entry_points(group=RECONCILER_GROUP), key=lambda e: e.name)
    if not found:
        raise ConfigError(
            f"no reconciler is installed (entry-point group {RECONCILER_GROUP!r} is empty): "
            "reinstall hybridsag (pip install -e .)"
        )
    try:
        return found[0].load()()  # type: ignore[no-any-return]
    except Exception as exc:  # noqa: BLE001 - a broken plugin is named, never a traceback
        raise ConfigError(
            f"the reconciler {found[0].value} failed to load: {type(exc).__name__}: {exc}"
        ) from exc
