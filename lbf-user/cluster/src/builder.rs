//! The central GAG builder (`lbf-gag serve`): accepts TLS streams from many nodes at once,
//! authenticates them, journals their batches, acknowledges, and feeds the engine thread
//! ([`super::apply`]); serves live results over HTTP ([`super::http`]).
//!
//! Every connection is its own task: a refused or malformed stream is logged and closed and
//! touches nothing the other streams use. A node that reconnects while its old connection is
//! still open (a cut the builder did not notice) takes over: the old connection is closed at
//! its next frame boundary, never in the middle of journaling a batch.

use super::apply::{Applier, Outcome, Work};
use super::journal::{self, NodeJournal};
use super::serve_config::{check_node_name, ServeConfig};
use super::status::Status;
use super::tls;
use super::wire::{decode_batch, read_frame, read_message, write_message};
use anyhow::{Context, Result};
use lbf_model::event::ProcId;
use lbf_model::trace::Header;
use lbf_proto::prost::Message;
use lbf_proto::{
    builder_frame, node_frame, Ack, BuilderFrame, Hello, Hold, NodeFrame, Refusal, Results,
    TargetResult, Welcome, PROTOCOL_VERSION,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Mutex};
use tokio_rustls::TlsAcceptor;

/// How long a new connection may take to finish its TLS handshake and send its hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a node held back by flow control is told so.
const HOLD_INTERVAL: Duration = Duration::from_secs(1);
/// Batches queued for the engine thread: bounds the builder's memory; a full queue stops the
/// connections from reading, which TCP turns into backpressure on the nodes.
const WORK_QUEUE: usize = 16;

/// One node's stream state, owned by its current connection.
struct NodeIo {
    journal: NodeJournal,
    last_seq: u64,
}

/// A node known to the builder.
struct Slot {
    hello: Hello,
    io: Mutex<NodeIo>,
    /// Bumped by every new connection of the node; an older connection sees it and leaves.
    generation: watch::Sender<u64>,
}

/// What every connection shares.
struct Ctx {
    config: ServeConfig,
    status: Arc<Status>,
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    work: mpsc::Sender<Work>,
    done: watch::Receiver<Option<Arc<Outcome>>>,
}

/// Why a hello is refused.
struct Refused {
    reason: String,
    permanent: bool,
}

