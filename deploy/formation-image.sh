#!/bin/sh
# Builds the formation image docs/kubernetes.md describes without a container registry: a root
# filesystem holding mur, socat and the libraries both load, a static busybox for /bin/sh, the
# user 10001, and the formation's capsules installed in the store every member pod reads
# (/opt/murmur), imported with `docker import`. The Dockerfile builds the same image where its
# base images can be pulled; this script needs only a Debian-like host with `socat`,
# `busybox-static` (or BUSYBOX=PATH to a static busybox) and a Docker engine.
#
#   deploy/formation-image.sh [--mur PATH] IMAGE DIR
#
# DIR holds the formation's .mur.zip archives (what `mur build` writes for each member); IMAGE is
# the name `mur deploy --kubernetes --image IMAGE` gets. `--mur PATH` picks the mur binary to
# put in the image (default: the `mur` on PATH). DOCKER (default `docker`) names the client;
# DOCKER_HOST is honoured as usual.
set -eu

mur=$(command -v mur || true)
if [ "${1:-}" = "--mur" ]; then
  mur=$2
  shift 2
fi
if [ $# -ne 2 ] || [ -z "$mur" ]; then
  echo "usage: $0 [--mur PATH] IMAGE DIR" >&2
  exit 2
fi
image=$1
capsules=$2
docker=${DOCKER:-docker}
busybox=${BUSYBOX:-/bin/busybox}
socat=$(command -v socat) || { echo "$0: socat is not installed (apt-get install socat)" >&2; exit 1; }
[ -x "$busybox" ] || { echo "$0: no static busybox at $busybox (apt-get install busybox-static)" >&2; exit 1; }

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
umask 022
mkdir -p "$root/bin" "$root/usr/local/bin" "$root/etc" "$root/home/mur" "$root/work" \
  "$root/tmp" "$root/opt/murmur" "$root/var/run/murmur" "$root/etc/murmur" "$root/proc" \
  "$root/sys" "$root/dev"
chmod 1777 "$root/tmp"

# A binary and every library it loads, at the paths the loader looks them up.
with_libraries() {
  mkdir -p "$root$(dirname "$2")"
  cp -L "$1" "$root$2"
  ldd "$1" | awk '/=> \//{print $3} /^\t\/[^ ]*ld-linux/{print $1}' | while read -r lib; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
}
with_libraries "$mur" /usr/local/bin/mur
with_libraries "$socat" /usr/bin/socat
cp "$busybox" "$root/bin/busybox"
for applet in $("$busybox" --list); do
  [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done
ln -sf /usr/bin/socat "$root/bin/socat"

printf 'root:x:0:0:root:/root:/bin/sh\nmur:x:10001:10001:mur:/home/mur:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nmur:x:10001:\n' >"$root/etc/group"
[ ! -d /etc/ssl/certs ] || { mkdir -p "$root/etc/ssl"; cp -rL /etc/ssl/certs "$root/etc/ssl/certs"; }
# As root, /home/mur and /work belong to the user 10001 as in the Dockerfile's image; otherwise
# every file is packed as root's and those two stay root's (a pod mounts emptyDirs over them).
owner=
if [ "$(id -u)" = 0 ]; then
  chown 10001:10001 "$root/home/mur" "$root/work"
else
  owner="--owner=0 --group=0"
fi

# As the Dockerfile's last stage: `mur install -g` with HOME=/opt/murmur writes exactly the store
# `--store-root /opt/murmur` reads; root owns it and members only read it.
found=0
for zip in "$capsules"/*.mur.zip; do
  [ -e "$zip" ] || continue
  HOME="$root/opt/murmur" "$mur" install -g "$zip" >/dev/null
  found=1
done
[ "$found" = 1 ] || { echo "$0: no .mur.zip in $capsules" >&2; exit 1; }
chmod -R go+rX "$root/opt/murmur/.murmur"

# shellcheck disable=SC2086
tar -C "$root" $owner --numeric-owner -c . | "$docker" import \
  --change 'ENV HOME=/home/mur' \
  --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
  --change 'WORKDIR /work' \
  --change 'USER 10001:10001' \
  --change 'ENTRYPOINT ["/usr/local/bin/mur"]' \
  - "$image" >/dev/null
echo "$image"
