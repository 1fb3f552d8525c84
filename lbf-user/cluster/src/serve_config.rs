//! The builder's configuration file (`lbf-gag serve --config FILE`, TOML; see
//! `deploy/builder.toml` and `docs/cluster.md`): where to listen, the TLS files, the journal,
//! the job's processes, the procedures its nodes follow, its targets (with the procedure
//! what-ifs), and the nodes' tokens. Relative paths are relative to the
//! configuration file's directory.

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use lbf_model::config::{
    load_target, parse_speedup, preset, short_form, Layout, ProcedureArgs, ShortForm,
};
use lbf_model::event::ProcInfo;
use lbf_model::procedure::{check_list, resolve as resolve_changes, ProcedureError};
use lbf_model::target::{Target, MAX_PROCS};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The builder's settings, validated and with paths resolved.
pub struct ServeConfig {
    /// Where nodes connect (TLS).
    pub listen: SocketAddr,
    /// Where the HTTP endpoints (`/results`, `/nodes`, `/metrics`) listen, if anywhere.
    pub http: Option<SocketAddr>,
    /// The builder's certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// The journal directory (one per job: remove it to start a new job).
    pub journal: PathBuf,
    /// Whether every journal append waits for the disk (power-loss safety, at a cost).
    pub fsync: bool,
    /// Where to write the merged trace (trace format version 2), if anywhere.
    pub merged_trace: Option<PathBuf>,
    /// Where to write the final report (JSON), if anywhere.
    pub report: Option<PathBuf>,
    /// The job's processes, ids `0..n`.
    pub procs: Vec<ProcInfo>,
    /// The procedures every node follows (`lbf-node --procedure`), in the order of the
    /// shares their batches carry; empty if none.
    pub procedures: Vec<String>,
    /// The targets to predict: the files' and short forms', then one per procedure what-if
    /// (`move`, `zero`, `speedup`) and placement.
    pub targets: Vec<Target>,
    /// Each node's token, by node name.
    pub tokens: BTreeMap<String, String>,
}

/// The file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default = "default_listen")]
    listen: SocketAddr,
    http: Option<SocketAddr>,
    #[serde(default)]
    allow_all_interfaces: bool,
    cert: PathBuf,
    key: PathBuf,
    journal: PathBuf,
    #[serde(default)]
    fsync: bool,
    merged_trace: Option<PathBuf>,
    report: Option<PathBuf>,
    job: Job,
    #[serde(default)]
    tokens: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Job {
    procs: Option<usize>,
    names: Option<Vec<String>>,
    #[serde(default)]
    targets: Vec<PathBuf>,
    #[serde(default)]
    short: Vec<Short>,
    #[serde(default)]
    procedures: Vec<String>,
    #[serde(default, rename = "move")]
    moves: Vec<String>,
    #[serde(default)]
    zero: Vec<String>,
    #[serde(default)]
    speedup: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Short {
    nodes: u32,
    #[serde(default = "one")]
    cores: u32,
    #[serde(default = "block")]
    layout: String,
    #[serde(default = "one_f")]
    speed: f64,
    #[serde(default = "zero")]
    network: String,
}

/// Where a builder listens unless its configuration says: loopback, port 7400.
pub(crate) fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7400))
}
fn one() -> u32 {
    1
}
fn one_f() -> f64 {
    1.0
}
fn block() -> String {
    "block".into()
}
fn zero() -> String {
    "zero".into()
}

impl ServeConfig {
    /// Reads and checks the configuration file at `path`.
    pub fn load(path: &Path) -> Result<Self> {
        load_with(path, Self::parse)
    }

