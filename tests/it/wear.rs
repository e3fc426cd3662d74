//! No door can be worn down (docs/reliability.md): a connection's every request head has a
//! deadline, not only its first; a reply nobody reads is dropped once it makes no progress, with
//! what it pins; and a door under a low descriptor limit keeps room for its operator.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::door::{AUTH, Door, install, serve};
use crate::support::{Sandbox, wait_until};

const CARD: &[u8] = b"GET /.well-known/agent-card.json HTTP/1.1\r\nhost: localhost\r\n\r\n";

/// Sends one whole keep-alive request for the card and reads its whole reply.
fn first_request(addr: &str) -> TcpStream {
    first_request_of(addr, CARD)
}

/// Sends one whole keep-alive `request` and reads its whole reply (by its content-length).
pub(crate) fn first_request_of(addr: &str, request: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    s.write_all(request).expect("first request");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).expect("first reply");
        assert!(n > 0, "the door closed before its first reply");
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got);
        if let Some(end) = text.find("\r\n\r\n") {
            let len: usize = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap_or(0))
                })
                .expect("content-length");
            if got.len() >= end + 4 + len {
                return s;
            }
        }
    }
}

/// Reads until the server closes the connection; `None` if it is still open after `limit`.
pub(crate) fn closed_within(s: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(100))).expect("timeout");
    let mut buf = [0u8; 1024];
    while start.elapsed() < limit {
        match s.read(&mut buf) {
            Ok(0) => return Some(start.elapsed()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return Some(start.elapsed()),
        }
    }
    None
}

/// How often [`serve_until_closed`] serves the operator.
const SERVE_EVERY: Duration = Duration::from_millis(100);

/// Serves the operator (`serve`, which asserts that it was) again and again until the door closes
/// `held`, so the operator is shown served all the while another client holds a connection;
/// returns how long `held` stayed open, or `None` if it still is after `limit`.
pub(crate) fn serve_until_closed(
    held: &mut TcpStream,
    limit: Duration,
    mut serve: impl FnMut(usize),
) -> Option<Duration> {
    let start = Instant::now();
    let mut served = 0;
    loop {
        serve(served);
        served += 1;
        if closed_within(held, SERVE_EVERY).is_some() {
            return Some(start.elapsed());
        }
        if start.elapsed() >= limit {
            return None;
        }
    }
}

