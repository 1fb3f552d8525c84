//! Procedure changes from the outside world: a target file's `[[procedure]]` tables and the
//! command line's `--move NAME`, `--zero NAME` and `--speedup NAME=S`, each of which makes
//! one more target from a placement (see `docs/targets.md`).

use serde::Deserialize;

use crate::event::{ProcId, ProcInfo};
use crate::procedure::{ProcedureAction, ProcedureChange};
use crate::target::{Network, Node, Target};

/// One `[[procedure]]` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ProcedureFile {
    name: String,
    #[serde(default, rename = "move")]
    moved: bool,
    #[serde(default)]
    zero: bool,
    speedup: Option<f64>,
    from: Option<Vec<ProcId>>,
    to: Option<Vec<ProcId>>,
}

impl ProcedureFile {
    /// The change the table states, for a trace of `num_procs` processes; the message names
    /// the table.
    pub(super) fn change(self, num_procs: usize) -> Result<ProcedureChange, String> {
        let name = self.name;
        let at = format!("[[procedure]] `{name}`");
        if !self.moved && (self.from.is_some() || self.to.is_some()) {
            return Err(format!("{at}: from and to go with move = true only"));
        }
        let action = match (self.moved, self.zero, self.speedup) {
            (true, false, None) => ProcedureAction::Move {
                from: self.from,
                to: self.to,
            },
            (false, true, None) => ProcedureAction::Zero,
            (false, false, Some(s)) if s.is_finite() && s > 0.0 => ProcedureAction::Speedup(s),
            (false, false, Some(s)) => {
                return Err(format!(
                    "{at}: speedup is {s}; it must be a positive number (zero = true for an \
                     infinite one)"
                ))
            }
            _ => {
                return Err(format!(
                    "{at}: give exactly one of move = true, zero = true or speedup = S"
                ))
            }
        };
        if let ProcedureAction::Move { from, to } = &action {
            for (key, ids) in [("from", from), ("to", to)] {
                if let Some(&id) = ids.iter().flatten().find(|&&id| id as usize >= num_procs) {
                    return Err(format!(
                        "{at}: {key} lists process {id}, but the trace has only {num_procs} \
                         processes (ids 0 to {})",
                        num_procs.saturating_sub(1)
                    ));
                }
            }
        }
        Ok(ProcedureChange { name, action })
    }
}

/// The command line's procedure changes, shared by `lbf-gag predict` and `lbf-trace`:
/// each option makes one more target (flatten it into a clap command).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ProcedureArgs {
    /// One more target in which the procedure NAME (traced with lbf-trace --procedure) is
    /// moved from the processes that ran it to the receivers of their messages: its CPU in
    /// each interval that ends at a send is done by the receiver just before that receive
    /// completes (procedure LBF). Repeatable.
    #[arg(long = "move", value_name = "NAME", help_heading = "Procedure what-if")]
    pub moves: Vec<String>,

    /// One more target in which the procedure NAME costs nothing (critical-path zeroing).
    /// Repeatable.
    #[arg(long = "zero", value_name = "NAME", help_heading = "Procedure what-if")]
    pub zeros: Vec<String>,

    /// One more target in which the procedure NAME runs S times faster (S > 0; 2 halves its
    /// time). Repeatable.
    #[arg(
        long = "speedup",
        value_name = "NAME=S",
        value_parser = parse_speedup,
        help_heading = "Procedure what-if"
    )]
    pub speedups: Vec<(String, f64)>,
}

impl ProcedureArgs {
    /// Whether no option was given.
    pub fn is_empty(&self) -> bool {
        self.moves.is_empty() && self.zeros.is_empty() && self.speedups.is_empty()
    }

    /// The changes, in the order move, zero, speed-up, each in the order given.
    pub fn changes(&self) -> Vec<ProcedureChange> {
        let change = |name: &String, action| ProcedureChange {
            name: name.clone(),
            action,
        };
        let every_move = || ProcedureAction::Move {
            from: None,
            to: None,
        };
        (self.moves.iter().map(|n| change(n, every_move())))
            .chain(self.zeros.iter().map(|n| change(n, ProcedureAction::Zero)))
            .chain(
                self.speedups
                    .iter()
                    .map(|(n, s)| change(n, ProcedureAction::Speedup(*s))),
            )
            .collect()
    }

    /// `targets` followed by one target per change and placement: each placement of
    /// `targets` (those that change no procedure themselves) with the change. Without any,
    /// the run's own placement ([`as_run`]). A target is named by its change (`zero
    /// servBusy1`), prefixed with its placement's name when there are several.
    pub fn extend(&self, mut targets: Vec<Target>, procs: &[ProcInfo]) -> Vec<Target> {
        if self.is_empty() {
            return targets;
        }
        let mut bases: Vec<Target> = targets
            .iter()
            .filter(|t| t.procedures.is_empty())
            .cloned()
            .collect();
        if bases.is_empty() {
            bases.push(as_run(procs));
        }
        let several = bases.len() > 1;
        for change in self.changes() {
            for base in &bases {
                let name = match several {
                    true => format!("{} {change}", base.name),
                    false => change.to_string(),
                };
                targets.push(Target {
                    name,
                    procedures: vec![change.clone()],
                    ..base.clone()
                });
            }
        }
        targets
    }
}

