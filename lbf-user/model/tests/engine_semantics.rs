//! The engine against hand-worked examples: the paper's Fig. 3/5, and the two extreme
//! placements whose answer is known in closed form.

use std::cell::RefCell;
use std::rc::Rc;

use lbf_model::engine::{Engine, EngineError, ScheduleSink};
use lbf_model::event::{CollOp, Event, EventKind, ProcId};
use lbf_model::target::{CommTable, Network, Node, Target};

const S: u64 = 1_000_000_000; // one "unit" of the paper = one second of CPU

fn ev(proc: ProcId, cpu_units: u64, kind: EventKind) -> Event {
    Event {
        proc,
        cpu_ns: cpu_units * S,
        kind,
    }
}

fn target(name: &str, nodes: Vec<Vec<ProcId>>) -> Target {
    Target {
        name: name.into(),
        nodes: nodes.into_iter().map(Node::new).collect(),
        network: Network::default(),
        spin: 0.0,
        scheduler: None,
        bind_to_cores: false,
        procedures: Vec::new(),
    }
}

/// The events of Fig. 3 in their arrival order (processes renumbered from 0).
fn figure3() -> Vec<Event> {
    use EventKind::*;
    vec![
        ev(0, 1, RecvStart),          // E11
        ev(1, 2, Keepalive),          // E21 (a non-endRecv event)
        ev(0, 0, RecvEnd { msg: 1 }), // E12
        ev(
            2,
            5,
            Send {
                after: 0,
                msg: 1,
                bytes: 0,
                rendezvous: false,
            },
        ), // E31
        ev(1, 1, Exit),               // E22
        ev(2, 1, Exit),               // E32
        ev(0, 2, Exit),               // E13
    ]
}

/// Records when each event was reported.
#[derive(Default)]
struct Reported(Rc<RefCell<Vec<(ProcId, usize, f64)>>>);

impl ScheduleSink for Reported {
    fn running(&mut self, _: ProcId, _: usize, _: f64, _: f64, _: f64) {}
    fn waiting(&mut self, _: ProcId, _: usize, _: f64, _: f64) {}
    fn message(&mut self, _: ProcId, _: ProcId, _: f64, _: f64, _: u64) {}
    fn event(&mut self, proc: ProcId, node: usize, time: f64, _: &EventKind) {
        self.0.borrow_mut().push((proc, node, time));
    }
}

#[test]
fn figure_5_predicts_7_with_the_papers_group_times() {
    let mut engine = Engine::new(
        3,
        vec![target("G1={P1,P2} G2={P3}", vec![vec![0, 1], vec![2]])],
    )
    .unwrap();
    let log = Rc::new(RefCell::new(Vec::new()));
    engine.set_schedule_sink(0, Box::new(Reported(log.clone())));
    for (i, e) in figure3().into_iter().enumerate() {
        engine.push(e, i as u64 + 1).unwrap();
    }
    let predictions = engine.finish().unwrap();
    assert_eq!(predictions[0].predicted_seconds, 7.0);
    // Fig. 5's "Reported" column with the group time after each report:
    // E11 at 2, E21 at 3, E22 at 4 (G1); E31 at 5 (G2); E12 at 5 (G1); E32 at 6; E13 at 7.
    let reported = log.borrow().clone();
    assert_eq!(
        reported,
        vec![
            (0, 0, 2.0), // E11
            (1, 0, 3.0), // E21
            (1, 0, 4.0), // E22
            (2, 1, 5.0), // E31
            (0, 0, 5.0), // E12
            (2, 1, 6.0), // E32
            (0, 0, 7.0), // E13
        ]
    );
}

#[test]
fn figure_5_is_independent_of_arrival_order() {
    let events = figure3();
    // Process by process, in reverse process order: a very different interleaving.
    let mut reordered: Vec<Event> = Vec::new();
    for p in [2, 1, 0] {
        reordered.extend(events.iter().filter(|e| e.proc == p));
    }
    let mut engine = Engine::new(3, vec![target("t", vec![vec![0, 1], vec![2]])]).unwrap();
    for e in reordered {
        engine.push(e, 0).unwrap();
    }
    assert_eq!(engine.finish().unwrap()[0].predicted_seconds, 7.0);
}

