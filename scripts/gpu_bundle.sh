#!/usr/bin/env bash
# Packs what scripts/gpu_check.sh runs into one folder, for a GPU machine that has the NVIDIA
# driver and the CUDA toolkit but none of kvfold's build dependencies: every `gpu`-labelled
# test binary of a CUDA build, bench_gpu, the kvfold CLI and make_random_model, the shared libraries they load
# (except the C/C++ runtime and CUDA's own, which the GPU machine provides), and the
# stories260K model where the shared material is present (the tests that need it skip
# without it). Then, on the GPU machine:
#
#   KVFOLD_GPU_BUNDLE=BUNDLE_DIR scripts/gpu_check.sh [OUT_DIR]
#
#   scripts/gpu_bundle.sh [BUILD_DIR] [BUNDLE_DIR]   (defaults: build, BUILD_DIR/gpu_bundle)
#
# BUILD_DIR must be a CUDA build (KVFOLD_CUDA=ON or AUTO with nvcc found) whose architecture
# list includes the target card's (the default list has 80 and 90).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${1:-build}"
BUNDLE="${2:-$BUILD_DIR/gpu_bundle}"
die() { printf 'gpu_bundle: %s\n' "$1" >&2; exit 2; }

[ -f "$BUILD_DIR/CTestTestfile.cmake" ] || die "$BUILD_DIR is not a configured build"
TESTS_JSON=$(ctest --test-dir "$BUILD_DIR" -L gpu --show-only=json-v1)
# name<TAB>executable, one line per gpu-labelled test.
TESTS=$(/usr/bin/python3 -c '
import json, sys
for t in json.load(sys.stdin)["tests"]:
    print(t["name"] + "\t" + t["command"][0])
' <<<"$TESTS_JSON")
[ -n "$TESTS" ] || die "$BUILD_DIR has no gpu-labelled tests: configure it with KVFOLD_CUDA=ON"

rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/bin" "$BUNDLE/lib"
: > "$BUNDLE/tests.tsv"
BINS=()
while IFS=$'\t' read -r name exe; do
  [ -x "$exe" ] || die "test $name: $exe is not built (run cmake --build $BUILD_DIR)"
  printf '%s\t%s\n' "$name" "$(basename "$exe")" >> "$BUNDLE/tests.tsv"
  BINS+=("$exe")
done <<<"$TESTS"
for t in tools/bench_gpu/bench_gpu tools/kvfold/kvfold tools/make_random_model/make_random_model; do
  [ -x "$BUILD_DIR/$t" ] && BINS+=("$BUILD_DIR/$t")
done
for b in "${BINS[@]}"; do
  cp "$b" "$BUNDLE/bin/"
  strip --strip-unneeded "$BUNDLE/bin/$(basename "$b")"
done

# Libraries: everything ldd resolves, less what any Linux with a CUDA toolkit has.
SYSTEM='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libstdc\+\+|libgcc_s|libcuda\.so|libcudart|libcublas|libcublasLt|libnvidia)'
for b in "${BINS[@]}"; do
  ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r soname path; do
  [[ "$soname" =~ $SYSTEM ]] && continue
  cp -L "$path" "$BUNDLE/lib/$soname"
done

SHARED="${KVFOLD_SHARED_DIR:-../shared}"
if [ -f "$SHARED/models/stories260K/stories260K.bin" ]; then
  mkdir -p "$BUNDLE/shared/models"
  cp -r "$SHARED/models/stories260K" "$BUNDLE/shared/models/"
fi
du -sh "$BUNDLE"
echo "gpu_bundle: $(wc -l < "$BUNDLE/tests.tsv") gpu tests, $(ls "$BUNDLE/lib" | wc -l) libraries in $BUNDLE"
