//! The network a traced run saw, from its own messages (`lbf-gag fit-network`): NF can start
//! from the present network without a separate benchmark.
//!
//! A message's time is its arrival (its `recv_end`'s `t_ns`) less its departure (its
//! `send`'s), kept only where the receiver was already waiting when it was sent (its latest
//! `recv_start` before the `recv_end` came before the `send`): otherwise the arrival is when
//! the receiver got there, not when the message did. Per size class (0 B, then powers of two:
//! 1, 2-3, 4-7, ...) the one-way time is a low quantile of the times ([`QUANTILE`] by default:
//! the lower envelope, robust to a few messages timed too short or long) at the class's
//! median size, and the table is the fewest of those points that reproduce them all
//! ([`crate::fit`], as `lbf-node calibrate` fits).
//!
//! A socket send that several receives took is several messages in a trace (one per piece,
//! each sent at the call, the later ones with their `after`): they are timed together,
//! as one message of all their bytes, from the call (its entry: when the bytes began to
//! leave) to the last piece's arrival, as a ping-pong times a message, with the first piece's
//! receiver waiting.
//!
//! A message sent by rendezvous to a receiver already waiting arrives, in the engine's model
//! (`docs/engine.md`), two empty-message times after its send plus the table's time for its
//! size: the request and the answer travel first. Its table time is therefore its
//! send-to-arrival less twice the empty-message time, taken from the eager messages (their
//! fastest size class: no message is faster than an empty one); without eager messages to
//! take that from, rendezvous messages are left out.
//!
//! `t_ns` is one machine's clock: messages between processes the trace places on different
//! hosts are left out (cluster mode's merged traces carry no `t_ns` at all).

use crate::output::{Counted, NetworkTable};
use crate::pingpong::Measured;
use lbf_model::event::{EventKind, MsgId, ProcId};
use lbf_model::trace::TraceReader;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::path::Path;

/// The quantile of a size class's times taken as its one-way time by default: the 10 %.
pub const QUANTILE: f64 = 0.1;

/// How to fit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Options {
    /// The quantile of a size class's times that is its one-way time (0 to 1).
    pub quantile: f64,
    /// Whether every message crossed a network although the trace names one host for all
    /// processes (network namespaces or containers of one machine): the table is then
    /// `remote`, else `local`.
    pub remote: bool,
}

impl Default for Options {
    /// The [`QUANTILE`], messages within a host.
    fn default() -> Self {
        Options {
            quantile: QUANTILE,
            remote: false,
        }
    }
}

/// One message timed from its send to its arrival.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timed {
    /// Its size.
    pub bytes: u64,
    /// Arrival less send, seconds.
    pub seconds: f64,
    /// Whether it was sent by rendezvous.
    pub rendezvous: bool,
}

/// What became of a trace's messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Messages sent and received in the trace.
    pub messages: u64,
    /// Left out: their send or their receive has no `t_ns`.
    pub untimed: u64,
    /// Left out: between processes of different hosts, whose clocks differ.
    pub across_hosts: u64,
    /// Left out: their receiver was not waiting yet when they were sent.
    pub not_waiting: u64,
    /// Left out: sent by rendezvous, with no eager message to take the handshake's time from.
    pub rendezvous_alone: u64,
}

/// The table a traced run's messages give, and how many messages it rests on.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceNetwork {
    /// The fitted table (`local` or `remote`, [`Options::remote`]), with the messages per
    /// size as its counts.
    pub table: NetworkTable,
    /// Messages sent by rendezvous among them.
    pub rendezvous: u64,
    /// The empty-message time taken twice off each of those (seconds).
    pub handshake: f64,
    /// What became of the trace's messages.
    pub tally: Tally,
}

/// A message's send, kept until its receive is read (or the other way round).
#[derive(Clone, Copy, Debug)]
struct Sent {
    proc: ProcId,
    bytes: u64,
    rendezvous: bool,
    t: Option<u64>,
    /// The first message of its send call (itself, but for the later pieces of a socket
    /// send that several receives took).
    call: MsgId,
}

