//! `lbf-gag`: predicts a traced program's run time on other placements (LBF) and networks
//! (NF) by replaying its trace through the online engine. Thin: parses arguments, wires
//! `lbf::trace`, `lbf::config`, `lbf::engine` and `lbf::report`, prints.

use anyhow::{Context, Result};
use clap::{error::ErrorKind, CommandFactory, Parser, Subcommand};
use lbf::config::{load_target, preset, short_form, Layout, NetworkPreset, ShortForm, PRESETS};
use lbf::engine::Engine;
use lbf::report::{json_lines, table, warnings, Timeline};
use lbf::target::Target;
use lbf::trace::{Header, TraceReader};
use std::path::PathBuf;
use std::process::ExitCode;

/// Predict how long a traced program would run on other machines and networks.
#[derive(Parser)]
#[command(name = "lbf-gag", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Predict(Predict),
}

/// Replay a trace once, predicting its run time on every target given.
///
/// A target is a placement of the trace's processes onto nodes plus a network. Give targets as
/// TOML files (--target, repeatable; see docs/targets.md) and/or in the short form (--nodes
/// with --cores, --layout, --speed, --network). Every target is evaluated in one pass.
#[derive(clap::Args)]
#[command(
    group = clap::ArgGroup::new("targets").required(true).multiple(true).args(["target", "nodes"]),
    after_help = AFTER_HELP,
)]
struct Predict {
    /// The trace (lbf trace format v1, JSON Lines; see docs/trace-format.md).
    trace: PathBuf,

    /// A target file (TOML); repeat for several targets.
    #[arg(long, value_name = "FILE")]
    target: Vec<PathBuf>,

    /// Short form: put all processes on this many identical nodes.
    #[arg(long, value_name = "N", help_heading = "Short-form target")]
    nodes: Option<u32>,

    /// Short form: cores per node.
    #[arg(
        long,
        default_value_t = 1,
        requires = "nodes",
        help_heading = "Short-form target"
    )]
    cores: u32,

    /// Short form: how processes are spread over the nodes.
    #[arg(
        long,
        value_enum,
        default_value_t = Layout::Block,
        requires = "nodes",
        help_heading = "Short-form target"
    )]
    layout: Layout,

    /// Short form: relative speed of every node (2.0 runs the same work in half the time).
    #[arg(
        long,
        default_value_t = 1.0,
        requires = "nodes",
        help_heading = "Short-form target"
    )]
    speed: f64,

    /// Short form: network preset (zero, shm, gige, 10gige, ib-edr, ib-hdr).
    #[arg(
        long,
        long_help = network_help(),
        value_name = "PRESET",
        default_value = "zero",
        value_parser = parse_preset,
        requires = "nodes",
        help_heading = "Short-form target"
    )]
    network: &'static NetworkPreset,

    /// Print one JSON object per target and line instead of a table.
    #[arg(long)]
    json: bool,

    /// Write one target's predicted schedule as a Perfetto / Chrome trace-event JSON file.
    #[arg(long, value_name = "OUT.json")]
    timeline: Option<PathBuf>,

    /// The target whose schedule --timeline writes (default: the first).
    #[arg(long, value_name = "NAME", requires = "timeline")]
    timeline_target: Option<String>,
}

const AFTER_HELP: &str = "\
Examples:
  # two target files, compared with the measured run
  lbf-gag predict run.trace.jsonl --target two-nodes.toml --target one-node.toml

  # 64 processes on 8 nodes of 4 cores over Gigabit Ethernet, as JSON
  lbf-gag predict run.trace.jsonl --nodes 8 --cores 4 --network gige --json

  # the predicted schedule of one target, to open in https://ui.perfetto.dev
  lbf-gag predict run.trace.jsonl --target two-nodes.toml --nodes 4 \\
      --timeline schedule.json --timeline-target two-nodes

The speed-up column is the measured run time over the predicted one (above 1: faster).
Errors name the trace line at fault; the engine's \"(at N)\" is line N of the trace.
Exit status: 0 success, 1 error (trace, target or engine), 2 usage.";

/// The long help of --network: every preset and what it models.
fn network_help() -> String {
    let mut help = String::from("Short form: network preset. The presets:");
    for p in PRESETS {
        help.push_str(&format!("\n  {:<7} {}", p.name, p.about));
    }
    help
}

/// clap's parser for --network: a preset's name.
fn parse_preset(name: &str) -> Result<&'static NetworkPreset, String> {
    preset(name).map_err(|e| e.message)
}

fn main() -> ExitCode {
    let Command::Predict(args) = Cli::parse().command;
    match predict(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn predict(args: &Predict) -> Result<()> {
    let trace = args.trace.display();
    let mut reader = TraceReader::open(&args.trace).with_context(|| trace.to_string())?;
    let header = reader.header().clone();
    let targets = targets(args, &header)?;
    let timeline_index = timeline_index(args, &targets);
    let timeline = match (&args.timeline, timeline_index) {
        (Some(path), Some(i)) => Some(
            Timeline::create(path, &targets[i], &header.procs)
                .with_context(|| format!("cannot write the timeline {}", path.display()))?,
        ),
        _ => None,
    };
    let mut engine = Engine::new(header.procs.len(), targets)?;
    if let (Some(timeline), Some(i)) = (&timeline, timeline_index) {
        engine.set_schedule_sink(i, timeline.sink());
    }
    let inconsistent = || format!("{trace}: inconsistent trace (\"at N\" is line N)");
    while let Some(e) = reader.next_event().with_context(|| trace.to_string())? {
        engine.push(e.event, e.line).with_context(inconsistent)?;
    }
    let predictions = engine.finish().with_context(inconsistent)?;
    if let (Some(timeline), Some(path)) = (timeline, &args.timeline) {
        timeline
            .finish()
            .with_context(|| format!("cannot write the timeline {}", path.display()))?;
    }
    let summary = reader.summary().copied();
    for w in warnings(summary.as_ref()) {
        eprintln!("warning: {trace}: {w}");
    }
    if args.json {
        print!("{}", json_lines(&predictions, summary.as_ref()));
    } else {
        print!("{}", table(&predictions, summary.as_ref()));
    }
    Ok(())
}

/// The targets of the command line: the files in order, then the short form.
fn targets(args: &Predict, header: &Header) -> Result<Vec<Target>> {
    let procs = header.procs.len();
    let mut targets = args
        .target
        .iter()
        .map(|path| load_target(path, procs))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(nodes) = args.nodes {
        let form = ShortForm {
            nodes,
            cores: args.cores,
            layout: args.layout,
            speed: args.speed,
            network: args.network,
        };
        targets.push(short_form(&form, procs)?);
    }
    Ok(targets)
}

/// Which target --timeline records; exits with a usage error for an unknown --timeline-target.
fn timeline_index(args: &Predict, targets: &[Target]) -> Option<usize> {
    args.timeline.as_ref()?;
    let Some(name) = &args.timeline_target else {
        return Some(0);
    };
    let found = targets.iter().position(|t| &t.name == name);
    if found.is_none() {
        let names: Vec<_> = targets.iter().map(|t| format!("\"{}\"", t.name)).collect();
        let message = format!(
            "no target is named \"{name}\"; the targets are {}",
            names.join(", ")
        );
        Cli::command()
            .error(ErrorKind::InvalidValue, message)
            .exit();
    }
    found
}
