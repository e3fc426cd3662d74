//! What a call's whole subtree spent (docs/reference/formation.md#cost-roll-up): the tokens in and
//! out, the model turns and tool calls of the callee's task and of every task below it, and the
//! callee task's wall time. A task's [`Cost`] is its own spending plus the roll-up each of its
//! calls brought back; the door sends it as `metadata.murmur.subtreeCost`, and the caller reads it
//! back leniently: a malformed or missing figure counts as none, and sums saturate, so a hostile
//! callee can inflate its own branch's figures but never make a total wrap. The figures are a
//! report, not an authority: what a subtree may spend is the launcher's budget keeper's to decide.
//!
//! A session's [`Meter`] gathers each task's cost from the records its trace is written from
//! (`inference`, `tool_call`, `member_call`), so every runner (model, component, remote) is
//! metered the same way, and no record kind carries a figure the trace does not.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{Value, json};

/// One subtree's spending. Every field saturates at `u64::MAX` when summed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cost {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub model_turns: u64,
    pub tool_calls: u64,
    /// The wall time of the subtree's root task, ms (its calls ran within it).
    pub wall_ms: u64,
}

/// The wire names of the fields, in [`Cost::to_wire`]'s order.
const WIRE: [&str; 5] = ["inputTokens", "outputTokens", "modelTurns", "toolCalls", "wallMs"];

impl Cost {
    /// `self` plus what a call's subtree spent (its wall time runs inside this task's, so it is
    /// not added).
    pub fn add_below(&mut self, below: &Cost) {
        self.input_tokens = self.input_tokens.saturating_add(below.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(below.output_tokens);
        self.model_turns = self.model_turns.saturating_add(below.model_turns);
        self.tool_calls = self.tool_calls.saturating_add(below.tool_calls);
    }

    fn fields(&self) -> [u64; 5] {
        [
            self.input_tokens,
            self.output_tokens,
            self.model_turns,
            self.tool_calls,
            self.wall_ms,
        ]
    }

    /// `metadata.murmur.subtreeCost`.
    pub fn to_wire(&self) -> Value {
        let map: serde_json::Map<String, Value> = WIRE
            .iter()
            .zip(self.fields())
            .map(|(k, v)| ((*k).to_string(), json!(v)))
            .collect();
        Value::Object(map)
    }

    /// The `subtree_cost` of a `member_call` record (docs/reference/formation.md#trace-records).
    pub fn to_record(&self) -> Value {
        json!({
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "model_turns": self.model_turns,
            "tool_calls": self.tool_calls,
            "wall_ms": self.wall_ms,
        })
    }

    /// Reads `metadata.murmur.subtreeCost` leniently: `None` when it is not an object; a field
    /// that is missing or not a non-negative integer counts as 0.
    pub fn from_wire(v: &Value) -> Option<Cost> {
        let o = v.as_object()?;
        let f = |k: &str| o.get(k).and_then(Value::as_u64).unwrap_or(0);
        Some(Cost {
            input_tokens: f(WIRE[0]),
            output_tokens: f(WIRE[1]),
            model_turns: f(WIRE[2]),
            tool_calls: f(WIRE[3]),
            wall_ms: f(WIRE[4]),
        })
    }

    /// `12 tokens in, 5 out, 2 model turns, 1 tool call, 340 ms`: a call line's subtree total.
    pub fn summary(&self) -> String {
        let plural = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        format!(
            "{} in, {} out, {}, {}, {} ms",
            plural(self.input_tokens, "token", "tokens"),
            self.output_tokens,
            plural(self.model_turns, "model turn", "model turns"),
            plural(self.tool_calls, "tool call", "tool calls"),
            self.wall_ms
        )
    }

    /// Reads a record's `subtree_cost` (as [`Cost::to_record`] wrote it); `None` when absent.
    pub fn from_record(v: &Value) -> Option<Cost> {
        let o = v.as_object()?;
        let f = |k: &str| o.get(k).and_then(Value::as_u64).unwrap_or(0);
        Some(Cost {
            input_tokens: f("input_tokens"),
            output_tokens: f("output_tokens"),
            model_turns: f("model_turns"),
            tool_calls: f("tool_calls"),
            wall_ms: f("wall_ms"),
        })
    }
}

/// Tasks metered at once, at most: a session runs one task at a time, so this bounds only a
/// writer of records naming tasks that never end. Past it, new tasks are not metered.
pub const MAX_METERED_TASKS: usize = 1024;

/// Each running task's cost so far, from the records written for it.
#[derive(Debug, Default)]
pub struct Meter {
    tasks: Mutex<HashMap<String, Cost>>,
}

impl Meter {
    /// Counts a record of `event_type` with `fields` towards its `task_id`'s cost: an
    /// `inference` is a model turn with its tokens, a `tool_call` a tool call, and a
    /// `member_call` adds the `subtree_cost` its callee answered with. Other records count nothing.
    pub fn note(&self, event_type: &str, fields: &[(&str, Value)]) {
        let field = |k: &str| fields.iter().find(|(f, _)| *f == k).map(|(_, v)| v);
        let add = |tasks: &mut HashMap<String, Cost>, task: &str, f: &dyn Fn(&mut Cost)| {
            if let Some(c) = tasks.get_mut(task) {
                f(c);
            } else if tasks.len() < MAX_METERED_TASKS {
                let mut c = Cost::default();
                f(&mut c);
                tasks.insert(task.to_owned(), c);
            }
        };
        let Some(task) = field("task_id").and_then(Value::as_str) else {
            return;
        };
        let n = |k: &str| field(k).and_then(Value::as_u64).unwrap_or(0);
        let mut tasks = crate::sync::lock(&self.tasks);
        match event_type {
            "inference" => {
                let (i, o) = (n("input_tokens"), n("output_tokens"));
                add(&mut tasks, task, &|c| {
                    c.model_turns = c.model_turns.saturating_add(1);
                    c.input_tokens = c.input_tokens.saturating_add(i);
                    c.output_tokens = c.output_tokens.saturating_add(o);
                });
            }
            "tool_call" => add(&mut tasks, task, &|c| c.tool_calls = c.tool_calls.saturating_add(1)),
            "member_call" => {
                if let Some(below) = field("subtree_cost").and_then(Cost::from_record) {
                    add(&mut tasks, task, &|c| c.add_below(&below));
                }
            }
            _ => {}
        }
    }

