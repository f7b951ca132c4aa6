#!/usr/bin/env python3
"""Vendor plotly.js's "basic" partial bundle (scatter, bar, pie) for the HTML report.

The full plotly.js that ships inside plotly's Python package is 4.8 MB; the report draws only
scatter and bar traces, which the basic bundle (1.2 MB) holds. This script fetches npm's
``plotly.js-basic-dist-min`` at the version matching the Python package's bundled plotly.js (npm
checks the tarball's integrity hash), and writes, under src/kvdoctor/report/assets/:

- ``plotly-basic.min.js.gz`` (gzip, mtime 0: the same input gives the same bytes),
- ``plotly-LICENSE`` (MIT, from the package),
- ``plotly-SOURCE.txt`` (package, version, sha256 of the uncompressed bundle).

Run from the repository root: ``python scripts/vendor_plotly.py [VERSION]``. Needs ``npm``.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PACKAGE = "plotly.js-basic-dist-min"
ASSETS = Path(__file__).resolve().parents[1] / "src" / "kvdoctor" / "report" / "assets"


def bundled_version() -> str:
    """The plotly.js version inside the installed plotly Python package (its first lines say it)."""
    from plotly.offline import get_plotlyjs

    m = re.search(r"plotly\.js v(\d+\.\d+\.\d+)", get_plotlyjs()[:400])
    if not m:
        sys.exit("cannot tell the bundled plotly.js version; pass VERSION")
    return m.group(1)


def main() -> None:
    version = sys.argv[1] if len(sys.argv) > 1 else bundled_version()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["npm", "pack", f"{PACKAGE}@{version}", "--silent"], cwd=tmp, check=True,
                       stdout=subprocess.DEVNULL)
        tgz = next(Path(tmp).glob("*.tgz"))
        with tarfile.open(tgz) as tar:
            js = tar.extractfile("package/plotly-basic.min.js").read()
            licence = tar.extractfile("package/LICENSE").read()
    if f"v{version}".encode() not in js[:400]:
        sys.exit(f"the bundle does not say it is plotly.js v{version}")
    ASSETS.mkdir(parents=True, exist_ok=True)
    (ASSETS / "plotly-basic.min.js.gz").write_bytes(gzip.compress(js, compresslevel=9, mtime=0))
    (ASSETS / "plotly-LICENSE").write_bytes(licence)
    (ASSETS / "plotly-SOURCE.txt").write_text(
        f"{PACKAGE}@{version} from the npm registry (https://www.npmjs.com/package/{PACKAGE})\n"
        f"file: package/plotly-basic.min.js, {len(js):,} bytes, sha256 {hashlib.sha256(js).hexdigest()}\n"
        "written by scripts/vendor_plotly.py; licence: plotly-LICENSE (MIT)\n")
    print(f"vendored {PACKAGE}@{version}: {len(js):,} bytes -> {ASSETS / 'plotly-basic.min.js.gz'}")


if __name__ == "__main__":
    main()