    /// Parses configuration text whose relative paths are relative to `base`.
    pub fn parse(text: &str, base: &Path) -> Result<Self> {
        let file: File = toml::from_str(text)?;
        check_listen(
            &[("listen", Some(file.listen)), ("http", file.http)],
            file.allow_all_interfaces,
        )?;
        check_tokens(&file.tokens)?;
        let procs = procs(&file.job)?;
        let resolve = |p: &Path| base.join(p);
        let mut targets = file
            .job
            .targets
            .iter()
            .map(|p| load_target(&resolve(p), procs.len()))
            .collect::<Result<Vec<_>, _>>()?;
        for s in &file.job.short {
            let layout = Layout::from_str(&s.layout, true).map_err(|_| {
                anyhow::anyhow!(
                    "job.short: layout `{}` is unknown; use block or round-robin",
                    s.layout
                )
            })?;
            let form = ShortForm {
                nodes: s.nodes,
                cores: s.cores,
                layout,
                speed: s.speed,
                network: preset(&s.network)?,
                spin: 0.0,
                scheduler: None,
                bind_to_cores: false,
            };
            targets.push(short_form(&form, procs.len())?);
        }
        if targets.is_empty() {
            bail!("[job] names no target: add `targets = [\"FILE.toml\"]` or a [[job.short]]");
        }
        let procedures = file.job.procedures.clone();
        check_list(&procedures).map_err(|e| anyhow::anyhow!("[job] procedures {e}"))?;
        let targets = what_ifs(&file.job)?.extend(targets, &procs);
        for t in &targets {
            resolve_changes(&t.procedures, &procedures).map_err(|e| match e {
                ProcedureError::Unknown { name, .. } => anyhow::anyhow!(
                    "[job]: target `{}` changes procedure `{name}`, which is not in \
                     `procedures = {procedures:?}`; add it there, and `--procedure {name}` \
                     to every lbf-node",
                    t.name
                ),
                other => anyhow::anyhow!("[job]: target `{}`: {other}", t.name),
            })?;
        }
        Ok(ServeConfig {
            listen: file.listen,
            http: file.http,
            cert: resolve(&file.cert),
            key: resolve(&file.key),
            journal: resolve(&file.journal),
            fsync: file.fsync,
            merged_trace: file.merged_trace.as_deref().map(resolve),
            report: file.report.as_deref().map(resolve),
            procs,
            procedures,
            targets,
            tokens: file.tokens,
        })
    }
}

/// Reads the builder configuration at `path` and parses it with `parse`, relative paths
/// relative to its directory; errors name the file.
pub(crate) fn load_with<T>(path: &Path, parse: impl FnOnce(&str, &Path) -> Result<T>) -> Result<T> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the builder configuration {}", path.display()))?;
    let base = path.parent().unwrap_or(Path::new("."));
    parse(&text, base).with_context(|| path.display().to_string())
}

/// Refuses an address of `addresses` (key, value) that listens on all interfaces unless
/// `allow_all` says that is meant.
pub(crate) fn check_listen(
    addresses: &[(&str, Option<SocketAddr>)],
    allow_all: bool,
) -> Result<()> {
    for &(what, addr) in addresses {
        if let Some(addr) = addr.filter(|a| a.ip().is_unspecified() && !allow_all) {
            bail!(
                "`{what} = \"{addr}\"` listens on all interfaces; name one address, or set \
                 `allow_all_interfaces = true` if that is what you want"
            );
        }
    }
    Ok(())
}

/// Checks `[tokens]`: safe node names, strong tokens, none shared by two nodes.
pub(crate) fn check_tokens(tokens: &BTreeMap<String, String>) -> Result<()> {
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for (name, token) in tokens {
        check_node_name(name).map_err(|e| anyhow::anyhow!("[tokens]: {e}"))?;
        check_token(token).map_err(|e| anyhow::anyhow!("[tokens] {name}: {e}"))?;
        if let Some(other) = seen.insert(token, name) {
            bail!(
                "[tokens] {other} and {name} have the same token: each node needs its own, \
                 or one node could pass for the other"
            );
        }
    }
    Ok(())
}

/// The procedure what-ifs of `[job]` (`move`, `zero`, `speedup = ["NAME=S"]`), as
/// `lbf-gag predict`'s `--move`, `--zero` and `--speedup` state them.
fn what_ifs(job: &Job) -> Result<ProcedureArgs> {
    let speedups = job
        .speedup
        .iter()
        .map(|s| parse_speedup(s).map_err(|e| anyhow::anyhow!("[job] speedup: {e}")))
        .collect::<Result<_>>()?;
    Ok(ProcedureArgs {
        moves: job.moves.clone(),
        zeros: job.zero.clone(),
        speedups,
    })
}