    /// The cost of `task_id` (its own spending and every call's subtree), forgotten here, with
    /// `wall_ms` as its wall time.
    pub fn take(&self, task_id: &str, wall_ms: u64) -> Cost {
        let mut c = crate::sync::lock(&self.tasks).remove(task_id).unwrap_or_default();
        c.wall_ms = wall_ms;
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(i: u64, o: u64, t: u64, k: u64, w: u64) -> Cost {
        Cost {
            input_tokens: i,
            output_tokens: o,
            model_turns: t,
            tool_calls: k,
            wall_ms: w,
        }
    }

    #[test]
    fn the_wire_form_reads_back_leniently() {
        let cases: &[(Value, Option<Cost>)] = &[
            (c(1, 2, 3, 4, 5).to_wire(), Some(c(1, 2, 3, 4, 5))),
            (json!({}), Some(Cost::default())),
            (
                json!({"inputTokens": -1, "outputTokens": "9", "modelTurns": 1.5, "toolCalls": 2}),
                Some(c(0, 0, 0, 2, 0)),
            ),
            (json!({"inputTokens": u64::MAX}), Some(c(u64::MAX, 0, 0, 0, 0))),
            (json!([1, 2]), None),
            (json!("cheap"), None),
            (Value::Null, None),
        ];
        for (wire, want) in cases {
            assert_eq!(Cost::from_wire(wire), *want, "{wire}");
        }
        assert_eq!(
            Cost::from_record(&c(6, 7, 8, 9, 10).to_record()),
            Some(c(6, 7, 8, 9, 10))
        );
    }

    #[test]
    fn a_meter_counts_each_tasks_records_and_forgets_a_task_it_hands_over() {
        let m = Meter::default();
        let t = |id: &str| ("task_id", json!(id));
        m.note(
            "inference",
            &[t("tsk_a"), ("input_tokens", json!(10)), ("output_tokens", json!(3))],
        );
        m.note("inference", &[t("tsk_a"), ("input_tokens", json!(5))]);
        m.note(
            "inference",
            &[t("tsk_b"), ("input_tokens", json!(1)), ("output_tokens", json!(1))],
        );
        m.note("tool_call", &[t("tsk_a"), ("tool", json!("calc"))]);
        m.note(
            "member_call",
            &[t("tsk_a"), ("subtree_cost", c(100, 50, 2, 1, 9000).to_record())],
        );
        // A call that brought no figure back, a record of no task and other kinds count nothing.
        m.note("member_call", &[t("tsk_a"), ("subtree_cost", Value::Null)]);
        m.note("inference", &[("input_tokens", json!(7))]);
        m.note("task_start", &[t("tsk_a")]);
        assert_eq!(m.take("tsk_a", 40), c(115, 53, 4, 2, 40));
        assert_eq!(m.take("tsk_a", 1), c(0, 0, 0, 0, 1), "handed over once");
        assert_eq!(m.take("tsk_b", 2), c(1, 1, 1, 0, 2));
        assert_eq!(m.take("tsk_never", 3), c(0, 0, 0, 0, 3));
    }

    #[test]
    fn a_meter_holds_at_most_its_bound_of_tasks() {
        let m = Meter::default();
        for i in 0..MAX_METERED_TASKS + 10 {
            m.note("tool_call", &[("task_id", json!(format!("tsk_{i}")))]);
        }
        assert_eq!(crate::sync::lock(&m.tasks).len(), MAX_METERED_TASKS);
        // A task already metered still counts.
        m.note("tool_call", &[("task_id", json!("tsk_0"))]);
        assert_eq!(m.take("tsk_0", 0).tool_calls, 2);
    }

    #[test]
    fn the_summary_reads_as_a_sentence() {
        assert_eq!(
            c(12, 5, 2, 1, 340).summary(),
            "12 tokens in, 5 out, 2 model turns, 1 tool call, 340 ms"
        );
        assert_eq!(
            c(1, 0, 1, 0, 0).summary(),
            "1 token in, 0 out, 1 model turn, 0 tool calls, 0 ms"
        );
    }

    #[test]
    fn sums_add_what_is_below_and_saturate() {
        let cases = [
            (c(1, 2, 3, 4, 100), c(10, 20, 30, 40, 50), c(11, 22, 33, 44, 100)),
            (c(u64::MAX, 0, 0, 0, 1), c(5, 0, 0, 0, 1), c(u64::MAX, 0, 0, 0, 1)),
            (Cost::default(), Cost::default(), Cost::default()),
        ];
        for (mut own, below, want) in cases {
            own.add_below(&below);
            assert_eq!(own, want);
        }
    }
}