/// Runs the builder until the job completes (with `exit_when_done`) or SIGINT/SIGTERM.
pub fn serve(config: ServeConfig, exit_when_done: bool) -> Result<()> {
    let names: Vec<String> = config.targets.iter().map(|t| t.name.clone()).collect();
    let status = Arc::new(Status::new(config.procs.len(), &names));
    let tls = tls::server_config(&config.cert, &config.key)?;
    let (work_tx, work_rx) = mpsc::channel(WORK_QUEUE);
    let (done_tx, done_rx) = watch::channel(None);
    let applier = Applier {
        header: Header {
            procs: config.procs.clone(),
            // Hosts may capture from different sources; the merged trace says none.
            source: None,
            procedures: config.procedures.clone(),
        },
        targets: config.targets.clone(),
        merged_trace: config.merged_trace.clone(),
        report: config.report.clone(),
        status: status.clone(),
        nodes: config.tokens.keys().cloned().collect(),
    };
    let engine = std::thread::Builder::new()
        .name("engine".into())
        .spawn(move || applier.run(work_rx, done_tx))
        .context("starting the engine thread")?;
    let slots = recover(&config, &status, &work_tx)?;
    let ctx = Arc::new(Ctx {
        config,
        status,
        slots: Mutex::new(slots),
        work: work_tx,
        done: done_rx,
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let served = runtime.block_on(run(ctx.clone(), TlsAcceptor::from(tls), exit_when_done));
    runtime.shutdown_timeout(Duration::from_secs(1));
    drop(ctx);
    let finished = engine
        .join()
        .map_err(|_| anyhow::anyhow!("the engine thread panicked"))?;
    served.and(finished)
}

/// Replays the journal into the engine; returns the nodes it holds.
fn recover(
    config: &ServeConfig,
    status: &Status,
    work: &mpsc::Sender<Work>,
) -> Result<HashMap<String, Arc<Slot>>> {
    let num_procs = config.procs.len();
    let recovered = journal::recover(&config.journal, config.fsync, |_, hello, batch| {
        if status.hello(&hello.node).is_none() {
            status.add_node(hello, 0, false);
        }
        let invalid = |e: String| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("journal of node `{}`: {e}", hello.node),
            )
        };
        check_procedures(hello, &config.procedures).map_err(invalid)?;
        let owned: BTreeSet<ProcId> = hello.procs.iter().map(|p| p.id).collect();
        let decoded = decode_batch(&batch, hello.procedures.len(), |p| {
            owned.contains(&p) && (p as usize) < num_procs
        })
        .map_err(invalid)?;
        let end = batch.end;
        let n = decoded.events.len() as u64;
        status.batch(&hello.node, batch.seq, n, batch.lost_events, end.is_some());
        let item = Work {
            node: hello.node.clone(),
            events: decoded.events,
            procedures: decoded.procedures,
            closed: decoded.closed,
            end,
        };
        work.blocking_send(item)
            .map_err(|_| std::io::Error::other("the engine thread stopped"))
    })
    .with_context(|| format!("recovering the journal {}", config.journal.display()))?;
    let mut slots = HashMap::new();
    for r in recovered {
        if status.hello(&r.hello.node).is_none() {
            status.add_node(&r.hello, r.last_seq, r.ended);
        }
        eprintln!(
            "lbf-gag serve: journal: node `{}` holds batches 1 to {}{}",
            r.hello.node,
            r.last_seq,
            if r.ended { " (complete)" } else { "" }
        );
        let slot = Slot {
            hello: r.hello.clone(),
            io: Mutex::new(NodeIo {
                journal: r.journal,
                last_seq: r.last_seq,
            }),
            generation: watch::channel(0).0,
        };
        slots.insert(r.hello.node, Arc::new(slot));
    }
    Ok(slots)
}

/// Accepts connections (and serves HTTP) until told to stop.
async fn run(ctx: Arc<Ctx>, acceptor: TlsAcceptor, exit_when_done: bool) -> Result<()> {
    let listener = TcpListener::bind(ctx.config.listen)
        .await
        .with_context(|| format!("listening on {} for nodes", ctx.config.listen))?;
    eprintln!(
        "lbf-gag serve: listening for nodes on {} (TLS); job of {} processes, {} target(s)",
        ctx.config.listen,
        ctx.config.procs.len(),
        ctx.config.targets.len()
    );
    if let Some(addr) = ctx.config.http {
        let http = TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr} for HTTP"))?;
        eprintln!("lbf-gag serve: HTTP on http://{addr} (/results, /nodes, /metrics)");
        tokio::spawn(super::http::serve(http, ctx.status.clone()));
    }
    tokio::spawn(super::http::measure_rate(ctx.status.clone()));
    let mut done = ctx.done.clone();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, peer)) => {
                    let _ = tcp.set_nodelay(true);
                    tokio::spawn(connection(ctx.clone(), acceptor.clone(), tcp, peer));
                }
                Err(e) => eprintln!("lbf-gag serve: accepting a connection: {e}"),
            },
            _ = done.wait_for(Option::is_some), if exit_when_done => {
                // Let the connections pass the results on.
                tokio::time::sleep(Duration::from_millis(200)).await;
                return Ok(());
            }
            _ = tokio::signal::ctrl_c() => return Ok(()),
            _ = term.recv() => return Ok(()),
        }
    }
}

