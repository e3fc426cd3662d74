//! `mur stop ID`: stop one session (`ses_…`) or a whole formation (`frm_…`),
//! docs/reference/cli.md#mur-stop. The stopping itself is the operator's (`operator::stop`),
//! shared with `mur ui`.

use std::time::Duration;

use super::{Outcome, StopArgs};
use crate::ids::IdKind;
use crate::operator::stop;
use crate::paths::MurHome;

pub fn run(a: &StopArgs) -> Outcome {
    let home = MurHome::from_env();
    let timeout = Duration::from_secs(a.timeout);
    let lines = if a.id.starts_with(IdKind::Formation.prefix()) {
        stop::formation(&home, &a.id, timeout)?
    } else {
        vec![stop::session(&home, &a.id, timeout)?]
    };
    for line in lines {
        println!("{line}");
    }
    Ok(0)
}