/// The job's processes: `procs = N` (named `p0`, `p1`, ...) or `names = [...]`.
fn procs(job: &Job) -> Result<Vec<ProcInfo>> {
    if let Some(n) = job.procs.filter(|&n| n > MAX_PROCS) {
        bail!("[job] procs = {n} is more than lbf models (at most {MAX_PROCS})");
    }
    let names: Vec<String> = match (&job.procs, &job.names) {
        (Some(n), None) => (0..*n).map(|i| format!("p{i}")).collect(),
        (None, Some(names)) => names.clone(),
        (Some(n), Some(names)) if *n == names.len() => names.clone(),
        (Some(n), Some(names)) => bail!(
            "[job] says procs = {n} but lists {} names; give one of the two",
            names.len()
        ),
        (None, None) => bail!("[job] needs `procs = N` or `names = [...]`"),
    };
    if names.is_empty() {
        bail!("[job] has no process");
    }
    Ok(names
        .into_iter()
        .enumerate()
        .map(|(id, name)| ProcInfo {
            id: id as u32,
            name,
            host: String::new(),
            ..Default::default()
        })
        .collect())
}

/// Node names become journal file names: letters, digits, `.`, `_`, `-`, at most 64.
pub fn check_node_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "node name `{name}` is not allowed: use 1 to 64 letters, digits, `.`, `_` or `-`, \
             not starting with `.`"
        ))
    }
}

/// The least length of a node's token, in bytes: a short one can be guessed.
pub const MIN_TOKEN_BYTES: usize = 16;

