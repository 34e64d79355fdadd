#!/usr/bin/env bash
# device-mpi-deps.sh [DIR] -- run HERE (Debian 12; `apt-get update` first if a download 404s),
# inside a checkout, not on the GPU machine.
# Downloads Debian 12's Open MPI 4.1 (libopenmpi-dev, openmpi-bin, libopenmpi3, openmpi-common)
# and the closure of its runtime libraries (libpmix2, libhwloc15, libevent, libfabric1, libucx0,
# libibverbs1, librdmacm1, libpsm*, libnl*, ...) into DIR (default .device-mpi/), as .debs
# stripped of docs, man pages, static libraries and the Fortran/Java bindings, and writes
# DIR/activate.sh. Packages already shipped in .device-deps/ (shared/tools/device-deps.sh, run
# first if that folder is missing; SSB4D_DEVICE_DEPS names another) are not downloaded again.
#
# On the GPU machine (no MPI, no network; carry both folders), for a build with MPI:
#
#   . .device-deps/activate.sh && . .device-mpi/activate.sh &&
#   cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSSB4D_MPI=ON ... &&
#   cmake --build build -j16 &&
#   mpirun --allow-run-as-root --oversubscribe -np 2 -x SSB4D_MPI_TRAFFIC=1 build/ssb4d ...
#
# activate.sh unpacks the .debs with dpkg -x into $SSB4D_MPI_PREFIX (default /opt/ssb4d-mpi,
# never /), once per machine (rm -rf the prefix to unpack a newer set), recreates the links
# Debian's update-alternatives makes (mpicc, mpirun, mpiexec, include/.../mpi, libmpi.so,
# mpi-c.pc, libpsm_infinipath.so.1), and exports PATH, LD_LIBRARY_PATH (with
# $PREFIX/lib/x86_64-linux-gnu: libnl-3-200 installs there), PKG_CONFIG_PATH, MPI_HOME,
# OPAL_PREFIX and OPAL_SYSCONFDIR (Open MPI relocated: mpicc --showme, the component and help
# paths follow them), PMIX_PREFIX, PMIX_SYSCONFDIR and PMIX_MCA_mca_base_component_path (the
# external PMIx, relocated),
# OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)=1, and, unless already set, OMPI_MCA_pml=ob1,
# OMPI_MCA_btl=self,vader and OMPI_MCA_btl_vader_single_copy_mechanism=none (one node, no
# RDMA/UCX probing; CMA needs ptrace rights that containers often lack).
set -euo pipefail
DIR=${1:-.device-mpi}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${SSB4D_SHARED:-$ROOT/../shared}
DEPS=${SSB4D_DEVICE_DEPS:-$ROOT/.device-deps}
# Headers, wrapper data and pkg-config files; its Depends (-dev trees, gfortran) are not followed.
DEV="libopenmpi-dev"
# What mpicc/mpirun/libmpi need; their runtime dependencies are resolved by apt below.
RUN="openmpi-bin libopenmpi3 openmpi-common"
# Taken as present on the image: the HAVE list of shared/tools/device-deps.sh (read from there
# when it is at hand; this copy otherwise).
HAVE="libc6 libgcc-s1 libstdc++6 gcc-12-base zlib1g liblzma5 libzstd1 libbz2-1.0 libcrypt1
      libffi8 libgmp10 libgnutls30 libhogweed6 libnettle8 libp11-kit0 libtasn1-6 libidn2-0
      libunistring2 libgcrypt20 libgpg-error0 libcom-err2 libselinux1 libpcre2-8-0 libdb5.3"
if [ -r "$SHARED/tools/device-deps.sh" ]; then
  eval "$(sed -n '/^HAVE="/,/"$/p' "$SHARED/tools/device-deps.sh")"
fi
# Left out on purpose (apt is told they are installed): openssh-client (mpirun needs ssh only to
# start ranks on other hosts; it pulls PAM, Kerberos, adduser, ...), libhwloc-plugins (optional
# hwloc plugins for X11/OpenCL/NVML/libxml2, ~40 MiB with libicu72; hwloc works without) and
# adduser (libibverbs1's postinst: PAM, passwd, ...). ibverbs-providers stays (330 KiB):
# libfabric links libefa, UCX's IB module libmlx5, though the RDMA drivers themselves are not
# used (activate.sh runs Open MPI over shared memory).
SKIP="openssh-client libhwloc-plugins adduser"
# Downloaded, yet removed at activation where the machine has the soname (ldconfig -p), so that
# Ubuntu's newer copies are kept: package=soname.
MAYBE="libudev1=libudev.so.1 libnuma1=libnuma.so.1 libatomic1=libatomic.so.1 libuuid1=libuuid.so.1"

