//! `lbf-gag advise`: which placement of a trace's processes onto a machine's hosts runs
//! fastest, as the engine predicts; and, for a master/worker program, its per-task figures.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use lbf::advise::hostfiles::{
    mpich_machinefile, open_mpi_hostfile, open_mpi_rankfile, target_toml,
};
use lbf::advise::master_worker::{declared, recognise, MasterWorker};
use lbf::advise::on_demand::OnDemand;
use lbf::advise::search::{describe, search, Host, Machine, Progress, Scored, SearchOptions};
use lbf::advise::work_rate_placement::{self, WorkRateAdvice};
use lbf::config::{load_cluster, NetworkPreset};
use lbf::event::Event;
use lbf::trace::TraceReader;

/// Search placements of a trace's processes onto hosts and print the fastest, as predicted.
///
/// Every candidate is scored by the engine (as `predict` scores a target), many per pass over
/// the trace: simple placements first (block, round-robin, the fewest hosts, and one that
/// keeps the processes exchanging the most bytes together), every placement when there are
/// at most 4096, then moves and swaps of the best while they help, within --budget. For a master/worker program (recognised, or declared with
/// --master) the work-rate model's placement is one more start. Prints the best placements next to those baselines and
/// the best time for each number of hosts used; --write DIR writes the best as files to run
/// and predict it with.
#[derive(clap::Args)]
#[command(
    after_help = ADVISE_HELP,
    group = clap::ArgGroup::new("machine").required(true).args(["hosts", "cluster"]),
)]
pub(crate) struct Advise {
    /// The trace (see docs/trace-format.md).
    trace: PathBuf,

    /// Hosts the program may use (identical: --cores and --speed each).
    #[arg(long, value_name = "N")]
    hosts: Option<u32>,

    /// The hosts of a cluster file instead (measured with `lbf-node calibrate`; see
    /// docs/targets.md): their names, cores and speeds, and the network between them (the
    /// slowest of its tables where they differ, with a note).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["cores", "speed", "network"])]
    cluster: Option<PathBuf>,

    /// Cores per host.
    #[arg(long, default_value_t = 1)]
    cores: u32,

    /// Speed of each host relative to the traced run's (2.0: the same work in half the time).
    #[arg(long, default_value_t = 1.0)]
    speed: f64,

    /// Network preset between and within hosts (zero, shm, gige, 10gige, ib-edr, ib-hdr).
    #[arg(long, value_name = "PRESET", default_value = "gige", value_parser = lbf::config::parse_preset)]
    network: &'static NetworkPreset,

    /// How much a waiting process loads its host, 0 to 1 (see `predict --help`).
    #[arg(long, default_value_t = 0.0)]
    spin: f64,

    /// Bind each process to one core of its host, as `mpirun --bind-to core` does: a host's
    /// processes are dealt out to its cores in turn, each core shared by its own processes
    /// only (see `predict --help`).
    #[arg(long)]
    bind_to_cores: bool,

    /// How long the search may improve its best placement, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    budget: f64,

    /// How many of the best placements to print.
    #[arg(long, default_value_t = 5)]
    top: usize,

    /// The master process of a master/worker program whose workers also exchange among
    /// themselves (so that it is not recognised as one): the work-rate model's placement is
    /// then a start of the search too.
    #[arg(long, value_name = "PROC")]
    master: Option<u32>,

    /// Print one JSON object per placement and line (`rank`, `label`, `predicted_seconds`,
    /// `placement`: process id to host name) instead of tables.
    #[arg(long)]
    json: bool,

    /// Write the best placement to DIR: hostfile and rankfile (Open MPI), machinefile
    /// (MPICH), target.toml (for `lbf-gag predict --target`).
    #[arg(long, value_name = "DIR")]
    write: Option<PathBuf>,
}

const ADVISE_HELP: &str = "\
Examples:
  # 16 processes, 4 hosts of 4 cores over Gigabit Ethernet: the best placements in 30 s
  lbf-gag advise run.trace.jsonl --hosts 4 --cores 4 --network gige

  # on measured hosts (lbf-node calibrate), by their names
  lbf-gag advise run.trace.jsonl --cluster lab.toml

  # a master/worker program whose workers also talk: process 0 hands out the tasks
  lbf-gag advise run.trace.jsonl --cluster lab.toml --master 0

  # the best placement as files to run it with, found within 5 s
  lbf-gag advise run.trace.jsonl --hosts 8 --cores 2 --budget 5 --write advised/
  mpirun.openmpi --rankfile advised/rankfile -np 16 ./app

