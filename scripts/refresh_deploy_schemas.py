"""Refresh the schemas tests/test_deploy.py checks deploy/ against, in tests/data/deploy_schemas/.

They are vendored so that the tests run where no package index can be reached (CI): the
Compose specification's schema, as check-jsonschema vendors it (compose-spec.json, Apache 2.0),
and Kubernetes' strict schemas of the kinds deploy/kubernetes uses, as kubernetes-validate
ships them (Apache 2.0), with their shared definitions cut to what those kinds reach.

    pip install check-jsonschema kubernetes-validate
    python scripts/refresh_deploy_schemas.py [--kubernetes 1.33]
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
import re
import shutil
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "deploy_schemas"
KINDS = ("deployment-apps-v1", "service-v1", "configmap-v1")
_REF = re.compile(r'"\$ref": "(?:/api/_definitions\.json)?#/\$defs/([^"]+)"')


def _reached(definitions: dict[str, Any], roots: list[str]) -> dict[str, Any]:
    """The definitions ``roots`` reach through ``$ref``s, and only those."""
    kept: dict[str, Any] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in kept:
            continue
        kept[name] = definitions[name]
        todo.extend(_REF.findall(json.dumps(definitions[name])))
    return dict(sorted(kept.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubernetes", default="1.33", help="Kubernetes version (default 1.33)")
    version = parser.parse_args().kubernetes
    OUT.mkdir(parents=True, exist_ok=True)

    vendor = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    (OUT / "compose-spec.json").write_text((vendor / "compose-spec.json").read_text())
    (OUT / "LICENSE.compose-spec").write_text((vendor / "licenses" / "LICENSE.compose-spec").read_text())

    import kubernetes_validate

    package = Path(kubernetes_validate.__file__).parent
    schemas = package / "kubernetes-json-schema" / f"v{version}.0-local-strict"
    kinds = {kind: json.loads((schemas / f"{kind}.json").read_text()) for kind in KINDS}
    definitions = json.loads((schemas / "_definitions.json").read_text())
    roots = [name for schema in kinds.values() for name in _REF.findall(json.dumps(schema))]
    cut = {**definitions, "$defs": _reached(definitions["$defs"], roots)}
    (OUT / f"kubernetes-{version}-strict.json").write_text(
        json.dumps({"kinds": kinds, "definitions": cut}, indent=1, sort_keys=True) + "\n"
    )
    licence = next(package.parent.glob("kubernetes_validate-*.dist-info")) / "licenses" / "LICENSE"
    if not licence.exists():
        licence = next(package.parent.glob("kubernetes_validate-*.dist-info")) / "LICENSE"
    shutil.copy(licence, OUT / "LICENSE.kubernetes-validate")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
