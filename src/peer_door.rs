//! A peer's door as a Unix socket inside its formation's owner-only directory [ours]: the
//! door binds it, and callers and the launcher dial it and check who serves it before they send
//! a token or a task.
//!
//! Why: a TCP port on 127.0.0.1 belongs to whoever binds it next once its member exits, and a
//! caller that dialled `localhost:<port>` would hand that process its bearer token and its task.
//! A Unix socket in a 0700 directory cannot be reached or replaced by another user, and the
//! kernel names the process serving it (`SO_PEERCRED`). Invariant: **a connection from [`dial`]
//! is served by exactly the process the launcher vouched for** (same user, same pid, same start
//! token), or it is refused before a byte is written.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use crate::channel::DoorIdentity;
use crate::procinfo;

/// `sun_path` holds 108 bytes with its NUL; a longer path is reached through its directory.
const SUN_PATH_MAX: usize = 107;

/// Runs `f` with a path to `path` short enough for a socket address: `path` itself, or
/// `/proc/self/fd/<dir>/<name>` through a descriptor of its directory held for the call.
fn short<T>(path: &Path, f: impl FnOnce(&Path) -> io::Result<T>) -> io::Result<T> {
    if path.as_os_str().len() <= SUN_PATH_MAX {
        return f(path);
    }
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the socket path has no directory",
        ));
    };
    let dir = std::fs::File::open(dir)?;
    let via = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name);
    if via.as_os_str().len() > SUN_PATH_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the socket's name is too long",
        ));
    }
    let out = f(&via);
    drop(dir);
    out
}

/// Binds the door's socket at `path`, owner-only. A socket left at that path (by nothing else
/// than a door: the directory is the user's alone) is replaced; any other file is refused.
pub fn bind(path: &Path) -> io::Result<UnixListener> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path)?,
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = short(path, |p| UnixListener::bind(p))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// The directory peers' sockets live in, when it is fit for them: a real directory owned by
/// this user that nobody else may enter. `None` otherwise (a member not launched by a launcher
/// of ours serves TCP only, as before).
pub fn usable_dir(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(dir)
        .is_ok_and(|m| m.is_dir() && m.uid() == nix::unistd::geteuid().as_raw() && m.mode() & 0o077 == 0)
}

/// Connects to the door `door` names and checks who serves it (see [`verify`]).
pub async fn dial(door: &DoorIdentity) -> io::Result<tokio::net::UnixStream> {
    let path = Path::new(&door.socket);
    let stream = if path.as_os_str().len() <= SUN_PATH_MAX {
        tokio::net::UnixStream::connect(path).await?
    } else {
        // The blocking connect of a Unix socket returns at once (or EAGAIN on a full backlog,
        // which is an error like any other here).
        let std_stream = short(path, |p| std::os::unix::net::UnixStream::connect(p))?;
        std_stream.set_nonblocking(true)?;
        tokio::net::UnixStream::from_std(std_stream)?
    };
    verify(&stream, door)?;
    Ok(stream)
}

fn gone(door: &DoorIdentity) -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionRefused,
        format!("the member's process ({}) has ended", door.pid),
    )
}

/// The connection is served by the process `door` names: this user, that pid, and (when the
/// launcher could read it) that process's start token, so a pid reused since is not it.
pub fn verify(stream: &tokio::net::UnixStream, door: &DoorIdentity) -> io::Result<()> {
    let cred = stream.peer_cred()?;
    let me = nix::unistd::geteuid().as_raw();
    if cred.uid() != me {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("the door's socket is served by user {}, not by this user", cred.uid()),
        ));
    }
    let pid = cred.pid().and_then(|p| u32::try_from(p).ok());
    if pid != Some(door.pid) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "the door's socket is served by process {}, not by the member's process {}",
                pid.map_or("unknown".into(), |p| p.to_string()),
                door.pid
            ),
        ));
    }
    if !door.start.is_empty() && procinfo::process_start(door.pid).as_deref() != Some(door.start.as_str()) {
        return Err(gone(door));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(socket: &Path, pid: u32) -> DoorIdentity {
        DoorIdentity {
            socket: socket.display().to_string(),
            pid,
            start: procinfo::process_start(pid).unwrap_or_default(),
        }
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn a_door_served_by_the_vouched_process_is_reached_and_any_other_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("coder.sock");
        let listener = bind(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        rt().block_on(async {
            listener.set_nonblocking(true).unwrap();
            let _l = tokio::net::UnixListener::from_std(listener).unwrap();
            // This process serves it: reached.
            dial(&identity(&path, std::process::id())).await.unwrap();
            // Vouched for another process (say, the member that exited): refused.
            let parent = std::os::unix::process::parent_id();
            let e = dial(&identity(&path, parent)).await.unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
            assert!(e.to_string().contains("not by the member's process"), "{e}");
            // A pid whose start token is not the vouched one: that process has ended.
            let mut stale = identity(&path, std::process::id());
            stale.start = "1".into();
            let e = dial(&stale).await.unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
        });
    }

    #[test]
    fn long_paths_are_bound_and_dialled_through_their_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("d".repeat(120));
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join("a-member-name-of-thirty-two-chars.sock");
        assert!(path.as_os_str().len() > SUN_PATH_MAX);
        let listener = bind(&path).unwrap();
        rt().block_on(async {
            listener.set_nonblocking(true).unwrap();
            let _l = tokio::net::UnixListener::from_std(listener).unwrap();
            dial(&identity(&path, std::process::id())).await.unwrap();
        });
        // A second bind replaces the socket left there; a file that is no socket is refused.
        drop(bind(&path).unwrap());
        let file = tmp.path().join("plain");
        std::fs::write(&file, "x").unwrap();
        assert_eq!(bind(&file).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
    }

    #[test]
    fn only_an_owner_only_directory_is_used() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("doors");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(usable_dir(&dir));
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(!usable_dir(&dir));
        assert!(!usable_dir(&tmp.path().join("absent")));
    }
}
