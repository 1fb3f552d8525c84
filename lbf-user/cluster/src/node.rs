//! The node daemon's sending side: takes batches from a source (live capture or replay),
//! numbers them, keeps them in the on-disk [`Spool`] until the builder acknowledges them, and
//! (re)connects to the builder as often as needed, resending from its last acknowledged batch.
//!
//! Memory stays bounded: the source hands over batches through a short channel, and a spool
//! at its limit stops taking them while the builder is reachable (backpressure: the source
//! waits; a live capture's kernel side then drops and counts). While the builder is
//! unreachable a full spool drops batches instead, counting their events as lost; the count
//! travels in every later batch, so the builder reports it, and the node logs it.

use super::spool::Spool;
use super::wire::{frame, read_message};
use anyhow::{bail, Context, Result};
use lbf_proto::{
    builder_frame, node_frame, Batch, BuilderFrame, End, Hello, HostFacts, NodeFrame, Proc,
    Results, Welcome, PROTOCOL_VERSION,
};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Notify};
use tokio_rustls::TlsConnector;

/// Batches a source may have in flight to the spool.
const CHANNEL_BATCHES: usize = 4;
/// How long connecting, the TLS handshake, and the answer to the hello may each take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What a source hands the node.
pub enum Chunk {
    /// Events, packed (`seq`, `lost_events`, `end` unset); boxed, as the largest chunk.
    Events(Box<Batch>),
    /// A process started (a live capture learns it when the rank starts; it goes into the
    /// hello, which waits for every process's): its global id, its start in nanoseconds
    /// after the run's start, and its start-up's figures (see `lbf_proto::Proc`).
    Started(Proc),
    /// When the run started (a live capture's first record), on the wall clock: what the
    /// builder aligns the hosts' processes by. Before any [`Chunk::Started`].
    Origin {
        /// Nanoseconds since the Unix epoch.
        run_start_unix_ns: u64,
    },
    /// The source is done: the run's measured seconds and teardown, and events the source
    /// itself lost (a capture's kernel-side drops).
    End {
        /// Wall-clock seconds of the run as this node saw it.
        measured_seconds: f64,
        /// Seconds from the last `MPI_Finalize` entry to the run's end (0 if unknown).
        teardown_seconds: f64,
        /// Events lost before reaching the node.
        lost_events: u64,
    },
}

/// How the node reaches and identifies itself to the builder.
pub struct NodeConfig {
    /// `host:port` of the builder.
    pub builder: String,
    /// The name the builder's certificate must carry.
    pub server_name: String,
    /// TLS trusting only the builder's certificate.
    pub tls: Arc<rustls::ClientConfig>,
    /// This node's name (unique in the job).
    pub node: String,
    /// Its token.
    pub token: String,
    /// The processes it streams, with global ids.
    pub procs: Vec<Proc>,
    /// The procedures it follows, in the order of its batches' shares (none: empty).
    pub procedures: Vec<String>,
    /// The spool's directory.
    pub spool_dir: PathBuf,
    /// The spool's size limit in bytes.
    pub spool_bytes: u64,
    /// With no acknowledgement for this long while batches are outstanding, the connection
    /// is taken for dead and replaced.
    pub ack_timeout: Duration,
    /// Stay connected after the last batch is acknowledged until the builder sends results.
    pub wait_results: bool,
    /// Connect only once the source has told every process's start ([`Chunk::Started`]),
    /// so that the hello carries them (a live capture; a replay knows them up front).
    pub await_starts: bool,
}

/// How a node's run went.
pub struct NodeReport {
    /// Batches sent and acknowledged.
    pub batches: u64,
    /// Events lost (spool full while the builder was unreachable, or by the source).
    pub lost_events: u64,
    /// Reconnections after the first connection.
    pub reconnections: u64,
    /// The builder's results, if it sent them before the node left.
    pub results: Option<Results>,
}

