//! What a target may change about a traced procedure: move it from the processes that ran it
//! to the receivers of their messages (procedure LBF, Eom and Hollingsworth 1998), make it
//! free (critical-path zeroing), or make it faster (a virtual speed-up).
//!
//! This module only describes the changes; the engine applies them (`engine::shaper`, see
//! `docs/engine.md`), and the `config` module reads them from target files and command lines.
//! A procedure is named as the trace's header lists it.

use crate::event::ProcId;

/// One change to one procedure, as a target states it (a `[[procedure]]` table).
#[derive(Clone, Debug, PartialEq)]
pub struct ProcedureChange {
    /// The procedure, as the trace's header lists it (e.g. `servBusy1`).
    pub name: String,
    /// What happens to it.
    pub action: ProcedureAction,
}

/// What a target does to a procedure.
#[derive(Clone, Debug, PartialEq)]
pub enum ProcedureAction {
    /// The paper's procedure LBF: the procedure's CPU in each interval of a process that ends
    /// at a send (since the process's previous inter-process event) is taken from the sender
    /// and done by the message's receiver just before its receive completes.
    Move {
        /// The processes it is moved from; `None`: every process that ran it.
        from: Option<Vec<ProcId>>,
        /// The receivers it may be moved to; `None`: the receiver of each message. A message to
        /// a process not listed leaves the procedure with its sender.
        to: Option<Vec<ProcId>>,
    },
    /// Critical-path zeroing: the procedure costs nothing.
    Zero,
    /// The procedure runs this many times faster (finite, at least 1 means faster; any
    /// positive number is allowed, 0.5 being twice as slow).
    Speedup(f64),
}

impl ProcedureAction {
    /// The fraction of the procedure's CPU a speed change removes: 1 for [`ProcedureAction::Zero`]
    /// (the limit of a speed-up going to infinity), `1 - 1/S` for a speed-up `S`, `None` for a
    /// move.
    pub fn removed_fraction(&self) -> Option<f64> {
        match self {
            ProcedureAction::Zero => Some(1.0),
            ProcedureAction::Speedup(s) => Some(1.0 - 1.0 / s),
            ProcedureAction::Move { .. } => None,
        }
    }
}

impl std::fmt::Display for ProcedureChange {
    /// The change as a target's name says it: `move servBusy1`, `zero servBusy1`,
    /// `speedup servBusy1=2`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = &self.name;
        match &self.action {
            ProcedureAction::Move { from, to } => {
                write!(f, "move {name}")?;
                let list = |ids: &[ProcId]| {
                    ids.iter()
                        .map(ProcId::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                };
                if let Some(from) = from {
                    write!(f, " from {}", list(from))?;
                }
                if let Some(to) = to {
                    write!(f, " to {}", list(to))?;
                }
                Ok(())
            }
            ProcedureAction::Zero => write!(f, "zero {name}"),
            ProcedureAction::Speedup(s) => write!(f, "speedup {name}={s}"),
        }
    }
}

/// Why a target's procedure changes cannot apply to a trace.
#[derive(Clone, Debug, PartialEq)]
pub enum ProcedureError {
    /// The trace does not record the procedure.
    Unknown {
        /// The procedure named.
        name: String,
        /// The procedures the trace records.
        recorded: Vec<String>,
    },
    /// One target changes the same procedure twice.
    Twice(String),
    /// A speed-up that is not a positive number.
    Speedup {
        /// The procedure.
        name: String,
        /// Its speed-up.
        speedup: f64,
    },
}

impl std::fmt::Display for ProcedureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProcedureError::Unknown { name, recorded } if recorded.is_empty() => write!(
                f,
                "procedure `{name}` is not in the trace, which records no procedure; trace \
                 with `lbf-trace --procedure {name}`"
            ),
            ProcedureError::Unknown { name, recorded } => write!(
                f,
                "procedure `{name}` is not in the trace, which records {}",
                recorded
                    .iter()
                    .map(|r| format!("`{r}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            ProcedureError::Twice(name) => {
                write!(f, "procedure `{name}` is changed twice; change it once")
            }
            ProcedureError::Speedup { name, speedup } => write!(
                f,
                "procedure `{name}` has speedup {speedup}; it must be a positive number (use \
                 zero for an infinite speed-up)"
            ),
        }
    }
}

impl std::error::Error for ProcedureError {}

/// Checks a list of followed procedures (a trace header's, a builder's `[job]`): at most
/// [`MAX_PROCEDURES`](crate::event::MAX_PROCEDURES), each once. The error says what the list
/// does wrong (`lists 9 procedures; ...`, ``lists `f` twice ...``), for the caller to prefix
/// with where the list is.
pub fn check_list(procedures: &[String]) -> Result<(), String> {
    use crate::event::MAX_PROCEDURES;
    if procedures.len() > MAX_PROCEDURES {
        return Err(format!(
            "lists {} procedures; a trace follows at most {MAX_PROCEDURES}",
            procedures.len()
        ));
    }
    match procedures
        .iter()
        .enumerate()
        .find(|(i, name)| procedures[..*i].contains(name))
    {
        Some((i, name)) => Err(format!(
            "lists `{name}` twice (the second time at index {i})"
        )),
        None => Ok(()),
    }
}

/// The index of each change's procedure in the trace's list `recorded`, checking that each is
/// recorded, changed once, and (for a speed-up) positive.
pub fn resolve(
    changes: &[ProcedureChange],
    recorded: &[String],
) -> Result<Vec<usize>, ProcedureError> {
    let mut indices = Vec::with_capacity(changes.len());
    for change in changes {
        if let ProcedureAction::Speedup(s) = change.action {
            if s.is_nan() || s <= 0.0 {
                return Err(ProcedureError::Speedup {
                    name: change.name.clone(),
                    speedup: s,
                });
            }
        }
        let i = recorded
            .iter()
            .position(|r| *r == change.name)
            .ok_or_else(|| ProcedureError::Unknown {
                name: change.name.clone(),
                recorded: recorded.to_vec(),
            })?;
        if indices.contains(&i) {
            return Err(ProcedureError::Twice(change.name.clone()));
        }
        indices.push(i);
    }
    Ok(indices)
}
