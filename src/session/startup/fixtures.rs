//! What the start-up tests share: capsules installed into a scratch store.

use std::path::Path;

/// Installs a `.mur.zip` of `manifest` (and `component`) as `local/<name>@<version>` under the
/// store `root`, with its sha256 sidecar; returns that sha256.
pub(super) fn install(root: &Path, name: &str, version: &str, manifest: &str, component: Option<&[u8]>) -> String {
    let bytes = crate::store::archive::pack(manifest.as_bytes(), component);
    let zip = crate::paths::artifact_zip(root, "local", name, version);
    std::fs::create_dir_all(zip.parent().unwrap()).unwrap();
    std::fs::write(&zip, &bytes).unwrap();
    let sha = crate::digest::sha256_hex(&bytes);
    std::fs::write(
        crate::paths::artifact_sidecar(root, "local", name, version),
        format!("{sha}\n"),
    )
    .unwrap();
    sha
}