/// State shared by the spooling and the sending tasks.
struct Shared {
    spool: Spool,
    next_seq: u64,
    lost_events: u64,
    connected: bool,
    end_seq: Option<u64>,
    acked: u64,
    warned: Option<Instant>,
    /// Processes whose start the source has told, by global id.
    starts: std::collections::BTreeMap<u32, Proc>,
    /// When the source's run started on the wall clock, if it said ([`Chunk::Origin`]).
    run_start_unix_ns: u64,
}

/// The node's tasks' common handles.
struct Node {
    config: NodeConfig,
    hello: Hello,
    shared: Mutex<Shared>,
    /// A batch was spooled.
    spooled: Notify,
    /// An acknowledgement freed spool space.
    acked: Notify,
}

impl Node {
    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Why one connection ended.
enum SessionEnd {
    /// Everything is acknowledged (and the results came, if waited for).
    Done,
    /// The connection failed; try again.
    Retry(String),
}

/// Streams what `source` produces (it runs on its own thread, sending into the channel it is
/// given) to the builder until all of it is acknowledged.
pub fn run(
    config: NodeConfig,
    source: impl FnOnce(mpsc::Sender<Chunk>) -> Result<()> + Send + 'static,
) -> Result<NodeReport> {
    let spool = Spool::new(&config.spool_dir, config.spool_bytes)
        .with_context(|| format!("creating the spool in {}", config.spool_dir.display()))?;
    let hello = Hello {
        procs: config.procs.clone(),
        procedures: config.procedures.clone(),
        ..hello(&config.node, &config.token)
    };
    let node = Arc::new(Node {
        config,
        hello,
        shared: Mutex::new(Shared {
            spool,
            next_seq: 1,
            lost_events: 0,
            connected: false,
            end_seq: None,
            acked: 0,
            warned: None,
            starts: Default::default(),
            run_start_unix_ns: 0,
        }),
        spooled: Notify::new(),
        acked: Notify::new(),
    });
    let (tx, rx) = mpsc::channel(CHANNEL_BATCHES);
    let source = std::thread::Builder::new()
        .name("source".into())
        .spawn(move || source(tx))
        .context("starting the source thread")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let report = runtime.block_on(async {
        let spooler = tokio::spawn(spool_batches(node.clone(), rx));
        let sent = send(&node).await;
        spooler.abort();
        sent
    });
    // Dropping the runtime drops the channel, which ends a source still sending; a failed
    // node does not wait for its source (a live capture runs as long as the job).
    drop(runtime);
    let report = report?;
    match source.join() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e.context("the event source failed")),
        Err(_) => bail!("the event source panicked"),
    }
    Ok(report)
}

/// Numbers and spools what the source sends; see the module documentation for when it
/// waits and when it drops.
async fn spool_batches(node: Arc<Node>, mut rx: mpsc::Receiver<Chunk>) -> Result<()> {
    while let Some(chunk) = rx.recv().await {
        let (mut batch, is_end) = match chunk {
            Chunk::Events(batch) => (*batch, false),
            Chunk::Started(proc) => {
                node.lock().starts.insert(proc.id, proc);
                continue;
            }
            Chunk::Origin { run_start_unix_ns } => {
                node.lock().run_start_unix_ns = run_start_unix_ns;
                continue;
            }
            Chunk::End {
                measured_seconds,
                teardown_seconds,
                lost_events,
            } => {
                node.lock().lost_events += lost_events;
                let end = Some(End {
                    measured_seconds,
                    teardown_seconds,
                });
                (
                    Batch {
                        end,
                        ..Batch::default()
                    },
                    true,
                )
            }
        };
        loop {
            {
                let mut s = node.lock();
                batch.seq = s.next_seq;
                batch.lost_events = s.lost_events;
                let bytes = frame(&NodeFrame {
                    body: Some(node_frame::Body::Batch(batch.clone())),
                });
                if is_end || !s.spool.would_overflow(bytes.len()) {
                    s.spool
                        .push(batch.seq, &bytes)
                        .context("writing the spool")?;
                    s.next_seq += 1;
                    if is_end {
                        s.end_seq = Some(batch.seq);
                    }
                    node.spooled.notify_one();
                    break;
                }
                if !s.connected {
                    let n = batch.proc_kind.len() as u64;
                    s.lost_events += n;
                    if s.warned
                        .is_none_or(|t| t.elapsed() > Duration::from_secs(10))
                    {
                        s.warned = Some(Instant::now());
                        eprintln!(
                            "lbf-node: spool full ({} bytes) and the builder unreachable: \
                             dropping events, {} lost so far; raise --spool-size or restore \
                             the builder",
                            s.spool.bytes(),
                            s.lost_events
                        );
                    }
                    break;
                }
            }
            let _ = tokio::time::timeout(Duration::from_millis(200), node.acked.notified()).await;
        }
    }
    Ok(())
}

