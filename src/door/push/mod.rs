//! Push notifications (A2A v1.0 §3.1.7–3.1.10, §4.3; docs/a2a.md#push-notification-configuration-methods): the four
//! config methods and the configs a door holds. Each config has one delivery (`deliver`) that
//! follows its task and POSTs every update to the webhook, one at a time, in order.
//!
//! What a config may be is the core's `push` (the URL rule, the params, the retry plan). The
//! configs are bounded: [`push::PER_TASK`] per task and [`push::PER_DOOR`] per door; a config
//! lives as long as its task is on the board, and at the door's bound the configs whose task was
//! forgotten or whose delivery is over make room first. A caller reaches a task's configs exactly
//! when it may see the task (an invisible task is an unknown one, `-32001`); a formation token
//! reaches none of these methods (they are outside its scopes, docs/reference/door.md#methods).

mod deliver;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};
use tokio::sync::watch;

use super::call::{Call, Reply};
use super::jsonrpc::{self, A2aError, RpcError};
use crate::push::{self, ConfigParams, Host, Scheme};
use crate::sync::lock;
use crate::tasks::{Board, TaskSnapshot};

/// One stored config and its delivery.
struct Stored {
    id: String,
    params: Arc<ConfigParams>,
    /// Set to stop the delivery (the config was deleted or replaced).
    stop: watch::Sender<bool>,
    /// Set by the delivery when it is over (its task ended and the last update went, or was given
    /// up); such a config may make room at the door's bound.
    done: Arc<AtomicBool>,
}

impl Drop for Stored {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// The configs of one door, by task.
#[derive(Default)]
pub struct Configs {
    by_task: Mutex<HashMap<String, Vec<Stored>>>,
}

impl std::fmt::Debug for Configs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // How many configs there are: what a log of the door wants of them.
        let n: usize = lock(&self.by_task).values().map(Vec::len).sum();
        f.debug_struct("Configs").field("configs", &n).finish()
    }
}

/// A config as A2A shows it (`TaskPushNotificationConfig`, a2a.proto): to the caller that may
/// see its task, with the token and credentials it gave.
fn config_json(task_id: &str, id: &str, p: &ConfigParams) -> Value {
    let mut v = json!({"id": id, "taskId": task_id, "url": p.url});
    if let Some(t) = &p.token {
        v["token"] = Value::from(t.reveal());
    }
    if let Some(a) = &p.auth {
        v["authentication"] = json!({"credentials": a.credentials.reveal(), "scheme": a.scheme});
    }
    v
}

fn invalid(refusal: push::ParamRefusal) -> RpcError {
    RpcError::invalid_param(&refusal.0, &refusal.1)
}

/// A name's addresses judged before the config is stored (they are judged again at each
/// delivery). A literal or `localhost` was judged by the URL rule already. A name that does not
/// resolve now has no address to judge: it is stored, and each delivery resolves and judges it
/// (an attempt that finds no address fails and is retried), so resolution at this instant, which
/// a passing DNS fault can deny, decides nothing.
async fn check_resolved(p: &ConfigParams, field: &str) -> Result<(), RpcError> {
    let Host::Name(name) = &p.webhook.host else {
        return Ok(());
    };
    let addrs = match deliver::resolve(name, p.webhook.port).await {
        Ok(addrs) if !addrs.is_empty() => addrs,
        _ => return Ok(()),
    };
    match push::resolved_refusal(p.webhook.scheme, name, &addrs) {
        Some(why) => Err(RpcError::invalid_param(field, &why)),
        None => Ok(()),
    }
}

/// SendMessage's `configuration.taskPushNotificationConfig` (a2a.proto `SendMessageConfiguration`
/// field 2), read and judged before the task is created; `None` when absent.
pub async fn from_send(params: &Map<String, Value>) -> Result<Option<ConfigParams>, RpcError> {
    const AT: &str = "configuration.taskPushNotificationConfig.";
    let Some(Value::Object(c)) = params.get("configuration") else {
        return Ok(None);
    };
    let cfg = match c.get("taskPushNotificationConfig") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(cfg)) => cfg,
        Some(_) => {
            return Err(RpcError::invalid_param(
                "configuration.taskPushNotificationConfig",
                "must be an object",
            ));
        }
    };
    let p = push::parse_config(cfg, AT).map_err(invalid)?;
    check_resolved(&p, &format!("{AT}url")).await?;
    Ok(Some(p))
}

