#!/usr/bin/env bash
# `pip install .` at the repository root, as docs/python.md says: the wheel is built (offline, no
# build isolation) from a copy of the source tree, with its own Release libssb4d and ssb4d command
# (never this build's, which may be sanitized), installed into a fresh virtual environment outside
# the tree that sees Debian's numpy, and used from an empty folder with no PYTHONPATH,
# LD_LIBRARY_PATH or SSB4D_* variable: the console script, simulate, open with a relative path,
# fit, view (its page, and Save into that folder). A Python without numpy gets an ImportError
# naming numpy, while the console script's --help needs none. Exit 77 (skip) when venv, pip,
# setuptools, wheel or numpy are missing.
#   wheel_install.sh SRC BUILD [PYTHON]
# The CMake build and the copy of the source stay in BUILD/python_wheel, so a second run only
# rebuilds what changed.
set -euo pipefail
SRC=$(cd "$1" && pwd) BUILD=$2 PY=${3:-/usr/bin/python3}
skip() { echo "python_wheel: SKIP: $*"; exit 77; }
"$PY" -c 'import venv, ensurepip' 2>/dev/null || skip "$PY has no venv/ensurepip (apt-get install python3-venv)"
"$PY" -m pip --version >/dev/null 2>&1 || skip "$PY has no pip (apt-get install python3-pip)"
"$PY" -c 'import setuptools, wheel, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 61)' 2>/dev/null ||
  skip "$PY needs setuptools >= 61 and wheel (apt-get install python3-setuptools python3-wheel)"
"$PY" -c 'import numpy' 2>/dev/null || skip "$PY has no numpy (apt-get install python3-numpy)"
command -v cmake >/dev/null || skip "no cmake on PATH"
# a Python without numpy, for the ImportError check: the first python3 on PATH that is not $PY
NONUMPY=$(command -v python3 || true)
if [ -n "$NONUMPY" ] && { [ "$(realpath "$NONUMPY")" = "$(realpath "$PY")" ] || "$NONUMPY" -c 'import numpy' 2>/dev/null ||
                          ! "$NONUMPY" -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null; }; then
  NONUMPY=
fi

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
CACHE=$(mkdir -p "$BUILD/python_wheel" && cd "$BUILD/python_wheel" && pwd)
# The copy: the sources, never a build folder or a hidden one (.git); a fresh copy each time with
# the files' own times, so that CMake's build (kept in $CACHE/build) redoes only what changed.
rm -rf "$CACHE/src" && mkdir -p "$CACHE/src"
tar -C "$SRC" --anchored --exclude='./.*' --exclude='./build*' --exclude=./Testing --exclude=./dist \
  --exclude=./tests/view/node_modules --exclude='*/__pycache__' --exclude='*.egg-info' -cf - . | tar -C "$CACHE/src" -xf -
t0=$(date +%s)
touch "$W/mark"
SSB4D_WHEEL_BUILD_DIR="$CACHE/build" "$PY" -m pip wheel --no-build-isolation --no-index --no-deps -q \
  -w "$W/dist" "$CACHE/src"
echo "python_wheel: wheel built in $(( $(date +%s) - t0 )) s"
WHEEL=$(ls "$W"/dist/ssb4d-*.whl)
case "$WHEEL" in
  *-py3-none-linux_*.whl) ;;
  *) echo "python_wheel: not a platform-tagged wheel: $WHEEL"; exit 1 ;;
esac
"$PY" - "$WHEEL" <<'PYEOF'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
names = {i.filename: i for i in z.infolist()}
for n in ('ssb4d/__init__.py', 'ssb4d/_cli.py', 'ssb4d_cli.py', 'ssb4d/_native/libssb4d.so.0', 'ssb4d/_native/ssb4d'):
    assert n in names, (n, sorted(names))
assert names['ssb4d/_native/ssb4d'].external_attr >> 16 & 0o111, 'the command is not executable'
assert 'ssb4d = ssb4d_cli:main' in z.read([n for n in names if n.endswith('entry_points.txt')][0]).decode()
PYEOF
# nothing written into the copy of the source but what the copy brought
test -z "$(find "$CACHE/src" -newer "$W/mark" -print -quit)" ||
  { echo "python_wheel: the build wrote into the source tree:"; find "$CACHE/src" -newer "$W/mark"; exit 1; }

"$PY" -m venv --system-site-packages "$W/venv"
"$W/venv/bin/pip" install --no-index -q "$WHEEL"   # numpy, its dependency, is Debian's

