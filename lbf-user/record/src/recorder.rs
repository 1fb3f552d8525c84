//! Setting up a recording, the same for `lbf-trace` and the cluster's node daemon: the probes
//! of a source loaded and attached ([`Recorder::load`], [`Recorder::attach_mpi`]), and the
//! capture of that source feeding an event sink ([`Recorder::capture`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::Result;
use lbf_capture::mpi::inspect::ProcFs;
use lbf_capture::mpi::{Capture, Library};
use lbf_capture::pvm::{self as pvm_capture, PvmCapture};
use lbf_capture::sockets::resolve::ProcResolver;
use lbf_capture::sockets::{syscall, SocketCapture};
use lbf_capture::EventSink;
use lbf_model::source::Source;
use lbf_probe::{AttachMode, InitWatch, Returns, Tracer, TracerOptions};

use crate::CaptureSink;

/// Which of a program's processes a capture is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The whole program, on this host (`lbf-trace`). PVM and socket captures hold their
    /// events until `expected` processes have joined (`None`: until the end).
    Whole {
        /// How many processes a PVM or socket capture waits for.
        expected: Option<usize>,
    },
    /// This host's part of a program spread over hosts (a cluster node): its MPI ranks, or as
    /// many PVM tasks or socket processes as `procs` lists. Messages to and from other hosts
    /// keep the ids the other hosts' nodes give them; TCP connections that may join hosts are
    /// left to the builder to match.
    Node {
        /// The global process ids this node announces.
        procs: BTreeSet<u32>,
    },
}

/// The probes of one source, loaded and attached; the tracer they run in.
pub struct Recorder {
    tracer: Tracer,
    source: Source,
    /// MPI libraries probed.
    attached: BTreeSet<PathBuf>,
    /// Who speaks in messages: `lbf-trace`, `lbf-node`.
    who: &'static str,
    /// Whether to say what is probed.
    verbose: bool,
}

impl Recorder {
    /// Loads lbf's eBPF object as `options` say, and attaches the
    /// probes of `source` that need no process: PVM's libraries, or the socket system calls.
    /// MPI libraries are attached with [`Recorder::attach_mpi`]. Needs root. Messages start
    /// with `who`; `verbose` says what is probed.
    pub fn load(
        source: Source,
        options: &TracerOptions,
        scope: &Scope,
        who: &'static str,
        verbose: bool,
    ) -> Result<Self> {
        let mut tracer = Tracer::load(options)?;
        match source {
            Source::Pvm => {
                let reads = pvm_capture::fn_reads();
                for lib in tracer.attach_pvm_libraries(&reads, pvm_capture::RECEIVE_BUFFER)? {
                    if verbose {
                        eprintln!(
                            "{who}: probing {} PVM functions in {}",
                            lib.functions,
                            lib.path.display()
                        );
                    }
                    // Without it a receive is named only by a queued send of this host.
                    if matches!(scope, Scope::Node { .. })
                        && lib.missing.contains(&pvm_capture::RECEIVE_BUFFER)
                    {
                        eprintln!(
                            "{who}: warning: {} has no GOT slot for `{}`: receives of messages \
                             from other hosts cannot be matched",
                            lib.path.display(),
                            pvm_capture::RECEIVE_BUFFER
                        );
                    }
                }
            }
            Source::Sockets => tracer.record_syscalls(&syscall::traced())?,
            Source::Mpi => {}
        }
        Ok(Recorder {
            tracer,
            source,
            attached: BTreeSet::new(),
            who,
            verbose,
        })
    }

    /// Probes the MPI libraries `libs` not probed yet, each with the memory reads its ABI
    /// needs (statuses, request arrays, ...).
    pub fn attach_mpi(&mut self, libs: impl IntoIterator<Item = PathBuf>) -> Result<()> {
        let how = match (self.tracer.attach_mode(), self.tracer.returns()) {
            (AttachMode::Multi, Returns::AsNeeded) => "a uprobe session, returns as needed",
            (AttachMode::Multi, Returns::Every) => "uprobe_multi links, every return",
            (AttachMode::PerPoint, _) => "one uprobe per function",
        };
        for path in libs {
            if !self.attached.insert(path.clone()) {
                continue;
            }
            let lib = self.tracer.attach_mpi_library(&path, &mpi_reads(&path))?;
            if self.verbose {
                eprintln!(
                    "{}: probing {} functions in {} (slot {}, {how}){}",
                    self.who,
                    lib.probed.len(),
                    lib.path.display(),
                    lib.slot,
                    if lib.missing.is_empty() {
                        String::new()
                    } else {
                        format!("; not defined there: {}", lib.missing.join(", "))
                    }
                );
            }
        }
        Ok(())
    }

    /// Whether an MPI library is probed.
    pub fn probes_mpi(&self) -> bool {
        !self.attached.is_empty()
    }

    /// The tracer: to trace processes, read its records and run the capture loop.
    pub fn tracer(&mut self) -> &mut Tracer {
        &mut self.tracer
    }

    /// The capture of this recorder's source on `host` for `scope`, feeding `events`; for
    /// MPI also the watch that inspects each rank when it enters `MPI_Init`, however far
    /// behind the reader is (see `InitWatch`), which the caller finishes after the capture.
    pub fn capture<S: EventSink>(
        &mut self,
        host: String,
        scope: Scope,
        events: S,
    ) -> Result<(CaptureSink<S>, Option<InitWatch>)> {
        Ok(match (self.source, scope) {
            (Source::Mpi, scope) => {
                let procfs = ProcFs::new();
                let send_rules = self.tracer.send_rules_writer()?;
                let watch = self.tracer.watch_inits(procfs.prefetcher(send_rules))?;
                let capture = Capture::new(Box::new(procfs), host);
                let capture = match scope {
                    Scope::Whole { .. } => capture,
                    Scope::Node { procs } => capture.only_ranks(procs),
                };
                (CaptureSink::new(capture, events), Some(watch))
            }
            (Source::Pvm, Scope::Whole { expected }) => (
                CaptureSink::new(PvmCapture::new(host).expecting(expected), events),
                None,
            ),
            (Source::Pvm, Scope::Node { procs }) => (
                CaptureSink::new(
                    PvmCapture::new(host)
                        .expecting(Some(procs.len()))
                        .across_hosts(),
                    events,
                ),
                None,
            ),
            (Source::Sockets, scope) => {
                let capture = SocketCapture::new(Box::new(ProcResolver::new()), host);
                let capture = match scope {
                    Scope::Whole { expected } => capture.expecting(expected),
                    Scope::Node { procs } => capture
                        .expecting(Some(procs.len()))
                        .matching_between_hosts(),
                };
                (CaptureSink::new(capture, events), None)
            }
        })
    }
}

/// The memory reads of the MPI library at `path` (by its name); none for an unknown one.
fn mpi_reads(path: &Path) -> Vec<(u16, lbf_common::FnReads)> {
    Library::from_path(&path.to_string_lossy())
        .map(Library::fn_reads)
        .unwrap_or_default()
}
