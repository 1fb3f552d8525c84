//! Targets that change a traced procedure, against hand-computed graphs: the paper's Fig. 1
//! (a procedure moved from a sender on the critical path to a receiver that waited), zeroing,
//! speed-ups, moves restricted by `from`/`to`, and a move that loads a shared node.

use lbf_model::engine::{Engine, EngineError};
use lbf_model::event::{Event, EventKind, ProcId, ProcedureCpu};
use lbf_model::procedure::{ProcedureAction, ProcedureChange};
use lbf_model::target::{Network, Node, Target};

const S: u64 = 1_000_000_000;

/// An event of `cpu` seconds, `f` of them inside procedure `F`.
fn ev(proc: ProcId, cpu: u64, f: u64, kind: EventKind) -> (Event, u64) {
    let event = Event {
        proc,
        cpu_ns: cpu * S,
        kind,
    };
    (event, f * S)
}

fn send(msg: u64) -> EventKind {
    EventKind::Send {
        after: 0,
        msg,
        bytes: 0,
        rendezvous: false,
    }
}

fn target(nodes: Vec<Vec<ProcId>>, action: Option<ProcedureAction>) -> Target {
    Target {
        name: format!("{action:?}"),
        nodes: nodes.into_iter().map(Node::new).collect(),
        network: Network::default(),
        spin: 0.0,
        scheduler: None,
        bind_to_cores: false,
        procedures: action
            .into_iter()
            .map(|action| ProcedureChange {
                name: "F".into(),
                action,
            })
            .collect(),
    }
}

fn predict(events: &[(Event, u64)], targets: Vec<Target>) -> Result<Vec<f64>, EngineError> {
    let n = events.iter().map(|(e, _)| e.proc + 1).max().unwrap_or(0) as usize;
    let mut engine = Engine::with_procedures(n, &["F".to_string()], targets)?;
    for (i, (event, f)) in events.iter().enumerate() {
        let shares = ProcedureCpu::from_slice(&[*f]).unwrap();
        engine.push_with_procedures(*event, &shares, i as u64 + 1)?;
    }
    Ok(engine
        .finish()?
        .into_iter()
        .map(|p| p.predicted_seconds)
        .collect())
}

fn every_move() -> Option<ProcedureAction> {
    Some(ProcedureAction::Move {
        from: None,
        to: None,
    })
}

/// Fig. 1: S computes 2 s, then 3 s in F, and sends; R computes 1 s and waits for the message,
/// then computes 1 s. `Cs = 5`, `Cr = 1`, `F = 3`. Each on a node of its own.
fn figure1(f_on_keepalive: bool) -> Vec<(Event, u64)> {
    let sender = if f_on_keepalive {
        vec![
            ev(0, 3, 3, EventKind::Keepalive),
            ev(0, 2, 0, send(1)),
            ev(0, 1, 0, EventKind::Exit),
        ]
    } else {
        vec![ev(0, 5, 3, send(1)), ev(0, 1, 0, EventKind::Exit)]
    };
    let receiver = vec![
        ev(1, 1, 0, EventKind::RecvStart),
        ev(1, 0, 0, EventKind::RecvEnd { msg: 1 }),
        ev(1, 1, 0, EventKind::Exit),
    ];
    // The receiver's events first: its receive waits for the sender's share.
    receiver.into_iter().chain(sender).collect()
}

#[test]
fn figure1_move_zero_and_speedup() {
    let spread = vec![vec![0], vec![1]];
    for f_on_keepalive in [false, true] {
        let got = predict(
            &figure1(f_on_keepalive),
            vec![
                target(spread.clone(), None),
                target(spread.clone(), every_move()),
                target(spread.clone(), Some(ProcedureAction::Zero)),
                target(spread.clone(), Some(ProcedureAction::Speedup(2.0))),
            ],
        )
        .unwrap();
        // As traced: R's receive completes at Cs = 5, then 1 s: 6.
        // Moved: S sends at 2 (Cs - F); R does F from 1 to 4 (Cr + F), and its receive
        // completes at max(2, 4) = 4, the paper's max(Cs - F, Cr + F); then 1 s: 5.
        // Zero: S sends at 2; R completes at 2, exits at 3; S exits at 3.
        // Speed-up 2: S sends at 3.5; both exit at 4.5.
        assert_eq!(
            got,
            vec![6.0, 5.0, 3.0, 4.5],
            "F on a keepalive: {f_on_keepalive}"
        );
    }
}

