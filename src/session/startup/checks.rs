//! Steps 1–4 of docs/reference/formation.md#member-intake, each testable alone:
//! `MURMUR_FORMATION_ID` (E-RUN-044), `MURMUR_FORMATION_PEERS` (E-RUN-046), the lifeline
//! (E-RUN-046) and W-RUN-007; W-RUN-008, said once the session is staged; and the work folder and
//! `--task` text (E-RUN-012). Nothing here touches the stores or the capsule.

use std::ffi::OsStr;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::fcntl::{FcntlArg, FdFlag, fcntl};
use nix::sys::stat::{SFlag, fstat};

use crate::diag::{self, Diagnostic};
use crate::ids::{self, IdKind};

/// Step 1: a blank `MURMUR_FORMATION_ID` is none; anything else must be a formation id.
pub fn formation_id(raw: Option<&OsStr>) -> Result<Option<String>, Diagnostic> {
    let Some(raw) = raw else { return Ok(None) };
    let Some(text) = raw.to_str() else {
        return Err(Diagnostic::new(
            diag::E_RUN_044,
            "MURMUR_FORMATION_ID is set to a value that is not UTF-8 text, so it is not a formation id",
        ));
    };
    if text.trim().is_empty() {
        return Ok(None);
    }
    ids::check(IdKind::Formation, text).map_err(|why| {
        Diagnostic::new(
            diag::E_RUN_044,
            format!("MURMUR_FORMATION_ID is set to '{text}', which is not a formation id: {why}"),
        )
    })?;
    Ok(Some(text.to_string()))
}

/// Step 2: `MURMUR_FORMATION_PEERS` belongs to the runtime; set in its own environment, the
/// launch is refused.
pub fn refuse_peers_env(present: bool) -> Result<(), Diagnostic> {
    if !present {
        return Ok(());
    }
    Err(Diagnostic::new(
        diag::E_RUN_046,
        "MURMUR_FORMATION_PEERS is set in this process's environment, but only the runtime sets it, and only inside a member's components, so the launch is refused",
    )
    .with_hint("unset MURMUR_FORMATION_PEERS; the members a capsule may call come from its formation channel"))
}

/// A descriptor number handed over in the environment: decimal digits, at least 3.
pub fn parse_fd(raw: &OsStr) -> Result<RawFd, String> {
    let text = raw.to_str().unwrap_or("");
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("'{}' is not a descriptor number", raw.to_string_lossy()));
    }
    let fd: RawFd = text.parse().map_err(|_| format!("descriptor {text} is out of range"))?;
    if fd <= 2 {
        return Err(format!("descriptor {fd} is a standard stream"));
    }
    Ok(fd)
}

fn lifeline_refusal(reason: &str) -> Diagnostic {
    Diagnostic::new(
        diag::E_RUN_046,
        format!("MURMUR_FORMATION_LIFELINE does not name this member's lifeline: {reason}, so the launch is refused"),
    )
    .with_hint(
        "MURMUR_FORMATION_LIFELINE is set by `mur run --roster` for its members; unset it to run a capsule on its own",
    )
}

