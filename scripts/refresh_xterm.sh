#!/usr/bin/env bash
# Vendors xterm.js for the web console (codemode/console/static/vendor/): the built UMD files
# only, nothing fetched at run time. Packs the pinned versions from the npm registry with
# `npm pack` in a temporary directory (npm checks each tarball's integrity), copies
#   @xterm/xterm      lib/xterm.js (global `Terminal`), css/xterm.css, LICENSE -> LICENSE.xterm
#   @xterm/addon-fit  lib/addon-fit.js (global `FitAddon.FitAddon`), LICENSE -> LICENSE.addon-fit
# unchanged, and writes VERSIONS (versions and sha256 of each file). Source maps are left out
# (the files' trailing sourceMappingURL comment is kept as published: only devtools read it).
# Usage: scripts/refresh_xterm.sh [XTERM_VERSION [ADDON_FIT_VERSION]]
set -euo pipefail

XTERM_VERSION="${1:-6.0.0}"
FIT_VERSION="${2:-0.11.0}"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/codemode/console/static/vendor"

if ! command -v npm >/dev/null 2>&1; then
    echo "refresh_xterm: npm is not installed (apt-get install -y npm)" >&2
    exit 1
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

(cd "$WORK" && npm pack --silent "@xterm/xterm@$XTERM_VERSION" "@xterm/addon-fit@$FIT_VERSION" >/dev/null)
mkdir -p "$WORK/xterm" "$WORK/fit"
tar -xzf "$WORK/xterm-xterm-$XTERM_VERSION.tgz" -C "$WORK/xterm"
tar -xzf "$WORK/xterm-addon-fit-$FIT_VERSION.tgz" -C "$WORK/fit"
XT="$WORK/xterm/package"
FIT="$WORK/fit/package"

# The page loads them as classic scripts: each must be the UMD build that sets its global.
if ! grep -q '\.Terminal=' "$XT/lib/xterm.js"; then
    echo "refresh_xterm: $XT/lib/xterm.js does not look like xterm's UMD build" >&2
    exit 1
fi
if ! grep -q '\.FitAddon=' "$FIT/lib/addon-fit.js"; then
    echo "refresh_xterm: $FIT/lib/addon-fit.js does not look like addon-fit's UMD build" >&2
    exit 1
fi

mkdir -p "$DEST"
rm -f "$DEST"/xterm.js "$DEST"/xterm.css "$DEST"/addon-fit.js "$DEST"/LICENSE.xterm \
    "$DEST"/LICENSE.addon-fit "$DEST"/VERSIONS
install -m 0644 "$XT/lib/xterm.js" "$DEST/xterm.js"
install -m 0644 "$XT/css/xterm.css" "$DEST/xterm.css"
install -m 0644 "$XT/LICENSE" "$DEST/LICENSE.xterm"
install -m 0644 "$FIT/lib/addon-fit.js" "$DEST/addon-fit.js"
install -m 0644 "$FIT/LICENSE" "$DEST/LICENSE.addon-fit"

{
    echo "# Vendored by scripts/refresh_xterm.sh from the npm registry; files unchanged."
    echo "@xterm/xterm $XTERM_VERSION"
    echo "@xterm/addon-fit $FIT_VERSION"
    echo
    echo "# sha256"
    (cd "$DEST" && sha256sum xterm.js xterm.css LICENSE.xterm addon-fit.js LICENSE.addon-fit)
} >"$DEST/VERSIONS"

echo "refresh_xterm: @xterm/xterm $XTERM_VERSION and @xterm/addon-fit $FIT_VERSION in ${DEST#"$ROOT"/}"
