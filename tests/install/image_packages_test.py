#!/usr/bin/python3
"""The image recipes install every shared library the binaries load.

Runs ldd on the built binaries, maps each library to its Debian package (dpkg -S), and
checks that the runtime package list of docker/Dockerfile (stage runtime-deps), with the
packages it depends on, holds it, or that debootstrap's minbase already has it (essential
packages). scripts/build_image.sh (RUNTIME_PACKAGES) must list the same packages.
Libraries of the CUDA toolkit (a build with the CUDA backend links libcudart and libcublas
from CUDA_ROOT, /usr/local/cuda) are not Debian packages: the cuda image installs them from
NVIDIA's repository (cuda-cudart, libcublas), so they are checked against that stage's list
instead.

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


CUDA_ROOT = "/usr/local/cuda"
# Library name prefix -> the NVIDIA package of the cuda image that provides it.
CUDA_LIBS = {"libcudart": "cuda-cudart", "libcublasLt": "libcublas", "libcublas": "libcublas"}


def cuda_image_packages(src):
    """The NVIDIA packages the cuda stage installs (names without the version suffix)."""
    text = open(os.path.join(src, "docker", "Dockerfile")).read()
    stage = text.split("AS cuda", 1)[1].split("FROM ", 1)[0]
    return {re.sub(r"-\$\{CUDA_VERSION\}$", "", w) for w in stage.replace("\\", " ").split()
            if w.endswith("${CUDA_VERSION}")}


def cuda_toolkit_libs(binary):
    """The CUDA toolkit libraries `binary` loads (resolved under CUDA_ROOT)."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    libs = re.findall(r"=> (/\S+)", out)
    cuda_real = os.path.realpath(CUDA_ROOT)
    return [l for l in libs if os.path.realpath(l).startswith(cuda_real + "/")]


def needed_packages(binary):
    """The Debian packages owning the libraries ldd resolves for `binary` (one dpkg -S);
    CUDA toolkit libraries are left to cuda_toolkit_libs."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    if "not found" in out:
        raise SystemExit(f"{binary}: unresolved libraries:\n{out}")
    cuda = set(cuda_toolkit_libs(binary))
    libs = [l for l in re.findall(r"=> (/\S+)", out) if l not in cuda]
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
    nvidia = cuda_image_packages(src)
    for b in binaries:
        for pkg in sorted(needed_packages(b) - MINBASE):
            if pkg not in installed:
                problems.append(f"{os.path.basename(b)} needs {pkg}, which the images do not install")
        for lib in cuda_toolkit_libs(b):
            name = os.path.basename(lib).split(".so")[0]
            pkg = CUDA_LIBS.get(name)
            if pkg is None or pkg not in nvidia:
                problems.append(f"{os.path.basename(b)} loads {lib}, which the cuda image does not install")
    for p in problems:
        print("image_packages_test:", p)
    print(f"image_packages_test: {len(binaries)} binaries, {len(docker)} runtime packages: "
          f"{'OK' if not problems else 'FAIL'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
