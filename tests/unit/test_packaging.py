"""The public surface (``__all__``, ``py.typed``) and the built wheel's layout."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata, resources
from pathlib import Path

import hybridsag
import hybridsag.fusion
import pytest

from tests.code_modules import CODE_FOLDERS, code_modules

ROOT = Path(__file__).resolve().parents[2]

def _modules() -> list[str]:
    """Every module of the three code folders, by its import name."""
    return code_modules(CODE_FOLDERS[:3])


@pytest.mark.parametrize("name", _modules())
def test_every_module_declares_all_with_names_that_exist(name: str) -> None:
    module = importlib.import_module(name)
    exported = module.__all__
    assert len(exported) == len(set(exported)), "duplicate names in __all__"
    missing = [n for n in exported if not hasattr(module, n)]
    assert missing == []


#: Each package's public surface, pinned: a change here is a change of the API.
PUBLIC = {
    "hybridsag": {
        "ConfigError", "ConsistencyError", "DenseError", "Filters", "FusedHit", "Hit",
        "HybridSagError", "HybridSearch", "IndexMismatchError", "IngestError", "InputError",
        "JudgeError", "JudgeResponseError", "JudgeTimeoutError", "LexicalError", "QueryError",
        "SearchOptions", "SearchResponse", "SearchResult", "Settings", "StoreError", "__version__",
    },
    "hybridsag.fusion": {
        "RULE_REASONS", "ChunkFacts", "ChunkView", "Contribution", "FusedHit", "Hit",
        "apply_rules", "chunk_facts",
        "contains_whole_identifier", "defines_identifier", "fuse", "is_heading_only",
        "looks_like_identifier", "normalize_title", "rrf",
        "DEFAULT_TRUST_MODEL", "KINDS", "METHODS", "NORMALISERS", "SIGNAL_NAMES", "QueryFacts",
        "Trust", "TrustModel", "assess", "convex", "list_stats", "normalise", "trust_signals",
        "STEPS", "cap_per_resource", "markup_only", "merge_adjacent", "monotone_scores",
    },
    "hybridsag.consistency": {
        "CLASSES", "BatchResult", "ChunkRow", "FtsRow", "Lease", "MissingVectors",
        "ReconcilePlan", "ReconcileReport", "Reconciler", "SourceDrift", "SourceItem",
        "StoreState", "StuckClaim", "TombstonedLeftover", "VectorEntry", "apply_plan",
        "build_plan", "build_scheduler", "check_apply_allowed", "cron_trigger", "diff",
        "latest_report", "list_reports", "read_sources", "read_state", "reconcile_once",
        "report_exit_code", "run_scheduler", "write_report",
    },
    "hybridsag.paths": {
        "BUILTIN_PATHS", "PATHS", "PathFactory", "PathResult", "PathSpec", "Peers", "Retriever",
        "check_path_names", "check_weights", "path_kinds", "path_names", "path_spec",
        "register_path", "unregister_path",
    },
    "hybridsag.judges": {
        "JUDGES", "Candidate", "Judge", "JudgeFactory", "JudgeResult", "JudgeUsage",
        "judge_names", "make_judge", "register_judge", "unregister_judge",
    },
}


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_package_all_is_pinned(package: str) -> None:
    assert set(importlib.import_module(package).__all__) == PUBLIC[package]


def test_top_level_exports() -> None:
    expected = {
        "Settings",
        "Hit",
        "FusedHit",
        "HybridSagError",
        "ConfigError",
        "IndexMismatchError",
        "InputError",
        "QueryError",
        "IngestError",
        "StoreError",
        "LexicalError",
        "DenseError",
        "JudgeError",
        "ConsistencyError",
        "__version__",
    }
    assert expected <= set(hybridsag.__all__)
    assert hybridsag.Settings is importlib.import_module("hybridsag.settings").Settings
    assert hybridsag.Hit is hybridsag.fusion.Hit
    assert issubclass(hybridsag.QueryError, hybridsag.InputError)
    assert issubclass(hybridsag.IndexMismatchError, hybridsag.ConfigError)
    assert hybridsag.__version__ == metadata.version("hybridsag")


def test_hybridsearch_is_importable_from_the_top_level() -> None:
    assert "HybridSearch" in hybridsag.__all__
    assert hybridsag.HybridSearch is importlib.import_module("hybridsag.search").HybridSearch


def test_fusion_exports() -> None:
    expected = {"Hit", "FusedHit", "Contribution", "ChunkView", "rrf", "apply_rules"}
    assert expected <= set(hybridsag.fusion.__all__)
    assert callable(hybridsag.fusion.rrf)


def test_py_typed_and_stopwords_are_package_data() -> None:
    assert resources.files("hybridsag").joinpath("py.typed").is_file()
    for name in ("en.txt", "zh.txt"):
        assert resources.files("hybridsag.stopwords").joinpath(name).is_file()


def test_console_script_entry_point() -> None:
    scripts = {ep.name: ep.value for ep in metadata.entry_points(group="console_scripts")}
    assert scripts.get("hybridsag") == "hybridsag.cli:main"


_NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hybridsag"
)


@pytest.mark.slow
def test_wheel_holds_only_the_hybridsag_package(tmp_path: Path) -> None:
    # Built from a clean copy of the checkout: a stale build/ folder in the tree must neither
    # leak into nor hide from this check, and the test must not write into the tree.
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=_NOT_SOURCE)
    out = tmp_path / "wheels"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(src)],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = out.glob("hybridsag-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        entry_points = zf.read(f"{dist_info}/entry_points.txt").decode()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"hybridsag", dist_info}
    for forbidden in ("plugin", "fusion", "consistency", "tests", "config", "samples"):
        assert forbidden not in tops
    for required in (
        "hybridsag/__init__.py",
        "hybridsag/py.typed",
        "hybridsag/stopwords/en.txt",
        "hybridsag/stopwords/zh.txt",
        "hybridsag/fusion/__init__.py",
        "hybridsag/consistency/__init__.py",
        "hybridsag/search/__init__.py",
        "hybridsag/search/reads.py",
        "hybridsag/cli.py",
    ):
        assert required in names, required
    assert "hybridsag = hybridsag.cli:main" in entry_points
