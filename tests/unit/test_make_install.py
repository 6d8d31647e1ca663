"""Where ``make install`` takes torch from: the wheel folder ``TORCH_WHEELS`` (``/opt/wheels`` by
default) when it holds the locked wheel, else PyTorch's CPU wheel index ``TORCH_INDEX_URL``,
checked against the same hash in requirements.lock; on failure one line says what to run.

The plans are read with ``make -n -B install`` (nothing runs, nothing is downloaded); the one
recipe that does run, cutting the lock's torch entry out, needs only awk and grep.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"
WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
PYTORCH_CPU = "https://download.pytorch.org/whl/cpu"
PIP = ".venv/bin/python -m pip install --quiet --disable-pip-version-check"


def make(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}
    for name in ("TORCH_WHEELS", "TORCH_INDEX_URL"):  # only what a test passes
        env.pop(name, None)
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def plan(*overrides: str) -> list[str]:
    """The commands ``make install`` would run with ``overrides``, every target out of date."""
    done = make("-n", "-B", "install", *overrides)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def pip_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith(PIP)]


def test_the_wheel_folder_with_the_locked_wheel_is_used(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / WHEEL).write_bytes(b"")  # make only looks for the name; pip would check the hash
    lines = plan(f"TORCH_WHEELS={wheels}")
    assert lines[0] == f'echo "torch==2.13.0+cpu from {wheels}/{WHEEL}"'
    assert pip_lines(lines) == [
        f"{PIP} --require-hashes --find-links {wheels} -r requirements.lock",
        f"{PIP} --no-deps -e .",
    ]
    assert not any("--index-url" in line or "torch-requirement" in line for line in lines)


def test_without_the_wheel_folder_torch_comes_from_the_cpu_index() -> None:
    lines = plan("TORCH_WHEELS=/nonexistent")
    info = f'echo "torch==2.13.0+cpu from {PYTORCH_CPU} (no torch-2.13.0+cpu-*.whl in /nonexistent)"'
    assert info in lines
    (torch_first,) = [line for line in lines if "--index-url" in line]
    shown, rest = torch_first.split(" && ", 1)
    first, instead = rest.split(" || ", 1)
    assert first == (
        f"{PIP} --require-hashes --no-deps --index-url {PYTORCH_CPU} "
        "-r .venv/torch-requirement.txt"
    )
    assert shown == f"echo '{first}'"  # the command is shown, not the instruction around it
    # what to run instead, in one line, when the index does not serve it
    assert instead.startswith('{ echo "make install: torch==2.13.0+cpu is not in /nonexistent')
    assert "make install TORCH_WHEELS=<folder>" in instead and instead.endswith("exit 1; }")
    assert "\n" not in instead
    # then the whole lock, hash-checked, from the usual index (torch is already there)
    assert pip_lines(lines) == [
        f"{PIP} --require-hashes  -r requirements.lock",
        f"{PIP} --no-deps -e .",
    ]
    assert lines.index(torch_first) < lines.index(f"{PIP} --require-hashes  -r requirements.lock")
    # the lock's torch entry is cut out first, before anything is installed
    assert lines.index(info) > max(i for i, line in enumerate(lines) if line.startswith("awk "))


def test_a_folder_without_the_wheel_counts_as_none(tmp_path: Path) -> None:
    (tmp_path / "torch-2.12.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    lines = plan(f"TORCH_WHEELS={tmp_path}")
    assert any(f"--index-url {PYTORCH_CPU} " in line for line in lines)


def test_the_index_is_one_variable() -> None:
    mirror = "https://mirror.example.org/pytorch/whl/cpu"
    lines = plan("TORCH_WHEELS=/nonexistent", f"TORCH_INDEX_URL={mirror}")
    (first,) = [line for line in lines if "--index-url" in line]
    assert f"--index-url {mirror} -r .venv/torch-requirement.txt" in first
    assert PYTORCH_CPU not in "\n".join(lines)


def test_the_torch_requirement_is_the_locks_entry(tmp_path: Path) -> None:
    req = tmp_path / "torch-requirement.txt"
    done = make(f"TORCH_REQ={req}", str(req))
    assert done.returncode == 0, done.stderr
    entry = re.search(r"^torch==.*?(?=^\S|\Z)", LOCK.read_text("utf-8"), re.MULTILINE | re.DOTALL)
    assert entry is not None
    hashes = re.findall(r"--hash=sha256:[0-9a-f]{64}", entry.group(0))
    assert hashes  # the lock holds torch by hash
    assert req.read_text("utf-8").splitlines() == [
        "torch==2.13.0+cpu \\",
        *(f"    {h}" + (" \\" if i < len(hashes) - 1 else "") for i, h in enumerate(hashes)),
    ]


def test_the_lock_names_no_local_folder() -> None:
    # the folder is the Makefile's (TORCH_WHEELS) to choose: a --find-links line in the lock
    # would send every machine to this workplace's path
    text = LOCK.read_text("utf-8")
    assert not re.search(r"^--(find-links|index-url|extra-index-url)", text, re.MULTILINE)
