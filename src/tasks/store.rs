//! A peer's task store [ours] (docs/reference/formation.md#tasks-across-a-restart): every task of
//! its door, kept in an SQLite database in the member's records group, so a restarted process of
//! the same member answers for the tasks the one before it took.
//!
//! The board is its only writer, under the board's own lock, so the store's rows follow the
//! board's changes in order: a task's offer and first snapshot are committed before the door
//! acknowledges it, and each later change of the task rewrites its snapshot. SQLite runs in WAL
//! mode with `synchronous=NORMAL`: a commit is in the operating system's hands when it returns
//! (it survives the process's death, a SIGKILL or an out-of-memory kill, the faults a restart
//! answers), without an `fsync` per task; a machine's crash may lose the newest commits, which no
//! restart could serve anyway. The connection holds the database's lock exclusively for the
//! process's life, so two processes of one member never share it, and no `-shm` file is made.
//!
//! Bounded: the database may grow to [`MAX_STORE_BYTES`]; a task's offer is dropped once it ends,
//! and the board forgets ended tasks past its retention here as it does in memory. A task the
//! store cannot take is refused (E-RST-003), never acknowledged unkept.

use std::fs::{DirBuilder, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OpenFlags, params};
use serde::{Deserialize, Serialize};

use super::types::{HistoryMessage, HistoryText, Role, TaskSnapshot};
use crate::task::{NoAnswerBelow, Origin, TaskState, Trust};

/// Status text of a task refused because the store could not keep it (E-RST-003).
pub const REJECT_UNKEPT: &str = "task rejected: the member's task store cannot keep it (E-RST-003)";
/// The most a task store's database may hold, in bytes.
pub const MAX_STORE_BYTES: u64 = 64 * 1024 * 1024;
/// The most one kept row may hold: a snapshot or an offer larger than this is not read back.
const MAX_ROW_BYTES: usize = 8 * 1024 * 1024;
/// The database's page size; [`MAX_STORE_BYTES`] is a whole number of pages.
const PAGE_BYTES: u64 = 4096;

/// What a task came with, kept until it ends: what a restarted process needs to run it.
#[derive(Debug, Clone, PartialEq)]
pub struct Offer {
    /// The caller's message: kept once, as the history's first message.
    pub text: Arc<str>,
    pub traceparent: Option<String>,
    pub grant: Option<Arc<crate::grant::Grant>>,
    pub limits: Option<crate::wire::limits::Limits>,
}

/// A task as the store gave it back: its last snapshot, its creation order, and its offer while
/// it had not ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Kept {
    pub snap: TaskSnapshot,
    pub created: u64,
    pub offer: Option<Offer>,
}

/// One member's task store. Not `Sync`: the board keeps it under its state lock.
pub struct TaskStore {
    conn: Connection,
}

