"""A griffe extension for the documentation site (mkdocs.yml names it): the docstrings' doctest
lines (``>>> ...`` and their output) become fenced ``pycon`` blocks, so that Markdown reads
``x["results"][0]`` or ``['b', 'a']`` as code rather than as reference links."""

from __future__ import annotations

from typing import Any

import griffe


def fence_doctests(text: str) -> str:
    """``text`` with every run of doctest lines (a ``>>>`` line, its ``...`` continuations and
    the output up to the next blank line) inside a ``pycon`` fence; lines already in a fence
    are left as they are.

    >>> fence_doctests("Add.\\n\\n>>> 1 + 1\\n2\\n")
    'Add.\\n\\n```pycon\\n>>> 1 + 1\\n2\\n```\\n'
    """
    out: list[str] = []
    lines = text.split("\n")
    in_fence = in_doctest = False
    indent = ""
    for line in lines:
        stripped = line.strip()
        if not in_doctest and stripped.startswith(("```", "~~~")):
            in_fence = not in_fence
        elif not in_fence and not in_doctest and stripped.startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}```pycon")
            in_doctest = True
        elif in_doctest and not stripped:
            out.append(f"{indent}```")
            in_doctest = False
        out.append(line)
    if in_doctest:
        if out and out[-1] == "":
            out.insert(len(out) - 1, f"{indent}```")
        else:
            out.append(f"{indent}```")
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
        docstring = getattr(obj, "docstring", None)
        if docstring is not None and ">>>" in docstring.value:
            docstring.value = fence_doctests(docstring.value)