#[test]
fn a_slow_and_a_stalled_second_request_head_are_closed_in_bounded_time() {
    let sb = Sandbox::new();
    install(&sb, "echo", "worn", &format!("{AUTH}{}", serve(4)));
    let d = Door::start(&sb, "worn", &[("MURMUR_TEST_TIMING", "door_head=2s")]);
    let addr = d.local_url().replacen("localhost", "127.0.0.1", 1);

    // A second head that stops half-way.
    let mut stalled = first_request(&addr);
    stalled
        .write_all(b"POST / HTTP/1.1\r\nhost: localhost\r\n")
        .expect("half a head");
    // A second head sent a byte at a time, never finished.
    let slow = {
        let addr = addr.clone();
        std::thread::spawn(move || {
            let mut s = first_request(&addr);
            let start = Instant::now();
            for b in b"POST / HTTP/1.1\r\nhost: localhost\r\nx-slow: ".iter().cycle() {
                if start.elapsed() > Duration::from_secs(20) || s.write_all(&[*b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
                let mut probe = [0u8; 1];
                s.set_nonblocking(true).expect("nonblocking");
                let eof = matches!(s.read(&mut probe), Ok(0));
                s.set_nonblocking(false).expect("blocking");
                if eof {
                    break;
                }
            }
            start.elapsed()
        })
    };
    // An idle keep-alive connection that sends nothing more.
    let mut idle = first_request(&addr);

    // The operator is served meanwhile, until the stalled head is cut off.
    let stalled_after = serve_until_closed(&mut stalled, Duration::from_secs(10), |i| {
        let h = d.call(Some(&d.op()), "ListTasks", json!({}));
        assert_eq!(h.status, 200, "operator request {i}: {}", h.body);
    })
    .expect("the stalled head is cut off");
    let idle_after = closed_within(&mut idle, Duration::from_secs(10)).expect("the idle connection is closed");
    let slow_after = slow.join().expect("slow writer");
    eprintln!("closed after: stalled {stalled_after:?}, idle {idle_after:?}, slow {slow_after:?}");
    assert!(
        slow_after < Duration::from_secs(6),
        "a head sent a byte at a time lasted {slow_after:?}"
    );
    let h = d.call(Some(&d.op()), "ListTasks", json!({}));
    assert_eq!(h.status, 200, "after the slow heads: {}", h.body);
}

#[test]
fn stalled_heads_under_a_low_descriptor_limit_do_not_lock_the_operator_out() {
    let sb = Sandbox::new();
    install(&sb, "echo", "worn", &format!("{AUTH}{}", serve(4)));
    let d = Door::start_with_nofile(&sb, "worn", &[("MURMUR_TEST_TIMING", "door_head=2s")], 256);
    let addr = d.local_url().replacen("localhost", "127.0.0.1", 1);
    // More connections than the limit leaves room for, each holding a half-sent second head.
    const HOLDERS: usize = 232;
    // Each holder counts itself once it holds its half head, or once the door turned it away.
    let settled = Arc::new(AtomicUsize::new(0));
    let holders: Vec<_> = (0..HOLDERS)
        .map(|_| {
            let addr = addr.clone();
            let settled = settled.clone();
            std::thread::spawn(move || {
                let hold = |s: Option<TcpStream>| {
                    settled.fetch_add(1, Ordering::AcqRel);
                    if let Some(mut s) = s {
                        // Held until the door lets go of it.
                        let _ = s.read(&mut [0u8; 64]);
                    }
                };
                let Ok(mut s) = TcpStream::connect(&addr) else {
                    return hold(None);
                };
                let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
                if s.write_all(CARD).is_err() {
                    return hold(None);
                }
                let mut buf = [0u8; 4096];
                if !matches!(s.read(&mut buf), Ok(n) if n > 0) {
                    return hold(None);
                }
                let _ = s.write_all(b"POST / HTTP/1.1\r\nhost: localhost\r\n");
                hold(Some(s));
            })
        })
        .collect();
    wait_until(Duration::from_secs(30), || settled.load(Ordering::Acquire) == HOLDERS)
        .expect("every holder holds its connection or was turned away");
    let started = Instant::now();
    let h = d.call(Some(&d.op()), "ListTasks", json!({}));
    let took = started.elapsed();
    assert_eq!(h.status, 200, "the operator was locked out: {}", h.body);
    eprintln!("the operator's request took {took:?} beside {HOLDERS} stalled connections");
    assert!(took < Duration::from_secs(15), "the operator waited {took:?}");
    for h in holders {
        let _ = h.join();
    }
    assert!(d.stderr().lines().all(|l| !l.contains("panicked")), "{}", d.stderr());
}

/// Open sockets of a process.
pub(crate) fn sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:")))
                .count()
        })
        .unwrap_or(0)
}

/// How much a member may grow per wave of replies nobody reads: about what one wave holds
/// (each reply carries its 4 MiB task twice, and the door buffers it) before the stall bound
/// drops it. Without the bound every wave stays, pinned, for good.
const WAVE_GROWTH_KIB: u64 = 160 * 1024;