impl std::fmt::Debug for TaskStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TaskStore")
    }
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tasks (id TEXT PRIMARY KEY, created INTEGER NOT NULL, snap BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS offers (id TEXT PRIMARY KEY, offer BLOB NOT NULL) WITHOUT ROWID;
";

impl TaskStore {
    /// Opens (or makes) the store at `path` and reads back every task it keeps, oldest first.
    /// The directory is made owner-only and the file 0600; a file that is not this user's own
    /// regular file is refused, as is a store another process holds.
    pub fn open(path: &Path) -> Result<(TaskStore, Vec<Kept>), String> {
        TaskStore::open_within(path, MAX_STORE_BYTES)
    }

    /// As [`TaskStore::open`], the database held to `max_bytes` (tests fill a small one).
    pub fn open_within(path: &Path, max_bytes: u64) -> Result<(TaskStore, Vec<Kept>), String> {
        let shown = path.display();
        if let Some(dir) = path.parent() {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("the task store's directory {} cannot be made: {e}", dir.display()))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(|e| {
                format!(
                    "the task store's directory {} cannot be made owner-only: {e}",
                    dir.display()
                )
            })?;
        }
        // Made here, 0600 and never through a link, before SQLite opens it: SQLite gives its WAL
        // the database file's mode.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| format!("the task store {shown} cannot be opened: {e}"))?;
        let meta = file.metadata().map_err(|e| format!("the task store {shown}: {e}"))?;
        if !meta.is_file() || meta.uid() != nix::unistd::geteuid().as_raw() || meta.mode() & 0o077 != 0 {
            return Err(format!(
                "the task store {shown} is not this user's owner-only file; remove it and start again"
            ));
        }
        if meta.len() > max_bytes + PAGE_BYTES {
            return Err(format!("the task store {shown} is larger than {max_bytes} bytes"));
        }
        drop(file);
        let flags =
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_NOFOLLOW;
        let conn = Connection::open_with_flags(path, flags).map_err(|e| format!("the task store {shown}: {e}"))?;
        let pragmas = format!(
            "PRAGMA locking_mode = EXCLUSIVE;
             PRAGMA page_size = {PAGE_BYTES};
             PRAGMA journal_mode = WAL;
             PRAGMA synchronous = NORMAL;
             PRAGMA journal_size_limit = 4194304;
             PRAGMA max_page_count = {};
             PRAGMA trusted_schema = OFF;",
            (max_bytes / PAGE_BYTES).max(8)
        );
        conn.execute_batch(&pragmas)
            .and_then(|()| conn.execute_batch(SCHEMA))
            .map_err(|e| {
                format!("the task store {shown} cannot be used (another process of this member may hold it): {e}")
            })?;
        // The durability above rests on WAL; a file system that cannot give it is refused.
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .map_err(|e| format!("the task store {shown}: {e}"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(format!(
                "the task store {shown} cannot keep a write-ahead log (journal mode {mode})"
            ));
        }
        let store = TaskStore { conn };
        let kept = store
            .read_all()
            .map_err(|e| format!("the task store {shown} cannot be read: {e}"))?;
        Ok((store, kept))
    }

    fn read_all(&self) -> rusqlite::Result<Vec<Kept>> {
        let mut stmt = self.conn.prepare(
            "SELECT t.created, t.snap, o.offer FROM tasks t LEFT JOIN offers o ON o.id = t.id ORDER BY t.created",
        )?;
        let rows = stmt.query_map([], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, Vec<u8>>(1)?,
                row.get::<_, Option<Vec<u8>>>(2)?,
            ))
        })?;
        let mut kept = Vec::new();
        for row in rows {
            let (created, snap, offer) = row?;
            // A row that does not read back (written by a newer mur, or damaged) is passed over:
            // its task is unknown to this process, as a forgotten one is.
            let Some(snap) = read_snap(&snap) else { continue };
            let offer = offer.as_deref().and_then(|o| read_offer(o, &snap));
            kept.push(Kept {
                snap,
                created: u64::try_from(created).unwrap_or(0),
                offer,
            });
        }
        Ok(kept)
    }

    /// Keeps a task just admitted: its offer and its first snapshot, in one commit.
    pub fn admit(&mut self, snap: &TaskSnapshot, created: u64, offer: &Offer) -> Result<(), String> {
        let tx = self.conn.transaction().map_err(|e| e.to_string())?;
        tx.execute(
            "INSERT OR REPLACE INTO tasks (id, created, snap) VALUES (?1, ?2, ?3)",
            params![snap.id, i64::try_from(created).unwrap_or(i64::MAX), write_snap(snap)],
        )
        .map_err(|e| e.to_string())?;
        tx.execute(
            "INSERT OR REPLACE INTO offers (id, offer) VALUES (?1, ?2)",
            params![snap.id, write_offer(offer)],
        )
        .map_err(|e| e.to_string())?;
        tx.commit().map_err(|e| e.to_string())
    }

    /// Keeps the snapshots of tasks that changed, and forgets the offers of those that ended and
    /// the tasks `forgotten` names, in one commit.
    pub fn update<'a>(
        &mut self,
        changed: impl IntoIterator<Item = (&'a TaskSnapshot, u64)>,
        forgotten: &[String],
    ) -> Result<(), String> {
        let tx = self.conn.transaction().map_err(|e| e.to_string())?;
        for (snap, created) in changed {
            tx.execute(
                "INSERT OR REPLACE INTO tasks (id, created, snap) VALUES (?1, ?2, ?3)",
                params![snap.id, i64::try_from(created).unwrap_or(i64::MAX), write_snap(snap)],
            )
            .map_err(|e| e.to_string())?;
            if snap.state.is_terminal() {
                tx.execute("DELETE FROM offers WHERE id = ?1", params![snap.id])
                    .map_err(|e| e.to_string())?;
            }
        }
        for id in forgotten {
            tx.execute("DELETE FROM tasks WHERE id = ?1", params![id])
                .map_err(|e| e.to_string())?;
            tx.execute("DELETE FROM offers WHERE id = ?1", params![id])
                .map_err(|e| e.to_string())?;
        }
        tx.commit().map_err(|e| e.to_string())
    }
}

#[cfg(test)]
impl TaskStore {
    /// Lets the database grow to `max_bytes`: a full disk given room.
    pub(crate) fn allow(&self, max_bytes: u64) {
        let _ = self
            .conn
            .execute_batch(&format!("PRAGMA max_page_count = {};", max_bytes / PAGE_BYTES));
    }
}