/// Connects, and reconnects, until everything is acknowledged.
async fn send(node: &Node) -> Result<NodeReport> {
    let connector = TlsConnector::from(node.config.tls.clone());
    let name = super::tls::server_name(&node.config.server_name)?;
    let mut backoff = Duration::from_millis(100);
    let mut connections = 0u64;
    let mut results = None;
    while node.config.await_starts && !all_started(node) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    loop {
        match session(node, &connector, name.clone(), &mut results).await? {
            SessionEnd::Done => break,
            SessionEnd::Retry(why) => {
                node.lock().connected = false;
                let s = node.lock();
                eprintln!(
                    "lbf-node: {why}; retrying in {backoff:?} ({} batches spooled, {} bytes)",
                    s.spool.len(),
                    s.spool.bytes()
                );
            }
        }
        connections += 1;
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
    let s = node.lock();
    if s.lost_events > 0 {
        eprintln!(
            "lbf-node: {} events were lost; the builder reports them too, and its predictions \
             are unreliable",
            s.lost_events
        );
    }
    Ok(NodeReport {
        batches: s.acked,
        lost_events: s.lost_events,
        reconnections: connections,
        results,
    })
}

/// Whether the source has told every process's start, or ended.
fn all_started(node: &Node) -> bool {
    let s = node.lock();
    s.starts.len() >= node.hello.procs.len() || s.end_seq.is_some()
}

/// Why a connection to the builder was not opened.
pub(crate) enum Unopened {
    /// Trying again may help (the builder is down or restarting, the network cut): why.
    Retry(String),
    /// It cannot (the builder refused this node for good, or its certificate is not the one
    /// trusted).
    Fatal(anyhow::Error),
}

/// Connects to `builder` over TCP and TLS, checking its certificate against `name`.
pub(crate) async fn open(
    builder: &str,
    connector: &TlsConnector,
    name: rustls::pki_types::ServerName<'static>,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, Unopened> {
    let retry = |what: &str, e: &dyn std::fmt::Display| {
        Unopened::Retry(format!("{what} builder {builder}: {e}"))
    };
    let tcp = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(builder)).await {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(e)) => return Err(retry("cannot connect to", &e)),
        Err(_) => return Err(retry("cannot connect to", &"timed out")),
    };
    let _ = tcp.set_nodelay(true);
    match tokio::time::timeout(CONNECT_TIMEOUT, connector.connect(name, tcp)).await {
        Err(_) => Err(retry("TLS handshake with", &"timed out")),
        Ok(Ok(tls)) => Ok(tls),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::InvalidData => {
            Err(Unopened::Fatal(anyhow::anyhow!(
                "TLS with builder {builder} failed: {e}; is --ca the builder's certificate, \
                 and --server-name a name in it?"
            )))
        }
        Ok(Err(e)) => Err(retry("TLS handshake with", &e)),
    }
}