#[test]
fn replies_nobody_reads_are_dropped_with_their_tasks_and_the_member_stays_bounded() {
    let sb = Sandbox::new();
    install(&sb, "echo", "worn", &format!("{AUTH}{}", serve(64)));
    let d = Door::start(&sb, "worn", &[("MURMUR_TEST_TIMING", "door_write_stall=2s")]);
    let addr = d.local_url().replacen("localhost", "127.0.0.1", 1);
    let op = d.op();
    let text = "x".repeat(4 << 20);
    let body = json!({"id": 1, "jsonrpc": "2.0", "method": "SendMessage", "params": {
        "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": text, "mediaType": "text/plain"}]},
    }})
    .to_string();
    let request = format!(
        "POST / HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\na2a-version: 1.0\r\nauthorization: {op}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let base_sockets = sockets(d.pid());
    let base = crate::hostile::rss_kib(u64::from(d.pid()));
    let mut after = Vec::new();
    for wave in 0..3 {
        // Ten clients send a large task and never read the reply.
        let conns: Vec<TcpStream> = (0..10)
            .map(|_| {
                let mut s = TcpStream::connect(&addr).expect("connect");
                s.write_all(request.as_bytes()).expect("send");
                s
            })
            .collect();
        // Their tasks are answered, none refused as busy: earlier waves' pins are gone.
        wait_until(Duration::from_secs(30), || {
            d.trace().iter().filter(|r| r["event_type"] == "task_end").count() >= 10 * (wave + 1)
        })
        .unwrap_or_else(|| panic!("wave {wave}: the tasks were not all answered"));
        let refused = d.trace().iter().filter(|r| r["event_type"] == "task_rejected").count();
        assert_eq!(refused, 0, "wave {wave}: tasks were refused");
        // The stalled replies are dropped: the door lets go of their connections.
        wait_until(Duration::from_secs(20), || sockets(d.pid()) <= base_sockets + 1)
            .unwrap_or_else(|| panic!("wave {wave}: the stalled replies' connections stay open"));
        drop(conns);
        after.push(crate::hostile::rss_kib(u64::from(d.pid())));
    }
    eprintln!("resident set: {base} KiB at start, after each wave {after:?} KiB");
    assert!(
        after[2] < after[0] + WAVE_GROWTH_KIB,
        "the member kept growing wave after wave: {after:?} KiB"
    );
    let h = d.call(Some(&op), "ListTasks", json!({}));
    assert_eq!(h.status, 200, "{}", h.body);
}

/// How late the caller below reads the end of a task: the lateness is what is tested, well
/// inside the linger.
const READ_LATE: Duration = Duration::from_millis(700);

/// Nothing lost when a member ends after its task: its door stays until the task's end was
/// shown to its caller (`answer_linger`, here 30 s), so a caller that reads it late
/// ([`READ_LATE`] after the task ended, as a GetTask poll after a SubscribeToTask that found the
/// task over) still gets the answer; and once it has, the member ends at once. Before, the door
/// was gone.
#[test]
fn a_member_that_ends_after_its_task_keeps_its_door_until_the_answer_is_read() {
    let sb = Sandbox::new();
    install(
        &sb,
        "echo",
        "once",
        "lifecycle:\n  task_acceptance: single\n  after_task: exit\n",
    );
    let mut d = Door::start(&sb, "once", &[("MURMUR_TEST_TIMING", "answer_linger=30s")]);
    let task = d.send(None, "read me late", true);
    let id = task["id"].as_str().expect("task id").to_string();
    // The task ends at once (echo); nobody has looked at its end yet.
    wait_until(Duration::from_secs(10), || {
        d.trace().iter().any(|r| r["event_type"] == "task_end")
    })
    .unwrap_or_else(|| panic!("the task did not end: {:?}", d.trace()));
    std::thread::sleep(READ_LATE);
    assert!(!d.exited(), "the member ended before its answer was read");
    let got = d.task(None, &id);
    assert_eq!(got["status"]["state"], "TASK_STATE_COMPLETED", "{got}");
    assert_eq!(got["artifacts"][0]["parts"][0]["text"], "read me late", "{got}");
    let shown = Instant::now();
    let ended = wait_until(Duration::from_secs(10), || d.exited());
    assert!(ended.is_some(), "the member did not end after its answer was read");
    // At once: well under the 30 s linger it would otherwise wait out.
    assert!(
        shown.elapsed() < Duration::from_secs(10),
        "it lingered {:?} after the read",
        shown.elapsed()
    );
}