impl Configs {
    /// Stores `p` for `task` (replacing a config of the same id) and starts its delivery, which
    /// opens with `task` as it stands. `Err` when a bound is reached.
    pub fn add(&self, call: &Call<'_>, task: TaskSnapshot, p: ConfigParams) -> Result<Value, RpcError> {
        let id = p.id.clone().unwrap_or_else(|| task.id.clone());
        let mut by_task = lock(&self.by_task);
        let replaces = by_task.get(&task.id).is_some_and(|v| v.iter().any(|s| s.id == id));
        if !replaces {
            if by_task.get(&task.id).map_or(0, Vec::len) >= push::PER_TASK {
                return Err(RpcError::invalid_param(
                    "taskId",
                    &format!(
                        "the task holds {} push notification configs, the most it may; delete one first",
                        push::PER_TASK
                    ),
                ));
            }
            make_room(&mut by_task, call.board)?;
        }
        let params = Arc::new(p);
        let shown = config_json(&task.id, &id, &params);
        let (stop, stopped) = watch::channel(false);
        let done = Arc::new(AtomicBool::new(false));
        let stored = Stored {
            id: id.clone(),
            params: Arc::clone(&params),
            stop,
            done: Arc::clone(&done),
        };
        let list = by_task.entry(task.id.clone()).or_default();
        // Dropping the one replaced stops its delivery.
        list.retain(|s| s.id != id);
        list.push(stored);
        drop(by_task);
        deliver::start(Arc::clone(call.board), task, params, stopped, done);
        Ok(shown)
    }

    /// `Ok` when the door may hold one more config: SendMessage asks before it creates the task.
    pub fn check_room(&self, board: &Board) -> Result<(), RpcError> {
        make_room(&mut lock(&self.by_task), board)
    }

    fn with_task<T>(&self, task_id: &str, f: impl FnOnce(&mut Vec<Stored>) -> T) -> T {
        let mut by_task = lock(&self.by_task);
        let list = by_task.entry(task_id.to_string()).or_default();
        let out = f(list);
        if list.is_empty() {
            by_task.remove(task_id);
        }
        out
    }
}

/// Room for one more config at the door's bound, made first from configs whose task was forgotten
/// or whose delivery is over; `-32603` when there is none [ours].
fn make_room(by_task: &mut HashMap<String, Vec<Stored>>, board: &Board) -> Result<(), RpcError> {
    let count = |m: &HashMap<String, Vec<Stored>>| m.values().map(Vec::len).sum::<usize>();
    if count(by_task) < push::PER_DOOR {
        return Ok(());
    }
    by_task.retain(|t, v| {
        let live = board.get(t).is_some();
        v.retain(|s| live && !s.done.load(Ordering::Relaxed));
        !v.is_empty()
    });
    if count(by_task) < push::PER_DOOR {
        return Ok(());
    }
    Err(RpcError {
        code: jsonrpc::INTERNAL_ERROR,
        message: format!(
            "the door holds {} push notification configs, the most it may; retry later",
            push::PER_DOOR
        ),
        data: None,
    })
}

/// The task when it exists and the caller may see it, as GetTask decides.
fn visible(call: &Call<'_>, id: &str) -> Result<TaskSnapshot, RpcError> {
    call.board
        .get(id)
        .filter(|t| call.caller.sees(t.owner.as_deref()))
        .ok_or_else(|| A2aError::task_not_found(id))
}

/// A request field under its JSON name or its proto field name (ProtoJSON; `push::field`).
fn field<'a>(params: &'a Map<String, Value>, key: &str) -> Result<Option<&'a Value>, RpcError> {
    push::field(params, "", key).map_err(invalid)
}

fn required<'a>(params: &'a Map<String, Value>, key: &str) -> Result<&'a str, RpcError> {
    match field(params, key)? {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(Value::String(_)) | None | Some(Value::Null) => Err(RpcError::invalid_param(key, "is required")),
        Some(_) => Err(RpcError::invalid_param(key, "must be a string")),
    }
}

/// A config id a task does not hold: `-32001`, as the official SDK's server answers, naming both.
fn unknown_config(task_id: &str, id: &str) -> RpcError {
    A2aError::TaskNotFound.with(&[("id", id), ("taskId", task_id)])
}

/// CreateTaskPushNotificationConfig (§3.1.7): params are a `TaskPushNotificationConfig`.
pub async fn create(params: &Map<String, Value>, call: &Call<'_>) -> Reply {
    let r = async {
        let p = push::parse_config(params, "").map_err(invalid)?;
        let task_id = p
            .task_id
            .clone()
            .ok_or_else(|| RpcError::invalid_param("taskId", "is required"))?;
        let task = visible(call, &task_id)?;
        check_resolved(&p, "url").await?;
        // Looked at again: the task may have been forgotten while the name resolved.
        let task = call.board.get(&task.id).unwrap_or(task);
        call.push.add(call, task, p)
    };
    match r.await {
        Ok(v) => Reply::Result(v),
        Err(e) => Reply::Error(e),
    }
}

/// GetTaskPushNotificationConfig (§3.1.8): `taskId` and `id`.
pub fn get(params: &Map<String, Value>, call: &Call<'_>) -> Result<Reply, RpcError> {
    let task_id = required(params, "taskId")?;
    let id = required(params, "id")?;
    visible(call, task_id)?;
    call.push
        .with_task(task_id, |list| {
            list.iter()
                .find(|s| s.id == id)
                .map(|s| config_json(task_id, &s.id, &s.params))
        })
        .map(Reply::Result)
        .ok_or_else(|| unknown_config(task_id, id))
}