/// Serves one connection, logging why it ended if not cleanly.
async fn connection(ctx: Arc<Ctx>, acceptor: TlsAcceptor, tcp: TcpStream, peer: SocketAddr) {
    let tls = match tokio::time::timeout(HELLO_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            return eprintln!(
                "lbf-gag serve: refused {peer}: TLS handshake failed: {e} (not an lbf-node, or \
                 a node that does not trust this builder's certificate)"
            )
        }
        Err(_) => {
            return eprintln!(
                "lbf-gag serve: refused {peer}: no TLS handshake within {HELLO_TIMEOUT:?}"
            )
        }
    };
    if let Err(e) = stream(&ctx, tls, peer).await {
        eprintln!("lbf-gag serve: {e}");
    }
}

/// The protocol on an established TLS connection.
async fn stream(
    ctx: &Ctx,
    tls: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
    peer: SocketAddr,
) -> Result<(), String> {
    let (mut rd, mut wr) = tokio::io::split(tls);
    let mut buf = Vec::new();
    let first = tokio::time::timeout(HELLO_TIMEOUT, read_message::<NodeFrame>(&mut rd, &mut buf))
        .await
        .map_err(|_| format!("refused {peer}: no hello within {HELLO_TIMEOUT:?}"))?
        .map_err(|e| format!("refused {peer}: no valid hello: {e}"))?;
    let Some(node_frame::Body::Hello(hello)) = first.body else {
        return Err(format!("refused {peer}: the first frame is not a hello"));
    };
    let node = hello.node.clone();
    let slot = match admit(ctx, &hello).await {
        Ok(slot) => slot,
        Err(r) => {
            let refusal = BuilderFrame {
                body: Some(builder_frame::Body::Refusal(Refusal {
                    reason: r.reason.clone(),
                    permanent: r.permanent,
                })),
            };
            let _ = write_message(&mut wr, &refusal).await;
            return Err(format!("refused node `{node}` from {peer}: {}", r.reason));
        }
    };
    slot.generation.send_modify(|g| *g += 1);
    let mut generation = slot.generation.subscribe();
    let mut io = slot.io.lock().await;
    let welcome = BuilderFrame {
        body: Some(builder_frame::Body::Welcome(Welcome {
            protocol_version: PROTOCOL_VERSION,
            last_seq: io.last_seq,
        })),
    };
    write_message(&mut wr, &welcome)
        .await
        .map_err(|e| format!("node `{node}` ({peer}): {e}"))?;
    ctx.status.set_connected(&node, true);
    eprintln!(
        "lbf-gag serve: node `{node}` connected from {peer}; it resumes after batch {}",
        io.last_seq
    );
    let (acks, ack_rx) = mpsc::unbounded_channel();
    let writer = tokio::spawn(write_acks(wr, ack_rx, ctx.done.clone()));
    let owned: BTreeSet<ProcId> = slot.hello.procs.iter().map(|p| p.id).collect();
    let procedures = slot.hello.procedures.len();
    let gate = ctx
        .status
        .gate(&node)
        .expect("admitted nodes are registered");
    let takeover = || Ok("a newer connection of the node takes over".to_string());
    let ended = loop {
        let mut taken_over = false;
        while gate.is_paused() && !taken_over {
            let _ = acks.send(builder_frame::Body::Hold(Hold {}));
            tokio::select! {
                biased;
                _ = generation.changed() => taken_over = true,
                _ = tokio::time::timeout(HOLD_INTERVAL, gate.wait_open()) => {}
            }
        }
        if taken_over {
            break takeover();
        }
        tokio::select! {
            biased;
            _ = generation.changed() => break takeover(),
            read = read_frame(&mut rd, &mut buf) => match read {
                Ok(true) => {}
                Ok(false) => break Ok("closed by the node".to_string()),
                Err(e) => break Ok(format!("connection lost: {e}")),
            },
        }
        match take_batch(ctx, &node, &owned, procedures, &buf, &mut io).await {
            Ok(Some(seq)) => {
                let _ = acks.send(builder_frame::Body::Ack(Ack { seq }));
            }
            Ok(None) => {}
            Err(e) => break Err(e),
        }
    };
    drop(acks);
    let _ = writer.await;
    if *generation.borrow() == *slot.generation.borrow() {
        ctx.status.set_connected(&node, false);
    }
    match ended {
        Ok(why) => {
            eprintln!("lbf-gag serve: node `{node}` ({peer}): {why}");
            Ok(())
        }
        Err(e) => Err(format!(
            "node `{node}` ({peer}): malformed stream, closed: {e}"
        )),
    }
}

