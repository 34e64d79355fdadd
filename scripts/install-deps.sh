#!/usr/bin/env bash
# Installs what ssb4d needs on Debian 12 (bookworm). Run as root (or with sudo). Safe to re-run.
#   scripts/install-deps.sh            everything the build and the tests need (the README's set-up)
#   scripts/install-deps.sh --minimal  only what building ssb4d and its Python package needs
#   scripts/install-deps.sh --help     what each installs
set -euo pipefail

# The packages, by what they are for. CMakeLists.txt REQUIRES the "libraries" group (FFTW3,
# cJSON, libspng, libtiff, libcrypto, liblz4, HDF5, libmicrohttpd); MPI is optional
# (-DSSB4D_MPI=AUTO), and so is everything the tests use.
BUILD_PKGS="build-essential cmake pkg-config"
LIB_PKGS="libfftw3-dev libcjson-dev libspng-dev libtiff-dev zlib1g-dev libssl-dev liblz4-dev libhdf5-dev libmicrohttpd-dev"
OPTIONAL_LIB_PKGS="libpng-dev libopenmpi-dev openmpi-bin"
TEST_PKGS="libcmocka-dev clang libhtscodecs-dev python3-pytest python3-h5py"
BROWSER_PKGS="chromium"
PYTHON_PKGS="python3-numpy python3-venv python3-pip python3-setuptools python3-wheel"

usage() {
  cat <<EOF
usage: scripts/install-deps.sh [--minimal | --help]

Installs the Debian 12 packages ssb4d needs (apt-get; as root, or through sudo), after printing
the list. Safe to re-run.

(no argument)  everything the build and the tests need: what the README's set-up runs and CI
               (.ci/run) uses.
                 build:          $BUILD_PKGS
                 libraries:      $LIB_PKGS
                 optional:       $OPTIONAL_LIB_PKGS
                                 (OpenMPI: mpirun over several processes, docs/scale.md)
                 tests:          $TEST_PKGS
                                 (cmocka: the unit tests; clang: the libFuzzer targets;
                                 htscodecs: the codec benchmark; pytest, h5py: the Python tests)
                 viewer browser test: $BROWSER_PKGS, nodejs and npm (unless a node/npm is
                                 already installed), then playwright-core from
                                 tests/view/package-lock.json (npm ci; no browser download)
                 Python:         $PYTHON_PKGS
--minimal      only what building ssb4d and its Python package needs (no tests, no MPI,
               no browser, no Node):
                 build:          $BUILD_PKGS
                 libraries:      $LIB_PKGS
                 Python:         $PYTHON_PKGS
               The tests need cmocka, so configure with the tests off:
                 cmake -S . -B build -DSSB4D_TESTS=OFF && cmake --build build -j2
               or install the Python package with pip install --no-build-isolation . (it builds
               without the tests).
--help, -h     this help.
EOF
}

MODE=full
case "${1:-}" in
  "") ;;
  --minimal) MODE=minimal ;;
  -h|--help) usage; exit 0 ;;
  *) echo "install-deps: unknown argument '$1' (try --help)" >&2; exit 2 ;;
esac
if [ "$#" -gt 1 ]; then echo "install-deps: one argument at most (try --help)" >&2; exit 2; fi

if [ "$MODE" = minimal ]; then
  echo "install-deps: the minimal set (build ssb4d and its Python package; no tests):"
  echo "  build:      $BUILD_PKGS"
  echo "  libraries:  $LIB_PKGS"
  echo "  Python:     $PYTHON_PKGS"
  PKGS="$BUILD_PKGS $LIB_PKGS $PYTHON_PKGS"
else
  echo "install-deps: everything the build and the tests need (--minimal: the build only):"
  echo "  build:      $BUILD_PKGS"
  echo "  libraries:  $LIB_PKGS"
  echo "  optional:   $OPTIONAL_LIB_PKGS"
  echo "  tests:      $TEST_PKGS"
  echo "  viewer browser test: $BROWSER_PKGS, nodejs and npm (unless installed), playwright-core (npm ci)"
  echo "  Python:     $PYTHON_PKGS"
  PKGS="$BUILD_PKGS $LIB_PKGS $OPTIONAL_LIB_PKGS $TEST_PKGS $BROWSER_PKGS $PYTHON_PKGS"
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086 # the lists are words
$SUDO apt-get install -y -qq --no-install-recommends $PKGS >/dev/null

if [ "$MODE" = full ]; then
  # The viewer's browser test (tests/view/browser.mjs): Node and npm (Debian's, unless a node is
  # already installed), then playwright-core from tests/view/package-lock.json. It drives Debian's
  # /usr/bin/chromium: the download of Playwright's own browsers is switched off.
  if ! command -v node >/dev/null 2>&1; then
    $SUDO apt-get install -y -qq --no-install-recommends nodejs >/dev/null
  fi
  if ! command -v npm >/dev/null 2>&1; then
    $SUDO apt-get install -y -qq --no-install-recommends npm >/dev/null
  fi
  HERE="$(cd "$(dirname "$0")/.." && pwd)"
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --prefix "$HERE/tests/view" --no-audit --no-fund --loglevel=error >/dev/null
fi
echo "install-deps: done"
