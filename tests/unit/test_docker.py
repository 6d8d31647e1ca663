"""docker/: the compose file and the Dockerfile, read without a Docker engine (none runs here).

Every ``HYBRIDSAG_`` variable they set is a real setting and its value is valid; every command
they run exists (the ``hybridsag`` subcommand, the extra, the module the build imports, the
health-check endpoint, the files they copy); torch is the Makefile's pin from a CPU wheel index.
"""

from __future__ import annotations

import ast
import importlib
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from hybridsag.cli import build_parser
from hybridsag.settings import Settings
from tests.unit.test_config_examples import leaves

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "compose.yaml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text(encoding="utf-8"))
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for word, rest in instructions():
        if word == "ENV":
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                env[key] = value
    return env


def setting_of(name: str) -> str:
    """HYBRIDSAG_SERVER__PORT -> server.port."""
    return name.removeprefix("HYBRIDSAG_").lower().replace("__", ".")


def hybridsag_env() -> dict[str, str]:
    """Every HYBRIDSAG_ variable of the compose services and the Dockerfile (compose
    interpolations such as ``${HYBRIDSAG_SERVER__TOKEN:?...}`` stand for a valid token)."""
    env = {k: v for k, v in dockerfile_env().items() if k.startswith("HYBRIDSAG_")}
    for service in compose()["services"].values():
        for key, value in (service.get("environment") or {}).items():
            if key.startswith("HYBRIDSAG_"):
                env[key] = re.sub(r"\$\{[^}]*\}", "compose-token-0123456789", str(value))
    return env


def test_every_variable_is_a_setting() -> None:
    known = set(leaves())
    unknown = [k for k in hybridsag_env() if setting_of(k) not in known]
    assert unknown == []


def test_the_values_make_valid_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in hybridsag_env().items():
        monkeypatch.setenv(key, value)
    s = Settings(_env_file=None)
    assert s.server.host == "0.0.0.0" and s.server.auth and s.server.token is not None
    assert s.milvus.uri == "http://milvus:19530"


def test_compose_starts_milvus_standalone_and_the_service() -> None:
    services = compose()["services"]
    assert {"etcd", "minio", "milvus", "hybridsag"} <= set(services)
    app = services["hybridsag"]
    assert app["build"]["dockerfile"] == "docker/Dockerfile"
    assert (COMPOSE.parent / app["build"]["context"] / app["build"]["dockerfile"]).is_file()
    assert "hybridsag:/data" in app["volumes"] and "hybridsag" in compose()["volumes"]
    assert app["environment"]["HYBRIDSAG_DATA_DIR"] == "/data"
    assert app["depends_on"]["milvus"]["condition"] == "service_healthy"
    subcommands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert app["command"][0] in subcommands
    grace = float(app["stop_grace_period"].removesuffix("s"))
    assert grace > float(app["environment"]["HYBRIDSAG_SERVER__SHUTDOWN_TIMEOUT_S"])


def test_dockerfile_commands_exist() -> None:
    steps = instructions()
    words = [w for w, _ in steps]
    entry = ast.literal_eval(dict(steps)["ENTRYPOINT"])
    cmd = ast.literal_eval(dict(steps)["CMD"])
    assert entry == ["hybridsag"]
    subcommands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert cmd[0] in subcommands
    assert "USER" in words and dict(steps)["USER"] != "root"
    assert "HEALTHCHECK" in words
    for word, rest in steps:
        if word == "COPY":
            for source in rest.split()[:-1]:
                assert (ROOT / source).exists(), f"COPY {source}: no such path"


def test_dockerfile_installs_cpu_torch_as_the_makefile_pins_it() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    pin = re.search(r"torch==[\d.]+", makefile)
    assert pin is not None
    runs = [rest for word, rest in instructions() if word == "RUN"]
    torch = [r for r in runs if "torch==" in r]
    assert len(torch) == 1 and pin.group() in torch[0] and "--index-url" in torch[0]
    assert re.search(r"ARG TORCH_INDEX_URL=\S*/cpu\b", DOCKERFILE.read_text(encoding="utf-8"))
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    installs = [re.findall(r"\.\[([a-z,]+)\]", r) for r in runs]
    used = {e for found in installs for group in found for e in group.split(",")}
    assert used and used <= set(extras)


def test_dockerfile_python_steps_name_what_exists() -> None:
    from hybridsag.service.probe_routes import probes

    checked = []
    for word, rest in instructions():
        if word in ("RUN", "HEALTHCHECK") and "python -c" in rest.replace('"python", "-c"', "python -c"):
            code = re.search(r"""-c[", ]+(.+?)"\]?$""", rest).group(1)  # type: ignore[union-attr]
            for module, names in re.findall(r"from ([\w.]+) import ([\w, ]+)", code):
                mod = importlib.import_module(module)
                for name in names.split(","):
                    assert hasattr(mod, name.strip()), f"{module}.{name.strip()}"
                    checked.append(f"{module}.{name.strip()}")
            for path in re.findall(r"http://127\.0\.0\.1:\d+(/\w+)", code):
                assert path in {r.path for r in probes.routes}  # type: ignore[attr-defined]
                checked.append(path)
    assert {"hybridsag.vectors.embedder.make_embedder", "/readyz"} <= set(checked)