/// Sends `hello` on a connection [`open`] made and reads the builder's answer: its welcome,
/// or why not.
pub(crate) async fn greet(
    builder: &str,
    rd: &mut (impl AsyncRead + Unpin),
    wr: &mut (impl AsyncWrite + Unpin),
    hello: Hello,
) -> Result<Welcome, Unopened> {
    let retry = |what: &str, e: &dyn std::fmt::Display| {
        Unopened::Retry(format!("{what} builder {builder}: {e}"))
    };
    let hello = NodeFrame {
        body: Some(node_frame::Body::Hello(hello)),
    };
    if let Err(e) = wr.write_all(&frame(&hello)).await.and(wr.flush().await) {
        return Err(retry("sending the hello to", &e));
    }
    let mut buf = Vec::new();
    let answer = tokio::time::timeout(CONNECT_TIMEOUT, read_message::<BuilderFrame>(rd, &mut buf));
    let first = match answer.await {
        Ok(Ok(f)) => f.body,
        Ok(Err(e)) => return Err(retry("no answer to the hello from", &e)),
        Err(_) => return Err(retry("no answer to the hello from", &"timed out")),
    };
    match first {
        Some(builder_frame::Body::Welcome(w)) => Ok(w),
        Some(builder_frame::Body::Refusal(r)) if r.permanent => Err(Unopened::Fatal(
            anyhow::anyhow!("builder {builder} refused this node: {}", r.reason),
        )),
        Some(builder_frame::Body::Refusal(r)) => Err(retry("refused by", &r.reason)),
        _ => Err(Unopened::Fatal(anyhow::anyhow!(
            "builder {builder} answered the hello with something else than a welcome"
        ))),
    }
}

/// One connection: hello, then send from the spool and take acknowledgements until done or
/// the connection fails. Errors are for what retrying cannot fix.
async fn session(
    node: &Node,
    connector: &TlsConnector,
    name: rustls::pki_types::ServerName<'static>,
    results: &mut Option<Results>,
) -> Result<SessionEnd> {
    let builder = &node.config.builder;
    let retry = |what: &str, e: &dyn std::fmt::Display| {
        Ok(SessionEnd::Retry(format!("{what} builder {builder}: {e}")))
    };
    let (mut rd, mut wr) = match open(builder, connector, name).await {
        Ok(tls) => tokio::io::split(tls),
        Err(Unopened::Retry(why)) => return Ok(SessionEnd::Retry(why)),
        Err(Unopened::Fatal(e)) => return Err(e),
    };
    let mut hello = node.hello.clone();
    hello.run_start_unix_ns = node.lock().run_start_unix_ns;
    for p in &mut hello.procs {
        if let Some(started) = node.lock().starts.get(&p.id) {
            *p = Proc {
                name: std::mem::take(&mut p.name),
                ..started.clone()
            };
        }
    }
    let last_seq = match greet(builder, &mut rd, &mut wr, hello).await {
        Ok(welcome) => welcome.last_seq,
        Err(Unopened::Retry(why)) => return Ok(SessionEnd::Retry(why)),
        Err(Unopened::Fatal(e)) => return Err(e),
    };
    {
        let mut s = node.lock();
        s.spool.release_through(last_seq)?;
        s.acked = s.acked.max(last_seq);
        s.connected = true;
        node.acked.notify_one();
    }
    eprintln!("lbf-node: connected to {builder}; the builder holds batches up to {last_seq}");
    let (frames_tx, mut frames) = mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        let mut buf = Vec::new();
        loop {
            let read = read_message::<BuilderFrame>(&mut rd, &mut buf).await;
            let failed = read.is_err();
            if frames_tx.send(read).is_err() || failed {
                return;
            }
        }
    });
    let _reader = AbortOnDrop(reader);
    let mut next = last_seq + 1;
    let mut waiting_since: Option<Instant> = None;
    loop {
        // A write that makes no progress within the ack timeout (a link down: the socket's
        // buffer full and TCP retransmitting for many minutes) ends the connection too.
        let stalled = || {
            retry(
                "no progress sending within the ack timeout to",
                &format!("{:?}", node.config.ack_timeout),
            )
        };
        let mut wrote = false;
        loop {
            let stored = node.lock().spool.get(next)?;
            let Some(f) = stored else { break };
            match tokio::time::timeout(node.config.ack_timeout, wr.write_all(&f)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return retry("sending to", &e),
                Err(_) => return stalled(),
            }
            next += 1;
            wrote = true;
        }
        if wrote {
            match tokio::time::timeout(node.config.ack_timeout, wr.flush()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return retry("sending to", &e),
                Err(_) => return stalled(),
            }
        }
        let outstanding = node.lock().acked + 1 < next;
        if !outstanding {
            waiting_since = None;
        } else if waiting_since.is_none() {
            waiting_since = Some(Instant::now());
        }
        if waiting_since.is_some_and(|t| t.elapsed() > node.config.ack_timeout) {
            return retry(
                "no acknowledgement within the ack timeout from",
                &format!("{:?}", node.config.ack_timeout),
            );
        }
        let message = tokio::select! {
            m = frames.recv() => m,
            _ = node.spooled.notified() => continue,
            _ = tokio::time::sleep(Duration::from_millis(250)) => continue,
        };
        match message {
            Some(Ok(BuilderFrame {
                body: Some(builder_frame::Body::Ack(ack)),
            })) => {
                let mut s = node.lock();
                s.spool.release_through(ack.seq)?;
                if ack.seq > s.acked {
                    s.acked = ack.seq;
                    waiting_since = None;
                }
                node.acked.notify_one();
            }
            Some(Ok(BuilderFrame {
                body: Some(builder_frame::Body::Results(r)),
            })) => *results = Some(r),
            Some(Ok(BuilderFrame {
                body: Some(builder_frame::Body::Hold(_)),
            })) => waiting_since = Some(Instant::now()),
            Some(Ok(_)) => bail!("builder {builder} sent an unexpected frame"),
            Some(Err(e)) => return retry("connection lost to", &e),
            None => return retry("connection lost to", &"reader ended"),
        }
        let s = node.lock();
        let all_acked = s.end_seq.is_some_and(|end| s.acked >= end);
        if all_acked && (results.is_some() || !node.config.wait_results) {
            return Ok(SessionEnd::Done);
        }
    }
}