/// The kept form of a snapshot: plain JSON, the states and classes by their names.
#[derive(Serialize, Deserialize)]
struct SnapRow {
    id: String,
    context_id: String,
    state: String,
    timestamp_ms: i64,
    status_text: Option<String>,
    status_message_id: Option<String>,
    answer: Option<String>,
    no_answer_below: Option<Vec<(String, String)>>,
    owner: Option<String>,
    trusted: bool,
    origin: String,
    changed: u64,
    /// `(agent?, message id, own text or none for the answer)`.
    history: Vec<(bool, String, Option<String>)>,
    asked_by: Vec<String>,
    /// input, output, turns, tool calls, wall ms.
    cost: Option<[u64; 5]>,
}

#[derive(Serialize, Deserialize)]
struct OfferRow {
    traceparent: Option<String>,
    /// The grant's kept payload (`Grant::kept`), as text.
    grant: Option<String>,
    deadline_ms: Option<u64>,
    budget: Option<u64>,
    limits: bool,
}

fn write_snap(s: &TaskSnapshot) -> Vec<u8> {
    let row = SnapRow {
        id: s.id.clone(),
        context_id: s.context_id.clone(),
        state: s.state.wire().to_string(),
        timestamp_ms: s.timestamp.timestamp_millis(),
        status_text: s.status_text.clone(),
        status_message_id: s.status_message_id.clone(),
        answer: s.answer.clone(),
        no_answer_below: s
            .no_answer_below
            .as_ref()
            .map(|b| b.iter().map(|b| (b.member.clone(), b.status.clone())).collect()),
        owner: s.owner.clone(),
        trusted: s.trust == Trust::Trusted,
        origin: s.origin.as_str().to_string(),
        changed: s.changed,
        history: s
            .history
            .iter()
            .map(|m| {
                let text = match &m.text {
                    HistoryText::Own(t) => Some(t.to_string()),
                    HistoryText::Answer => None,
                };
                (m.role == Role::Agent, m.message_id.clone(), text)
            })
            .collect(),
        asked_by: s.asked_by.clone(),
        cost: s
            .cost
            .as_ref()
            .map(|c| [c.input_tokens, c.output_tokens, c.model_turns, c.tool_calls, c.wall_ms]),
    };
    serde_json::to_vec(&row).unwrap_or_default()
}

fn read_snap(bytes: &[u8]) -> Option<TaskSnapshot> {
    if bytes.len() > MAX_ROW_BYTES {
        return None;
    }
    let r: SnapRow = serde_json::from_slice(bytes).ok()?;
    let origin = [Origin::Event, Origin::Peer, Origin::Completion, Origin::Local]
        .into_iter()
        .find(|o| o.as_str() == r.origin)?;
    Some(TaskSnapshot {
        id: r.id,
        context_id: r.context_id,
        state: TaskState::from_wire(&r.state)?,
        timestamp: DateTime::<Utc>::from_timestamp_millis(r.timestamp_ms)?,
        status_text: r.status_text,
        status_message_id: r.status_message_id,
        answer: r.answer,
        no_answer_below: r.no_answer_below.map(|b| {
            b.into_iter()
                .map(|(member, status)| NoAnswerBelow { member, status })
                .collect()
        }),
        owner: r.owner,
        trust: if r.trusted { Trust::Trusted } else { Trust::Untrusted },
        origin,
        changed: r.changed,
        history: r
            .history
            .into_iter()
            .map(|(agent, message_id, text)| HistoryMessage {
                role: if agent { Role::Agent } else { Role::User },
                message_id,
                text: text.map_or(HistoryText::Answer, |t| HistoryText::Own(Arc::from(t))),
            })
            .collect(),
        asked_by: r.asked_by,
        cost: r.cost.map(|[i, o, t, c, w]| {
            Box::new(crate::cost::Cost {
                input_tokens: i,
                output_tokens: o,
                model_turns: t,
                tool_calls: c,
                wall_ms: w,
            })
        }),
    })
}

fn write_offer(o: &Offer) -> Vec<u8> {
    let row = OfferRow {
        traceparent: o.traceparent.clone(),
        grant: o
            .grant
            .as_ref()
            .map(|g| String::from_utf8_lossy(&g.kept()).into_owned()),
        deadline_ms: o.limits.and_then(|l| l.deadline_ms),
        budget: o.limits.and_then(|l| l.budget),
        limits: o.limits.is_some(),
    };
    serde_json::to_vec(&row).unwrap_or_default()
}

