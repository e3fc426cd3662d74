#!/usr/bin/env bash
# Rebuilds tool.wasm here: the Rust tool `mur new --tool words --lang rust` scaffolds, built by
# `mur build` as a user's is, with the crate versions in Cargo.lock. It is committed so the tests
# of the tool host (src/capsule/tool.rs) and the tool-call bench (benches/tools.rs) never need a
# Rust that builds WebAssembly; scaffold.sha256 records the scaffold it was built from, and a test
# fails when the scaffold changes without a rebuild.
#
# Needs the mur binary (MUR, default target/debug/mur: `cargo build --workspace`) and a Rust that
# builds components first among the cargos on PATH, e.g. Debian's:
#   apt-get install rustc-web cargo-web rust-web-src rust-web-llvm lld-22
# or the one the tests provision (`cargo test --workspace --test it tools::a_rust_tool`):
#   RUST_BIN=target/test-rust/<tag>/bin src/capsule/testdata/rust-tool/build.sh
# and crates.io. The build trims paths, so the same toolchain and crates give the same bytes.
#
# Usage: build.sh           rebuild tool.wasm and scaffold.sha256 with the crates of Cargo.lock
#        build.sh --update  the same with the newest crates the scaffold allows (a new Cargo.lock)
#        build.sh --check   rebuild in a temporary directory; fail unless tool.wasm is identical
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../../.." && pwd)"
mode="${1:-build}"
case "$mode" in
  build|--update|--check) ;;
  *) echo "usage: $0 [--update|--check]" >&2; exit 2 ;;
esac
mur="${MUR:-$repo/target/debug/mur}"
[ -x "$mur" ] || { echo "$0: $mur is missing: cargo build --workspace, or set MUR" >&2; exit 1; }
if [ -n "${RUST_BIN:-}" ]; then
  PATH="$(cd "$RUST_BIN" && pwd):$PATH"
fi
export CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
capsule="$tmp/counter"
mkdir -p "$capsule" "$tmp/home"
cat > "$capsule/murmur.yaml" <<'YAML'
name: counter
version: 0.1.0
inference:
  provider: openai
  endpoint: http://127.0.0.1:9/v1
  model: test-model
  api_key: ${MUR_PROVIDER_KEY}
YAML
(cd "$capsule" && HOME="$tmp/home" "$mur" new --tool words --lang rust >/dev/null)
tool="$capsule/tools/words"

# The scaffold's digest: each file, in byte order of its path, as path NUL bytes NUL.
digest="$(cd "$tool" && find . -type f | sed 's|^\./||' | LC_ALL=C sort | while IFS= read -r f; do
  printf '%s\0' "$f"; cat "$f"; printf '\0'
done | sha256sum | cut -d' ' -f1)"

[ "$mode" = --update ] || cp "$here/Cargo.lock" "$tool/Cargo.lock"
(cd "$capsule" && HOME="$tmp/home" "$mur" build . >/dev/null)

if [ "$mode" = --check ]; then
  status=0
  if [ "$digest" != "$(cat "$here/scaffold.sha256")" ]; then
    echo "STALE  scaffold.sha256: the scaffold changed since tool.wasm was built; run $0" >&2
    status=1
  fi
  if cmp -s "$tool/tool.wasm" "$here/tool.wasm"; then
    echo "ok     tool.wasm"
  else
    echo "STALE  tool.wasm: its rebuild differs; run $0 and commit the result" >&2
    status=1
  fi
  exit "$status"
fi
cp "$tool/tool.wasm" "$here/tool.wasm"
cp "$tool/Cargo.lock" "$here/Cargo.lock"
echo "$digest" > "$here/scaffold.sha256"
echo "built  tool.wasm ($(wc -c < "$here/tool.wasm") bytes) from the scaffold $digest"