/// `SubscribeToTask` on `task` over a connection of its own, as `auth`: the open stream (its
/// head read, the connection held), or the refusal's status and whole head and body.
fn subscribe(addr: &str, auth: &str, task: &str) -> Result<TcpStream, (u16, String)> {
    let body = json!({"id": "s1", "jsonrpc": "2.0", "method": "SubscribeToTask", "params": {"id": task}}).to_string();
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    write!(
        s,
        "POST / HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\na2a-version: 1.0\r\nauthorization: {auth}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("subscribe");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("\r\n\r\n") {
        let n = s.read(&mut buf).expect("a reply head");
        assert!(n > 0, "the door closed before its reply");
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    if status == 200 {
        return Ok(s);
    }
    let mut rest = String::new();
    s.set_read_timeout(Some(Duration::from_millis(500))).expect("timeout");
    let _ = s.read_to_string(&mut rest);
    Err((status, text + &rest))
}

/// Peers with genuine formation tokens open `SubscribeToTask` streams on their own long tasks
/// until the door refuses: each holds at most a quarter of the door's 256 requests in flight,
/// all of them together at most 224, and the operator's GetTask, ListTasks and CancelTask are
/// answered meanwhile. Before, one peer took all 256 and the operator got 503 until it let go.
#[test]
fn peers_holding_streams_on_their_own_tasks_get_a_share_and_leave_the_operator_room() {
    use crate::door::{FRM, Key, Member};
    let sb = Sandbox::new();
    install(&sb, "spin", "held", &format!("{AUTH}{}", serve(4)));
    let key = Key::new(9);
    let d = Door::member(
        &sb,
        "held",
        &Member {
            key: &key,
            formation: FRM,
            name: "held",
        },
    );
    let addr = d.local_url().replacen("localhost", "127.0.0.1", 1);
    let op = d.op();
    let peers = ["planner", "reviewer", "tester", "writer"];
    let mut streams: Vec<Vec<TcpStream>> = Vec::new();
    let mut tasks = Vec::new();
    for peer in peers {
        let auth = format!("Bearer {}", key.mint(FRM, peer, "held"));
        let task = d.send(Some(&auth), "spin", true);
        let id = task["id"].as_str().expect("task id").to_string();
        let mut open = Vec::new();
        let refusal = loop {
            match subscribe(&addr, &auth, &id) {
                Ok(s) => open.push(s),
                Err(refused) => break refused,
            }
            assert!(open.len() <= 256, "{peer} was never refused");
        };
        let (status, reply) = refusal;
        assert_eq!(status, 503, "{peer}: {reply}");
        assert!(reply.to_ascii_lowercase().contains("retry-after: 1"), "{peer}: {reply}");
        // Any request of the credential is past its share, not only another stream.
        let h = d.call(Some(&auth), "GetTask", json!({"id": id}));
        assert_eq!(h.status, 503, "{peer}'s GetTask past its share: {}", h.body);
        streams.push(open);
        tasks.push((auth, id));
    }
    let held: Vec<usize> = streams.iter().map(Vec::len).collect();
    assert_eq!(
        held,
        [64, 64, 64, 32],
        "a quarter each, an eighth kept for the operator"
    );

    // The operator's requests that could stop the peers' work get through, with their results.
    let (planner, planner_task) = &tasks[0];
    let got = d.rpc(Some(&op), "GetTask", json!({"id": planner_task}));
    assert_eq!(got["result"]["id"], json!(planner_task), "{got}");
    let listed = d.rpc(Some(&op), "ListTasks", json!({}));
    assert_eq!(listed["result"]["totalSize"], 4, "{listed}");
    let canceled = d.rpc(Some(&op), "CancelTask", json!({"id": planner_task}));
    assert_eq!(
        canceled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled}"
    );

    // The canceled task's streams end, and with them the planner's hold on the door.
    for s in &mut streams[0] {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&seen).contains("TASK_STATE_CANCELED") {
            let n = s.read(&mut buf).expect("the stream's events");
            assert!(n > 0, "a stream ended without the cancel");
            seen.extend_from_slice(&buf[..n]);
        }
    }
    let back = wait_until(Duration::from_secs(20), || {
        d.call(Some(planner), "GetTask", json!({"id": planner_task})).status == 200
    });
    assert!(back.is_some(), "the planner's share was not given back");
    assert!(d.stderr().lines().all(|l| !l.contains("panicked")), "{}", d.stderr());
}