/// Checks a node's token: at least [`MIN_TOKEN_BYTES`] bytes, not blank. The error says how to
/// make a good one.
pub fn check_token(token: &str) -> Result<()> {
    let how = "make one with `head -c 32 /dev/urandom | base64`";
    if token.trim().is_empty() {
        bail!("the token is empty: any node could connect; {how}");
    }
    if token.len() < MIN_TOKEN_BYTES {
        bail!(
            "the token has {} bytes, fewer than {MIN_TOKEN_BYTES}: it could be guessed; {how}",
            token.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
        cert = "c.pem"
        key = "k.pem"
        journal = "j"
        [job]
        procs = 4
        [[job.short]]
        nodes = 2
        network = "gige"
        [tokens]
        node-a = "node-a-token-for-tests"
    "#;

    #[test]
    fn a_minimal_file_listens_on_loopback_with_paths_resolved() {
        let c = ServeConfig::parse(BASE, Path::new("/etc/lbf")).unwrap();
        assert_eq!(c.listen, default_listen());
        assert_eq!(c.journal, Path::new("/etc/lbf/j"));
        assert_eq!(c.procs.len(), 4);
        assert_eq!(c.targets[0].name, "2x1 block gige");
    }

    #[test]
    fn all_interfaces_only_when_asked() {
        let text = format!("listen = \"0.0.0.0:7400\"\n{BASE}");
        let err = ServeConfig::parse(&text, Path::new(".")).err().unwrap();
        assert!(
            format!("{err:#}").contains("allow_all_interfaces"),
            "{err:#}"
        );
        let text = format!("allow_all_interfaces = true\n{text}");
        assert!(ServeConfig::parse(&text, Path::new(".")).is_ok());
    }

    #[test]
    fn empty_short_and_shared_tokens_are_refused() {
        let with = |tokens: &str| {
            let text = BASE.replace("node-a = \"node-a-token-for-tests\"", tokens);
            ServeConfig::parse(&text, Path::new("."))
                .err()
                .map(|e| format!("{e:#}"))
        };
        let empty = with("c = \"\"").unwrap();
        assert!(empty.contains("[tokens] c: the token is empty"), "{empty}");
        let short = with("c = \"s3cret\"").unwrap();
        assert!(
            short.contains("[tokens] c: the token has 6 bytes"),
            "{short}"
        );
        let shared = with("c = \"0123456789abcdef\"\nd = \"0123456789abcdef\"").unwrap();
        assert!(
            shared.contains("[tokens] c and d have the same token"),
            "{shared}"
        );
        assert_eq!(
            with("c = \"0123456789abcdef\"\nd = \"0123456789abcdeF\""),
            None
        );
    }

    #[test]
    fn a_huge_job_is_refused_before_allocating() {
        let text = BASE.replace("procs = 4", "procs = 4294967295");
        let err = format!(
            "{:#}",
            ServeConfig::parse(&text, Path::new(".")).err().unwrap()
        );
        assert!(
            err.contains("procs = 4294967295 is more than lbf models"),
            "{err}"
        );
    }

    /// `BASE` with `keys` added to its `[job]`.
    fn with_job_keys(keys: &str) -> Result<ServeConfig, String> {
        let text = BASE.replace("procs = 4\n", &format!("procs = 4\n{keys}\n"));
        ServeConfig::parse(&text, Path::new(".")).map_err(|e| format!("{e:#}"))
    }

    /// Each what-if makes one more target from each placement, as `lbf-gag predict`'s
    /// options do, after the placements and in the order move, zero, speed-up.
    #[test]
    fn procedures_and_what_ifs_make_targets() {
        let c = with_job_keys(
            "procedures = [\"servBusy1\", \"servBusy2\"]\nmove = [\"servBusy1\"]\n\
             zero = [\"servBusy2\"]\nspeedup = [\"servBusy1=2\"]",
        )
        .unwrap();
        assert_eq!(c.procedures, ["servBusy1", "servBusy2"]);
        let names: Vec<&str> = c.targets.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "2x1 block gige",
                "move servBusy1",
                "zero servBusy2",
                "speedup servBusy1=2"
            ]
        );
        assert_eq!(c.targets[3].nodes, c.targets[0].nodes);
        assert_eq!(
            c.targets[3].procedures[0].action,
            lbf_model::procedure::ProcedureAction::Speedup(2.0)
        );
        // Without procedures, a job has none and no more targets.
        let plain = with_job_keys("").unwrap();
        assert!(plain.procedures.is_empty() && plain.targets.len() == 1);
    }

    /// A target file's `[[procedure]]` tables work as in `lbf-gag predict`, against the
    /// job's procedures.
    #[test]
    fn a_target_file_may_change_a_procedure_of_the_job() {
        let dir = std::env::temp_dir().join(format!("lbf-serve-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("moved.toml"),
            "[[node]]\nprocs = [0, 1, 2, 3]\n[[procedure]]\nname = \"f\"\nmove = true\nto = [1]\n",
        )
        .unwrap();
        let text = |procedures: &str| {
            BASE.replace(
                "procs = 4\n",
                &format!("procs = 4\ntargets = [\"moved.toml\"]\n{procedures}\n"),
            )
        };
        let c = ServeConfig::parse(&text("procedures = [\"f\"]"), &dir).unwrap();
        assert_eq!(c.targets[0].procedures[0].name, "f");
        let err = format!("{:#}", ServeConfig::parse(&text(""), &dir).err().unwrap());
        assert!(
            err.contains("changes procedure `f`, which is not in `procedures = []`"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_procedures_and_what_ifs_are_named() {
        let err = with_job_keys("move = [\"servBusy1\"]").err().unwrap();
        assert!(
            err.contains("target `move servBusy1` changes procedure `servBusy1`")
                && err.contains("--procedure servBusy1"),
            "{err}"
        );
        let err = with_job_keys("procedures = [\"f\", \"g\", \"f\"]")
            .err()
            .unwrap();
        assert!(
            err.contains("[job] procedures lists `f` twice (the second time at index 2)"),
            "{err}"
        );
        let nine: Vec<String> = (0..9).map(|i| format!("\"f{i}\"")).collect();
        let err = with_job_keys(&format!("procedures = [{}]", nine.join(", ")))
            .err()
            .unwrap();
        assert!(err.contains("lists 9 procedures"), "{err}");
        for bad in ["f", "f=0", "f=x"] {
            let keys = format!("procedures = [\"f\"]\nspeedup = [\"{bad}\"]");
            let err = with_job_keys(&keys).err().unwrap();
            assert!(err.contains("[job] speedup: `"), "{bad}: {err}");
        }
    }

    #[test]
    fn node_names_are_safe_file_names() {
        assert!(check_node_name("node-1.rack_2").is_ok());
        for bad in ["", "../x", ".hidden", "a/b", "a b"] {
            assert!(check_node_name(bad).is_err(), "{bad}");
        }
    }
}
