#!/usr/bin/env bash
# Build the container image rtk's container tests run Ray in, from Debian's packages
# alone (no registry): a minimal Debian root filesystem made by debootstrap, with
# python3 (Debian 12's 3.11, the Python CI's .venv is made from) and what Ray runs at
# run time; the venv itself is not in the image, the tests mount it at its own path.
#
#   scripts/container-image.sh          print the root filesystem's tar, building it once
#   scripts/container-image.sh --import also import it into this machine's podman as
#                                       IMAGE (printed on the second line) when missing
#
# The tar is cached in $RTK_IMAGE_CACHE (default /var/cache/rtk-image), named after
# what goes in, so a second run (or a second test) reuses it; delete the folder to
# rebuild. Needs root and debootstrap; the mirror is $RTK_DEBIAN_MIRROR (default
# http://deb.debian.org/debian). Each sandbox node has its own podman storage: the
# tests import the tar there (`podman import TAR IMAGE`), as a real cluster's nodes
# each need the image.
set -euo pipefail

suite=bookworm
# procps: ps and pgrep (rtk's agent, Ray's scripts); iproute2: ip (rtk's probe).
packages=python3,procps,iproute2
mirror=${RTK_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${RTK_IMAGE_CACHE:-/var/cache/rtk-image}
key=$(printf '%s %s' "$suite" "$packages" | sha256sum | cut -c1-12)
tar_path=$cache/rtk-ray-test-$suite-$key.tar
image=localhost/rtk-ray-test:$suite-$key

if [ ! -s "$tar_path" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "rtk: building the test image needs root (debootstrap)" >&2
    exit 1
  fi
  command -v debootstrap >/dev/null || {
    echo "rtk: debootstrap not found (apt-get install debootstrap)" >&2
    exit 1
  }
  mkdir -p "$cache"
  work=$(mktemp -d "$cache/build.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  began=$(date +%s)
  echo "rtk: debootstrap $suite (minbase, $packages) from $mirror" >&2
  debootstrap --variant=minbase --include="$packages" "$suite" "$work/rootfs" "$mirror" \
    >"$work/debootstrap.log" 2>&1 || {
    tail -20 "$work/debootstrap.log" >&2
    exit 1
  }
  # What only installing needs: downloaded packages, package lists, documentation.
  rm -rf "$work"/rootfs/var/cache/apt/archives/*.deb "$work"/rootfs/var/lib/apt/lists/* \
    "$work"/rootfs/usr/share/{doc,man,info,locale}/*
  tar -C "$work/rootfs" -cf "$work/rootfs.tar" .
  mv "$work/rootfs.tar" "$tar_path"
  echo "rtk: built $tar_path ($(du -h "$tar_path" | cut -f1)) in $(($(date +%s) - began)) s" >&2
fi
echo "$tar_path"

if [ "${1:-}" = --import ]; then
  if ! podman image exists "$image"; then
    podman import -q --change 'CMD ["/bin/sh"]' "$tar_path" "$image" >/dev/null
  fi
  echo "$image"
fi
