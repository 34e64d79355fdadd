#!/usr/bin/env bash
# exported_symbols.sh CC HEADER LIBSSB4D_SO MAP — libssb4d.so exports exactly the functions that
# the public headers declare (HEADER: ssb4d_advanced.h, which includes ssb4d.h), and the version script MAP lists exactly those (ctest
# exported_symbols). On a difference it prints what to add or remove, and fails.
#   header:   the header preprocessed by CC (comments and macros gone), cut into declarations at
#             ';', typedefs dropped; every `ssb4d_NAME(` left is a function declaration;
#   map:      the names in MAP (comments removed by the same preprocessor);
#   exported: `nm -D --defined-only` of the library, every defined dynamic symbol.
set -euo pipefail
if [ $# -ne 4 ]; then
  echo "usage: $0 CC HEADER LIBSSB4D_SO MAP" >&2
  exit 2
fi
cc=$1 header=$2 lib=$3 map=$4
NM=${NM:-nm}
export LC_ALL=C
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$cc" -E -P -x c "$header" >"$tmp/header.i"
tr '\n' ' ' <"$tmp/header.i" | tr ';' '\n' | grep -v '^[[:space:]]*typedef' |
  { grep -o '\bssb4d_[A-Za-z0-9_]*[[:space:]]*(' || true; } | sed 's/[[:space:]]*($//' | sort -u >"$tmp/header"
"$cc" -E -P -x c "$map" | { grep -o '\bssb4d_[A-Za-z0-9_]*[[:space:]]*;' || true; } |
  sed 's/[[:space:]]*;$//' | sort -u >"$tmp/map"
"$NM" -D --defined-only "$lib" | awk 'NF >= 3 { print $NF }' | sed 's/@.*//' | sort -u >"$tmp/exported"

status=0
# The extraction itself must work: a few functions every version of the header has.
for f in ssb4d_status_name ssb4d_source_open ssb4d_calibrate ssb4d_gbuild ssb4d_loss; do
  for list in header map exported; do
    if ! grep -qx "$f" "$tmp/$list"; then
      echo "exported_symbols: $f not found in the $list list (broken extraction or install?)"
      status=1
    fi
  done
done
report() { # report TITLE FILE
  if [ -s "$2" ]; then
    echo "$1"
    sed 's/^/    /' "$2"
    status=1
  fi
}
comm -23 "$tmp/header" "$tmp/map" >"$tmp/d1"
comm -13 "$tmp/header" "$tmp/map" >"$tmp/d2"
comm -13 "$tmp/header" "$tmp/exported" >"$tmp/d3"
comm -23 "$tmp/header" "$tmp/exported" >"$tmp/d4"
report "declared in $header but not in $map (add these lines, with ';'):" "$tmp/d1"
report "in $map but not declared in $header (remove them):" "$tmp/d2"
report "exported by $lib but not declared in $header:" "$tmp/d3"
report "declared in $header but not exported by $lib (not in the map, or not defined):" "$tmp/d4"
n=$(wc -l <"$tmp/header")
if [ $status -eq 0 ]; then
  echo "exported_symbols: the $n functions of $(basename "$header") are exactly the library's exports and the version script's list"
fi
exit $status
