#!/usr/bin/env bash
# Installs kvfold's Debian 12 dependencies (idempotent, non-interactive) and builds Release.
#
#   scripts/setup.sh            # install what is missing, configure, build
#   KVFOLD_BUILD_DIR=out scripts/setup.sh
#   KVFOLD_CUDA=OFF scripts/setup.sh   # AUTO (default) builds CUDA when nvcc is found
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git openssl curl
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev librocksdb-dev libgtest-dev libgmock-dev
  libsentencepiece-dev libopenblas-dev libxxhash-dev nlohmann-json3-dev libcli11-dev libssl-dev libboost-dev
  libboost-context-dev
  python3 python3-numpy python3-torch python3-grpcio python3-jsonschema
  librados-dev libradospp-dev ceph-mon ceph-osd ceph-common
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

BUILD_DIR="${KVFOLD_BUILD_DIR:-build}"
CMAKE_ARGS=(-G Ninja -DCMAKE_BUILD_TYPE="${KVFOLD_BUILD_TYPE:-Release}" -DKVFOLD_CUDA="${KVFOLD_CUDA:-AUTO}")
if [ "${CI:-}" = "true" ] || [ "${KVFOLD_WERROR:-}" = "ON" ]; then CMAKE_ARGS+=(-DKVFOLD_WERROR=ON); fi
if [ "${KVFOLD_SANITIZE:-}" = "ON" ]; then CMAKE_ARGS+=(-DKVFOLD_SANITIZE=ON); fi
mkdir -p "$BUILD_DIR"
cmake -S . -B "$BUILD_DIR" "${CMAKE_ARGS[@]}" > "$BUILD_DIR/configure.log" 2>&1 || { cat "$BUILD_DIR/configure.log"; exit 1; }
cmake --build "$BUILD_DIR" -j "${KVFOLD_JOBS:-$(nproc)}"
echo "setup: built $BUILD_DIR"
