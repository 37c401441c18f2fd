"""The Python suite as CTest runs it (python/python.cmake): pytest over this folder, or exit status 77, which
CTest reports as skipped, when numpy or pytest is not installed for this interpreter."""

import os
import sys

missing = []
for module in ("numpy", "pytest"):
    try:
        __import__(module)
    except ImportError:
        missing.append(module)
if missing:
    print(f"skipped: {sys.executable} has no {' or '.join(missing)} "
          "(Debian: apt-get install python3-numpy python3-pytest)")
    sys.exit(77)

import pytest  # noqa: E402

# no cache directory: the source tree stays clean
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", os.path.dirname(os.path.abspath(__file__))] + sys.argv[1:]))