#[test]
fn one_node_takes_the_sum_of_cpu_times_and_one_per_node_the_longest_path() {
    let mut engine = Engine::new(
        3,
        vec![
            target("all on one", vec![vec![0, 1, 2]]),
            target("one each", vec![vec![0], vec![1], vec![2]]),
        ],
    )
    .unwrap();
    for e in figure3() {
        engine.push(e, 0).unwrap();
    }
    let p = engine.finish().unwrap();
    // Work: P1 1+2, P2 2+1, P3 5+1 = 12; the recv_end's CPU is waiting, not work.
    assert_eq!(p[0].predicted_seconds, 12.0);
    // Longest path: P3 sends at 5, P1 receives at 5 and exits at 7.
    assert_eq!(p[1].predicted_seconds, 7.0);
}

#[test]
fn messages_pay_the_remote_table_between_nodes_and_the_local_one_within() {
    use EventKind::*;
    let events = vec![
        ev(
            0,
            1,
            Send {
                after: 0,
                msg: 9,
                bytes: 1000,
                rendezvous: false,
            },
        ),
        ev(0, 0, Exit),
        ev(1, 0, RecvStart),
        ev(1, 0, RecvEnd { msg: 9 }),
        ev(1, 1, Exit),
    ];
    let network = Network {
        local: CommTable::new(vec![(0.0, 0.5), (1000.0, 1.0)]).unwrap(),
        remote: CommTable::new(vec![(0.0, 2.0), (1000.0, 3.0)]).unwrap(),
    };
    let mut apart = target("apart", vec![vec![0], vec![1]]);
    apart.network = network.clone();
    let mut together = target("together", vec![vec![0, 1]]);
    together.network = network;
    let mut engine = Engine::new(2, vec![apart, together]).unwrap();
    for e in events {
        engine.push(e, 0).unwrap();
    }
    let p = engine.finish().unwrap();
    // apart: send at 1, arrives at 1 + 3 = 4, P1 exits at 5
    assert_eq!(p[0].predicted_seconds, 5.0);
    // together: P0 runs alone until its send at 1 (P1 is waiting), arrives at 2, P1 exits at 3
    assert_eq!(p[1].predicted_seconds, 3.0);
}

/// A send call that two receives took is two messages: the second leaves behind the first's
/// bytes (`after`), so it arrives when the whole call would, and the first when its own
/// bytes would.
#[test]
fn a_send_calls_later_messages_pay_for_the_bytes_before_them() {
    use EventKind::*;
    let events = vec![
        ev(
            0,
            1,
            Send {
                msg: 1,
                bytes: 400,
                rendezvous: false,
                after: 0,
            },
        ),
        ev(
            0,
            0,
            Send {
                msg: 2,
                bytes: 600,
                rendezvous: false,
                after: 400,
            },
        ),
        ev(0, 0, Exit),
        ev(1, 0, RecvStart),
        ev(1, 0, RecvEnd { msg: 1 }),
        ev(1, 0, RecvStart),
        ev(1, 0, RecvEnd { msg: 2 }),
        ev(1, 0, Exit),
    ];
    let mut apart = target("apart", vec![vec![0], vec![1]]);
    apart.network = Network {
        local: CommTable::default(),
        remote: CommTable::new(vec![(0.0, 0.0), (1000.0, 10.0)]).unwrap(),
    };
    let mut engine = Engine::new(2, vec![apart]).unwrap();
    for e in events {
        engine.push(e, 0).unwrap();
    }
    // Both leave at 1; the first arrives at 1 + 4, the second at 1 + 10 (its own 600 bytes
    // alone would take 6): P1 exits at 11.
    assert_eq!(engine.finish().unwrap()[0].predicted_seconds, 11.0);
}

