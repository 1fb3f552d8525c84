//! A node's live capture of local processes: the recorder of `lbf-record` (probes and a
//! capture, as `lbf-trace` uses them) on the processes a [`Selection`] names, its events
//! filtered to the processes this node announces and batched as [`Chunk`]s for
//! [`super::node::run`]. Needs root to start (see [`super::privileges`]); feature `live`.

use super::node::Chunk;
use super::source::Batcher;
use anyhow::{bail, Context, Result};
use lbf_capture::ids;
use lbf_capture::select::Source;
use lbf_capture::EventSink;
use lbf_model::event::{Event, EventDetail, ProcId, ProcInfo, ProcedureCpu};
use lbf_model::stream::{EndClosed, StreamOp};
use lbf_probe::procedures::{self as traced_procedures, ProcedureSpec};
use lbf_probe::{self, InitWatch, Tracer, TracerOptions};
use lbf_record::{Recorder, Scope};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Which local processes a live capture follows (with, always, their descendants). Processes
/// that come to match it during the capture are followed too: from their exec for a command
/// name, else from when a scan sees them (every fifth of a second).
#[derive(Clone)]
pub enum Selection {
    /// These PIDs.
    Pids(Vec<u32>),
    /// Processes whose command name (`/proc/PID/comm`) is this.
    Comm(String),
    /// The processes of this cgroup (v2 directory, e.g. `/sys/fs/cgroup/job.slice`).
    Cgroup(PathBuf),
    /// Every process that has an MPI library mapped.
    AllMpi,
    /// Every process that has the PVM task library mapped.
    AllPvm,
}

impl Selection {
    /// The event source this selection implies: PVM for [`Selection::AllPvm`], and for PIDs
    /// of which one maps the PVM library but none an MPI library; else MPI (a launcher or a
    /// job script about to start one maps neither).
    pub fn implied_source(&self) -> Source {
        match self {
            Selection::AllPvm => Source::Pvm,
            Selection::Pids(pids) if lbf_capture::select::for_pids(pids) == Source::Pvm => {
                Source::Pvm
            }
            _ => Source::Mpi,
        }
    }
}

/// A live capture with its probes attached, ready to run on the source thread.
pub struct Live {
    recorder: Recorder,
    source: Source,
    procs: BTreeSet<ProcId>,
    host: String,
    selection: Selection,
    procedures: Vec<String>,
}