/// One send call's messages as they are paired with their receives: a socket send that
/// several receives took is several messages (pieces) of one call, timed together from the
/// call to the arrival of its last piece, as a ping-pong times a message.
#[derive(Clone, Copy, Debug, Default)]
struct Call {
    /// Its pieces, and those paired with their receives so far.
    pieces: u32,
    paired: u32,
    bytes: u64,
    /// Its last piece's arrival so far.
    arrival: u64,
    /// What its first piece's pairing found (`None`: timed), which stands for the call's.
    left_out: Option<LeftOut>,
    rendezvous: bool,
    departure: u64,
}

/// Why a message is left out of the fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LeftOut {
    Untimed,
    AcrossHosts,
    NotWaiting,
}

/// A message's receive: its process, when it ended, and since when the process waited.
#[derive(Clone, Copy, Debug)]
struct Received {
    proc: ProcId,
    t: Option<u64>,
    waiting_since: Option<u64>,
}

/// The messages of `trace` that can be timed, and what became of the others. A trace without
/// any `t_ns` is an error saying how to get one.
pub fn timed_messages(trace: &Path) -> Result<(Vec<Timed>, Tally), String> {
    let name = trace.display();
    let mut reader = TraceReader::open(trace).map_err(|e| format!("{name}: {e}"))?;
    let hosts: Vec<String> = reader
        .header()
        .procs
        .iter()
        .map(|p| p.host.clone())
        .collect();
    let mut waiting: Vec<Option<u64>> = vec![None; hosts.len()];
    // Each process's last send call: its first message (its later ones have `after`).
    let mut calling: Vec<Option<MsgId>> = vec![None; hosts.len()];
    let mut sent: HashMap<MsgId, Sent> = HashMap::new();
    let mut received: HashMap<MsgId, Received> = HashMap::new();
    let mut calls: BTreeMap<MsgId, Call> = BTreeMap::new();
    let mut any_time = false;
    while let Some(e) = reader.next_event().map_err(|e| format!("{name}: {e}"))? {
        any_time |= e.t_ns.is_some();
        let proc = e.event.proc;
        let wait = &mut waiting[proc as usize];
        let in_call = calling[proc as usize].take();
        match e.event.kind {
            EventKind::RecvStart => *wait = e.t_ns,
            EventKind::RecvEnd { msg } => {
                let r = Received {
                    proc,
                    t: e.t_ns,
                    waiting_since: *wait,
                };
                match sent.remove(&msg) {
                    Some(s) => pair(&mut calls, &hosts, msg, s, r),
                    None => {
                        received.insert(msg, r);
                    }
                }
            }
            // Still inside the wait that its recv_start began.
            EventKind::SendEnd { .. } => {}
            EventKind::Send {
                msg,
                bytes,
                rendezvous,
                after,
            } => {
                *wait = None;
                let call = match in_call {
                    Some(first) if after > 0 => first,
                    _ => msg,
                };
                calling[proc as usize] = Some(call);
                calls.entry(call).or_default().pieces += 1;
                let s = Sent {
                    proc,
                    bytes,
                    rendezvous,
                    t: e.t_ns,
                    call,
                };
                match received.remove(&msg) {
                    Some(r) => pair(&mut calls, &hosts, msg, s, r),
                    None => {
                        sent.insert(msg, s);
                    }
                }
            }
            _ => *wait = None,
        }
    }
    let mut tally = Tally::default();
    let mut timed = Vec::new();
    // A call some of whose pieces were never received is not timed, nor counted.
    for call in calls.values().filter(|c| c.paired == c.pieces) {
        tally.messages += 1;
        match call.left_out {
            Some(LeftOut::Untimed) => tally.untimed += 1,
            Some(LeftOut::AcrossHosts) => tally.across_hosts += 1,
            Some(LeftOut::NotWaiting) => tally.not_waiting += 1,
            None => timed.push(Timed {
                bytes: call.bytes,
                seconds: call.arrival.saturating_sub(call.departure) as f64 / 1e9,
                rendezvous: call.rendezvous,
            }),
        }
    }
    if !any_time {
        return Err(format!(
            "{name} has no wall-clock timestamps (`t_ns` on its events), so its messages \
             cannot be timed: it was written by an older lbf, by a socket or PVM capture, or \
             merged by a cluster builder (hosts' clocks differ). Trace the MPI job with this \
             lbf-trace (`lbf-trace -o run.trace.jsonl -- mpirun ...`) to get them"
        ));
    }
    Ok((timed, tally))
}

