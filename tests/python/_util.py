"""Shared helpers for kvfold's Python tests (run by CTest with /usr/bin/python3).

Exit code 77 = skipped (CTest SKIP_RETURN_CODE): torch/numpy missing, shared data absent,
or a C++ binary not built.
"""
import os
import sys

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("KVFOLD_SOURCE_DIR", os.path.abspath(os.path.join(HERE, "..", "..")))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tools", "train_projector"))


def skip(msg):
    print(f"SKIPPED: {msg}")
    sys.exit(SKIP)


def require_torch():
    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        skip(f"python torch/numpy not available ({e})")
    import torch
    torch.set_num_threads(1)


def shared_dir():
    d = os.environ.get("KVFOLD_SHARED_DIR", os.path.join(SOURCE_DIR, "..", "shared"))
    return os.path.abspath(d)


def require_shared(*rel):
    p = os.path.join(shared_dir(), *rel)
    if not os.path.exists(p):
        skip(f"{p} not found (set KVFOLD_SHARED_DIR)")
    return p


def require_binary(path, name):
    if not path or not os.path.exists(path):
        skip(f"{name} binary not built ({path!r})")
    return path


def run_main(tests):
    """Runs test functions in order; prints PASS/FAIL per test; exit 1 on failure."""
    failed = 0
    for t in tests:
        try:
            t()
            print(f"[  PASSED  ] {t.__name__}")
        except AssertionError as e:
            failed += 1
            print(f"[  FAILED  ] {t.__name__}: {e}")
    sys.exit(1 if failed else 0)
