#!/usr/bin/env bash
# Build KenLM's lmplz, build_binary and query from the PyPI kenlm source distribution and install them
# into $KENLM_PREFIX/bin (default ~/.local/kenlm/bin), where lmstudy.ngram looks for them.
#
# Idempotent: does nothing when the three binaries are already installed. Needs a C++ toolchain,
# CMake, Boost and zlib; on Debian/Ubuntu (run as root, or set KENLM_APT=0 and install them yourself):
#   apt-get install libboost-program-options-dev libboost-system-dev libboost-thread-dev \
#                   libboost-test-dev libeigen3-dev zlib1g-dev cmake build-essential
# The source comes from PyPI through pip (``pip download kenlm --no-binary :all:``), the only network
# access needed. Usage: scripts/install_kenlm.sh [PYTHON]   (PYTHON: the pip to use, default .venv/bin/python)
set -euo pipefail

PREFIX="${KENLM_PREFIX:-$HOME/.local/kenlm}"
VERSION="${KENLM_VERSION:-0.3.0}"
PYTHON="${1:-.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
JOBS="${KENLM_JOBS:-2}"
BINARIES=(lmplz build_binary query)

if [ -x "$PREFIX/bin/lmplz" ] && [ -x "$PREFIX/bin/build_binary" ] && [ -x "$PREFIX/bin/query" ]; then
    echo "KenLM already installed in $PREFIX/bin"
    exit 0
fi

if [ "${KENLM_APT:-1}" = "1" ] && command -v apt-get >/dev/null && [ "$(id -u)" = "0" ]; then
    apt-get install -y -qq libboost-program-options-dev libboost-system-dev libboost-thread-dev \
        libboost-test-dev libeigen3-dev zlib1g-dev cmake build-essential >/dev/null
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# --no-build-isolation: only the sdist is wanted; with isolation pip would compile cmake from source
# just to read the package metadata.
"$PYTHON" -m pip download "kenlm==$VERSION" --no-binary :all: --no-deps --no-build-isolation -d "$WORK" -q
tar xzf "$WORK/kenlm-$VERSION.tar.gz" -C "$WORK"
cmake -S "$WORK/kenlm-$VERSION" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DKENLM_MAX_ORDER=6 >/dev/null
cmake --build "$WORK/build" --target "${BINARIES[@]}" -j "$JOBS" >/dev/null
mkdir -p "$PREFIX/bin"
for binary in "${BINARIES[@]}"; do
    install -m 755 "$WORK/build/bin/$binary" "$PREFIX/bin/$binary"
done
echo "KenLM $VERSION installed in $PREFIX/bin: ${BINARIES[*]}"