mkdir "$W/run"
cd "$W/run"
unset PYTHONPATH LD_LIBRARY_PATH LD_PRELOAD
for v in $(compgen -e | grep '^SSB4D_' || true); do unset "$v"; done
export PATH="$W/venv/bin:$PATH"   # as an activated environment
test "$(command -v ssb4d)" = "$W/venv/bin/ssb4d"
help=$(ssb4d --help) && [[ $help == *view* ]] || { echo "python_wheel: ssb4d --help (the console script) failed"; exit 1; }
# The console script needs no numpy: the wheel alone in a venv without the system's site-packages.
"$PY" -m venv "$W/bare"
"$W/bare/bin/pip" install --no-index --no-deps -q "$WHEEL"
if "$W/bare/bin/python" -c 'import numpy' 2>/dev/null; then
  echo "python_wheel: the bare venv has numpy; the console script's check without it is skipped"
else
  help=$("$W/bare/bin/ssb4d" --help) && [[ $help == *view* ]] ||
    { echo "python_wheel: ssb4d --help (the console script) failed without numpy"; exit 1; }
  echo "python_wheel: the console script's --help in a venv without numpy: OK"
fi

"$W/venv/bin/python" - "$SRC" "$W/venv" <<'PYEOF'
import json, os, sys, time, urllib.request
src, venv = (os.path.realpath(p) + os.sep for p in sys.argv[1:3])
import ssb4d
from ssb4d import _lib

def inside_venv(p):
    p = os.path.realpath(p)
    assert p.startswith(venv) and not p.startswith(src), (p, venv, src)
    return p

inside_venv(ssb4d.__file__)
assert inside_venv(ssb4d.library_path).endswith('/_native/libssb4d.so.0'), ssb4d.library_path
assert inside_venv(_lib.cli_path()).endswith('/_native/ssb4d'), _lib.cli_path()
with open('/proc/self/maps') as f:
    for p in {l.split()[-1] for l in f if 'libssb4d' in l}:
        inside_venv(p)

# a missing file is named before any missing microscope value
try:
    ssb4d.open('missing.npy')
    raise AssertionError('opened a missing file')
except OSError as e:
    assert 'missing.npy' in str(e), e

ssb4d.simulate('s.npy', 'tiny', progress=False, scan_n=24, det=32, scan_cells=3)
s = ssb4d.open('s.npy')   # relative, the microscope values from the sidecar s.json
f = s.fit(progress=False)
v = s.view()
try:
    assert v.url.startswith('http://127.0.0.1:') and 'token=' in v.url, v.url
    page = urllib.request.urlopen(v.url, timeout=30).read().decode()
    assert '<html' in page.lower()
    base, token = v.url.split('/?')[0], v.url.split('token=')[1]
    hdr = {'X-SSB4D-Token': token}
    state = urllib.request.urlopen(urllib.request.Request(base + '/api/state', headers=hdr), timeout=30).read()
    json.loads(state)
    # Save: into this folder, not into the viewer's temporary one that stop() removes
    req = urllib.request.Request(base + '/api/save', data=b'{}', method='POST',
                                 headers=dict(hdr, **{'Content-Type': 'application/json'}))
    saved = json.loads(urllib.request.urlopen(req, timeout=60).read())
    end = time.monotonic() + 60
    while not os.path.exists('calibration.json') and time.monotonic() < end:
        time.sleep(0.2)
    assert os.path.exists('calibration.json'), (saved, os.listdir('.'))
finally:
    v.stop()
assert not v.running and v.process.returncode == 0, v.process.returncode
assert json.load(open('calibration.json'))
s.close()
print('python_wheel: ssb4d %s from %s, fit C10 %.3f nm, viewer %s, saved %s' % (
    ssb4d.__version__, os.path.dirname(ssb4d.__file__), f.C10_nm, v.url.split('/?')[0], saved.get('path')))
PYEOF

if [ -n "$NONUMPY" ]; then
  SITE=$("$W/venv/bin/python" -c 'import os, ssb4d; print(os.path.dirname(os.path.dirname(ssb4d.__file__)))')
  if out=$(PYTHONPATH="$SITE" "$NONUMPY" -c 'import ssb4d' 2>&1); then
    echo "python_wheel: $NONUMPY imported ssb4d without numpy"; exit 1
  fi
  echo "$out" | grep -q 'ImportError: ssb4d needs numpy.*pip install numpy' ||
    { echo "python_wheel: no clear ImportError naming numpy from $NONUMPY:"; echo "$out"; exit 1; }
  echo "python_wheel: $NONUMPY without numpy: $(echo "$out" | tail -1 | cut -c1-100)..."
else
  echo "python_wheel: no python3 without numpy on PATH; the ImportError check is skipped"
fi
echo "python_wheel: OK"