#[test]
fn a_procedure_before_a_receive_stays_where_it_ran() {
    // S runs F (2 s) and then waits for a message from R: the interval ends at a receive.
    let events = vec![
        ev(0, 2, 2, EventKind::RecvStart),
        ev(0, 0, 0, EventKind::RecvEnd { msg: 1 }),
        ev(0, 1, 0, EventKind::Exit),
        ev(1, 1, 0, send(1)),
        ev(1, 0, 0, EventKind::Exit),
    ];
    let spread = vec![vec![0], vec![1]];
    let got = predict(
        &events,
        vec![target(spread.clone(), None), target(spread, every_move())],
    )
    .unwrap();
    assert_eq!(got, vec![3.0, 3.0]);
}

#[test]
fn from_and_to_restrict_a_move() {
    // A server (0) answers two clients (1, 2) with F of 2 s each; each client sent at 0.
    let mut events = Vec::new();
    for (c, m) in [(1, 1), (2, 2)] {
        events.push(ev(c, 0, 0, send(m)));
        events.push(ev(c, 0, 0, EventKind::RecvStart));
        events.push(ev(c, 0, 0, EventKind::RecvEnd { msg: m + 10 }));
        events.push(ev(c, 0, 0, EventKind::Exit));
    }
    for m in [1, 2] {
        events.push(ev(0, 0, 0, EventKind::RecvStart));
        events.push(ev(0, 0, 0, EventKind::RecvEnd { msg: m }));
        events.push(ev(0, 2, 2, send(m + 10)));
    }
    events.push(ev(0, 0, 0, EventKind::Exit));
    let spread = vec![vec![0], vec![1], vec![2]];
    let to_2 = ProcedureAction::Move {
        from: None,
        to: Some(vec![2]),
    };
    let from_1 = ProcedureAction::Move {
        from: Some(vec![1]),
        to: None,
    };
    let got = predict(
        &events,
        vec![
            target(spread.clone(), None),
            target(spread.clone(), every_move()),
            target(spread.clone(), Some(to_2)),
            target(spread, Some(from_1)),
        ],
    )
    .unwrap();
    // As traced: replies at 2 and 4. Moved to both: each client computes its 2 s from 0,
    // in parallel: 2. Moved to client 2 only: client 1's reply at 2, client 2's at 2 (sent
    // at 2, computed 0-2): 2. Moved from process 1 only (which runs nothing): 4.
    assert_eq!(got, vec![4.0, 2.0, 2.0, 4.0]);
}

#[test]
fn moved_work_shares_the_receivers_node() {
    // R and X share a one-core node; S sends after 3 s, 2 of them in F. X computes 4 s.
    let events = vec![
        ev(1, 0, 0, EventKind::RecvStart),
        ev(1, 0, 0, EventKind::RecvEnd { msg: 1 }),
        ev(1, 0, 0, EventKind::Exit),
        ev(2, 4, 0, EventKind::Exit),
        ev(0, 3, 2, send(1)),
        ev(0, 0, 0, EventKind::Exit),
    ];
    let nodes = vec![vec![0], vec![1, 2]];
    let got = predict(
        &events,
        vec![target(nodes.clone(), None), target(nodes, every_move())],
    )
    .unwrap();
    // As traced: X alone 0-3 (3 s done), R exits at 3, X ends at 4.
    // Moved: R does F's 2 s sharing the core with X from 0: done at 4, when X has done 2;
    // X ends at 6. Moving work onto a busy node makes the run longer.
    assert_eq!(got, vec![4.0, 6.0]);
}

#[test]
fn a_target_naming_an_unrecorded_procedure_is_refused() {
    let t = Target {
        procedures: vec![ProcedureChange {
            name: "servBusy9".into(),
            action: ProcedureAction::Zero,
        }],
        ..target(vec![vec![0]], None)
    };
    let err = Engine::with_procedures(1, &["F".into()], vec![t])
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "target `None`: procedure `servBusy9` is not in the trace, which records `F`"
    );
}