#[test]
fn faster_and_multicore_nodes() {
    use EventKind::*;
    let mut fast = target("fast", vec![vec![0, 1]]);
    fast.nodes[0].speed = 2.0;
    let mut dual = target("dual", vec![vec![0, 1]]);
    dual.nodes[0].cores = 2;
    let mut engine = Engine::new(2, vec![fast, dual]).unwrap();
    engine.push(ev(0, 4, Exit), 0).unwrap();
    engine.push(ev(1, 2, Exit), 0).unwrap();
    let p = engine.finish().unwrap();
    assert_eq!(p[0].predicted_seconds, 3.0); // 6 CPU-seconds at speed 2
    assert_eq!(p[1].predicted_seconds, 4.0); // each on its own core
}

#[test]
fn collectives_release_everyone_after_the_last_arrival_plus_their_cost() {
    use EventKind::*;
    let coll = |size| CollStart {
        coll: 1,
        op: CollOp::Allreduce,
        size,
        bytes: 8,
    };
    let mut t = target("two nodes", vec![vec![0, 1], vec![2, 3]]);
    t.network.remote = CommTable::new(vec![(0.0, 0.25)]).unwrap();
    let mut engine = Engine::new(4, vec![t]).unwrap();
    for p in 0..4 {
        engine.push(ev(p, u64::from(p) + 1, coll(4)), 0).unwrap();
        engine.push(ev(p, 0, CollEnd { coll: 1 }), 0).unwrap();
        engine.push(ev(p, 1, Exit), 0).unwrap();
    }
    // Node 1 runs P2 (3) and P3 (4): P2 arrives at 6, P3 at 7. Allreduce of 4 on two nodes:
    // 2 * ceil(log2 4) = 4 rounds of 0.25 s: everyone leaves at 8. Then node 1 runs two exits
    // of 1 s each sharing the core: 10.
    assert_eq!(engine.finish().unwrap()[0].predicted_seconds, 10.0);
}

