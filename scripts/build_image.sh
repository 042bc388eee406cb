#!/usr/bin/env bash
# Builds the kvfold CPU image without a container engine or a registry: a Debian 12 root
# made with debootstrap (Debian's packages only), the runtime libraries installed into it,
# kvfold installed from this checkout's build with `cmake --install`, committed as an OCI
# image with buildah. The result is what `docker build --target cpu` makes from
# docker/Dockerfile, built on a machine that cannot pull base images.
#
#   scripts/build_image.sh [OUT_DIR]        # default OUT_DIR: build/image
#
# Needs root (debootstrap), the packages debootstrap and buildah (installed when missing),
# and a build in $KVFOLD_BUILD_DIR (default build/; scripts/setup.sh makes it).
# Produces OUT_DIR/rootfs (the image's filesystem), OUT_DIR/kvfold-<version>-cpu.oci.tar
# (OCI archive: `skopeo copy oci-archive:... docker://REGISTRY/...` or `podman load -i`)
# and OUT_DIR/build_image.log. Each step says what it did; a step the machine does not
# allow fails with the reason. docs/deploy.md says what was built where.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT="${1:-build/image}"
BUILD_DIR="${KVFOLD_BUILD_DIR:-build}"
SUITE=bookworm
# The Debian mirror this machine's apt uses (deb822 .sources or a sources.list line).
apt_mirror() {
  sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null |
    grep -v security | head -1
  sed -n 's/^deb \(\[[^]]*\] \)\{0,1\}\([^ ]*\) bookworm .*/\2/p' /etc/apt/sources.list 2>/dev/null | head -1
}
MIRROR="${KVFOLD_DEBIAN_MIRROR:-$(apt_mirror | head -1)}"
[ -n "$MIRROR" ] || { echo "build_image: no Debian mirror in apt's sources; set KVFOLD_DEBIAN_MIRROR" >&2; exit 1; }
VERSION=$(sed -n 's/^project(kvfold VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
IMAGE="ghcr.io/kvfold/kvfold:${VERSION}"
# Runtime libraries of the binaries (docker/Dockerfile, stage runtime-deps) + curl for the
# init step's --from-url.
RUNTIME_PACKAGES=ca-certificates,curl,libgrpc++1.51,libgrpc29,libprotobuf32,libabsl20220623,librocksdb7.8,libsentencepiece0,libopenblas0-pthread,libxxhash0,libssl3,librados2

[ "$(id -u)" -eq 0 ] || { echo "build_image: needs root (debootstrap)" >&2; exit 1; }
[ -x "$BUILD_DIR/tools/kvfold/kvfold" ] || { echo "build_image: no build in $BUILD_DIR (run scripts/setup.sh)" >&2; exit 1; }
missing=()
for p in debootstrap buildah; do command -v "$p" >/dev/null || missing+=("$p"); done
if ((${#missing[@]})); then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ROOT="$OUT/rootfs"
LOG="$OUT/build_image.log"
: > "$LOG"
step() { echo "build_image: $*" | tee -a "$LOG"; }

step "1/5 debootstrap $SUITE (minbase + runtime packages) into $ROOT"
rm -rf "$ROOT"
debootstrap --variant=minbase --include="$RUNTIME_PACKAGES" "$SUITE" "$ROOT" "$MIRROR" >> "$LOG" 2>&1 ||
  { step "debootstrap failed (see $LOG)"; exit 1; }

step "2/5 cmake --install $BUILD_DIR into $ROOT/usr/local"
cmake --install "$BUILD_DIR" --prefix "$ROOT/usr/local" --strip >> "$LOG" 2>&1

step "3/5 user kvfold (10001), no apt lists or caches"
chroot "$ROOT" useradd --uid 10001 --user-group --no-create-home --home-dir /nonexistent kvfold
rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/*.bin "$ROOT"/var/cache/apt/archives/*.deb

step "4/5 smoke test inside the root, as UID 10001: the binaries start with the root's libraries"
chroot --userspec=10001:10001 "$ROOT" /usr/local/bin/kvfold --help > /dev/null
chroot --userspec=10001:10001 "$ROOT" /usr/local/bin/kvfold-inference --version | tee -a "$LOG"
chroot --userspec=10001:10001 "$ROOT" /usr/local/bin/kvfold-memory --version | tee -a "$LOG"
ls "$ROOT"/usr/local/share/kvfold/projectors | sed 's/^/build_image: projector /' | tee -a "$LOG"

step "5/5 buildah: commit $IMAGE and write $OUT/kvfold-$VERSION-cpu.oci.tar"
export STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot
ctr=$(buildah from scratch 2>> "$LOG") || { step "buildah from scratch failed (see $LOG)"; exit 1; }
buildah copy "$ctr" "$ROOT" / >> "$LOG" 2>&1
buildah config --user 10001:10001 --entrypoint '["/usr/local/bin/kvfold"]' --cmd '--help' \
  --env PATH=/usr/local/bin:/usr/bin:/bin --label org.opencontainers.image.version="$VERSION" \
  --label org.opencontainers.image.title=kvfold "$ctr" >> "$LOG" 2>&1
buildah commit --rm "$ctr" "$IMAGE" >> "$LOG" 2>&1
rm -f "$OUT/kvfold-$VERSION-cpu.oci.tar"
buildah push "$IMAGE" "oci-archive:$OUT/kvfold-$VERSION-cpu.oci.tar:$IMAGE" >> "$LOG" 2>&1
step "done: $IMAGE, $(du -h "$OUT/kvfold-$VERSION-cpu.oci.tar" | cut -f1) archive"