The predicted times are the engine's, as `predict` gives them for one target each. For a
master/worker program (one process exchanging with all others, the others not with each
other, or --master) the work-rate model's placement (label `work-rate`) is scored too, and
the model's own rate and time are printed next to the engine's prediction for it. When its
master hands the tasks out on demand (each result answered with the next task to its
sender, in no fixed rotation), every placement is scored by dealing the trace's tasks again,
each to the worker that reports first, rather than by replaying the traced deal (a note on
stderr says so; see docs/advise.md).";

/// Runs `lbf-gag advise`.
pub(crate) fn advise(args: &Advise) -> Result<()> {
    if !(0.0..=1.0).contains(&args.spin) {
        bail!("--spin must be between 0 and 1");
    }
    let trace = args.trace.display();
    let mut reader = TraceReader::open(&args.trace).with_context(|| trace.to_string())?;
    let procs = reader.header().procs.clone();
    let mut events: Vec<Event> = Vec::new();
    while let Some(e) = reader.next_event().with_context(|| trace.to_string())? {
        events.push(e.event);
    }
    let machine = machine(args)?;
    let options = SearchOptions {
        budget: Duration::from_secs_f64(args.budget.max(0.0)),
        keep: args.top.max(1),
        ..SearchOptions::default()
    };
    let mw = match args.master {
        Some(m) => Some(
            declared(procs.len(), &events, m).with_context(|| format!("{trace}: --master {m}"))?,
        ),
        None => recognise(procs.len(), &events).ok(),
    };
    let advice = mw
        .as_ref()
        .and_then(|mw| work_rate_placement::advise(mw, procs.len(), &machine));
    let extra = advice
        .iter()
        .map(|a| ("work-rate".to_string(), a.placement.clone()))
        .collect();
    // A master that deals its tasks on demand: placements are scored by dealing them again.
    let on_demand = mw
        .as_ref()
        .and_then(|mw| OnDemand::read(&procs, &events, mw.master));
    if let Some(d) = &on_demand {
        eprintln!(
            "advise: process {} deals {} tasks on demand to {} workers: placements are scored \
             by dealing them again, not by replaying the traced deal",
            d.master,
            d.tasks.len(),
            d.workers.len()
        );
    }
    let found = search(
        &procs,
        &events,
        &machine,
        on_demand.as_ref(),
        extra,
        options,
        show_progress,
    )
    .with_context(|| format!("{trace}: scoring placements"))?;
    eprintln!();
    let best = &found[0];
    // The engine's rank and time for the model's placement (a start, so always kept).
    let advised = advice.as_ref().and_then(|a| {
        let same = machine.canonical(&a.placement);
        let at = found
            .iter()
            .position(|s| machine.canonical(&s.placement) == same)?;
        Some((a, at))
    });
    if args.json {
        for (i, s) in found.iter().enumerate() {
            let model = advised.filter(|&(_, at)| at == i).map(|(a, _)| a);
            println!("{}", json_line(&machine, s, i + 1, model));
        }
    } else {
        print!("{}", table(&machine, &found, args.top));
        print!(
            "{}",
            by_hosts(&procs, &events, &machine, on_demand.as_ref(), options)?
        );
        if let Some(mw) = &mw {
            println!("{}", figures(mw));
        }
        if let Some((a, at)) = advised {
            println!("{}", model_line(&machine, a, &found[at], at + 1));
        }
    }
    if let Some(dir) = &args.write {
        write_files(dir, &machine, &best.placement)?;
        eprintln!(
            "lbf-gag: wrote hostfile, rankfile, machinefile and target.toml to {}",
            dir.display()
        );
    }
    Ok(())
}

/// The hosts `args` name: `--hosts` identical ones, or a cluster file's.
fn machine(args: &Advise) -> Result<Machine> {
    if let Some(path) = &args.cluster {
        let cluster = load_cluster(path)?;
        let all: Vec<usize> = (0..cluster.hosts.len()).collect();
        let (network, notes) = cluster
            .network_for(&all)
            .map_err(|e| anyhow::anyhow!("--cluster {}: {e}", path.display()))?;
        for note in notes {
            eprintln!("note: --cluster {}: {note}", path.display());
        }
        return Ok(Machine {
            hosts: cluster
                .hosts
                .iter()
                .map(|h| Host {
                    name: h.name.clone(),
                    cores: h.cores,
                    speed: h.speed,
                })
                .collect(),
            network,
            spin: args.spin,
            bind_to_cores: args.bind_to_cores,
        });
    }
    let hosts = args.hosts.unwrap_or(1);
    if hosts == 0 || args.cores == 0 {
        bail!("--hosts and --cores must be at least 1");
    }
    if hosts > lbf::target::MAX_NODES {
        bail!(
            "--hosts {hosts} is more than lbf's limit of {}",
            lbf::target::MAX_NODES
        );
    }
    if !(args.speed > 0.0 && args.speed.is_finite()) {
        bail!("--speed must be positive");
    }
    Ok(Machine {
        hosts: (0..hosts)
            .map(|h| Host {
                name: format!("host{h}"),
                cores: args.cores,
                speed: args.speed,
            })
            .collect(),
        network: args.network.network(),
        spin: args.spin,
        bind_to_cores: args.bind_to_cores,
    })
}