#[test]
fn a_receive_whose_message_is_never_sent_is_a_deadlock_naming_it() {
    use EventKind::*;
    let mut engine = Engine::new(2, vec![target("t", vec![vec![0], vec![1]])]).unwrap();
    engine.push(ev(0, 1, Exit), 1).unwrap();
    engine.push(ev(1, 1, RecvStart), 2).unwrap();
    let err = engine.push(ev(1, 0, RecvEnd { msg: 42 }), 3).unwrap_err();
    match &err {
        EngineError::Deadlock { waiting } => assert_eq!(waiting[0].0, 1),
        other => panic!("expected a deadlock, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("message 42") && text.contains("at 3"),
        "{text}"
    );
}

#[test]
fn bad_input_is_refused_with_its_origin() {
    use EventKind::*;
    let mut engine = Engine::new(1, vec![target("t", vec![vec![0]])]).unwrap();
    assert_eq!(
        engine.push(ev(5, 1, Exit), 7),
        Err(EngineError::UnknownProcess { proc: 5, origin: 7 })
    );
    let mut engine = Engine::new(1, vec![target("t", vec![vec![0]])]).unwrap();
    engine.push(ev(0, 1, Exit), 1).unwrap();
    assert_eq!(
        engine.push(ev(0, 1, Exit), 2),
        Err(EngineError::EventAfterExit { proc: 0, origin: 2 })
    );
    let mut engine = Engine::new(2, vec![target("t", vec![vec![0, 1]])]).unwrap();
    engine
        .push(
            ev(
                0,
                1,
                Send {
                    after: 0,
                    msg: 3,
                    bytes: 0,
                    rendezvous: false,
                },
            ),
            1,
        )
        .unwrap();
    engine
        .push(
            ev(
                0,
                1,
                Send {
                    after: 0,
                    msg: 3,
                    bytes: 0,
                    rendezvous: false,
                },
            ),
            2,
        )
        .unwrap();
    // Found as soon as every process has an event and the second send is simulated.
    let err = engine.push(ev(1, 1, Exit), 3).unwrap_err();
    assert_eq!(err, EngineError::DuplicateMessage { msg: 3, origin: 2 });
    // The engine refuses further input rather than go on from a broken state.
    assert_eq!(engine.push(ev(0, 1, Exit), 4), Err(err));
}

#[test]
fn a_stream_that_stops_early_is_truncated() {
    use EventKind::*;
    let mut engine = Engine::new(2, vec![target("t", vec![vec![0, 1]])]).unwrap();
    engine.push(ev(0, 1, Keepalive), 10).unwrap();
    let err = engine.finish().unwrap_err();
    assert_eq!(
        err,
        EngineError::Truncated {
            unfinished: vec![(0, 10), (1, 0)]
        }
    );
}

#[test]
fn targets_must_place_every_process_exactly_once() {
    let missing = Engine::new(2, vec![target("t", vec![vec![0]])])
        .err()
        .unwrap();
    assert!(
        missing.to_string().contains("process 1 is on no node"),
        "{missing}"
    );
    let twice = Engine::new(2, vec![target("t", vec![vec![0, 1], vec![1]])])
        .err()
        .unwrap();
    assert!(
        twice
            .to_string()
            .contains("process 1 is on node 0 and on node 1"),
        "{twice}"
    );
    let unknown = Engine::new(1, vec![target("t", vec![vec![0, 4]])])
        .err()
        .unwrap();
    assert!(unknown.to_string().contains("lists process 4"), "{unknown}");
}

#[test]
fn keepalives_let_the_engine_advance_and_events_are_freed() {
    use EventKind::*;
    let mut engine = Engine::new(2, vec![target("t", vec![vec![0], vec![1]])]).unwrap();
    // Process 1 computes for a long time, reporting only keep-alives; process 0 chats with
    // itself. Memory stays bounded by the unreported events.
    for i in 0..10_000u64 {
        engine
            .push(
                ev(
                    0,
                    1,
                    Send {
                        after: 0,
                        msg: i,
                        bytes: 0,
                        rendezvous: false,
                    },
                ),
                0,
            )
            .unwrap();
        engine.push(ev(0, 0, RecvStart), 0).unwrap();
        engine.push(ev(0, 0, RecvEnd { msg: i }), 0).unwrap();
        engine.push(ev(1, 1, Keepalive), 0).unwrap();
        assert!(
            engine.queued_events() < 16,
            "queue grew to {}",
            engine.queued_events()
        );
    }
    let progress = engine.progress();
    assert!(progress[0].simulated_seconds >= 9_999.0, "{progress:?}");
}

/// A trace whose processes say their start-up's CPU and CPUs (`lbf_model::startup`): each
/// target starts them later or sooner by its own shift, the run's own configuration not at
/// all.
#[test]
fn each_target_moves_the_start_up_by_its_own_shift() {
    use lbf_model::event::ProcInfo;
    // Two processes that started 1 s in, after 0.5 s of start-up CPU each on 2 CPUs (0.5 s
    // of wall for the CPU part), then compute 1 s each.
    let procs: Vec<ProcInfo> = (0..2)
        .map(|id| ProcInfo {
            id,
            start_ns: S,
            startup_cpu_ns: S / 2,
            cpus: "0-1".into(),
            ..ProcInfo::default()
        })
        .collect();
    let two_cores = Target {
        nodes: vec![Node {
            procs: vec![0, 1],
            cores: 2,
            speed: 1.0,
        }],
        ..target("2 cores", vec![])
    };
    let one_core = target("1 core", vec![vec![0, 1]]);
    let mut engine = Engine::for_procs(&procs, vec![two_cores, one_core]).unwrap();
    for p in 0..2 {
        engine.push(ev(p, 1, EventKind::Exit), 0).unwrap();
    }
    let predictions: Vec<(f64, f64)> = engine
        .finish()
        .unwrap()
        .iter()
        .map(|p| (p.predicted_seconds, p.startup_shift_seconds))
        .collect();
    // On 2 cores as measured: 1 s of start-up, 1 s of work. On 1 core the start-up's CPU
    // part takes 1 s instead of 0.5, and the work 2 s.
    assert_eq!(predictions, [(2.0, 0.0), (3.5, 0.5)]);
}
