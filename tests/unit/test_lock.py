"""requirements.lock covers what pyproject.toml asks for, so the lock cannot silently drift.

``make install`` installs only the lock (then the project with ``--no-deps``), so a dependency
named in pyproject.toml but missing from the lock, or locked at a version outside its range, would
be missing or wrong on a fresh clone. The extras checked are the Makefile's ``EXTRAS``, the ones
``make install`` (and so ``make test`` and CI) installs and ``make lock`` locks.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def makefile_extras() -> list[str]:
    """The extras named by the Makefile's ``EXTRAS :=`` line."""
    found = re.search(r"^EXTRAS\s*:=(.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert found, "the Makefile has no 'EXTRAS :=' line"
    return found.group(1).split()


def locked() -> dict[str, Version]:
    """Canonical name -> pinned version, for every package in the lock."""
    pins = {}
    for line in LOCK.read_text(encoding="utf-8").splitlines():
        if m := PIN.match(line):
            pins[canonicalize_name(m.group(1))] = Version(m.group(2))
    return pins


def required() -> list[tuple[str, Requirement]]:
    """(where, requirement) for the core dependencies and every extra in the Makefile."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    out = [("dependencies", Requirement(r)) for r in project["dependencies"]]
    extras = project.get("optional-dependencies", {})
    for extra in makefile_extras():
        assert extra in extras, f"Makefile EXTRAS names {extra!r}, not an extra in pyproject.toml"
        out += [(f"extra {extra!r}", Requirement(r)) for r in extras[extra]]
    return out


def lock_problems(
    requirements: list[tuple[str, Requirement]], pins: dict[str, Version]
) -> list[str]:
    """One line per requirement the pins miss or hold outside its range."""
    problems = []
    for where, req in requirements:
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue  # not for this Python or platform
        version = pins.get(canonicalize_name(req.name))
        if version is None:
            problems.append(f"{req} ({where}) is not in {LOCK.name}")
        elif not req.specifier.contains(version, prereleases=True):
            problems.append(f"{req} ({where}) is locked at {version}")
    return problems


def test_every_declared_dependency_is_locked_within_its_range() -> None:
    pins = locked()
    assert len(pins) > len(required()), f"{LOCK.name} pins too little: {sorted(pins)}"
    problems = lock_problems(required(), pins)
    assert problems == [], "run `make lock`: " + "; ".join(problems)


def test_a_missing_or_moved_dependency_is_reported() -> None:
    pins = {"jieba": Version("0.42.1"), "pytest": Version("8.0")}
    reqs = [
        ("dependencies", Requirement("jieba==0.42.1")),
        ("dependencies", Requirement("Fast_API>=0.110")),
        ("extra 'test'", Requirement("pytest>=9")),
        ("dependencies", Requirement("tomli>=2; python_version < '3.0'")),
    ]
    assert lock_problems(reqs, pins) == [
        "Fast_API>=0.110 (dependencies) is not in requirements.lock",
        "pytest>=9 (extra 'test') is locked at 8.0",
    ]


def test_the_lock_names_the_makefile_extras() -> None:
    """An extra added to EXTRAS is locked only once `make lock` has run again."""
    header = LOCK.read_text(encoding="utf-8").splitlines()[0]
    found = re.search(r"\(extras: ([^)]*)\)", header)
    assert found, f"{LOCK.name} has no '(extras: ...)' header: run `make lock`"
    assert found.group(1).split() == makefile_extras(), "run `make lock`"


def test_every_pin_has_a_hash_and_torch_is_the_cpu_wheel() -> None:
    blocks = re.split(r"\n(?=[A-Za-z0-9])", LOCK.read_text(encoding="utf-8"))
    pinned = [b for b in blocks if PIN.match(b)]
    unhashed = [b.split()[0] for b in pinned if "--hash=sha256:" not in b]
    assert unhashed == [], f"pins without a hash: {unhashed}"
    assert locked()["torch"] == Version("2.13.0+cpu")