impl Live {
    /// Loads the probes of `source` and attaches them: for MPI to `mpi_libs` (or the
    /// installed MPI libraries, and those the selected processes map), for PVM to the
    /// installed PVM libraries, for sockets to the system calls. Then waits up to `wait` for
    /// `selection` to match a process and traces the selected processes. Needs root;
    /// afterwards the capture needs much less (see [`super::privileges`]). `procs` are the
    /// global ids this node announces: MPI ranks, or for PVM and sockets the ids its
    /// processes take in order of their first message. `procedures` are followed (see
    /// [`Live::procedures`]), found as [`procedure_objects`] says.
    pub fn start(
        selection: &Selection,
        source: Source,
        wait: Duration,
        mpi_libs: &[PathBuf],
        ringbuf_bytes: u32,
        procs: BTreeSet<ProcId>,
        procedures: &[ProcedureSpec],
    ) -> Result<Live> {
        // Probes first, then the wait: a process found by the selection is traced within
        // milliseconds, before its first MPI call (loading takes most of a second).
        let scope = Scope::Node {
            procs: procs.clone(),
        };
        let options = TracerOptions {
            ringbuf_bytes,
            all_returns: false,
        };
        let mut recorder = Recorder::load(source, &options, &scope, "lbf-node", false)?;
        if source == Source::Mpi {
            recorder.attach_mpi(if mpi_libs.is_empty() {
                lbf_probe::installed_mpi_libraries()?
            } else {
                mpi_libs.to_vec()
            })?;
        }
        // Before any process is traced: their first events' shares are whole.
        let attached = traced_procedures::attach_all(
            recorder.tracer(),
            procedures,
            |spec| procedure_objects(selection, spec),
            "lbf-node",
        )?;
        for (name, found) in &attached {
            eprintln!("lbf-node: procedure {name}: {}", found.describe());
        }
        let tracer = recorder.tracer();
        // Processes that start the named program later are traced from their exec on.
        if let Selection::Comm(name) = selection {
            tracer.adopt_comm(name)?;
        }
        eprintln!("lbf-node: {source} probes loaded; waiting up to {wait:?} for the selection");
        let deadline = Instant::now() + wait;
        let pids = loop {
            let pids = select(selection)?;
            if !pids.is_empty() {
                break pids;
            }
            if Instant::now() >= deadline {
                bail!("no process matches the selection after waiting {wait:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        for &pid in &pids {
            tracer.trace_pid(pid)?;
        }
        // An MPI library of the selected processes not installed where lbf looks.
        if source == Source::Mpi && mpi_libs.is_empty() {
            for &pid in &pids {
                recorder.attach_mpi(lbf_probe::mpi_libraries_mapped_by(pid).unwrap_or_default())?;
            }
        }
        if source == Source::Mpi && !recorder.probes_mpi() {
            bail!("no MPI library found to probe; name one with --mpi-lib");
        }
        let host = super::node::host_facts().hostname;
        Ok(Live {
            recorder,
            source,
            procs,
            host,
            selection: selection.clone(),
            procedures: attached.into_iter().map(|(name, _)| name).collect(),
        })
    }

    /// The procedures followed, in order, as the hello lists them and the batches' shares
    /// come.
    pub fn procedures(&self) -> &[String] {
        &self.procedures
    }

    /// Captures until every traced process has ended or `stop` is set, streaming the events
    /// of the announced processes; events of other ranks are dropped and counted as lost.
    /// `node` is the node's name, which makes the ids of messages a socket capture
    /// matched here unique in the job.
    pub fn run(mut self, node: &str, stop: &AtomicBool, tx: mpsc::Sender<Chunk>) -> Result<()> {
        let mut reader = self.recorder.tracer().records()?;
        // PVM and socket captures number their processes themselves; a socket capture also
        // numbers the messages it matched here (PVM's ids are the same on every host).
        let numbered_here = self.source != Source::Mpi;
        let filter = Filter {
            out: Some(Batcher::new(tx, self.procedures.len())),
            renumber: numbered_here.then(|| self.procs.iter().copied().collect()),
            origin: (self.source == Source::Sockets).then(|| node.to_string()),
            procs: self.procs,
            foreign: 0,
        };
        let scope = Scope::Node {
            procs: filter.procs.clone(),
        };
        let (mut sink, init_watch) = self.recorder.capture(self.host.clone(), scope, filter)?;
        let selection = self.selection.clone();
        let mut adopt = |tracer: &mut Tracer| -> Result<()> {
            // A PID of the list that ended may be another process's by now: not adopted. A
            // command name is adopted by the kernel side at exec.
            if matches!(selection, Selection::Pids(_) | Selection::Comm(_)) {
                return Ok(());
            }
            let traced: BTreeSet<u32> = tracer.traced_pids()?.into_iter().collect();
            for pid in select(&selection)?
                .into_iter()
                .filter(|p| !traced.contains(p))
            {
                // One that ended since it was listed cannot be traced, and needs not be.
                let _ = tracer.trace_pid(pid);
            }
            Ok(())
        };
        lbf_record::run_adopting(
            self.recorder.tracer(),
            &mut reader,
            &mut sink,
            stop,
            &mut adopt,
        )?;
        if let Some(Err(e)) = init_watch.map(InitWatch::finish) {
            eprintln!("lbf-node: warning: {e:#}");
        }
        let (mut filter, summary) = sink.into_parts();
        let summary = summary.unwrap_or_default();
        for (what, n) in &summary.anomalies {
            eprintln!("lbf-node: capture: {n} x {what}");
        }
        if let Some(out) = filter.out.take() {
            out.end(
                summary.measured_seconds,
                summary.teardown_seconds,
                summary.lost_records + summary.lost_events + filter.foreign,
            );
        }
        Ok(())
    }
}

/// The objects a procedure `spec` of the processes `selection` names is looked for in: with
/// PIDs, what they map and the programs their command lines name
/// ([`traced_procedures::objects_of_selected`]), and the object `spec` names by its path
/// (`NAME@/path/to/program`), with its libraries. Other selections find their processes
/// later, after the probes are attached, so `spec` must name its object's path.
pub fn procedure_objects(selection: &Selection, spec: &ProcedureSpec) -> Result<Vec<PathBuf>> {
    let named = spec
        .object_path()
        .map(|path| traced_procedures::objects_of_command(&[path.to_string_lossy().into_owned()]));
    let objects = match (selection, named) {
        (Selection::Pids(pids), named) => {
            let mut objects = traced_procedures::objects_of_selected(pids);
            objects.extend(named.unwrap_or_default());
            objects
        }
        (_, Some(named)) => named,
        (_, None) => bail!(
            "--procedure {}: without --pid, the processes are not known when the probes are \
             attached; name the program or library that defines it by its path, e.g. \
             --procedure {}@/path/to/program",
            spec.text,
            traced_procedures::trace_name(spec)
        ),
    };
    Ok(traced_procedures::dedup(objects))
}

/// The PIDs `selection` matches now.
fn select(selection: &Selection) -> Result<Vec<u32>> {
    let all = || -> Result<Vec<u32>> {
        Ok(std::fs::read_dir("/proc")
            .context("listing /proc")?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect())
    };
    Ok(match selection {
        Selection::Pids(pids) => pids.clone(),
        Selection::Comm(name) => all()?
            .into_iter()
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.trim_end() == name)
            })
            .collect(),
        Selection::Cgroup(dir) => {
            let list = dir.join("cgroup.procs");
            std::fs::read_to_string(&list)
                .with_context(|| format!("reading {}", list.display()))?
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect()
        }
        Selection::AllMpi => all()?
            .into_iter()
            .filter(|&pid| lbf_probe::mpi_libraries_mapped_by(pid).is_ok_and(|l| !l.is_empty()))
            .collect(),
        Selection::AllPvm => all()?
            .into_iter()
            .filter(|&pid| lbf_capture::select::maps_library_of(pid, Source::Pvm))
            .collect(),
    })
}

