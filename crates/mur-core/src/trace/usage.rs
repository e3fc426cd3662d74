//! Where a session's time and tokens went, read from its trace: tasks run, member calls made,
//! model turns, model time, tool calls and their time, everything else, tokens in and out. `mur trace show` prints
//! it per member and for the whole formation, as a table or as JSON.
//!
//! Only the records are read: `task_start`, `task_end`/`task_canceled` (`duration_ms`),
//! `inference` (`duration_ms`, the token counts the provider reported), `tool_call`
//! (`duration_ms`), `member_call_start` and `member_call`. A trace written before these records existed sums to zeros.

use std::collections::HashSet;

use serde_json::{Value, json};

/// One session's (or the formation's) totals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    /// Tasks that started running.
    pub tasks: u64,
    /// Member calls this session made.
    pub calls: u64,
    pub model_turns: u64,
    /// Time in provider requests.
    pub model_ms: u64,
    /// Calls of WebAssembly and MCP tools.
    pub tool_calls: u64,
    /// Time in them (calls of one reply may overlap, so this may exceed the wall time).
    pub tool_ms: u64,
    /// Time tasks ran, model turns included.
    pub task_ms: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Turns whose provider reported no token counts (they count as zero above).
    pub turns_without_usage: u64,
}

impl Usage {
    /// Task time spent outside model turns and tool calls (member calls, waiting); never
    /// negative.
    pub fn other_ms(&self) -> u64 {
        self.task_ms.saturating_sub(self.model_ms).saturating_sub(self.tool_ms)
    }

    /// Sums one session's records.
    pub fn of_records(records: &[Value]) -> Usage {
        let mut u = Usage::default();
        let mut calls = HashSet::new();
        let ms = |r: &Value| r["duration_ms"].as_u64().unwrap_or(0);
        for r in records {
            match r["event_type"].as_str().unwrap_or("") {
                "task_start" => u.tasks += 1,
                "task_end" | "task_canceled" => u.task_ms = u.task_ms.saturating_add(ms(r)),
                "inference" => {
                    u.model_turns += 1;
                    u.model_ms = u.model_ms.saturating_add(ms(r));
                    let (i, o) = (r["input_tokens"].as_u64(), r["output_tokens"].as_u64());
                    if i.is_none() && o.is_none() {
                        u.turns_without_usage += 1;
                    }
                    u.input_tokens = u.input_tokens.saturating_add(i.unwrap_or(0));
                    u.output_tokens = u.output_tokens.saturating_add(o.unwrap_or(0));
                }
                "tool_call" => {
                    u.tool_calls += 1;
                    u.tool_ms = u.tool_ms.saturating_add(ms(r));
                }
                "member_call_start" | "member_call" => {
                    if let Some(id) = r["call_id"].as_str()
                        && calls.insert(id.to_owned())
                    {
                        u.calls += 1;
                    }
                }
                _ => {}
            }
        }
        u
    }

    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &Usage) {
        self.tasks += other.tasks;
        self.calls += other.calls;
        self.model_turns += other.model_turns;
        self.model_ms = self.model_ms.saturating_add(other.model_ms);
        self.tool_calls += other.tool_calls;
        self.tool_ms = self.tool_ms.saturating_add(other.tool_ms);
        self.task_ms = self.task_ms.saturating_add(other.task_ms);
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.turns_without_usage += other.turns_without_usage;
    }

    /// The JSON form `mur trace show --json` prints.
    pub fn to_json(&self) -> Value {
        json!({
            "tasks": self.tasks,
            "calls": self.calls,
            "model_turns": self.model_turns,
            "model_ms": self.model_ms,
            "tool_calls": self.tool_calls,
            "tool_ms": self.tool_ms,
            "other_ms": self.other_ms(),
            "task_ms": self.task_ms,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "turns_without_usage": self.turns_without_usage,
        })
    }
}

/// The column heads of [`table`].
const HEADS: [&str; 10] = [
    "member",
    "tasks",
    "calls",
    "turns",
    "model ms",
    "tools",
    "tool ms",
    "other ms",
    "tokens in",
    "tokens out",
];

