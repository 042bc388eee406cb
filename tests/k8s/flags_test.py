#!/usr/bin/python3
"""Every flag the manifests pass to a server is one that server accepts.

Renders k8s/base and every overlay (kubectl kustomize, as validate_manifests.py does),
collects each server container's flags (the keys of its --config file from the flags
ConfigMap plus its args) and checks each name against the flags the built binary lists in
--help. A renamed or misspelt flag would otherwise only show as a crash-looping pod. Names
are compared exactly as the binary spells them (no '-'/'_' folding). Skipped (exit 77)
without kubectl.

usage: flags_test.py KVFOLD_INFERENCE_BIN KVFOLD_MEMORY_BIN
"""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "k8s"))
import validate_manifests as vm  # noqa: E402


def accepted_flags(binary):
    """The long flags `binary --help` lists: the names in the option column of CLI11's help
    ("  --db-dir TEXT  ...", "  -h,--help  ..."), not flags named in descriptions."""
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30,
                         check=True)
    flags = set()
    for line in out.stdout.splitlines():
        m = re.match(r"  (-\S+)", line)
        if m:
            for name in m.group(1).split(","):
                flag = re.match(r"--[a-z0-9][a-z0-9-]*", name)
                if flag:
                    flags.add(flag.group(0))
    if "--help" not in flags or len(flags) < 5:
        raise SystemExit(f"flags_test: cannot read the flags of {binary} --help:\n{out.stdout}")
    return flags


def main():
    if shutil.which("kubectl") is None:
        print("flags_test: SKIP: kubectl is not installed")
        return vm.SKIP
    binaries = {"kvfold-inference": sys.argv[1], "kvfold-memory": sys.argv[2]}
    accepted = {name: accepted_flags(path) for name, path in binaries.items()}
    problems, checked = [], 0
    dirs = [os.path.join(vm.HERE, "base")] + sorted(
        os.path.join(vm.HERE, "overlays", d) for d in os.listdir(os.path.join(vm.HERE, "overlays")))
    for directory in dirs:
        docs = vm.render(directory)
        for name in binaries:
            w = vm.workload(docs, name)
            if w is None:
                problems.append(f"{directory}: no workload {name}")
                continue
            flags = accepted[name]
            for flag in w.flags:
                checked += 1
                if flag not in flags:
                    problems.append(f"{os.path.basename(directory)}: {name} does not accept {flag}")
    for p in problems:
        print("flags_test:", p)
    print(f"flags_test: {checked} flags in {len(dirs)} kustomizations: "
          f"{'OK' if not problems else f'{len(problems)} unknown'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
