//! What a delegation adds to a member call, end to end (docs/reference/formation.md#grants): the
//! same call made by two `mur` binaries, one whose calls carry grants and one from before them,
//! taking turns call by call.
//!
//! Each binary serves a formation of its own in a private HOME: `lead` (the relay test
//! component, which hands its task to `worker` with `call-member` and answers with the worker's
//! output) → `worker` (actors/echo). One call is a blocking `SendMessage` to the lead's door,
//! timed from the request to its reply: the lead's task, its call to the worker (with a grant:
//! the launcher's delegation and the worker door's verification of it), the worker's task, the
//! answer back. `MUR_BENCH_REPS` rounds (default 5; one of 20 calls without `--bench`) of
//! `MUR_BENCH_CALLS` calls (default 200) alternate the binaries call by call, the first binary
//! switching every round; a round's figure is the median of its paired differences.
//!
//! `MUR_BENCH_MUR` is the binary under test (default: this build's); `MUR_BENCH_MUR_BEFORE` the
//! one it is compared with (without it, only the binary under test is timed).

// Dependencies reach this target through the library; the library's own target keeps the rule.
#![allow(unused_crate_dependencies)]

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod support;
use support::{env_or, install_wat, median, member_door, mur_binary, mur_in};

use anyhow::{Context as _, Result, anyhow, bail};
use serde_json::{Value, json};

const LIFECYCLE: &str = "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n";
const RELAY_MANIFEST: &str = "name: relay\nversion: 0.1.0\ncomponent: capsule.wat\nnetwork:\n  \
     authentication:\n    scheme: bearer\ncapabilities:\n  network:\n    allow: [localhost]\n";
const ECHO_MANIFEST: &str = "name: echo\nversion: 0.1.0\ncomponent: capsule.wat\nnetwork:\n  \
     authentication:\n    scheme: bearer\nexports:\n  peer_tasks:\n    accept: true\n";
const ROSTER: &str = "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/relay, version: 0.1.0, entry: true}\n  - {name: worker, capsule: local/echo, version: 0.1.0}\nreachability:\n  - {from: lead, to: [worker]}\n";

/// A serving formation of one binary; SIGTERM to its launcher when dropped.
struct Formation {
    name: String,
    child: Child,
    /// The lead's door: address and operator token.
    door: (String, String),
    agent: ureq::Agent,
    _tmp: tempfile::TempDir,
}

