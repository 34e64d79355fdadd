#!/usr/bin/env bash
# Installs everything ssb4d needs to build and test on Debian 12 (bookworm).
# Run as root (or with sudo). Safe to re-run.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential cmake pkg-config \
  libfftw3-dev libcjson-dev libspng-dev libpng-dev libtiff-dev zlib1g-dev \
  libcmocka-dev libssl-dev liblz4-dev libhdf5-dev libhtscodecs-dev clang \
  libmicrohttpd-dev chromium libopenmpi-dev openmpi-bin \
  python3-numpy python3-pytest python3-h5py python3-venv python3-pip python3-setuptools python3-wheel \
  >/dev/null
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
echo "install-deps: done"
