#!/usr/bin/env bash
# Rebuilds the demo's WebAssembly components from their Rust sources: the three members'
# capsule.wasm and the two that `mur new --roster` writes into a scaffold (scaffold/*/capsule.wasm).
# The built components are committed, so building and testing mur never runs this.
#
# Needs Debian's Rust, which ships its std sources for -Zbuild-std:
#   apt-get install -y rustc-web cargo-web rust-web-src lld-22
# and crates.io for wit-bindgen and wit-component (pinned by Cargo.lock and tools/…/Cargo.lock).
#
# Usage: actors/demo/build.sh           rebuild every capsule.wasm in place
#        actors/demo/build.sh --check   rebuild into a temporary directory and fail unless every
#                                       committed capsule.wasm is byte-identical to its rebuild
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

check=0
case "${1:-}" in
  "") ;;
  --check) check=1 ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

# crate name → directory whose capsule.wasm it builds
guests=(
  "demo_planner planner"
  "demo_writer writer"
  "demo_analyst analyst"
  "scaffold_lead scaffold/lead"
  "scaffold_worker scaffold/worker"
)

# rustup's tools come first in PATH; the guests need Debian's, called explicitly.
for tool in /usr/bin/cargo /usr/bin/rustc /usr/bin/rust-lld; do
  [ -x "$tool" ] || { echo "$0: $tool is missing: apt-get install -y rustc-web cargo-web rust-web-src lld-22" >&2; exit 1; }
done
export RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc
target="${CARGO_TARGET_DIR:-$here/target}"

# Host paths end up in panic messages; map them to fixed names so rebuilds on any machine, in
# any checkout, give the same bytes.
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
guest_flags="--remap-path-prefix=$here=demo --remap-path-prefix=$cargo_home=cargo"

echo "== guests (wasm32-unknown-unknown)"
RUSTC_BOOTSTRAP=1 RUSTFLAGS="$guest_flags" /usr/bin/cargo build --locked --release \
  --manifest-path "$here/Cargo.toml" --target-dir "$target" \
  -Zbuild-std=std,panic_abort --target wasm32-unknown-unknown

echo "== componentize"
/usr/bin/cargo build --locked --release --quiet \
  --manifest-path "$here/tools/componentize/Cargo.toml" --target-dir "$target"

out="$here"
if [ "$check" = 1 ]; then
  out="$(mktemp -d)"
  trap 'rm -rf "$out"' EXIT
fi
pairs=()
for g in "${guests[@]}"; do
  set -- $g
  mkdir -p "$out/$2"
  pairs+=("$target/wasm32-unknown-unknown/release/$1.wasm" "$out/$2/capsule.wasm")
done
"$target/release/componentize" "${pairs[@]}"

if [ "$check" = 1 ]; then
  stale=0
  for g in "${guests[@]}"; do
    set -- $g
    if cmp -s "$out/$2/capsule.wasm" "$here/$2/capsule.wasm"; then
      echo "ok     $2/capsule.wasm"
    else
      echo "STALE  $2/capsule.wasm: its rebuild differs; run actors/demo/build.sh and commit the result" >&2
      stale=1
    fi
  done
  exit "$stale"
fi
for g in "${guests[@]}"; do
  set -- $g
  echo "built  $2/capsule.wasm ($(wc -c < "$here/$2/capsule.wasm") bytes)"
done
