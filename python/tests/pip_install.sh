#!/bin/sh
# pip_install.sh PYTHON LIBWEFT SOURCE_DIR - `pip install ./python` as a user runs it: a copy of the checkout's
# python/ (with the include/ and src/gpt/ it builds from) installed into a fresh virtual environment of
# PYTHON against LIBWEFT, then imported from elsewhere and used. Exit 77 (skipped) when PYTHON has no venv
# or pip (Debian: python3-venv, python3-pip).
set -eu
py=$1 lib=$2 src=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! "$py" -m venv --system-site-packages "$tmp/venv" >/dev/null 2>&1 || ! "$tmp/venv/bin/python" -m pip --version >/dev/null 2>&1; then
  echo "skipped: $py cannot make a virtual environment with pip (Debian: apt-get install python3-venv python3-pip)"
  exit 77
fi
mkdir -p "$tmp/co/src"
cp -r "$src/include" "$tmp/co/"
cp -r "$src/src/gpt" "$tmp/co/src/"
mkdir "$tmp/co/python"
(cd "$src/python" && tar cf - --exclude=build --exclude='*.egg-info' --exclude=__pycache__ .) | (cd "$tmp/co/python" && tar xf -)
# --no-build-isolation: the setuptools and numpy already installed (no package index is needed)
WEFT_LIBRARY=$lib "$tmp/venv/bin/python" -m pip install -q --no-build-isolation --no-deps "$tmp/co/python"
cd "$tmp"
env -u WEFT_PYTHON_EXT -u PYTHONPATH "$tmp/venv/bin/python" - <<'PY'
import os, sys
import numpy as np
import weft
here = os.path.dirname(weft._weft.__file__)
assert here.startswith(sys.prefix), f"weft._weft came from {here}, not the virtual environment"
a = np.arange(6, dtype=np.float32).reshape(2, 3)
assert np.array_equal(weft.matmul(a, a.T), a @ a.T)
t = weft.tensor(a)
assert np.array_equal(np.asarray(t @ t.T * 2), (a @ a.T) * 2)
v = np.from_dlpack(t)  # numpy 1.24 makes it read-only: weft writes, numpy reads
t.write(a * 3)
assert v[0, 1] == 3
print(f"pip install ./python: weft {weft.library_version} in {here}, on {weft.library_path}: ok")
PY
