"""Arms of an offline comparison: what ``hybridsag eval --compare A,B[,C...]`` runs.

An arm is written as one of:

- a registered path name (``bm25``, ``sag2``, ``dense``, ``title``): that path alone, as
  ``hybridsag eval --paths NAME`` runs it;
- ``fused``: a whole fused search over ``search.paths``, as ``--paths fused`` runs it;
- a path set ``sag2+dense``: a fused search over those paths;
- a settings file (``*.toml``): a fused search under that file's fusion, judge, SAG2, search,
  title and lexical sections (the index itself is the one every arm shares);
- a TREC run file (``*.trec``, ``*.run``): another tool's answers, compared as they are;

and any of the first three may take options after a colon: ``fused:method=rrf,k=30,dense=1.0``
(the fusion method, RRF's ``k``, a path's fusion weight), ``rounds=N`` (SAG2 expansion rounds),
``judge_order=true|false``. A ``k`` the arm sets (as an option or in its settings file's
``[fusion]``) under convex fusion, which does not read it, is refused naming the method, as a
``normalisation`` under rrf is.
Arms are separated by commas; a ``KEY=VALUE`` that follows an arm with options belongs to it,
so ``sag2,dense,fused:k=30,dense=1.0`` is three arms. Each arm is labelled by its text.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hybridsag.errors import InputError
from hybridsag.paths import PATHS, path_names
from hybridsag.settings import Settings

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["FUSED", "Arm", "parse_arms", "parse_arm"]

#: The arm that runs a whole fused search over ``search.paths``.
FUSED = "fused"
#: Sections a settings-file arm may change: what a search reads, never what the index holds.
SEARCH_SECTIONS = ("fusion", "judge", "sag2", "search", "title", "lexical", "query")


@dataclass(frozen=True)
class Arm:
    """One arm: ``alone`` runs the single path in ``paths`` by itself; otherwise a fused search
    over ``paths`` (empty: ``search.paths``) with the optional ``weights``, fusion ``method``,
    RRF ``k``, ``judge_order``, SAG2 ``rounds`` and settings file."""

    label: str
    paths: tuple[str, ...] = ()
    alone: bool = False
    weights: Mapping[str, float] | None = None
    method: str | None = None
    k: float | None = None
    rounds: int | None = None
    judge_order: bool | None = None
    settings_file: Path | None = None
    file_sections: Mapping[str, Any] = field(default_factory=dict)
    run_file: Path | None = None

    def settings_for(self, base: Settings) -> Settings:
        """``base`` with this arm's method, k, rounds and settings-file sections applied.
        InputError names a value the settings refuse, and a fusion parameter the arm sets that
        its fusion method does not read (a ``k`` under convex)."""
        from hybridsag.evaluation.offline_runs import check_method

        if not self.file_sections and (self.method, self.k, self.rounds) == (None, None, None):
            return base
        data = base.model_dump()
        for section, values in self.file_sections.items():
            data[section] = {**data[section], **values}
        own = dict(self.file_sections.get("fusion", {}))
        for name, value in (("method", self.method), ("k", self.k)):
            if value is not None:
                data["fusion"][name] = own[name] = value
        if self.rounds is not None:
            data["sag2"]["rounds"] = self.rounds
        try:
            settings = type(base).model_validate(data)
        except ValueError as exc:
            raise InputError(f"arm {self.label!r}: {exc}") from None
        check_method(settings.fusion.method, own, where=f"arm {self.label!r}")
        return settings

    def search_options(self) -> dict[str, Any]:
        """The per-call arguments of ``HybridSearch.search`` for a fused arm."""
        return {
            "paths": self.paths or None,
            "weights": dict(self.weights) if self.weights is not None else None,
            "judge_order": self.judge_order,
        }

    def all_paths(self, settings: Settings) -> tuple[str, ...]:
        """The paths this arm runs under ``settings``."""
        return self.paths or tuple(self.settings_for(settings).search.paths)


def _bool(value: str, where: str) -> bool:
    low = value.strip().lower()
    if low in ("true", "1", "yes", "on"):
        return True
    if low in ("false", "0", "no", "off"):
        return False
    raise InputError(f"{where}={value!r} must be true or false")


def _number(value: str, where: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise InputError(f"{where}={value!r} is not a number") from None


def _check_path(name: str, where: str) -> str:
    if name not in PATHS:
        raise InputError(
            f"unknown path {name!r} in arm {where!r}; valid: {', '.join(path_names())}, {FUSED}"
        )
    return name


def _settings_file(path: Path, label: str) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise InputError(f"arm {label!r}: cannot read {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"arm {label!r}: {path} is not valid TOML: {exc}") from None
    bad = sorted(set(data) - set(SEARCH_SECTIONS))
    if bad:
        raise InputError(
            f"arm {label!r}: {path} sets {bad}; a settings-file arm may set only "
            f"{', '.join(SEARCH_SECTIONS)} (every arm reads the same index)"
        )
    return data


def parse_arm(text: str) -> Arm:
    """One arm from its text (see the module docstring); InputError names what is wrong."""
    label = text.strip()
    if not label:
        raise InputError("an empty arm in --compare")
    head, _, options = label.partition(":")
    head = head.strip()
    if head.endswith((".trec", ".run")):
        if options:
            raise InputError(f"arm {label!r}: a TREC run arm takes no options")
        if not Path(head).is_file():
            raise InputError(f"arm {label!r}: TREC run {head} does not exist")
        return Arm(label=label, run_file=Path(head))
    if head.endswith(".toml") or (":" not in label and Path(head).is_file()):
        if options:
            raise InputError(f"arm {label!r}: a settings-file arm takes no options")
        sections = _settings_file(Path(head), label)
        paths = tuple(sections.get("search", {}).get("paths", ()))
        return Arm(label=label, settings_file=Path(head), file_sections=sections, paths=paths)
    if head == FUSED:
        paths: tuple[str, ...] = ()
        alone = False
    elif "+" in head:
        paths = tuple(_check_path(p.strip(), label) for p in head.split("+") if p.strip())
        if len(set(paths)) != len(paths):
            raise InputError(f"arm {label!r} names a path twice")
        alone = False
    else:
        paths = (_check_path(head, label),)
        alone = True
    weights: dict[str, float] = {}
    k = rounds = judge_order = method = None
    for item in (o.strip() for o in options.split(",") if o.strip()) if options else ():
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq:
            raise InputError(f"arm {label!r}: option {item!r} must be KEY=VALUE")
        if key == "method":
            method = value.strip()
        elif key == "k":
            k = _number(value, "k")
        elif key == "rounds":
            number = _number(value, "rounds")
            if number != int(number):
                raise InputError(f"arm {label!r}: rounds={value!r} must be a whole number")
            rounds = int(number)
        elif key == "judge_order":
            judge_order = _bool(value, "judge_order")
        elif key in PATHS:
            weights[key] = _number(value, key)
        else:
            raise InputError(
                f"arm {label!r}: unknown option {key!r}; valid: method, k, rounds, judge_order, "
                f"or a path's weight ({', '.join(path_names())})"
            )
    if alone and (k is not None or method is not None or weights or judge_order is not None):
        raise InputError(
            f"arm {label!r}: {head} alone is not fused; method, k, weights and judge_order "
            f"need a fused arm ({FUSED}:... or a path set such as {head}+title:...)"
        )
    return Arm(
        label=label,
        paths=paths,
        alone=alone,
        weights=weights or None,
        method=method,
        k=k,
        rounds=rounds,
        judge_order=judge_order,
    )


def _split(text: str) -> list[str]:
    """Comma-separated arms, where a ``KEY=VALUE`` after an arm with options continues it."""
    out: list[str] = []
    for token in text.split(","):
        stripped = token.strip()
        continues = "=" in stripped and ":" not in stripped and out and ":" in out[-1]
        if continues:
            out[-1] = f"{out[-1]},{stripped}"
        else:
            out.append(stripped)
    return out


def parse_arms(text: str | Sequence[str]) -> list[Arm]:
    """Arms from ``--compare`` text (or a list of arm texts): at least two, labels unique."""
    items = _split(text) if isinstance(text, str) else [str(t) for t in text]
    arms = [parse_arm(t) for t in items]
    if len(arms) < 2:
        raise InputError(f"--compare needs at least two arms, got {len(arms)}: {text!r}")
    labels = [a.label for a in arms]
    if len(set(labels)) != len(labels):
        raise InputError(f"--compare names an arm twice: {labels}")
    return arms