impl Formation {
    fn start(name: &str, bin: &Path) -> Result<Formation> {
        let tmp = tempfile::Builder::new().prefix("mur-bench-").tempdir()?;
        let home = tmp.path().join("home");
        std::fs::create_dir_all(&home)?;
        for (name, wat, manifest) in [
            ("echo", "actors/echo/capsule.wat", ECHO_MANIFEST),
            ("relay", "src/capsule/testdata/relay.wat", RELAY_MANIFEST),
        ] {
            let manifest = format!("{manifest}{LIFECYCLE}");
            install_wat(bin, &home, tmp.path(), (name, wat, &manifest)).map_err(|e| anyhow!(e))?;
        }
        let project = tmp.path().join("project");
        std::fs::create_dir_all(&project)?;
        std::fs::write(project.join("roster.yaml"), ROSTER)?;
        let mut child = mur_in(bin, &home, &project)
            .args(["run", "--roster"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .context("spawn mur run --roster")?;
        let pipe = child.stderr.take().ok_or_else(|| anyhow!("no stderr"))?;
        let err = Arc::new(Mutex::new(String::new()));
        let into = Arc::clone(&err);
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut s = into.lock().unwrap_or_else(|e| e.into_inner());
                s.push_str(&line);
                s.push('\n');
            }
        });
        let start = Instant::now();
        let door = loop {
            let ready = err.lock().unwrap_or_else(|e| e.into_inner()).contains("  entry  ");
            if let Some(door) = ready.then(|| member_door(&home, "lead")).flatten() {
                break door;
            }
            if start.elapsed() > Duration::from_secs(60) {
                bail!("{name}: not ready: {}", err.lock().unwrap_or_else(|e| e.into_inner()));
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        Ok(Formation {
            name: name.to_string(),
            child,
            door,
            agent: ureq::AgentBuilder::new().build(),
            _tmp: tmp,
        })
    }

    /// One call through the lead: the time from the request to its reply, in µs.
    fn call(&self, n: usize) -> Result<f64> {
        let body = json!({"id": 1, "jsonrpc": "2.0", "method": "SendMessage", "params": {
            "message": {"messageId": format!("msg-{n}"), "role": "ROLE_USER", "parts": [{"text": format!("ping {n}")}]}}})
        .to_string();
        let start = Instant::now();
        let resp = self
            .agent
            .post(&format!("http://{}/", self.door.0))
            .set("authorization", &format!("Bearer {}", self.door.1))
            .set("a2a-version", "1.0")
            .set("content-type", "application/json")
            .send_string(&body)
            .with_context(|| format!("{}: SendMessage", self.name))?
            .into_string()?;
        let took = start.elapsed().as_secs_f64() * 1e6;
        let v: Value = serde_json::from_str(&resp)?;
        let task = &v["result"]["task"];
        if task["status"]["state"] != "TASK_STATE_COMPLETED" || !resp.contains(&format!("ping {n}")) {
            bail!(
                "{}: the call did not come back completed with the worker's echo: {resp}",
                self.name
            );
        }
        Ok(took)
    }
}

impl Drop for Formation {
    fn drop(&mut self) {
        support::stop_launcher(&mut self.child);
    }
}

fn main() -> Result<()> {
    let bench = std::env::args().any(|a| a == "--bench");
    let (reps, calls) = if bench {
        (env_or("MUR_BENCH_REPS", 5), env_or("MUR_BENCH_CALLS", 200))
    } else {
        (1, 20)
    };
    let before: Option<PathBuf> = std::env::var_os("MUR_BENCH_MUR_BEFORE")
        .filter(|v| !v.is_empty())
        .map(|b| std::fs::canonicalize(&b).unwrap_or_else(|_| PathBuf::from(b)));
    let under = Formation::start("under test", &mur_binary())?;
    let other = before.as_deref().map(|b| Formation::start("before", b)).transpose()?;
    // Warm up: each member's component compiled and instantiated once, connections made.
    for n in 0..10 {
        under.call(n)?;
        if let Some(o) = &other {
            o.call(n)?;
        }
    }
    let (mut all_under, mut all_other, mut round_diffs) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..reps {
        let (mut u, mut o, mut d) = (Vec::new(), Vec::new(), Vec::new());
        for n in 0..calls {
            let id = 1000 + rep * calls + n;
            match &other {
                None => u.push(under.call(id)?),
                Some(other) => {
                    let (a, b) = if rep % 2 == 0 {
                        let a = under.call(id)?;
                        (a, other.call(id)?)
                    } else {
                        let b = other.call(id)?;
                        (under.call(id)?, b)
                    };
                    u.push(a);
                    o.push(b);
                    d.push(a - b);
                }
            }
        }
        if other.is_some() {
            println!(
                "round {rep}: under test p50 {:.0} µs, before p50 {:.0} µs, median of paired differences {:+.0} µs",
                median(u.clone()),
                median(o.clone()),
                median(d.clone())
            );
            round_diffs.push(median(d));
        } else {
            println!("round {rep}: p50 {:.0} µs", median(u.clone()));
        }
        all_under.extend(u);
        all_other.extend(o);
    }
    let p = |v: &[f64], q: f64| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v.get(((v.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    println!(
        "a member call through the lead (relay → echo), {} calls: under test p50 {:.0} µs, p90 {:.0} µs",
        all_under.len(),
        p(&all_under, 0.5),
        p(&all_under, 0.9)
    );
    if other.is_some() {
        let min = round_diffs.iter().copied().fold(f64::INFINITY, f64::min);
        let max = round_diffs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        println!(
            "  before p50 {:.0} µs, p90 {:.0} µs; added by the binary under test: {:+.0} µs (median of the rounds' paired medians; rounds {min:+.0} to {max:+.0} µs), p50 against p50 {:+.0} µs",
            p(&all_other, 0.5),
            p(&all_other, 0.9),
            median(round_diffs.clone()),
            p(&all_under, 0.5) - p(&all_other, 0.5)
        );
    }
    Ok(())
}
