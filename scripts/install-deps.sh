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
  >/dev/null
echo "install-deps: done"