fn read_offer(bytes: &[u8], snap: &TaskSnapshot) -> Option<Offer> {
    if bytes.len() > MAX_ROW_BYTES {
        return None;
    }
    let r: OfferRow = serde_json::from_slice(bytes).ok()?;
    let grant = match r.grant {
        Some(g) => Some(Arc::new(crate::grant::Grant::from_kept(g.as_bytes())?)),
        None => None,
    };
    let text = match &snap.history.first()?.text {
        HistoryText::Own(t) if snap.history[0].role == Role::User => Arc::clone(t),
        _ => return None,
    };
    Some(Offer {
        text,
        traceparent: r.traceparent,
        grant,
        limits: r.limits.then_some(crate::wire::limits::Limits {
            deadline_ms: r.deadline_ms,
            budget: r.budget,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(id: &str, state: TaskState) -> TaskSnapshot {
        TaskSnapshot {
            id: id.to_string(),
            context_id: "ctx_1".into(),
            state,
            timestamp: DateTime::<Utc>::from_timestamp_millis(1_700_000_000_123).expect("time"),
            status_text: Some("a note".into()),
            status_message_id: Some("msg_2".into()),
            answer: (state == TaskState::Completed).then(|| "the answer".into()),
            no_answer_below: Some(vec![NoAnswerBelow {
                member: "worker".into(),
                status: "failed".into(),
            }]),
            owner: Some("member:lead".into()),
            trust: Trust::Untrusted,
            origin: Origin::Peer,
            changed: 7,
            history: vec![
                HistoryMessage {
                    role: Role::User,
                    message_id: "msg_1".into(),
                    text: HistoryText::Own(Arc::from("do it")),
                },
                HistoryMessage {
                    role: Role::Agent,
                    message_id: "msg_3".into(),
                    text: HistoryText::Answer,
                },
            ],
            asked_by: vec!["worker".into()],
            cost: Some(Box::new(crate::cost::Cost {
                input_tokens: 1,
                output_tokens: 2,
                model_turns: 3,
                tool_calls: 4,
                wall_ms: 5,
            })),
        }
    }

    fn offer() -> Offer {
        Offer {
            text: Arc::from("do it"),
            traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into()),
            grant: None,
            limits: Some(crate::wire::limits::Limits {
                deadline_ms: Some(9),
                budget: None,
            }),
        }
    }

    #[test]
    fn a_task_reads_back_as_it_was_kept_and_its_offer_goes_when_it_ends() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("group/tasks.db");
        {
            let (mut store, kept) = TaskStore::open(&path).expect("opens");
            assert!(kept.is_empty());
            store
                .admit(&snap("tsk_a", TaskState::Submitted), 1, &offer())
                .expect("admits");
            store
                .admit(&snap("tsk_b", TaskState::Submitted), 2, &offer())
                .expect("admits");
            let done = snap("tsk_a", TaskState::Completed);
            store.update([(&done, 1)], &[]).expect("updates");
        }
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().expect("dir")), 0o700);
        let (mut store, kept) = TaskStore::open(&path).expect("opens again");
        assert_eq!(kept.len(), 2);
        assert_eq!(kept[0].snap, snap("tsk_a", TaskState::Completed));
        assert_eq!(kept[0].offer, None, "an ended task's offer is not kept");
        assert_eq!(kept[1].snap, snap("tsk_b", TaskState::Submitted));
        assert_eq!(kept[1].offer, Some(offer()));
        assert_eq!((kept[0].created, kept[1].created), (1, 2));
        store.update([], &["tsk_a".to_string()]).expect("forgets");
        drop(store);
        let (_, kept) = TaskStore::open(&path).expect("opens a third time");
        assert_eq!(kept.iter().map(|k| k.snap.id.as_str()).collect::<Vec<_>>(), ["tsk_b"]);
    }

    #[test]
    fn a_store_another_process_holds_or_a_foreign_file_is_refused() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("tasks.db");
        let (mut held, _) = TaskStore::open(&path).expect("opens");
        held.admit(&snap("tsk_a", TaskState::Submitted), 1, &offer())
            .expect("admits");
        let second = TaskStore::open(&path).map(|_| ()).expect_err("the lock is exclusive");
        assert!(second.contains("cannot be used"), "{second}");
        drop(held);

        let link = dir.path().join("link.db");
        std::os::unix::fs::symlink(&path, &link).expect("link");
        assert!(TaskStore::open(&link).is_err(), "a link is not followed");

        let open = dir.path().join("open.db");
        std::fs::write(&open, b"").expect("file");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let why = TaskStore::open(&open).map(|_| ()).expect_err("not owner-only");
        assert!(why.contains("owner-only"), "{why}");
    }

    #[test]
    fn a_damaged_row_is_passed_over() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("tasks.db");
        {
            let (mut store, _) = TaskStore::open(&path).expect("opens");
            store
                .admit(&snap("tsk_a", TaskState::Submitted), 1, &offer())
                .expect("admits");
            store
                .conn
                .execute("INSERT INTO tasks (id, created, snap) VALUES ('tsk_x', 0, x'7b7d')", [])
                .expect("a damaged row");
        }
        let (_, kept) = TaskStore::open(&path).expect("opens");
        assert_eq!(kept.iter().map(|k| k.snap.id.as_str()).collect::<Vec<_>>(), ["tsk_a"]);
    }
}
