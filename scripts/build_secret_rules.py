"""Regenerate ``codemode/state/secret_rules/rules.json`` from the two rule files beside it.

Run: ``python scripts/build_secret_rules.py`` after changing ``gitleaks.toml`` (see
``scripts/vendor_gitleaks_rules.py``) or ``codemode.toml``; ``--check`` exits 1 when the file is
not what the rule files give. The JSON is the merged rules as plain data, with the SHA-256 of
the rule files it came from: reading it takes ~0.5 ms where parsing the TOML takes ~10 ms of
every cold start (bench/bench_cold.py). Where the digest does not match (the TOML was edited
and this was not run), codemode reads the TOML, so the rules in force are always the files'.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from codemode.state import _secret_rules  # noqa: E402

OUT = _secret_rules.RULES_DIR / "rules.json"


def render() -> str:
    data = {"digest": _secret_rules.rules_digest(), **_secret_rules.rule_specs_from_toml()}
    return json.dumps(data, ensure_ascii=False, indent=1, sort_keys=True) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if rules.json is out of date")
    text = render()
    if parser.parse_args().check:
        current = OUT.read_text("utf-8") if OUT.exists() else ""
        if current != text:
            sys.exit(f"{OUT} is out of date: run python scripts/build_secret_rules.py")
        return
    OUT.write_text(text, "utf-8")
    print(f"wrote {OUT} ({len(text):,} bytes)")


if __name__ == "__main__":
    main()