/// Aborts a task when dropped, so a reader never outlives its connection.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The hello of node `node` with `token`, as every connection of this process opens: the
/// protocol version, this run's session, the host's facts and addresses; what it streams
/// (processes, procedures) or that it is a calibration agent is the caller's to add.
pub(crate) fn hello(node: &str, token: &str) -> Hello {
    Hello {
        protocol_version: PROTOCOL_VERSION,
        node: node.to_string(),
        token: token.to_string(),
        session: session_id(),
        host: Some(host_facts()),
        addresses: address_bytes(),
        ..Hello::default()
    }
}

/// A number distinguishing this run of the node from its earlier ones.
fn session_id() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    now.as_nanos() as u64 ^ (u64::from(std::process::id()) << 32)
}

/// This host's name, core count and CPU model.
pub fn host_facts() -> HostFacts {
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    HostFacts {
        hostname,
        cores,
        cpu_model,
    }
}

/// [`host_addresses`] as a hello lists them: 4 or 16 bytes each.
fn address_bytes() -> Vec<Vec<u8>> {
    host_addresses()
        .iter()
        .map(|a| match a {
            IpAddr::V4(v4) => v4.octets().to_vec(),
            IpAddr::V6(v6) => v6.octets().to_vec(),
        })
        .collect()
}

/// The addresses of this host's network interfaces (of the network namespace the node runs
/// in), loopback ones left out: the builder learns from them which node holds an end of a TCP
/// connection between hosts.
pub fn host_addresses() -> Vec<IpAddr> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list`, freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut next = list;
    while !next.is_null() {
        // SAFETY: a node of the list getifaddrs made, valid until freeifaddrs.
        let ifa = unsafe { &*next };
        next = ifa.ifa_next;
        if ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: a non-null address of the list is a sockaddr, at least its family.
        let family = unsafe { (*ifa.ifa_addr).sa_family };
        let ip = match i32::from(family) {
            libc::AF_INET => {
                // SAFETY: the family says it is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                IpAddr::from(u32::from_be(sin.sin_addr.s_addr).to_be_bytes())
            }
            libc::AF_INET6 => {
                // SAFETY: the family says it is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                IpAddr::from(sin6.sin6_addr.s6_addr)
            }
            _ => continue,
        };
        if !ip.is_loopback() && !out.contains(&ip) {
            out.push(ip);
        }
    }
    // SAFETY: the list getifaddrs made, freed once.
    unsafe { libc::freeifaddrs(list) };
    out
}