mkdir -p "$DIR"; DIR=$(cd "$DIR" && pwd)
if ! ls "$DEPS"/*.deb >/dev/null 2>&1; then
  "$SHARED/tools/device-deps.sh" "$DEPS"
fi
SHIPPED=$(for f in "$DEPS"/*.deb; do basename "$f" | cut -d_ -f1; done | sort -u)

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# A fake dpkg status that holds HAVE, SKIP and what .device-deps ships, so that a simulated
# install lists only what is still missing (see device-deps.sh). SKIP and SHIPPED go in without
# their Depends (their closures are left out, or shipped, too) and with a version of epoch 99:
# apt reinstalls a package whose status entry differs from the archive's at the same version.
{ for p in $HAVE; do
    apt-cache show --no-all-versions "$p" | sed '/^$/d'; printf 'Status: install ok installed\n\n'
  done
  for p in $SKIP $SHIPPED; do
    apt-cache show --no-all-versions "$p" | sed -e '/^$/d' -e '/^ /d' \
      -e '/^\(Pre-Depends\|Depends\|Recommends\|Suggests\|Breaks\|Conflicts\):/d' \
      -e 's/^Version: \([0-9]*:\)\{0,1\}/Version: 99:/'
    printf 'Status: install ok installed\n\n'
  done; } >"$tmp/status"
# shellcheck disable=SC2086
need=$(apt-get -o Dir::State::status="$tmp/status" -o Debug::NoLocking=1 \
         -o APT::Install-Recommends=0 -s install $RUN | awk '/^Inst /{print $2}')
rm -f "$DIR"/*.deb
# shellcheck disable=SC2086
(cd "$DIR" && apt-get download -qq -o APT::Sandbox::User="$(id -un)" $DEV $need)
# Repack each .deb without static libraries, docs and man pages, and without what a C build
# never uses: the Fortran modules and the second copy of the headers under fortran/, the
# Fortran and Java bindings (libmpi_mpifh*, libmpi_usempi*, libmpi_java*). (dpkg -x runs no
# maintainer scripts: activate.sh makes the update-alternatives links itself.)
for deb in "$DIR"/*.deb; do
  rm -rf "$tmp/x"; dpkg-deb -R "$deb" "$tmp/x"
  find "$tmp/x" \( -name '*.a' -o -name '*.la' -o -name '*.mod' -o -name 'libmpi_mpifh*' \
                   -o -name 'libmpi_usempi*' -o -name 'libmpi_java*' -o -name 'mpijavac*' \) -delete
  rm -rf "$tmp/x"/usr/share/{doc,man,lintian} "$tmp/x"/usr/lib/x86_64-linux-gnu/fortran \
         "$tmp/x/DEBIAN/md5sums"
  dpkg-deb --root-owner-group -Zxz -b "$tmp/x" "$deb" >/dev/null
done

{
cat <<'ACT'
# Source on the GPU machine (bash), after .device-deps/activate.sh:
#   . path/to/.device-mpi/activate.sh
# Unpacks the .debs beside this file into $SSB4D_MPI_PREFIX (default /opt/ssb4d-mpi), once per
# machine (rm -rf the prefix to unpack a newer set on a machine still warm). Written by
# scripts/device-mpi-deps.sh.
_dm=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_mp=${SSB4D_MPI_PREFIX:-/opt/ssb4d-mpi}; _ml=$_mp/usr/lib/x86_64-linux-gnu; _mo=$_ml/openmpi
ACT
echo "_dm_maybe=\"$MAYBE\""
cat <<'ACT'
if [ ! -e "$_mp/.unpacked" ]; then
  mkdir -p "$_mp" && for f in "$_dm"/*.deb; do dpkg -x "$f" "$_mp" || return 1; done
  # The links update-alternatives would make (mpicc.openmpi -> opal_wrapper, which reads
  # share/openmpi/<argv0>-wrapper-data.txt; mpirun.openmpi -> orterun).
  for n in mpicc:mpicc mpicxx:mpic++ mpic++:mpic++ mpiCC:mpic++ mpirun:mpirun mpiexec:mpiexec; do
    ln -sf "${n#*:}.openmpi" "$_mp/usr/bin/${n%%:*}"
  done
  mkdir -p "$_mp/usr/include/x86_64-linux-gnu" "$_ml/pkgconfig"
  ln -sfn ../../lib/x86_64-linux-gnu/openmpi/include "$_mp/usr/include/x86_64-linux-gnu/mpi"
  ln -sf openmpi/lib/libmpi.so "$_ml/libmpi.so"
  ln -sf ../openmpi/lib/pkgconfig/ompi-c.pc "$_ml/pkgconfig/mpi-c.pc"
  ln -sf ../openmpi/lib/pkgconfig/ompi.pc "$_ml/pkgconfig/mpi.pc"
  # libpsm-infinipath1's alternative (libfabric and mca_mtl_psm link libpsm_infinipath.so.1).
  for f in "$_mp"/usr/lib/libpsm1/libpsm_infinipath.so.1.*; do
    [ -e "$f" ] && ln -sf "../libpsm1/${f##*/}" "$_ml/libpsm_infinipath.so.1"
  done
  # The .pc files and PMIx's own MCA parameter file say /usr.
  sed -i "s#^prefix=/usr#prefix=$_mp/usr#" "$_mo"/lib/pkgconfig/*.pc
  sed -i "s#= */usr/#= $_mp/usr/#" "$_ml/pmix2/share/pmix-mca-params.conf"
  # Keep the machine's own (newer) copies of these small libraries where it has them.
  for m in $_dm_maybe; do
    if ldconfig -p | grep -q "${m#*=} "; then
      rm -f "$_ml/${m#*=}"* "$_mp/lib/x86_64-linux-gnu/${m#*=}"*
    fi
  done
  touch "$_mp/.unpacked"