/// The placement the trace ran on, as far as its header says: a node per host, with a core
/// for each of its processes, and free messages. Named `as run`.
pub fn as_run(procs: &[ProcInfo]) -> Target {
    let mut hosts: Vec<&str> = Vec::new();
    let mut nodes: Vec<Node> = Vec::new();
    for p in procs {
        let n = match hosts.iter().position(|h| *h == p.host) {
            Some(n) => n,
            None => {
                hosts.push(&p.host);
                nodes.push(Node::new(Vec::new()));
                hosts.len() - 1
            }
        };
        nodes[n].procs.push(p.id);
        nodes[n].cores = nodes[n].procs.len() as u32;
    }
    Target {
        name: "as run".into(),
        nodes,
        network: Network::default(),
        spin: 0.0,
        scheduler: None,
        bind_to_cores: false,
        procedures: Vec::new(),
    }
}

/// `NAME=S` as a procedure and its speed-up (clap's parser for `--speedup`; the builder's
/// `[job] speedup` entries); the error says what is wrong.
pub fn parse_speedup(text: &str) -> Result<(String, f64), String> {
    let (name, s) = text
        .rsplit_once('=')
        .ok_or_else(|| format!("`{text}` is not NAME=S (such as servBusy1=2)"))?;
    let s: f64 = s
        .parse()
        .map_err(|_| format!("`{s}` in `{text}` is not a number"))?;
    if name.is_empty() || !(s.is_finite() && s > 0.0) {
        return Err(format!(
            "`{text}`: give a procedure and a positive, finite speed-up (--zero for an \
             infinite one)"
        ));
    }
    Ok((name.to_string(), s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_target;

    #[test]
    fn a_target_file_states_changes() {
        let text = r#"
            [[node]]
            procs = [0, 1, 2, 3]
            [[procedure]]
            name = "servBusy1"
            move = true
            to = [1]
            [[procedure]]
            name = "servBusy2"
            speedup = 2.0
        "#;
        let t = parse_target(text, "t", 4).unwrap();
        assert_eq!(
            t.procedures,
            vec![
                ProcedureChange {
                    name: "servBusy1".into(),
                    action: ProcedureAction::Move {
                        from: None,
                        to: Some(vec![1])
                    }
                },
                ProcedureChange {
                    name: "servBusy2".into(),
                    action: ProcedureAction::Speedup(2.0)
                },
            ]
        );
    }

    #[test]
    fn a_table_states_one_change() {
        let err = |table: &str| {
            let text = format!("[[node]]\nprocs = [0]\n[[procedure]]\n{table}\n");
            parse_target(&text, "t", 1).unwrap_err().to_string()
        };
        assert!(err("name = \"f\"\nzero = true\nmove = true").contains("exactly one of"));
        assert!(err("name = \"f\"").contains("exactly one of"));
        assert!(err("name = \"f\"\nspeedup = 0.0").contains("speedup is 0"));
        assert!(err("name = \"f\"\nzero = true\nto = [0]").contains("with move = true only"));
        assert!(err("name = \"f\"\nmove = true\nfrom = [3]").contains("from lists process 3"));
        assert!(err("name = \"f\"\nspeed = 2.0").contains("unknown field `speed`"));
    }

    #[test]
    fn each_option_makes_a_target_named_for_it() {
        let args = ProcedureArgs {
            moves: vec!["servBusy1".into()],
            zeros: vec!["servBusy1".into()],
            speedups: vec![("hot".into(), 2.0)],
        };
        let procs: Vec<ProcInfo> = (0..2)
            .map(|id| ProcInfo {
                id,
                host: "h".into(),
                ..ProcInfo::default()
            })
            .collect();
        let names = |ts: Vec<Target>| ts.into_iter().map(|t| t.name).collect::<Vec<_>>();
        assert_eq!(
            names(args.extend(Vec::new(), &procs)),
            ["move servBusy1", "zero servBusy1", "speedup hot=2"]
        );
        let run = as_run(&procs);
        assert_eq!(
            run.nodes,
            vec![Node {
                procs: vec![0, 1],
                cores: 2,
                speed: 1.0
            }]
        );
        let two = vec![
            Target {
                name: "a".into(),
                ..run.clone()
            },
            Target {
                name: "b".into(),
                ..run
            },
        ];
        assert_eq!(
            names(args.extend(two, &procs))[2..4],
            ["a move servBusy1", "b move servBusy1"]
        );
        assert!(parse_speedup("f=0").is_err());
        assert!(parse_speedup("f").is_err());
        assert_eq!(parse_speedup("ns::f=1.5"), Ok(("ns::f".into(), 1.5)));
    }
}