/// Pairs message `msg`'s send `s` with its receive `r`, into its send call's [`Call`].
fn pair(calls: &mut BTreeMap<MsgId, Call>, hosts: &[String], msg: MsgId, s: Sent, r: Received) {
    let call = calls.entry(s.call).or_default();
    call.paired += 1;
    call.bytes += s.bytes;
    let first = msg == s.call;
    let (Some(departure), Some(arrival)) = (s.t, r.t) else {
        call.left_out.get_or_insert(LeftOut::Untimed);
        return;
    };
    call.arrival = call.arrival.max(arrival);
    if hosts[s.proc as usize] != hosts[r.proc as usize] {
        call.left_out = Some(LeftOut::AcrossHosts);
    } else if first && r.waiting_since.is_none_or(|w| w > departure) {
        call.left_out.get_or_insert(LeftOut::NotWaiting);
    }
    if first {
        call.departure = departure;
        call.rendezvous = s.rendezvous;
    }
}

/// One measured point per size class of `times` (`(bytes, seconds)`): the class's median size
/// and the `quantile` of its times, with how many times it has; classes are 0 B and the powers
/// of two (1, 2-3, 4-7, ...), in order of size.
pub fn size_classes(times: &[(u64, f64)], quantile: f64) -> Vec<Measured> {
    let mut classes: BTreeMap<u32, (Vec<u64>, Vec<f64>)> = BTreeMap::new();
    for &(bytes, seconds) in times {
        let class = classes
            .entry(u64::BITS - bytes.leading_zeros())
            .or_default();
        class.0.push(bytes);
        class.1.push(seconds);
    }
    classes
        .into_values()
        .map(|(mut sizes, mut seconds)| {
            sizes.sort_unstable();
            seconds.sort_by(f64::total_cmp);
            let n = seconds.len();
            // The nearest rank: the smallest time with at least `quantile` of them at or below.
            let rank = ((quantile * n as f64).ceil() as usize).clamp(1, n);
            Measured {
                bytes: sizes[(n - 1) / 2],
                seconds: seconds[rank - 1],
                reps: n as u32,
            }
        })
        .collect()
}

/// Fits the table of `trace`'s messages with `options`; `how` (the command line) heads the
/// file. An error where no message can be timed, saying why.
pub fn fit_network(trace: &Path, options: Options, how: &str) -> Result<TraceNetwork, String> {
    let (timed, mut tally) = timed_messages(trace)?;
    let eager: Vec<(u64, f64)> = timed
        .iter()
        .filter(|m| !m.rendezvous)
        .map(|m| (m.bytes, m.seconds))
        .collect();
    // No message is faster than an empty one: the fastest size class is the best estimate of
    // the empty message's time, where the smallest sizes met delays (a busy machine).
    let handshake = size_classes(&eager, options.quantile)
        .iter()
        .map(|m| m.seconds)
        .min_by(f64::total_cmp);
    let mut all = eager;
    let rendezvous: Vec<&Timed> = timed.iter().filter(|m| m.rendezvous).collect();
    let adjusted = match handshake {
        Some(c0) => {
            all.extend((rendezvous.iter()).map(|m| (m.bytes, (m.seconds - 2.0 * c0).max(0.0))));
            rendezvous.len() as u64
        }
        None => {
            tally.rendezvous_alone = rendezvous.len() as u64;
            0
        }
    };
    if all.is_empty() {
        return Err(format!(
            "no message of {} can be timed: {}",
            trace.display(),
            tally_words(&tally)
        ));
    }
    let key = if options.remote { "remote" } else { "local" };
    let how = format!(
        "{how}\n# the {} % quantile of each size class's send-to-arrival times of {} messages \
         whose receiver was already waiting",
        options.quantile * 100.0,
        all.len()
    );
    let measured = size_classes(&all, options.quantile);
    Ok(TraceNetwork {
        table: NetworkTable::fit_counting(key, how, measured, Counted::Messages),
        rendezvous: adjusted,
        handshake: handshake.unwrap_or(0.0),
        tally,
    })
}

