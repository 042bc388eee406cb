#!/usr/bin/env bash
# Sets up if needed, builds, and runs every test with CTest.
#
#   scripts/test.sh                 # all tests (gpu tests skip without a device)
#   scripts/test.sh -L unit         # extra arguments go to ctest
#   KVFOLD_SANITIZE=ON scripts/test.sh   # ASan+UBSan build (build-asan/), CPU tests only
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${KVFOLD_SANITIZE:-}" = "ON" ]; then
  export KVFOLD_BUILD_DIR="${KVFOLD_BUILD_DIR:-build-asan}" KVFOLD_CUDA=OFF KVFOLD_BUILD_TYPE=RelWithDebInfo
fi
BUILD_DIR="${KVFOLD_BUILD_DIR:-build}"
scripts/setup.sh

cd "$BUILD_DIR"
ctest --output-on-failure -j "${KVFOLD_TEST_JOBS:-2}" "$@"
