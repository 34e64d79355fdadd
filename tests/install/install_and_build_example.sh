#!/usr/bin/env bash
# install_and_build_example.sh CMAKE BUILD_DIR SOURCE_DIR VERSION — ctest install_example.
# Installs BUILD_DIR into a temporary prefix (`cmake --install BUILD_DIR --prefix P`), checks what
# must be there (header, both libraries and the .so links, ssb4d.pc, the ssb4d program), then
# builds SOURCE_DIR/examples/phase_of_simulation.c as a user would, with pkg-config, and runs it:
#   shared: `cc example.c $(pkg-config --cflags --libs ssb4d) -lm` (-lm: the example's own sqrt):
#           needs libssb4d.so.0 (the SONAME), found under P through LD_LIBRARY_PATH;
#   static: `pkg-config --static`, with libssb4d.a named instead of -lssb4d: no libssb4d.so needed.
# Both must exit 0 and print the same lines. Environment: CC (default cc), EXAMPLE_CFLAGS and
# EXAMPLE_LDFLAGS (the build's own compile and link options, e.g. the sanitizers, which a program
# linking a sanitized libssb4d needs too), READELF (default readelf).
set -euo pipefail
if [ $# -ne 4 ]; then
  echo "usage: $0 CMAKE BUILD_DIR SOURCE_DIR VERSION" >&2
  exit 2
fi
cmake=$1 build=$2 src=$3 version=$4
example=$src/examples/phase_of_simulation.c
CC=${CC:-cc}
READELF=${READELF:-readelf}
read -r -a cflags <<<"${EXAMPLE_CFLAGS:-}"
read -r -a ldflags <<<"${EXAMPLE_LDFLAGS:-}"
soname=libssb4d.so.${version%%.*}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "install_example: FAIL: $*" >&2
  exit 1
}
step() { echo "install_example: $*"; }

P=$work/prefix
"$cmake" --install "$build" --prefix "$P" >"$work/install.log" || { cat "$work/install.log"; fail "cmake --install"; }
step "installed into $P: $(grep -c 'Installing:' "$work/install.log") files"

# What must be there. The folders are whatever GNUInstallDirs chose (lib, lib64, ...): the .pc
# file says where the library and the header went.
pc=$(find "$P" -name ssb4d.pc -path '*/pkgconfig/*' | head -n 1)
[ -n "$pc" ] || fail "no ssb4d.pc installed under $P"
export PKG_CONFIG_PATH=$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
[ "$(pkg-config --modversion ssb4d)" = "$version" ] || fail "pkg-config --modversion ssb4d is not $version"
[ "$(pkg-config --variable=prefix ssb4d)" = "$P" ] || fail "ssb4d.pc's prefix is $(pkg-config --variable=prefix ssb4d), not $P"
libdir=$(pkg-config --variable=libdir ssb4d)
includedir=$(pkg-config --variable=includedir ssb4d)
[ "$libdir" = "$(dirname "$(dirname "$pc")")" ] || fail "ssb4d.pc's libdir $libdir is not where it was installed"
[ -f "$includedir/ssb4d.h" ] || fail "no ssb4d.h in $includedir"
cmp -s "$includedir/ssb4d.h" "$src/include/ssb4d.h" || fail "the installed ssb4d.h is not include/ssb4d.h"
cmp -s "$includedir/ssb4d_advanced.h" "$src/include/ssb4d_advanced.h" || fail "the installed ssb4d_advanced.h is not include/ssb4d_advanced.h"
[ -f "$libdir/libssb4d.a" ] || fail "no libssb4d.a in $libdir"
[ -f "$libdir/libssb4d.so.$version" ] || fail "no libssb4d.so.$version in $libdir"
[ "$(readlink "$libdir/$soname")" = "libssb4d.so.$version" ] || fail "$soname is not a link to libssb4d.so.$version"
[ "$(readlink "$libdir/libssb4d.so")" = "$soname" ] || fail "libssb4d.so is not a link to $soname"
"$READELF" -d "$libdir/libssb4d.so.$version" | grep -q "(SONAME).*\[$soname\]" || fail "the SONAME of libssb4d.so.$version is not $soname"
bin=$(find "$P" -type f -name ssb4d -perm -u+x | head -n 1)
[ -n "$bin" ] || fail "no ssb4d program installed"
"$bin" --version | grep -qx "ssb4d $version" || fail "${bin#"$P"/} --version does not say ssb4d $version"
step "${includedir#"$P"/}/ssb4d.h, ${libdir#"$P"/}/libssb4d.a, libssb4d.so -> $soname -> libssb4d.so.$version (SONAME $soname), ${pc#"$P"/}, ${bin#"$P"/}"

flags=$(pkg-config --cflags --libs ssb4d) || fail "pkg-config --cflags --libs ssb4d"
read -r -a pc_shared <<<"$flags"
flags=$(pkg-config --cflags --libs --static ssb4d) || fail "pkg-config --cflags --libs --static ssb4d"
read -r -a pc_static <<<"$flags"
step "pkg-config --cflags --libs ssb4d: ${pc_shared[*]}"

# Shared: the program needs libssb4d.so.0 and loads the installed one.
"$CC" -std=c17 -Wall -Wextra -Werror "${cflags[@]}" "$example" -o "$work/example_shared" \
  "${pc_shared[@]}" -lm "${ldflags[@]}" || fail "the example does not build against the shared library"
"$READELF" -d "$work/example_shared" | grep -q "(NEEDED).*\[$soname\]" || fail "example_shared does not need $soname"
loaded=$(LD_LIBRARY_PATH=$libdir ldd "$work/example_shared" | awk -v s="$soname" '$1 == s { print $3 }')
[ "$loaded" = "$libdir/$soname" ] || fail "example_shared loads $soname from '$loaded', not from $libdir"
rc=0
LD_LIBRARY_PATH=$libdir "$work/example_shared" >"$work/shared.out" || rc=$?
[ $rc -eq 0 ] || { cat "$work/shared.out"; fail "example_shared exited $rc"; }
step "shared: needs $soname, runs:"
cat "$work/shared.out"

# Static: libssb4d.a in place of -lssb4d (with both installed, -lssb4d would take the .so).
static_libs=()
for f in "${pc_static[@]}"; do
  if [ "$f" = "-lssb4d" ]; then static_libs+=("$libdir/libssb4d.a"); else static_libs+=("$f"); fi
done
"$CC" -std=c17 -Wall -Wextra -Werror "${cflags[@]}" "$example" -o "$work/example_static" \
  "${static_libs[@]}" -lm "${ldflags[@]}" || fail "the example does not build against the static library"
if "$READELF" -d "$work/example_static" | grep -q "(NEEDED).*libssb4d"; then
  fail "example_static needs a shared libssb4d"
fi
rc=0
env -u LD_LIBRARY_PATH "$work/example_static" >"$work/static.out" || rc=$?
[ $rc -eq 0 ] || { cat "$work/static.out"; fail "example_static exited $rc"; }
cmp -s "$work/shared.out" "$work/static.out" || { diff "$work/shared.out" "$work/static.out" || true; fail "the static and shared programs printed different lines"; }
step "static (pkg-config --static): no libssb4d.so needed, same output"
