#!/usr/bin/python3
"""The image recipes install every shared library the binaries load.

Runs ldd on the built binaries, maps each library to its Debian package (dpkg -S), and
checks that the runtime package list of docker/Dockerfile (stage runtime-deps), with the
packages it depends on, holds it, or that debootstrap's minbase already has it (essential
packages). scripts/build_image.sh (RUNTIME_PACKAGES) must list the same packages.

usage: image_packages_test.py SOURCE_DIR BINARY...
"""
import os
import re
import subprocess
import sys

# In every Debian minbase root (Priority: required / Essential: yes).
MINBASE = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g", "libzstd1", "liblzma5", "libbz2-1.0",
           "libsystemd0", "libcap2", "libgcrypt20", "libgpg-error0", "liblz4-1", "libselinux1",
           "libpcre2-8-0", "libcrypt1", "libudev1", "libmd0", "libacl1", "libattr1",
           "libblkid1", "libmount1", "libuuid1", "libsmartcols1"}


def dockerfile_packages(src):
    text = open(os.path.join(src, "docker", "Dockerfile")).read()
    stage = text.split("AS runtime-deps", 1)[1].split("FROM ", 1)[0]
    install = stage.split("install -y --no-install-recommends", 1)[1].split("&&", 1)[0]
    return set(install.replace("\\", " ").split())


def build_image_packages(src):
    text = open(os.path.join(src, "scripts", "build_image.sh")).read()
    return set(re.search(r"^RUNTIME_PACKAGES=(\S+)", text, re.M).group(1).split(","))


def closure(packages):
    """The packages plus everything they depend on, recursively (dpkg's records of the
    installed packages: the build machine has the runtime packages as -dev dependencies).
    One dpkg-query per level of the dependency tree."""
    seen, level = set(), set(packages)
    while level:
        seen |= level
        r = subprocess.run(["dpkg-query", "-W", "-f=${Depends},${Pre-Depends}\\n", *sorted(level)],
                           capture_output=True, text=True)
        nxt = set()
        for alternative in r.stdout.replace("\n", ",").split(","):
            name = alternative.split("|")[0].strip().split(" ")[0].split(":")[0]
            if name and name not in seen:
                nxt.add(name)
        level = nxt
    return seen


def needed_packages(binary):
    """The Debian packages owning the libraries ldd resolves for `binary` (one dpkg -S)."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    if "not found" in out:
        raise SystemExit(f"{binary}: unresolved libraries:\n{out}")
    libs = re.findall(r"=> (/\S+)", out)
    # dpkg records /usr/lib/... or /lib/... (merged /usr): ask for both spellings.
    paths = set()
    for lib in libs:
        real = os.path.realpath(lib)
        for p in (lib, real):
            paths.add(p)
            paths.add(p[4:] if p.startswith("/usr/") else "/usr" + p)
    r = subprocess.run(["dpkg", "-S", *sorted(paths)], capture_output=True, text=True)
    owners = {}
    for line in r.stdout.splitlines():
        pkg, _, path = line.partition(": ")
        for p in path.split(", "):
            owners[p.strip()] = pkg.split(":")[0].split(",")[0].strip()
    pkgs = set()
    for lib in libs:
        real = os.path.realpath(lib)
        cands = [lib, real, lib[4:] if lib.startswith("/usr/") else "/usr" + lib,
                 real[4:] if real.startswith("/usr/") else "/usr" + real]
        owner = next((owners[c] for c in cands if c in owners), None)
        if owner is None:
            raise SystemExit(f"{binary}: no Debian package owns {lib}")
        pkgs.add(owner)
    return pkgs


def main():
    src, binaries = sys.argv[1], sys.argv[2:]
    docker, script = dockerfile_packages(src), build_image_packages(src)
    problems = []
    if docker != script:
        problems.append(f"Dockerfile and build_image.sh differ: {sorted(docker ^ script)}")
    installed = closure(docker)
    for b in binaries:
        for pkg in sorted(needed_packages(b) - MINBASE):
            if pkg not in installed:
                problems.append(f"{os.path.basename(b)} needs {pkg}, which the images do not install")
    for p in problems:
        print("image_packages_test:", p)
    print(f"image_packages_test: {len(binaries)} binaries, {len(docker)} runtime packages: "
          f"{'OK' if not problems else 'FAIL'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
