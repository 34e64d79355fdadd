#!/usr/bin/env bash
# `pip install ./python` against an installed libssb4d, as docs/python.md says: the library is
# installed into a fresh prefix (cmake --install), the package into a virtual environment that
# sees Debian's numpy (--system-site-packages), with no network and no build isolation; then a
# script outside the source tree imports it, finds the installed library and fits.
set -euo pipefail
CMAKE=$1 BUILD=$2 SRC=$3 PY=$4
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
unset PYTHONPATH
"$CMAKE" --install "$BUILD" --prefix "$W/prefix" >/dev/null
"$PY" -m venv --system-site-packages "$W/venv"
cp -r "$SRC/python" "$W/src"   # pip builds in place: keep the checkout clean
"$W/venv/bin/pip" install --no-index --no-build-isolation --no-deps -q "$W/src"
LIB=$(find "$W/prefix" -name libssb4d.so.0 | head -1)
test -n "$LIB" || { echo "pip_install: no libssb4d.so.0 under $W/prefix"; exit 1; }
cd "$W"
LD_LIBRARY_PATH=$(dirname "$LIB") PATH="$W/prefix/bin:$PATH" "$W/venv/bin/python" - <<'PYEOF'
import os, ssb4d
assert 'site-packages' in ssb4d.__file__, ssb4d.__file__
assert ssb4d.library_path == 'libssb4d.so.0', ssb4d.library_path
sim = ssb4d.simulate_array('tiny', progress=False, scan_n=24, det=32, scan_cells=3)
with ssb4d.open_array(sim.counts, **sim.microscope) as s:
    f = s.fit(progress=False)
print('pip_install: ssb4d %s from %s, fit C10 %.3f nm' % (ssb4d.__version__, os.path.dirname(ssb4d.__file__), f.C10_nm))
PYEOF