/// Journals one received frame of the node that owns the processes `owned` and follows
/// `procedures` procedures, hands its events to the engine, and returns the sequence number
/// to acknowledge (`None` for nothing to acknowledge).
async fn take_batch(
    ctx: &Ctx,
    node: &str,
    owned: &BTreeSet<ProcId>,
    procedures: usize,
    body: &[u8],
    io: &mut NodeIo,
) -> Result<Option<u64>, String> {
    let frame = NodeFrame::decode(body).map_err(|e| format!("undecodable frame: {e}"))?;
    let Some(node_frame::Body::Batch(batch)) = frame.body else {
        return Err("a frame after the hello is not a batch".into());
    };
    if batch.seq <= io.last_seq {
        return Ok(Some(io.last_seq)); // resent after a reconnection: already held
    }
    if batch.seq != io.last_seq + 1 {
        return Err(format!(
            "batch {} follows batch {}: sequence numbers must be consecutive",
            batch.seq, io.last_seq
        ));
    }
    let decoded = decode_batch(&batch, procedures, |p| owned.contains(&p))?;
    io.journal
        .append_body(body)
        .map_err(|e| format!("cannot journal (not acknowledged): {e}"))?;
    io.last_seq = batch.seq;
    let end = batch.end;
    let n = decoded.events.len() as u64;
    ctx.status
        .batch(node, batch.seq, n, batch.lost_events, end.is_some());
    let work = Work {
        node: node.to_string(),
        events: decoded.events,
        procedures: decoded.procedures,
        closed: decoded.closed,
        end,
    };
    ctx.work
        .send(work)
        .await
        .map_err(|_| "the engine thread stopped".to_string())?;
    Ok(Some(batch.seq))
}

/// Writes acknowledgements and holds, and the results once the job is complete.
async fn write_acks(
    mut wr: impl AsyncWrite + Unpin,
    mut acks: mpsc::UnboundedReceiver<builder_frame::Body>,
    mut done: watch::Receiver<Option<Arc<Outcome>>>,
) {
    let mut results_sent = false;
    loop {
        let frame = tokio::select! {
            frame = acks.recv() => match frame {
                Some(frame) => frame,
                None => return,
            },
            outcome = done.wait_for(Option::is_some), if !results_sent => {
                results_sent = true;
                match outcome {
                    Ok(outcome) => builder_frame::Body::Results(results(
                        outcome.as_ref().expect("waited for it"),
                    )),
                    Err(_) => continue,
                }
            }
        };
        if write_message(&mut wr, &BuilderFrame { body: Some(frame) })
            .await
            .is_err()
        {
            return;
        }
    }
}

/// The outcome as the wire's `Results`.
fn results(outcome: &Outcome) -> Results {
    Results {
        targets: outcome
            .predictions
            .iter()
            .map(|p| TargetResult {
                target: p.target.clone(),
                predicted_seconds: p.predicted_seconds,
            })
            .collect(),
        complete: !outcome.predictions.is_empty(),
        error: String::new(),
        lost_events: outcome.summary.lost_events,
    }
}

/// Checks that the node of `hello` follows the job's `procedures`, in that order (the
/// shares of its batches are read by position); the error names both lists.
fn check_procedures(hello: &Hello, procedures: &[String]) -> Result<(), String> {
    if hello.procedures == procedures {
        return Ok(());
    }
    let list = |names: &[String]| match names {
        [] => "no procedure".to_string(),
        _ => {
            let names: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
            format!("the procedures {}", names.join(", "))
        }
    };
    Err(format!(
        "node `{}` follows {}, but the job (`[job] procedures` in the builder's \
         configuration) follows {}; give every node the job's --procedure options, in that \
         order",
        hello.node,
        list(&hello.procedures),
        list(procedures)
    ))
}

