"""The commands of ``hybridsag``, grouped by job: :mod:`~hybridsag.commands.index` (``index``,
``rebuild-vectors``), :mod:`~hybridsag.commands.resources` (``list``, ``show``, ``delete``,
``disable``, ``enable``, ``include``), :mod:`~hybridsag.commands.search`,
:mod:`~hybridsag.commands.evaluate` (``eval``), :mod:`~hybridsag.commands.doctor` and
:mod:`~hybridsag.commands.mcp`; what they share is :mod:`~hybridsag.commands.common`.

Each module holds its commands' ``cmd_*(args, out) -> int`` and the ``add_*(subparsers)``
builders of their parsers; :func:`hybridsag.cli.build_parser` calls the builders and
:func:`hybridsag.cli.main` runs the chosen command. The other packages' commands (``reconcile``,
``audit``, ``serve``, ``ab``) come through the :data:`hybridsag.cli.COMMANDS_GROUP` entry points.
"""

__all__: list[str] = []
