//! The calibration agent (`lbf-node calibrate --builder`): connects to the coordinator
//! (`lbf-gag calibrate`) as a node connects to a job's builder, then measures what it is
//! ordered to, one order at a time, and reports each result (see [`super`]).

use super::{plan_of, sizes_of};
use crate::node::{greet, hello, open, Unopened};
use crate::wire::{read_message, write_message};
use anyhow::{bail, Context, Result};
use lbf_calibrate::cpu::{self, REFERENCE};
use lbf_calibrate::pingpong::{self, KEY_BYTES};
use lbf_calibrate::progress::Progress;
use lbf_proto::{
    builder_frame, calibration_order, calibration_report, node_frame, CalibrationReport,
    CpuMeasured, Finish, Hello, NodeFrame,
};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_rustls::TlsConnector;

/// How long a ping-pong server waits for its peer at most, whatever the order says.
const MAX_LISTEN: Duration = Duration::from_secs(600);
/// The longest CPU measurement an order may ask for.
const MAX_CPU: Duration = Duration::from_secs(600);

/// How the agent reaches and identifies itself to the coordinator.
pub struct AgentConfig {
    /// `host:port` of the coordinator.
    pub coordinator: String,
    /// The name the coordinator's certificate must carry.
    pub server_name: String,
    /// TLS trusting only the coordinator's certificate.
    pub tls: Arc<rustls::ClientConfig>,
    /// This agent's node name (a key of the coordinator's `[tokens]`).
    pub node: String,
    /// Its token.
    pub token: String,
    /// How long to keep trying to reach the coordinator, which may start after the agents.
    pub patience: Duration,
}

/// Serves the coordinator's orders until it says it has finished; an error if it cannot be
/// reached within the patience, refuses this agent, or goes away before finishing.
pub fn run(config: AgentConfig) -> Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(serve(&config))
}