/// What became of the messages, in words: how many, and each reason some were left out.
fn tally_words(t: &Tally) -> String {
    let mut s = format!("{} messages", t.messages);
    for (n, why) in [
        (t.untimed, "without t_ns on their send or receive"),
        (
            t.across_hosts,
            "between processes of different hosts (their clocks differ)",
        ),
        (
            t.not_waiting,
            "sent before their receiver waited for them (their arrival is the receiver's)",
        ),
        (
            t.rendezvous_alone,
            "sent by rendezvous, with no eager message to time the handshake by",
        ),
    ] {
        if n > 0 {
            let _ = write!(s, ", {n} {why}");
        }
    }
    s
}

impl TraceNetwork {
    /// What it measured: the messages used and left out, then every size class beside the
    /// fitted table (the `msgs` column: how many messages supported each point).
    pub fn listing(&self) -> String {
        let used: u64 = self.table.measured.iter().map(|m| u64::from(m.reps)).sum();
        let mut s = format!(
            "{}: {used} messages timed, of {}\n",
            self.table.key,
            tally_words(&self.tally)
        );
        if self.rendezvous > 0 {
            let _ = writeln!(
                s,
                "{} sent by rendezvous, each less the handshake's 2 x {:.4e} s",
                self.rendezvous, self.handshake
            );
        }
        s + &self.table.listing()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trace file of `body` lines (events) after a header of processes on `hosts`.
    fn trace(name: &str, hosts: &[&str], body: &[String]) -> std::path::PathBuf {
        let procs: Vec<String> = hosts
            .iter()
            .enumerate()
            .map(|(i, h)| format!(r#"{{"id":{i},"host":"{h}"}}"#))
            .collect();
        let mut text = format!(
            r#"{{"format":"lbf-trace","version":2,"procs":[{}]}}"#,
            procs.join(",")
        );
        for line in body {
            text.push('\n');
            text.push_str(line);
        }
        text.push('\n');
        let path = std::env::temp_dir().join(format!(
            "lbf-trace-network-{}-{name}.jsonl",
            std::process::id()
        ));
        std::fs::write(&path, text).expect("writing the trace");
        path
    }

    /// Message `msg` of `bytes` from process 0 (sent at `sent` us) to process 1, which
    /// waits from `waits` us and has it at `arrives` us.
    fn message(msg: u64, bytes: u64, (waits, sent, arrives): (u64, u64, u64)) -> [String; 3] {
        let us = 1000;
        [
            format!(
                r#"{{"p":1,"k":"recv_start","cpu_ns":0,"t_ns":{}}}"#,
                waits * us
            ),
            format!(
                r#"{{"p":0,"k":"send","cpu_ns":0,"msg":{msg},"bytes":{bytes},"t_ns":{}}}"#,
                sent * us
            ),
            format!(
                r#"{{"p":1,"k":"recv_end","cpu_ns":0,"msg":{msg},"t_ns":{}}}"#,
                arrives * us
            ),
        ]
    }

    #[test]
    fn the_lower_envelope_of_waited_for_messages_by_size() {
        // 100 B: 50 us, one message late (not the envelope), one sent before its receiver
        // waited (left out); 1 MiB: 1 ms per 100 kB.
        let mut body = Vec::new();
        let mut msg = 0;
        let mut add = |bytes, (w, s, a), body: &mut Vec<String>| {
            msg += 1;
            body.extend(message(msg, bytes, (w, s, a)));
        };
        let mut at = 0;
        for _ in 0..9 {
            add(100, (at, at + 10, at + 60), &mut body);
            at += 1000;
        }
        add(100, (at, at + 10, at + 900), &mut body);
        add(100, (at + 2000, at + 1000, at + 2010), &mut body);
        add(
            1 << 20,
            (at + 3000, at + 3000, at + 3000 + 10486),
            &mut body,
        );
        body.push(r#"{"p":0,"k":"exit","cpu_ns":0}"#.into());
        body.push(r#"{"p":1,"k":"exit","cpu_ns":0}"#.into());
        let path = trace("envelope", &["a", "a"], &body);
        let fit = fit_network(&path, Options::default(), "test").unwrap();
        assert_eq!(fit.tally.messages, 12);
        assert_eq!(fit.tally.not_waiting, 1);
        assert_eq!(fit.table.key, "local");
        let points: Vec<(u64, f64, u32)> = fit
            .table
            .measured
            .iter()
            .map(|m| (m.bytes, m.seconds, m.reps))
            .collect();
        assert_eq!(points, vec![(100, 50e-6, 10), (1 << 20, 10.486e-3, 1)]);
        let listing = fit.listing();
        assert!(
            listing.starts_with("local: 11 messages timed, of 12 messages, 1 sent before"),
            "{listing}"
        );
        assert!(listing.contains("msgs"), "{listing}");
        let remote = Options {
            remote: true,
            ..Options::default()
        };
        let fit = fit_network(&path, remote, "test").unwrap();
        assert!(fit.table.toml().contains("\nremote = [[100, 5e-5]"));
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_rendezvous_message_is_timed_less_its_handshake() {
        // Eager 8 B: 40 us; by rendezvous 1 MB: 2 x 40 us of handshake, then 8 ms.
        let mut body: Vec<String> = message(1, 8, (0, 10, 50)).into();
        let mut rendezvous = message(2, 1_000_000, (100, 100, 100 + 80 + 8000));
        rendezvous[1] = rendezvous[1].replace(r#","t_ns""#, r#","rendezvous":true,"t_ns""#);
        body.extend(rendezvous);
        body.push(r#"{"p":0,"k":"send_end","cpu_ns":0,"msg":2,"t_ns":8180000}"#.into());
        let path = trace("rendezvous", &["a", "a"], &body);
        let fit = fit_network(&path, Options::default(), "test").unwrap();
        assert_eq!(fit.rendezvous, 1);
        assert!((fit.handshake - 40e-6).abs() < 1e-12);
        let big = fit.table.measured[1];
        assert_eq!(big.bytes, 1_000_000);
        assert!((big.seconds - 8e-3).abs() < 1e-12, "{big:?}");
        // Alone, a rendezvous message has no handshake to go by.
        let alone = trace("rendezvous-alone", &["a", "a"], &body[3..]);
        let err = fit_network(&alone, Options::default(), "test").unwrap_err();
        assert!(err.contains("1 sent by rendezvous, with no eager"), "{err}");
        std::fs::remove_file(path).unwrap();
        std::fs::remove_file(alone).unwrap();
    }

    #[test]
    fn traces_without_usable_times_are_errors_that_say_why() {
        let untimed = trace(
            "untimed",
            &["a", "a"],
            &[
                r#"{"p":0,"k":"send","cpu_ns":0,"msg":1,"bytes":8}"#.into(),
                r#"{"p":1,"k":"recv_end","cpu_ns":0,"msg":1}"#.into(),
            ],
        );
        let err = fit_network(&untimed, Options::default(), "test").unwrap_err();
        assert!(err.contains("has no wall-clock timestamps"), "{err}");
        assert!(err.contains("lbf-trace -o"), "{err}");
        let apart = trace("apart", &["a", "b"], &message(1, 8, (0, 10, 50)));
        let err = fit_network(&apart, Options::default(), "test").unwrap_err();
        assert!(
            err.contains("1 messages, 1 between processes of different hosts"),
            "{err}"
        );
        let late = trace("late", &["a", "a"], &message(1, 8, (20, 10, 50)));
        let err = fit_network(&late, Options::default(), "test").unwrap_err();
        assert!(err.contains("1 sent before their receiver waited"), "{err}");
        for path in [untimed, apart, late] {
            std::fs::remove_file(path).unwrap();
        }
    }

    #[test]
    fn size_classes_are_powers_of_two_at_their_median_size() {
        let times = [(0, 1.0), (3, 2.0), (2, 3.0), (2, 4.0), (5, 5.0)];
        let classes: Vec<(u64, f64, u32)> = size_classes(&times, 0.5)
            .iter()
            .map(|m| (m.bytes, m.seconds, m.reps))
            .collect();
        assert_eq!(classes, vec![(0, 1.0, 1), (2, 3.0, 3), (5, 5.0, 1)]);
    }
}
