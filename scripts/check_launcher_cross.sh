#!/bin/sh
# Cross-compiles the sandbox launcher (codemode/sandbox/launcher.c) for aarch64 with Debian's
# gcc-aarch64-linux-gnu and checks that the result is an aarch64 executable. Confinement itself
# is tested on x86_64 (the seccomp table exists for x86_64 only); this keeps the launcher
# building everywhere. Usage: scripts/check_launcher_cross.sh [compiler]
set -eu
CC="${1:-aarch64-linux-gnu-gcc}"
if ! command -v "$CC" >/dev/null 2>&1; then
    echo "check_launcher_cross: $CC is not installed (apt-get install -y gcc-aarch64-linux-gnu)" >&2
    exit 1
fi
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
FLAGS="-O2 -g0 -Wall -Wextra -Werror"
# Static where the cross C library allows it, as setup.py links it; dynamic otherwise.
"$CC" $FLAGS -static -o "$OUT/codemode-launcher" "$ROOT/codemode/sandbox/launcher.c" 2>/dev/null \
    || "$CC" $FLAGS -o "$OUT/codemode-launcher" "$ROOT/codemode/sandbox/launcher.c"
# ELF header: class 64-bit (byte 4 = 2) and e_machine EM_AARCH64 (183 = 0xb7, bytes 18-19).
CLASS="$(od -An -tu1 -j4 -N1 "$OUT/codemode-launcher" | tr -d ' ')"
MACHINE="$(od -An -tu2 -j18 -N2 "$OUT/codemode-launcher" | tr -d ' ')"
if [ "$CLASS" != 2 ] || [ "$MACHINE" != 183 ]; then
    echo "check_launcher_cross: the launcher built by $CC is not an aarch64 ELF64 (class $CLASS, machine $MACHINE)" >&2
    exit 1
fi
echo "check_launcher_cross: the launcher builds for aarch64 ($(wc -c <"$OUT/codemode-launcher") bytes)"