async fn serve(config: &AgentConfig) -> Result<()> {
    let connector = TlsConnector::from(config.tls.clone());
    let name = crate::tls::server_name(&config.server_name)?;
    let hello = Hello {
        calibration: true,
        ..hello(&config.node, &config.token)
    };
    let coordinator = &config.coordinator;
    let start = Instant::now();
    let mut backoff = Duration::from_millis(100);
    let (mut rd, mut wr) = loop {
        let why = match open(coordinator, &connector, name.clone()).await {
            Ok(tls) => {
                let (mut rd, mut wr) = tokio::io::split(tls);
                match greet(coordinator, &mut rd, &mut wr, hello.clone()).await {
                    Ok(_) => break (rd, wr),
                    Err(Unopened::Retry(why)) => why,
                    Err(Unopened::Fatal(e)) => return Err(e),
                }
            }
            Err(Unopened::Retry(why)) => why,
            Err(Unopened::Fatal(e)) => return Err(e),
        };
        if start.elapsed() + backoff > config.patience {
            bail!(
                "{why}; gave up after {:.0} s (is `lbf-gag calibrate` running there?)",
                start.elapsed().as_secs_f64()
            );
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    };
    eprintln!("lbf-node calibrate: connected to the coordinator {coordinator}; awaiting orders");
    let mut buf = Vec::new();
    loop {
        let frame = read_message::<lbf_proto::BuilderFrame>(&mut rd, &mut buf)
            .await
            .with_context(|| {
                format!("the coordinator {coordinator} went away before it had finished")
            })?;
        let order = match frame.body {
            Some(builder_frame::Body::Order(order)) => order,
            Some(builder_frame::Body::Refusal(r)) => {
                bail!("the coordinator {coordinator} stopped: {}", r.reason)
            }
            _ => bail!("the coordinator {coordinator} sent something else than an order"),
        };
        let what = execute(order.what).await;
        let finished = matches!(what, calibration_report::What::Finished(_));
        let report = NodeFrame {
            body: Some(node_frame::Body::Report(CalibrationReport {
                id: order.id,
                what: Some(what),
            })),
        };
        write_message(&mut wr, &report)
            .await
            .with_context(|| format!("reporting to the coordinator {coordinator}"))?;
        if finished {
            eprintln!("lbf-node calibrate: the coordinator has finished");
            return Ok(());
        }
    }
}

/// Carries out one order; what to report.
async fn execute(what: Option<calibration_order::What>) -> calibration_report::What {
    use calibration_order::What as Order;
    use calibration_report::What as Report;
    let outcome: Result<Report, String> = match what {
        Some(Order::Listen(order)) => listen(&order.key, Duration::from_nanos(order.patience_ns)),
        Some(Order::PingPong(order)) => {
            let key = key_of(&order.key);
            match (plan_of(&order), key) {
                (Ok(plan), Ok(key)) => {
                    let peer = order.peer.clone();
                    eprintln!("lbf-node calibrate: ping-pong with {peer}");
                    blocking(move || {
                        let mut progress = Progress::new(&format!("TCP ping-pong with {peer}"));
                        pingpong::measure_keyed(peer.as_str(), &key, &plan, &mut progress)
                            .map(|m| Report::Measured(sizes_of(&m)))
                            .map_err(|e| format!("the ping-pong with {peer}: {e}"))
                    })
                    .await
                }
                (Err(e), _) | (_, Err(e)) => Err(e),
            }
        }
        Some(Order::Local(order)) => match plan_of(&order) {
            Ok(plan) => {
                eprintln!("lbf-node calibrate: ping-pong on the loopback");
                blocking(move || {
                    let mut progress = Progress::new("TCP ping-pong on the loopback");
                    pingpong::measure_local(&plan, &mut progress)
                        .map(|m| Report::Measured(sizes_of(&m)))
                        .map_err(|e| format!("the loopback ping-pong: {e}"))
                })
                .await
            }
            Err(e) => Err(e),
        },
        Some(Order::Cpu(order)) => {
            let seconds = Duration::from_nanos(order.seconds_ns).min(MAX_CPU);
            eprintln!(
                "lbf-node calibrate: CPU micro-benchmarks for {:.1} s",
                seconds.as_secs_f64()
            );
            blocking(move || {
                let mut progress = Progress::new("CPU micro-benchmarks");
                let r = cpu::measure(seconds, &REFERENCE, &mut progress);
                Ok(Report::Cpu(CpuMeasured {
                    cores: r.cores,
                    speed: r.speed,
                    rates: r.rates.to_vec(),
                    cpus: r.cpus,
                    quota: r.quota.unwrap_or(0.0),
                    seconds: r.seconds,
                }))
            })
            .await
        }
        Some(Order::Finish(_)) => Ok(Report::Finished(Finish {})),
        None => Err("an order this agent does not know (is the coordinator newer?)".into()),
    };
    outcome.unwrap_or_else(Report::Failed)
}

/// Opens a ping-pong server on a free port of every interface for the peer presenting
/// `key`, served on a thread of its own; reports the port.
fn listen(key: &[u8], patience: Duration) -> Result<calibration_report::What, String> {
    let key = key_of(key)?;
    let listener = TcpListener::bind("[::]:0")
        .or_else(|_| TcpListener::bind("0.0.0.0:0"))
        .map_err(|e| format!("opening a ping-pong server: {e}"))?;
    let port = listener
        .local_addr()
        .map_err(|e| format!("opening a ping-pong server: {e}"))?
        .port();
    let patience = patience.min(MAX_LISTEN);
    eprintln!("lbf-node calibrate: answering one ping-pong on port {port}");
    std::thread::Builder::new()
        .name("ping-pong server".into())
        .spawn(move || {
            if let Err(e) = pingpong::serve_keyed(&listener, &key, patience) {
                eprintln!("lbf-node calibrate: the ping-pong server on port {port}: {e}");
            }
        })
        .map_err(|e| format!("starting the ping-pong server: {e}"))?;
    Ok(calibration_report::What::Listening(u32::from(port)))
}

/// An order's key, which must be [`KEY_BYTES`] long.
fn key_of(key: &[u8]) -> Result<[u8; KEY_BYTES], String> {
    key.try_into()
        .map_err(|_| format!("a key of {} bytes ({KEY_BYTES} expected)", key.len()))
}

/// Runs a measurement on a blocking thread.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(format!("the measurement panicked: {e}")))
}