/// `rows` (a label and its usage each) and their total as an aligned table: the label column
/// left-aligned, numbers right-aligned, a `total` row last. Each line ends in `\n`.
pub fn table(rows: &[(String, Usage)]) -> String {
    let mut total = Usage::default();
    rows.iter().for_each(|(_, u)| total.add(u));
    let cells = |label: &str, u: &Usage| -> [String; 10] {
        [
            label.to_owned(),
            u.tasks.to_string(),
            u.calls.to_string(),
            u.model_turns.to_string(),
            u.model_ms.to_string(),
            u.tool_calls.to_string(),
            u.tool_ms.to_string(),
            u.other_ms().to_string(),
            u.input_tokens.to_string(),
            u.output_tokens.to_string(),
        ]
    };
    let mut lines: Vec<[String; 10]> = vec![HEADS.map(str::to_owned)];
    lines.extend(rows.iter().map(|(l, u)| cells(l, u)));
    lines.push(cells("total", &total));
    let mut widths = [0usize; 10];
    for line in &lines {
        for (w, c) in widths.iter_mut().zip(line) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for line in &lines {
        let mut s = format!("  {:<w$}", line[0], w = widths[0]);
        for (c, w) in line.iter().zip(widths).skip(1) {
            s.push_str(&format!("  {c:>w$}"));
        }
        out.push_str(s.trim_end());
        out.push('\n');
    }
    if total.turns_without_usage > 0 {
        out.push_str(&format!(
            "  ({} model turn(s) came without token counts from the provider)\n",
            total.turns_without_usage
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(kind: &str, extra: Value) -> Value {
        let mut v = json!({"event_type": kind});
        if let (Some(o), Value::Object(e)) = (v.as_object_mut(), extra) {
            o.extend(e);
        }
        v
    }

    #[test]
    fn records_sum_as_the_table_says() {
        let cases: Vec<(&str, Vec<Value>, Usage)> = vec![
            (
                "an old trace sums to zero",
                vec![rec("session_start", json!({}))],
                Usage::default(),
            ),
            (
                "a model task with two turns",
                vec![
                    rec("task_start", json!({"task_id": "t"})),
                    rec(
                        "inference",
                        json!({"duration_ms": 300, "input_tokens": 10, "output_tokens": 4}),
                    ),
                    rec(
                        "inference",
                        json!({"duration_ms": 200, "input_tokens": 12, "output_tokens": 6}),
                    ),
                    rec("tool_call", json!({"duration_ms": 20, "kind": "wasm"})),
                    rec("tool_call", json!({"duration_ms": 30, "kind": "mcp"})),
                    rec("task_end", json!({"duration_ms": 650})),
                ],
                Usage {
                    tasks: 1,
                    model_turns: 2,
                    model_ms: 500,
                    tool_calls: 2,
                    tool_ms: 50,
                    task_ms: 650,
                    input_tokens: 22,
                    output_tokens: 10,
                    ..Usage::default()
                },
            ),
            (
                "a turn without usage, a canceled task, calls counted once each",
                vec![
                    rec("task_start", json!({})),
                    rec("member_call_start", json!({"call_id": "mcl_1"})),
                    rec("member_call", json!({"call_id": "mcl_1", "duration_ms": 99})),
                    rec("member_call_start", json!({"call_id": "mcl_2"})),
                    rec("inference", json!({"duration_ms": 40})),
                    rec("task_canceled", json!({"duration_ms": 30})),
                ],
                Usage {
                    tasks: 1,
                    calls: 2,
                    model_turns: 1,
                    model_ms: 40,
                    task_ms: 30,
                    turns_without_usage: 1,
                    ..Usage::default()
                },
            ),
        ];
        for (what, records, want) in cases {
            assert_eq!(Usage::of_records(&records), want, "{what}");
        }
    }

    #[test]
    fn other_time_never_goes_below_zero() {
        for (task, model, other) in [(650, 500, 150), (30, 40, 0), (0, 0, 0)] {
            let u = Usage {
                task_ms: task,
                model_ms: model,
                ..Usage::default()
            };
            assert_eq!(u.other_ms(), other);
            assert_eq!(u.to_json()["other_ms"], other);
        }
    }

    #[test]
    fn the_table_aligns_and_totals() {
        let a = Usage {
            tasks: 1,
            calls: 1,
            model_turns: 2,
            model_ms: 500,
            tool_calls: 3,
            tool_ms: 50,
            task_ms: 650,
            input_tokens: 22,
            output_tokens: 10,
            ..Usage::default()
        };
        let b = Usage {
            tasks: 1,
            model_turns: 1,
            model_ms: 40,
            task_ms: 1000,
            turns_without_usage: 1,
            ..Usage::default()
        };
        let out = table(&[("planner".into(), a), ("coder".into(), b)]);
        let want = "  member   tasks  calls  turns  model ms  tools  tool ms  other ms  tokens in  tokens out\n\
                    \x20 planner      1      1      2       500      3       50       100         22          10\n\
                    \x20 coder        1      0      1        40      0        0       960          0           0\n\
                    \x20 total        2      1      3       540      3       50      1060         22          10\n\
                    \x20 (1 model turn(s) came without token counts from the provider)\n";
        assert_eq!(out, want);
        assert_eq!(
            table(&[]),
            "  member  tasks  calls  turns  model ms  tools  tool ms  other ms  tokens in  tokens out\n\
             \x20 total       0      0      0         0      0        0         0          0           0\n"
        );
    }
}