/// Checks what every connection's hello must satisfy, whichever server it reaches: the
/// protocol version, a safe node name, well-formed addresses, and the node's token in
/// `tokens` (compared in constant time).
pub(crate) fn authenticate(hello: &Hello, tokens: &BTreeMap<String, String>) -> Result<(), String> {
    if hello.protocol_version != PROTOCOL_VERSION {
        return Err(format!(
            "protocol version mismatch: the node speaks version {}, this builder speaks \
             version {PROTOCOL_VERSION}; run the same lbf release on nodes and builder",
            hello.protocol_version
        ));
    }
    check_node_name(&hello.node)?;
    if let Some(a) = hello
        .addresses
        .iter()
        .find(|a| a.len() != 4 && a.len() != 16)
    {
        return Err(format!(
            "the hello lists an address of {} bytes (4 or 16 expected)",
            a.len()
        ));
    }
    let authentic = tokens
        .get(&hello.node)
        .is_some_and(|t| tls::token_matches(t, &hello.token));
    if !authentic {
        return Err(format!(
            "authentication failed for node `{}`: unknown node name or wrong token (see \
             [tokens] in the builder's configuration)",
            hello.node
        ));
    }
    Ok(())
}

/// Checks a hello; the node's slot if it may stream.
async fn admit(ctx: &Ctx, hello: &Hello) -> Result<Arc<Slot>, Refused> {
    let refuse = |reason: String| Refused {
        reason,
        permanent: true,
    };
    authenticate(hello, &ctx.config.tokens).map_err(refuse)?;
    if hello.calibration {
        return Err(refuse(format!(
            "node `{}` is a calibration agent (lbf-node calibrate --builder), and this is a \
             job's builder (lbf-gag serve); point it at lbf-gag calibrate instead",
            hello.node
        )));
    }
    check_procedures(hello, &ctx.config.procedures).map_err(refuse)?;
    let num_procs = ctx.config.procs.len();
    let mut ids = BTreeSet::new();
    for p in &hello.procs {
        if p.id as usize >= num_procs {
            return Err(refuse(format!(
                "process {} is outside the job, whose ids are 0 to {}",
                p.id,
                num_procs - 1
            )));
        }
        if !ids.insert(p.id) {
            return Err(refuse(format!("process {} is announced twice", p.id)));
        }
    }
    let mut slots = ctx.slots.lock().await;
    if let Some(slot) = slots.get(&hello.node) {
        if slot.hello.session != hello.session {
            return Err(refuse(format!(
                "node `{}` was restarted: the journal holds an unfinished stream of its \
                 previous session, which a new capture cannot continue; start a new job \
                 (a fresh journal directory)",
                hello.node
            )));
        }
        if slot.hello.procs != hello.procs {
            return Err(refuse(format!(
                "node `{}` announces other processes than when it first connected",
                hello.node
            )));
        }
        return Ok(slot.clone());
    }
    for p in &hello.procs {
        if let Some(owner) = ctx.status.owner(p.id) {
            return Err(refuse(format!(
                "process {} is already streamed by node `{owner}`",
                p.id
            )));
        }
    }
    let journal =
        NodeJournal::create(&ctx.config.journal, hello, ctx.config.fsync).map_err(|e| Refused {
            reason: format!("the builder cannot journal this node: {e}"),
            permanent: false,
        })?;
    ctx.status.add_node(hello, 0, false);
    let mut stored = hello.clone();
    stored.token.clear();
    let slot = Arc::new(Slot {
        hello: stored,
        io: Mutex::new(NodeIo {
            journal,
            last_seq: 0,
        }),
        generation: watch::channel(0).0,
    });
    slots.insert(hello.node.clone(), slot.clone());
    Ok(slot)
}