/// Passes on the events of the announced processes only.
struct Filter {
    out: Option<Batcher>,
    /// With PVM and sockets, the capture numbers the processes from 0 in order of their first
    /// message, no more than it was told to expect: the k-th becomes the k-th announced id.
    /// `None` with MPI, whose ids are global ranks.
    renumber: Option<Vec<ProcId>>,
    /// With sockets, the capture numbers the messages it matched from 1: they are made
    /// unique in the job with this node's name ([`ids::local_message`]). `None` with MPI and
    /// PVM, whose message ids every host computes alike.
    origin: Option<String>,
    procs: BTreeSet<ProcId>,
    foreign: u64,
}

impl Filter {
    /// The global id of the capture's process `id`; `None` for one this node does not
    /// announce.
    fn global(&self, id: ProcId) -> Option<ProcId> {
        match &self.renumber {
            Some(ids) => ids.get(id as usize).copied(),
            None => self.procs.contains(&id).then_some(id),
        }
    }
}

impl EventSink for Filter {
    fn clock_origin(&mut self, monotonic_ns: u64) {
        if let Some(out) = self.out.as_mut() {
            out.origin(lbf_probe::unix_ns_of(monotonic_ns));
        }
    }

    fn process(&mut self, info: &ProcInfo) {
        match (self.global(info.id), self.out.as_mut()) {
            (Some(id), Some(out)) => out.started(id, info),
            (Some(_), None) => {}
            (None, _) => eprintln!(
                "lbf-node: warning: rank {} runs here but is not in --procs; its events are \
                 dropped and counted as lost",
                info.id
            ),
        }
    }

    /// Passes the event on, without procedure CPU.
    fn event(&mut self, event: &Event) {
        self.event_with(event, &EventDetail::NONE);
    }

    /// Passes the event on with its process's CPU in the followed procedures.
    fn event_with(&mut self, event: &Event, detail: &EventDetail) {
        let Some(proc) = self.global(event.proc) else {
            self.foreign += 1;
            return;
        };
        let kind = match &self.origin {
            Some(origin) => ids::job_wide(event.kind, origin),
            None => event.kind,
        };
        if let Some(out) = self.out.as_mut() {
            let event = Event {
                proc,
                cpu_ns: event.cpu_ns,
                kind,
            };
            out.push(&event, &detail.procedures);
            out.flush_if_old();
        }
    }

    /// Passes a send or receive on a connection between hosts on, for the builder to match.
    fn stream_op(&mut self, proc: ProcId, cpu_ns: u64, procedures: &ProcedureCpu, op: &StreamOp) {
        let Some(proc) = self.global(proc) else {
            self.foreign += 1;
            return;
        };
        if let Some(out) = self.out.as_mut() {
            out.push_stream(proc, cpu_ns, procedures, op);
            out.flush_if_old();
        }
    }

    /// Passes the close of a connection's end on.
    fn stream_closed(&mut self, end: &EndClosed) {
        if let Some(out) = self.out.as_mut() {
            out.push_closed(end);
            out.flush_if_old();
        }
    }
}
