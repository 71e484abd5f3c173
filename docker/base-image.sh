#!/usr/bin/env bash
# Make sure the Debian base image the Dockerfiles build on exists locally.
#
#   docker/base-image.sh [IMAGE]          # default: $BASE_IMAGE, else debian:bookworm-slim
#
# 1. IMAGE already in the local image store: nothing to do.
# 2. `docker pull IMAGE` works (a machine with registry access): done.
# 3. Otherwise (no registry reachable) build it from Debian's archive:
#    `debootstrap --variant=minbase bookworm` into a temporary folder, then `docker import`,
#    tagged IMAGE. Needs root and debootstrap (apt-get install debootstrap). The result is
#    a plain Debian 12 userland like debian:bookworm-slim: apt, no Python, no ffmpeg (the
#    Dockerfiles install those).
#
# Prints the image name on stdout when it is ready; progress goes to stderr.
set -euo pipefail

IMAGE="${1:-${BASE_IMAGE:-debian:bookworm-slim}}"
SUITE="${DEBIAN_SUITE:-bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
DOCKER="${DOCKER:-docker}"

say() { printf '==> %s\n' "$*" >&2; }

if "$DOCKER" image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "$IMAGE"
  exit 0
fi
if [ "${BASE_IMAGE_NO_PULL:-0}" != 1 ] && timeout 60 "$DOCKER" pull -q "$IMAGE" >/dev/null 2>&1; then
  say "pulled $IMAGE"
  echo "$IMAGE"
  exit 0
fi

say "$IMAGE is not here and cannot be pulled: building it with debootstrap ($SUITE from $MIRROR)"
if [ "$(id -u)" != 0 ]; then
  echo "debootstrap needs root: run this script as root (or pull $IMAGE on a machine with registry access)" >&2
  exit 1
fi
if ! command -v debootstrap >/dev/null; then
  say "installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi

ROOTFS="$(mktemp -d /tmp/jobservice-rootfs.XXXXXX)"
trap 'rm -rf "$ROOTFS"' EXIT
started=$(date +%s)
debootstrap --variant=minbase "$SUITE" "$ROOTFS" "$MIRROR" >"$ROOTFS.log" 2>&1 || {
  tail -20 "$ROOTFS.log" >&2
  exit 1
}
rm -f "$ROOTFS.log"

# The same package sources as Debian's official image: the release, its updates and security.
rm -f "$ROOTFS/etc/apt/sources.list"
cat >"$ROOTFS/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${MIRROR%/debian}/debian-security
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
# Like the official image: no recommended packages, no apt caches kept in layers.
printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' \
  >"$ROOTFS/etc/apt/apt.conf.d/90-no-recommends"
rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/log/*.log
: >"$ROOTFS/etc/hostname"
: >"$ROOTFS/etc/resolv.conf"

tar --numeric-owner -C "$ROOTFS" -c . | "$DOCKER" import \
  --change 'CMD ["bash"]' \
  --change 'ENV LANG=C.UTF-8' \
  --message "debootstrap --variant=minbase $SUITE" \
  - "$IMAGE" >/dev/null
say "built $IMAGE in $(($(date +%s) - started)) s"
echo "$IMAGE"