/// Step 3, the lifeline (docs/reference/formation.md#lifelines): a decimal descriptor ≥ 3 that is
/// open and a FIFO, in a process that belongs to a formation, and not the channel's descriptor
/// (which is read already). It is made close-on-exec at once and owned from then on.
pub fn take_lifeline(
    raw: &OsStr,
    formation_id: Option<&str>,
    channel_fd: Option<RawFd>,
) -> Result<OwnedFd, Diagnostic> {
    if formation_id.is_none() {
        return Err(lifeline_refusal("it is set, but MURMUR_FORMATION_ID is not"));
    }
    let fd = parse_fd(raw).map_err(|r| lifeline_refusal(&r))?;
    if channel_fd == Some(fd) {
        return Err(lifeline_refusal(&format!(
            "descriptor {fd} is the formation channel, which is read already"
        )));
    }
    let st = fstat(fd).map_err(|_| lifeline_refusal(&format!("descriptor {fd} is not open")))?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFIFO {
        return Err(lifeline_refusal(&format!("descriptor {fd} is not a pipe")));
    }
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
        .map_err(|e| lifeline_refusal(&format!("descriptor {fd} cannot be made close-on-exec ({e})")))?;
    // SAFETY: `fd` is open (fstat succeeded), is not a standard stream or the channel's
    // descriptor, and nothing else in this process claims it: the launcher handed it to us alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Step 4: W-RUN-007, a formation member with no lifeline.
pub fn no_lifeline_warning(formation_id: &str) -> Diagnostic {
    Diagnostic::new(
        diag::W_RUN_007,
        format!(
            "this session is a member of formation {formation_id} but was handed no lifeline, so it will not wind down when that formation ends; end it with `mur stop` (`mur explain W-RUN-007`)"
        ),
    )
}

/// docs/reference/capsules.md#what-the-host-grants: W-RUN-008, a member with callees whose network
/// grant reaches no loopback door.
pub fn unreachable_callees_warning(member: &str, callees: &[String], network_allow: &[String]) -> Option<Diagnostic> {
    if callees.is_empty() || crate::address::allow::AllowList::parse(network_allow).reaches_loopback_door() {
        return None;
    }
    let names: Vec<String> = callees.iter().map(|c| format!("'{c}'")).collect();
    Some(Diagnostic::new(
        diag::W_RUN_008,
        format!(
            "roster.yaml lets '{member}' call {}, but its capabilities.network.allow reaches no loopback http door at an unpinned port, so every call-member call will be refused; declare \"localhost\" (`mur explain W-RUN-008`)",
            names.join(", ")
        ),
    ))
}

fn staging(msg: String) -> Diagnostic {
    Diagnostic::new(diag::E_RUN_012, msg)
}

/// `--workdir` (default: the current directory), made canonical: it names the records group.
pub fn workdir(arg: Option<&Path>) -> Result<PathBuf, Diagnostic> {
    let raw = match arg {
        Some(p) => p.to_path_buf(),
        None => std::env::current_dir().map_err(|e| staging(format!("the current directory cannot be read: {e}")))?,
    };
    let canon = raw
        .canonicalize()
        .map_err(|e| staging(format!("the work folder {} cannot be used: {e}", raw.display())))?;
    if !canon.is_dir() {
        return Err(staging(format!("the work folder {} is not a directory", raw.display())));
    }
    Ok(canon)
}

/// `--task T`: the contents of `T` when it names an existing file relative to `cwd`, else `T`.
pub fn task_text(arg: &str, cwd: &Path) -> Result<String, Diagnostic> {
    read_task(arg, cwd).map_err(staging)
}

/// The rule of `--task T` with its failure as text, for a member (E-RUN-012) and for `mur
/// deploy`, which reads the entry's task as the member would and hands the pod the text.
pub fn read_task(arg: &str, cwd: &Path) -> Result<String, String> {
    let path = cwd.join(arg);
    if !arg.is_empty() && path.is_file() {
        return std::fs::read_to_string(&path)
            .map_err(|e| format!("the --task file {} cannot be read as text: {e}", path.display()));
    }
    Ok(arg.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    #[test]
    fn formation_id_from_env() {
        let ok = "frm_0199c4e2f1b7712a9d3e4f5061728394";
        assert_eq!(formation_id(None), Ok(None));
        assert_eq!(formation_id(Some(OsStr::new("  "))), Ok(None));
        assert_eq!(formation_id(Some(OsStr::new(ok))), Ok(Some(ok.to_string())));
        let table = [
            (
                "frm_1",
                "MURMUR_FORMATION_ID is set to 'frm_1', which is not a formation id: it needs exactly 32 hex digits after `frm_`, found 1",
            ),
            (
                "ses_0199c4e2f1b7712a9d3e4f5061728394",
                "MURMUR_FORMATION_ID is set to 'ses_0199c4e2f1b7712a9d3e4f5061728394', which is not a formation id: it does not start with `frm_`",
            ),
        ];
        for (raw, msg) in table {
            let d = formation_id(Some(OsStr::new(raw))).unwrap_err();
            assert_eq!((d.code.id, d.message.as_str()), ("E-RUN-044", msg));
        }
    }

    #[test]
    fn peers_in_env_is_refused() {
        assert!(refuse_peers_env(false).is_ok());
        assert_eq!(refuse_peers_env(true).unwrap_err().code.id, "E-RUN-046");
    }

    #[test]
    fn descriptor_numbers() {
        assert_eq!(parse_fd(OsStr::new("7")), Ok(7));
        let table = [
            ("", "'' is not a descriptor number"),
            ("-3", "'-3' is not a descriptor number"),
            ("x", "'x' is not a descriptor number"),
            ("2", "descriptor 2 is a standard stream"),
            ("99999999999", "descriptor 99999999999 is out of range"),
        ];
        for (raw, why) in table {
            assert_eq!(parse_fd(OsStr::new(raw)), Err(why.to_string()), "{raw:?}");
        }
    }

    #[test]
    fn lifeline_checks() {
        let frm = Some("frm_0199c4e2f1b7712a9d3e4f5061728394");
        let msg = |raw: OsString, f: Option<&str>, ch: Option<RawFd>| {
            take_lifeline(&raw, f, ch).map(drop).unwrap_err().message
        };
        assert_eq!(
            msg("5".into(), None, None),
            "MURMUR_FORMATION_LIFELINE does not name this member's lifeline: it is set, but MURMUR_FORMATION_ID is not, so the launch is refused"
        );
        // A closed descriptor, a regular file, and the channel's own descriptor are refused.
        assert!(msg("987".into(), frm, None).contains("descriptor 987 is not open"));
        let file = tempfile::tempfile().unwrap();
        let raw = std::os::fd::AsRawFd::as_raw_fd(&file);
        assert!(msg(raw.to_string().into(), frm, None).contains(&format!("descriptor {raw} is not a pipe")));
        let (r, _w) = nix::unistd::pipe().unwrap();
        let raw = std::os::fd::IntoRawFd::into_raw_fd(r);
        assert!(msg(raw.to_string().into(), frm, Some(raw)).contains("is the formation channel"));
        let owned = take_lifeline(OsStr::new(&raw.to_string()), frm, None).unwrap();
        let flags = fcntl(std::os::fd::AsRawFd::as_raw_fd(&owned), FcntlArg::F_GETFD).unwrap();
        assert!(FdFlag::from_bits_truncate(flags).contains(FdFlag::FD_CLOEXEC));
    }

    #[test]
    fn warnings_007_and_008() {
        let w = no_lifeline_warning("frm_0199c4e2f1b7712a9d3e4f5061728394");
        assert_eq!(
            w.render("[capsule-runtime] "),
            "[capsule-runtime] warning[W-RUN-007]: this session is a member of formation frm_0199c4e2f1b7712a9d3e4f5061728394 but was handed no lifeline, so it will not wind down when that formation ends; end it with `mur stop` (`mur explain W-RUN-007`)"
        );
        let callees = vec!["a".to_string(), "b".to_string()];
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(unreachable_callees_warning("m", &[], &[]).is_none());
        assert!(unreachable_callees_warning("m", &callees, &s(&["localhost"])).is_none());
        assert!(unreachable_callees_warning("m", &callees, &s(&["http://localhost"])).is_none());
        for grant in [
            &[][..],
            &["127.0.0.1"][..],
            &["localhost:8080"][..],
            &["https://localhost"][..],
        ] {
            let d = unreachable_callees_warning("m", &callees, &s(grant)).expect("warns");
            assert_eq!(
                d.render("[capsule-runtime] "),
                "[capsule-runtime] warning[W-RUN-008]: roster.yaml lets 'm' call 'a', 'b', but its capabilities.network.allow reaches no loopback http door at an unpinned port, so every call-member call will be refused; declare \"localhost\" (`mur explain W-RUN-008`)"
            );
        }
    }

    #[test]
    fn task_from_text_or_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("t.md"), "from a file").unwrap();
        assert_eq!(task_text("t.md", dir.path()).unwrap(), "from a file");
        assert_eq!(task_text("say hi", dir.path()).unwrap(), "say hi");
        assert_eq!(
            task_text(".", dir.path()).unwrap(),
            ".",
            "a directory is not a task file"
        );
    }
}