/// A progress line on stderr, rewritten in place.
fn show_progress(p: Progress) {
    let width = 30;
    let done = (p.spent * width as f64).round() as usize;
    eprint!(
        "\radvise: [{}{}] {} candidates scored, best {:.6} s ",
        "#".repeat(done.min(width)),
        " ".repeat(width - done.min(width)),
        p.scored,
        p.best_seconds
    );
    let _ = std::io::stderr().flush();
}

/// The best `top` placements found and the baselines, ranked.
fn table(machine: &Machine, found: &[Scored], top: usize) -> String {
    let mut out = format!(
        "{:>4}  {:<14} {:>12}  placement (host: processes)\n",
        "rank", "found by", "predicted"
    );
    for (i, s) in found.iter().enumerate() {
        if i >= top && s.label == "search" {
            continue;
        }
        out += &format!(
            "{:>4}  {:<14} {:>10.6} s  {}\n",
            i + 1,
            s.label,
            s.seconds,
            describe(&machine.hosts, &s.placement)
        );
    }
    out
}

/// The best predicted time using 1, 2, ... of the hosts (each a short search of its own).
fn by_hosts(
    procs: &[lbf::event::ProcInfo],
    events: &[Event],
    machine: &Machine,
    on_demand: Option<&OnDemand>,
    options: SearchOptions,
) -> Result<String> {
    let mut out = String::from("hosts used  best predicted\n");
    let most = machine.hosts.len().min(procs.len());
    let budget = options.budget / (most as u32).max(1) / 4;
    for k in 1..=most {
        let fewer = Machine {
            hosts: machine.hosts[..k].to_vec(),
            ..machine.clone()
        };
        let found = search(
            procs,
            events,
            &fewer,
            on_demand,
            Vec::new(),
            SearchOptions { budget, ..options },
            |_| {},
        )?;
        out += &format!("{k:>10}  {:>12.6} s\n", found[0].seconds);
    }
    Ok(out)
}

/// A master/worker program's per-task figures, in a line.
fn figures(mw: &MasterWorker) -> String {
    format!(
        "master/worker: master {} and {} workers; {} tasks, master {:.3} ms and workers \
         {:.3} ms of CPU per task on average, {:.0} bytes per task",
        mw.master,
        mw.workers.len(),
        mw.tasks,
        mw.master_seconds_per_task * 1e3,
        mw.worker_seconds_per_task.iter().sum::<f64>() * 1e3
            / mw.worker_seconds_per_task.len().max(1) as f64,
        mw.bytes_per_task
    )
}

/// The work-rate model's answer next to the engine's prediction for its placement, ranked
/// `rank` among the placements found.
fn model_line(machine: &Machine, a: &WorkRateAdvice, engine: &Scored, rank: usize) -> String {
    let workers: Vec<&str> = a
        .worker_hosts
        .iter()
        .map(|&h| machine.hosts[h].name.as_str())
        .collect();
    format!(
        "work-rate model: master on {}, workers on {}; {:.1} tasks/s, {:.6} s by the model, \
         {:.6} s by the engine (rank {rank})",
        machine.hosts[a.master_host].name,
        workers.join(" "),
        a.rate,
        a.seconds,
        engine.seconds
    )
}

/// One candidate as a JSON object; the work-rate model's own rate and time (`model_rate`,
/// tasks per second, and `model_seconds`) when `model` is its placement.
fn json_line(machine: &Machine, s: &Scored, rank: usize, model: Option<&WorkRateAdvice>) -> String {
    let placement: serde_json::Map<String, serde_json::Value> = s
        .placement
        .iter()
        .enumerate()
        .map(|(p, &h)| (p.to_string(), machine.hosts[h].name.clone().into()))
        .collect();
    let mut line = serde_json::json!({
        "rank": rank,
        "label": s.label,
        "predicted_seconds": s.seconds,
        "placement": placement,
    });
    if let Some(a) = model {
        line["model_rate"] = a.rate.into();
        line["model_seconds"] = a.seconds.into();
    }
    line.to_string()
}

/// Writes the files to run and predict `placement` with.
fn write_files(dir: &std::path::Path, machine: &Machine, placement: &[usize]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (name, text) in [
        ("hostfile", open_mpi_hostfile(machine, placement)),
        ("rankfile", open_mpi_rankfile(machine, placement)),
        ("machinefile", mpich_machinefile(machine, placement)),
        ("target.toml", target_toml(machine, placement, "advised")),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
