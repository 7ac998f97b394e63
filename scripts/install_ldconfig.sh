#!/bin/sh
# Run by `meson install` after it has copied the files (meson.build): refreshes
# the dynamic loader's cache, so programs linked to libbaton without an rpath
# (README's `cc hello.c $(pkg-config --cflags --libs baton)`) find
# libbaton.so.0 at once, as GLib's and most libraries' installs do. Skipped for
# staged installs (DESTDIR: a package build runs ldconfig on the target) and
# when not root (the cache is root's).
#
#   install_ldconfig.sh LIBDIR
libdir=$1
if [ -n "${DESTDIR:-}" ] || [ -n "${MESON_INSTALL_DRY_RUN:-}" ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v ldconfig > /dev/null 2>&1; then
  echo "baton: the loader cache is root's: programs linked without an rpath find $libdir/libbaton.so.0" \
    "after 'ldconfig' as root (for a directory in /etc/ld.so.conf*), or link with -Wl,-rpath,$libdir"
  exit 0
fi
ldconfig || exit 0
if ! ldconfig -p | grep -q "libbaton.so.0 .*=> $libdir/"; then
  echo "baton: $libdir is not in the loader's search path: add it to /etc/ld.so.conf.d/ and" \
    "run ldconfig, or link programs with -Wl,-rpath,$libdir"
fi