fi
export PATH=$_mp/usr/bin:$PATH
export LD_LIBRARY_PATH=$_ml:$_mp/lib/x86_64-linux-gnu:$_mo/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_PATH=$_ml/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export MPI_HOME=$_mp/usr   # CMake's FindMPI looks for $MPI_HOME/bin/mpicc first
# Open MPI relocated: every install dir follows OPAL_PREFIX except sysconfdir (/etc/openmpi,
# Debian's openmpi-mca-params.conf: btl ^uct,openib,ofi, pml ^ucx, mtl ^ofi, osc ^ucx,pt2pt).
export OPAL_PREFIX=$_mp/usr OPAL_SYSCONFDIR=$_mp/etc/openmpi
# The external PMIx (libpmix2, Debian prefix /usr/lib/x86_64-linux-gnu/pmix2), relocated.
export PMIX_PREFIX=$_ml/pmix2 PMIX_SYSCONFDIR=$_ml/pmix2/share
export PMIX_MCA_mca_base_component_path=$_ml/pmix2/lib/pmix
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One node, shared memory only; each stays as the caller set it, if set.
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
# Name any library a shipped one needs and this machine lacks (source .device-deps/activate.sh
# first: libz, ... come from the image or from there). UCX loads its modules in order, so that
# ucx/libuct_ib.so.0, which the others link, is there for ldd only with ucx/ on the path.
LD_LIBRARY_PATH=$_ml/ucx:$LD_LIBRARY_PATH ldd "$_ml"/*.so.* "$_mp"/lib/x86_64-linux-gnu/*.so.* "$_mo"/lib/openmpi3/*.so \
    "$_ml"/pmix2/lib/pmix/*.so "$_ml"/ucx/*.so.* "$_mp"/usr/bin/orte* 2>/dev/null \
  | grep 'not found' | sort -u | sed 's/^/activate.sh (mpi): missing:/' >&2 || true
unset _dm _dm_maybe _mp _ml _mo
ACT
} >"$DIR/activate.sh"

ls -s --block-size=K "$DIR"/*.deb | sed "s#$DIR/##"
echo "device-mpi-deps: $(ls "$DIR"/*.deb | wc -l) .debs, $(du -sh "$DIR" | cut -f1) in $DIR"
