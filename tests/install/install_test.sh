#!/usr/bin/env bash
# `cmake --install` makes a self-contained tree: the binaries and the init step in bin/, the
# projectors, k8s manifests and docs under share/; after the tree is moved elsewhere, the
# binaries run from it and still find the installed projector for their model
# (--projector=auto) relative to their own location. The stories260K part is skipped,
# saying so, without ../shared (KVFOLD_SHARED_DIR).
#
# usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
BUILD=$1
SRC=$2
SHARED=${KVFOLD_SHARED_DIR:-$SRC/../shared}
work=$(mktemp -d /tmp/kvfold-install-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "install_test: FAIL: $*" >&2; exit 1; }

cmake --install "$BUILD" --prefix "$work/prefix" > "$work/install.log" || { cat "$work/install.log"; fail "cmake --install"; }
# A relocated tree: nothing may point back into the build or install directory.
mv "$work/prefix" "$work/moved"
p="$work/moved"
for b in kvfold kvfold-inference kvfold-memory kvfold-stage-model; do
  [ -x "$p/bin/$b" ] || fail "bin/$b missing"
done
for f in share/kvfold/projectors/stories260K/projector.json \
         share/kvfold/projectors/stories260K/projector.safetensors \
         share/kvfold/k8s/overlays/prod/kustomization.yaml \
         share/kvfold/k8s/grafana/kvfold-inference.json \
         share/doc/kvfold/README.md share/doc/kvfold/observability.md share/doc/kvfold/deploy.md; do
  [ -f "$p/$f" ] || fail "$f missing"
done
# The installed binaries run from the moved tree (their libraries are the system's) and
# report the project version and the commit they were built from (docs/cli.md).
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$BUILD/CMakeCache.txt")
[ -n "$version" ] || fail "no CMAKE_PROJECT_VERSION in $BUILD/CMakeCache.txt"
for b in kvfold kvfold-inference kvfold-memory kvfold-memory-admin; do
  [ -x "$p/bin/$b" ] || continue
  out=$("$p/bin/$b" --version) || fail "$b --version exited $?"
  [ "$(printf '%s\n' "$out" | sed -n 1p)" = "$b $version" ] || fail "$b --version printed '$out'"
  printf '%s\n' "$out" | sed -n 2p | grep -Eqx 'commit ([0-9a-f]{40}|unknown)' ||
    fail "$b --version printed '$out'"
done
"$p/bin/kvfold" --help > "$work/help.txt" || fail "kvfold --help exited $?"
grep -q -- '--version' "$work/help.txt" || fail "kvfold --help does not list --version"
echo "install_test: installed tree OK"

if [ ! -f "$SHARED/models/stories260K/stories260K.bin" ]; then
  echo "install_test: SKIP the projector lookup: no stories260K under $SHARED/models"
  exit 0
fi
# The installed kvfold finds share/kvfold/projectors/stories260K for stories260K.
"$p/bin/kvfold" generate --model "$SHARED/models/stories260K/stories260K.bin" --projector auto \
  --mode memory --prompt-ids 1 --max-new-tokens 40 --ignore-eos --json \
  > "$work/gen.json" 2> "$work/gen.err" || { cat "$work/gen.err"; fail "kvfold generate --projector auto"; }
grep -q '"generated_tokens": *40' "$work/gen.json" || { cat "$work/gen.json"; fail "no 40 tokens"; }
# ... and so does the init step (fingerprint match, from the moved prefix).
"$p/bin/kvfold-stage-model" --from "$SHARED/models/stories260K" --to "$work/staged" \
  --projector-from auto > "$work/stage.log" 2>&1 || { cat "$work/stage.log"; fail "kvfold-stage-model"; }
[ "$(readlink "$work/staged/projector")" = "$p/share/kvfold/projectors/stories260K" ] ||
  fail "staged projector is $(readlink "$work/staged/projector")"
echo "install_test: --projector auto and the init step found the installed projector"
