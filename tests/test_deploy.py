"""deploy/: the compose file valid against the Compose specification's schema, the Kubernetes
manifests against Kubernetes' (no container engine runs here; both schemas vendored in
tests/data/deploy_schemas by scripts/refresh_deploy_schemas.py), HAProxy's configurations
accepted by haproxy where it is installed, and every codemode flag and variable they use one
the CLI and the package know."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import referencing
import yaml  # type: ignore[import-untyped]

from codemode.cli import build_parser

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
PACKAGE = Path(__file__).resolve().parent.parent / "codemode"
SCHEMAS = Path(__file__).resolve().parent / "data" / "deploy_schemas"
KUBERNETES_VERSION = "1.33"


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return loaded


def _manifests() -> list[dict[str, Any]]:
    return [
        document
        for path in sorted((DEPLOY / "kubernetes").glob("*.yaml"))
        for document in yaml.safe_load_all(path.read_text())
        if document
    ]


def test_the_compose_file_is_valid_against_the_compose_specification() -> None:
    schema = json.loads((SCHEMAS / "compose-spec.json").read_text())
    jsonschema.validate(_compose(), schema)
    services = _compose()["services"]
    assert {"postgres", "codemode-1", "codemode-2", "loadbalancer"} <= set(services)
    assert services["postgres"]["healthcheck"]["test"]
    assert services["codemode-1"]["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_the_kubernetes_manifests_are_valid_and_probe_healthz() -> None:
    schemas = json.loads((SCHEMAS / f"kubernetes-{KUBERNETES_VERSION}-strict.json").read_text())
    registry: referencing.Registry[Any] = referencing.Registry().with_resource(
        schemas["definitions"]["$id"], referencing.Resource.from_contents(schemas["definitions"])
    )
    manifests = _manifests()
    for manifest in manifests:
        group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", manifest["apiVersion"])  # apps/v1 -> apps-v1
        schema = schemas["kinds"][f"{manifest['kind'].lower()}-{group}"]
        jsonschema.Draft202012Validator(schema, registry=registry).validate(manifest)
    (server,) = [m for m in manifests if m["kind"] == "Deployment" and m["metadata"]["name"] == "codemode"]
    (container,) = server["spec"]["template"]["spec"]["containers"]
    assert server["spec"]["replicas"] >= 2
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/healthz"


def _commands() -> list[list[str]]:
    """Every codemode command line the files give (after the image's ``codemode`` entry point)."""
    compose = _compose()
    lines = [compose["x-codemode"]["command"]]
    for manifest in _manifests():
        if manifest["kind"] == "Deployment":
            for container in manifest["spec"]["template"]["spec"]["containers"]:
                if "args" in container:
                    lines.append(container["args"])
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    (cmd,) = re.findall(r"^CMD (\[.*\])$", dockerfile, re.MULTILINE)
    lines.append(json.loads(cmd))
    return lines


def test_every_flag_the_files_pass_is_one_the_cli_takes() -> None:
    parser = build_parser()
    lines = _commands()
    assert len(lines) == 3
    for line in lines:
        try:
            args = parser.parse_args(line)
        except SystemExit as exc:  # argparse's way of refusing
            raise AssertionError(f"codemode refuses {line}") from exc
        assert isinstance(args, argparse.Namespace) and args.command == "mcp"
    flags = {word.split("=")[0] for line in lines for word in line if word.startswith("--")}
    assert {"--token-file", "--database-url-file", "--http"} <= flags
    assert not any(
        word in ("--token", "--database-url") for line in lines for word in line
    )  # never on a command line


def test_every_codemode_variable_the_files_set_is_one_the_package_reads() -> None:
    source = "\n".join(path.read_text() for path in PACKAGE.rglob("*.py"))
    texts = [
        p.read_text()
        for p in (DEPLOY / "compose.yaml", DEPLOY / "Dockerfile", *(DEPLOY / "kubernetes").glob("*.yaml"))
    ]
    used = {name for text in texts for name in re.findall(r"\bCODEMODE_[A-Z_]+\b", text)}
    assert "CODEMODE_HOME" in used
    for name in used:
        assert f'"{name}"' in source, f"deploy/ sets {name}, which codemode never reads"


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed")
def test_haproxy_accepts_both_configurations(tmp_path: Path) -> None:
    configs = [(DEPLOY / "haproxy.cfg").read_text()]
    (config_map,) = [m for m in _manifests() if m["kind"] == "ConfigMap"]
    configs.append(config_map["data"]["haproxy.cfg"])
    for n, text in enumerate(configs):
        path = tmp_path / f"haproxy-{n}.cfg"
        path.write_text(text)
        checked = subprocess.run(
            ["haproxy", "-c", "-f", str(path)], capture_output=True, text=True, timeout=30
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