/// ListTaskPushNotificationConfigs (§3.1.9): `taskId`, optional `pageSize` (1–100, default all)
/// and `pageToken` (the index to go on from, as the previous page gave it).
pub fn list(params: &Map<String, Value>, call: &Call<'_>) -> Result<Reply, RpcError> {
    let task_id = required(params, "taskId")?;
    let size = match field(params, "pageSize")? {
        None | Some(Value::Null) => push::PER_TASK,
        Some(v) => match v.as_u64() {
            Some(0) => push::PER_TASK,
            Some(n @ 1..=100) => n as usize,
            _ => return Err(RpcError::invalid_param("pageSize", "must be an integer from 1 to 100")),
        },
    };
    let from = match field(params, "pageToken")? {
        None | Some(Value::Null) => 0,
        Some(Value::String(s)) if s.is_empty() => 0,
        Some(Value::String(s)) => s
            .parse::<usize>()
            .map_err(|_| RpcError::invalid_param("pageToken", "is not a token a previous page gave"))?,
        Some(_) => return Err(RpcError::invalid_param("pageToken", "must be a string")),
    };
    visible(call, task_id)?;
    let (configs, next) = call.push.with_task(task_id, |list| {
        let page: Vec<Value> = list
            .iter()
            .skip(from)
            .take(size)
            .map(|s| config_json(task_id, &s.id, &s.params))
            .collect();
        let next = (from + page.len() < list.len()).then(|| (from + page.len()).to_string());
        (page, next)
    });
    Ok(Reply::Result(
        json!({"configs": configs, "nextPageToken": next.unwrap_or_default()}),
    ))
}

/// DeleteTaskPushNotificationConfig (§3.1.10): `taskId` and `id`; its delivery stops. Deleting a
/// config the task does not hold changes nothing and succeeds, as the official SDK's server does.
pub fn delete(params: &Map<String, Value>, call: &Call<'_>) -> Result<Reply, RpcError> {
    let task_id = required(params, "taskId")?;
    let id = required(params, "id")?;
    visible(call, task_id)?;
    call.push.with_task(task_id, |list| list.retain(|s| s.id != id));
    // google.protobuf.Empty.
    Ok(Reply::Result(json!({})))
}

/// Whether a delivery may connect to `ip` for this webhook (the rule, applied again at delivery).
fn may_connect(scheme: Scheme, ip: IpAddr) -> Result<(), String> {
    match push::address_refusal(scheme, ip) {
        Some(why) => Err(why),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Acceptance;

    fn stored(id: &str, done: bool) -> Stored {
        let obj = json!({"url": "http://127.0.0.1:9/"});
        let params = push::parse_config(obj.as_object().expect("an object"), "").expect("valid");
        Stored {
            id: id.to_string(),
            params: Arc::new(params),
            stop: watch::channel(false).0,
            done: Arc::new(AtomicBool::new(done)),
        }
    }

    /// At the door's bound, configs of forgotten tasks and finished deliveries make room; live
    /// deliveries of tasks on the board never do, and then the bound refuses.
    #[test]
    fn the_door_bound_makes_room_only_from_what_is_over() {
        let board = Board::new(Acceptance::Queue, 4);
        let live = board.submit_local("a");
        let mut by_task: HashMap<String, Vec<Stored>> = HashMap::new();
        let half = push::PER_DOOR / 2;
        by_task.insert(
            live.id.clone(),
            (0..half).map(|n| stored(&format!("l{n}"), n == 0)).collect(),
        );
        by_task.insert(
            "tsk_forgotten".into(),
            (0..push::PER_DOOR - half)
                .map(|n| stored(&format!("f{n}"), false))
                .collect(),
        );
        assert!(make_room(&mut by_task, &board).is_ok());
        assert!(!by_task.contains_key("tsk_forgotten"));
        assert_eq!(by_task[&live.id].len(), half - 1, "the finished one made room");

        let mut full: HashMap<String, Vec<Stored>> = HashMap::new();
        full.insert(
            live.id.clone(),
            (0..push::PER_DOOR).map(|n| stored(&format!("l{n}"), false)).collect(),
        );
        let e = make_room(&mut full, &board).expect_err("no room");
        assert_eq!(e.code, jsonrpc::INTERNAL_ERROR);
        assert_eq!(full[&live.id].len(), push::PER_DOOR);
    }

    /// The rule is applied again when a delivery connects: an address the URL rule would refuse
    /// (here built past it) is never dialled, and `localhost` is 127.0.0.1, never resolved.
    #[test]
    fn a_delivery_judges_its_address_again() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let mut p =
            push::parse_config(json!({"url": "http://localhost:9/h"}).as_object().expect("obj"), "").expect("valid");
        assert_eq!(
            rt.block_on(deliver::target(&p)),
            Ok(std::net::SocketAddr::from(([127, 0, 0, 1], 9)))
        );
        for ip in ["169.254.169.254", "10.0.0.1", "fe80::1"] {
            p.webhook.host = Host::Ip(ip.parse().expect("ip"));
            assert!(rt.block_on(deliver::target(&p)).is_err(), "{ip}");
            p.webhook.scheme = Scheme::Https;
            let refused = rt.block_on(deliver::target(&p)).is_err();
            assert_eq!(refused, ip != "10.0.0.1", "{ip} over https");
            p.webhook.scheme = Scheme::Http;
        }
    }
}
