# syntax=docker/dockerfile:1
#
# The image `mur deploy --kubernetes --image IMAGE` names: mur, socat for the callers' relays, and
# the formation's capsules installed in the store every member pod resolves from (/opt/murmur).
# docs/kubernetes.md explains each path the manifests use.
#
#   docker build --build-context capsules=DIR -t registry.example/mur-formation:1 .
#
# DIR holds the formation's .mur.zip archives (what `mur build` writes for each member). A pod
# runs `mur run --capsule S/N --capsule-version V --capsule-sha256 H --store-root /opt/murmur`,
# so an image whose bytes differ from what `mur deploy` admitted refuses to start the member
# (E-RUN-047) rather than run something else. `--target base` builds mur alone.
#
# Where the base images cannot be pulled, deploy/formation-image.sh builds the same image from
# this machine's mur, socat and busybox with `docker import` (docs/kubernetes.md, "The image").

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin mur

FROM debian:bookworm-slim AS base
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates socat \
 && rm -rf /var/lib/apt/lists/*
# The unprivileged user every pod runs as (runAsUser/fsGroup 10001). /home/mur and /work are
# emptyDir volumes in a pod; they exist here so the image also runs outside a cluster.
RUN groupadd --gid 10001 mur \
 && useradd --uid 10001 --gid 10001 --home-dir /home/mur --create-home --shell /usr/sbin/nologin mur \
 && mkdir -p /work /opt/murmur \
 && chown mur:mur /work
COPY --from=build /src/target/release/mur /usr/local/bin/mur
ENV HOME=/home/mur
WORKDIR /work
USER 10001:10001
ENTRYPOINT ["/usr/local/bin/mur"]

FROM base AS formation
USER root
# `mur install -g` stores into $HOME/.murmur/artifacts; with HOME=/opt/murmur that is exactly the
# project store `--store-root /opt/murmur` reads. Root owns it: members only read it. `mur install`
# makes a store owner-only, so this one is opened to reading for the members' user afterwards.
RUN --mount=type=bind,from=capsules,target=/capsules \
    set -e; \
    found=0; \
    for zip in /capsules/*.mur.zip; do \
      [ -e "$zip" ] || continue; \
      HOME=/opt/murmur mur install -g "$zip"; \
      found=1; \
    done; \
    [ "$found" = 1 ] || { echo "no .mur.zip in the capsules build context" >&2; exit 1; }; \
    chmod -R go+rX /opt/murmur/.murmur
USER 10001:10001
