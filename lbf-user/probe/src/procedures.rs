//! Traced procedures (`lbf-trace --procedure`): finding each in the traced program or its
//! libraries, and attaching its entry and return probes (`lbf-ebpf/src/procedure.rs`).
//!
//! A procedure is given as `NAME`, `NAME@OBJECT` or an address `0xADDR@OBJECT` (`0xADDR` alone
//! is in the program). `NAME` is a function symbol of the object's `.symtab` (where the
//! binary keeps it: static functions too) or `.dynsym`, or a C++ or Rust path (`ns::f`,
//! matched against the Itanium and Rust legacy manglings of a function of that path).
//! `OBJECT` is a path, or the file name of one of the objects searched (`spa`,
//! `libfoo.so.1`, or the start of one: `libfoo`).

use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};
use aya::programs::{
    uprobe::{UProbeAttachLocation, UProbeAttachPoint},
    ProgramError, UProbe,
};
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

use crate::tracer::{program, AttachMode, Tracer};

/// Most procedures one capture follows (one `ProcCpu` argument word each).
pub const MAX_PROCEDURES: usize = lbf_common::maps::MAX_PROCEDURES;

/// One `--procedure` as given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcedureSpec {
    /// The text given, which names the procedure in the trace.
    pub text: String,
    what: What,
    object: Option<String>,
}

/// What a spec looks for.
#[derive(Clone, Debug, PartialEq, Eq)]
enum What {
    Name(String),
    Address(u64),
}

impl std::str::FromStr for ProcedureSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (what, object) = match text.rsplit_once('@') {
            Some((w, o)) if !o.is_empty() => (w, Some(o.to_string())),
            _ => (text, None),
        };
        ensure_nonempty(what, text)?;
        let what = match what.strip_prefix("0x") {
            Some(hex) => What::Address(
                u64::from_str_radix(hex, 16)
                    .map_err(|_| format!("`{what}` in `{text}` is not a hexadecimal address"))?,
            ),
            None => What::Name(what.to_string()),
        };
        Ok(ProcedureSpec {
            text: text.to_string(),
            what,
            object,
        })
    }
}

impl ProcedureSpec {
    /// The object given after `@` if it is a path (has a `/`), not a file name to look for
    /// among the objects searched.
    pub fn object_path(&self) -> Option<&Path> {
        self.object
            .as_deref()
            .filter(|o| o.contains('/'))
            .map(Path::new)
    }
}

fn ensure_nonempty(what: &str, text: &str) -> Result<(), String> {
    match what.is_empty() {
        true => Err(format!(
            "`{text}`: give a function name or 0xADDRESS before the @"
        )),
        false => Ok(()),
    }
}

/// A procedure found: where its probes go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundProcedure {
    /// The object defining it.
    pub object: PathBuf,
    /// The symbol found (its mangled name, or the address given).
    pub symbol: String,
    /// Its offset in the object's file.
    pub offset: u64,
}

impl FoundProcedure {
    /// Where it is, as the tools print it: `servBusy1 at offset 0x1189 of /path/spa`.
    pub fn describe(&self) -> String {
        format!(
            "{} at offset {:#x} of {}",
            self.symbol,
            self.offset,
            self.object.display()
        )
    }
}

/// Finds each of `specs` in the objects `objects(spec)` lists and attaches its probes, the
/// i-th as the trace's procedure i; returns each one's name in the trace
/// ([`trace_name`]) and where it was found. More than [`MAX_PROCEDURES`] specs, or a name
/// given twice, is an error (`tool` names the program in it).
pub fn attach_all(
    tracer: &mut Tracer,
    specs: &[ProcedureSpec],
    mut objects: impl FnMut(&ProcedureSpec) -> Result<Vec<PathBuf>>,
    tool: &str,
) -> Result<Vec<(String, FoundProcedure)>> {
    ensure!(
        specs.len() <= MAX_PROCEDURES,
        "--procedure is given {} times; {tool} follows at most {MAX_PROCEDURES}",
        specs.len()
    );
    let mut attached: Vec<(String, FoundProcedure)> = Vec::new();
    for (index, spec) in specs.iter().enumerate() {
        let found = find(spec, &objects(spec)?)?;
        let name = trace_name(spec);
        ensure!(
            !attached.iter().any(|(n, _)| *n == name),
            "--procedure {name} is given twice"
        );
        tracer.attach_procedure(index, &found)?;
        attached.push((name, found));
    }
    Ok(attached)
}

/// A function symbol of one object.
struct Symbol {
    name: String,
    address: u64,
    offset: u64,
}

/// The function symbols of `path` (`.symtab` and `.dynsym`), each address once.
fn functions(path: &Path) -> Result<Vec<Symbol>> {
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let file = object::File::parse(&*data)
        .with_context(|| format!("parsing {} as an object file", path.display()))?;
    let mut found: Vec<Symbol> = Vec::new();
    for sym in file.symbols().chain(file.dynamic_symbols()) {
        if !sym.is_definition() || sym.kind() != SymbolKind::Text {
            continue;
        }
        let (Ok(name), Some(offset)) = (sym.name(), file_offset(&file, sym.address())) else {
            continue;
        };
        if !found
            .iter()
            .any(|s| s.address == sym.address() && s.name == name)
        {
            found.push(Symbol {
                name: name.to_string(),
                address: sym.address(),
                offset,
            });
        }
    }
    Ok(found)
}

/// The file offset of the address `address` of `file`, through the section holding it.
fn file_offset(file: &object::File<'_>, address: u64) -> Option<u64> {
    file.sections().find_map(|s| {
        let (start, size) = (s.address(), s.size());
        let (off, _) = s.file_range()?;
        (address >= start && address < start + size).then(|| address - start + off)
    })
}

/// Whether the symbol `symbol` is the function `name`: the same, or a C++/Rust path whose
/// Itanium or Rust legacy mangling `symbol` is.
fn matches(symbol: &str, name: &str) -> bool {
    if symbol == name {
        return true;
    }
    if !name.contains("::") {
        return false;
    }
    let mut prefix = String::from("_ZN");
    for part in name.split("::") {
        prefix.push_str(&format!("{}{part}", part.len()));
    }
    let Some(rest) = symbol.strip_prefix(&prefix) else {
        return false;
    };
    // C++: `E` and the parameter types; Rust: a hash component `17h` + 16 hex digits, `E`.
    rest.starts_with('E')
        || (rest.len() == 20
            && rest.starts_with("17h")
            && rest.ends_with('E')
            && rest[3..19].bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Whether `object` is the one `wanted` names: its path, its file name, or the start of it.
fn is_object(object: &Path, wanted: &str) -> bool {
    let name = object
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    object == Path::new(wanted) || name == wanted || name.starts_with(wanted)
}

/// Finds `spec` in `objects` (the program first): exactly one function, or an error listing
/// what was found (several) or what comes close (none).
pub fn find(spec: &ProcedureSpec, objects: &[PathBuf]) -> Result<FoundProcedure> {
    let searched: Vec<&PathBuf> = match &spec.object {
        Some(o) => objects.iter().filter(|p| is_object(p, o)).collect(),
        None => objects.iter().collect(),
    };
    let list = |paths: &[&PathBuf]| {
        paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if searched.is_empty() {
        let all: Vec<&PathBuf> = objects.iter().collect();
        bail!(
            "--procedure {}: no object searched is `{}`; the objects are: {}",
            spec.text,
            spec.object.as_deref().unwrap_or(""),
            list(&all)
        );
    }
    if let What::Address(address) = spec.what {
        let object = searched[0];
        let data =
            std::fs::read(object).with_context(|| format!("reading {}", object.display()))?;
        let file = object::File::parse(&*data)
            .with_context(|| format!("parsing {} as an object file", object.display()))?;
        let offset = file_offset(&file, address).with_context(|| {
            format!(
                "--procedure {}: {address:#x} is in no section of {}",
                spec.text,
                object.display()
            )
        })?;
        return Ok(FoundProcedure {
            object: object.clone(),
            symbol: format!("{address:#x}"),
            offset,
        });
    }
    let What::Name(name) = &spec.what else {
        unreachable!("addresses are handled above")
    };
    let mut found = Vec::new();
    let mut close = Vec::new();
    for &object in &searched {
        let Ok(symbols) = functions(object) else {
            continue;
        };
        for s in symbols {
            if matches(&s.name, name) {
                found.push(FoundProcedure {
                    object: object.clone(),
                    symbol: s.name,
                    offset: s.offset,
                });
            } else if close.len() < 12 && s.name.contains(name.rsplit("::").next().unwrap_or(name))
            {
                close.push(format!("{} in {}", s.name, object.display()));
            }
        }
    }
    found.dedup_by(|a, b| a.object == b.object && a.offset == b.offset);
    match found.len() {
        1 => Ok(found.remove(0)),
        0 if close.is_empty() => bail!(
            "--procedure {}: no function `{name}` in {} (a program stripped of its symbol \
             table keeps only its dynamic symbols; give 0xADDRESS@OBJECT then)",
            spec.text,
            list(&searched)
        ),
        0 => bail!(
            "--procedure {}: no function `{name}` in {}; functions with similar names: {}",
            spec.text,
            list(&searched),
            close.join(", ")
        ),
        _ => bail!(
            "--procedure {}: `{name}` is defined {} times: {}; say which with NAME@OBJECT or \
             0xADDRESS@OBJECT",
            spec.text,
            found.len(),
            found
                .iter()
                .map(|f| format!(
                    "{} at offset {:#x} of {}",
                    f.symbol,
                    f.offset,
                    f.object.display()
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The name a procedure has in the trace: the spec's name without `@OBJECT`, or the address
/// with its object.
pub fn trace_name(spec: &ProcedureSpec) -> String {
    match &spec.what {
        What::Name(name) => name.clone(),
        What::Address(_) => spec.text.clone(),
    }
}

/// The objects a command's procedures are looked for in: each word of it that is an
/// executable file (a word without `/` looked up in `PATH`; the words of a shell command
/// given to `sh -c` too), then the libraries each links (as `ldd` lists them), each once. The
/// program a launcher runs (`mpirun -np 4 ./spa`) is a word of the command.
pub fn objects_of_command(command: &[String]) -> Vec<PathBuf> {
    let path_dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    let mut programs = Vec::new();
    for word in command.iter().flat_map(|w| w.split_whitespace()) {
        let candidates: Vec<PathBuf> = if word.contains('/') {
            vec![PathBuf::from(word)]
        } else {
            path_dirs.iter().map(|d| d.join(word)).collect()
        };
        if let Some(found) = candidates.into_iter().find(|p| is_elf(p)) {
            programs.push(found);
        }
    }
    with_libraries(programs)
}

/// The objects the running processes `pids` map: each one's executable, then the files of
/// its memory map.
pub fn objects_of_pids(pids: &[u32]) -> Vec<PathBuf> {
    let mut objects: Vec<PathBuf> = Vec::new();
    for pid in pids {
        if let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) {
            objects.push(exe);
        }
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        for line in maps.lines() {
            if let Some(path) = line
                .split_whitespace()
                .nth(5)
                .filter(|p| p.starts_with('/'))
            {
                objects.push(PathBuf::from(path));
            }
        }
    }
    dedup(objects.into_iter().filter(|p| is_elf(p)).collect())
}

/// The objects procedures of the running processes `pids` are looked for in: those they map
/// ([`objects_of_pids`]), then the programs their command lines name, with the libraries
/// those link ([`objects_of_command`]): a launcher's (`mpirun -np 4 ./spa`, a job script)
/// names the program it starts, which it does not map. Each file once.
pub fn objects_of_selected(pids: &[u32]) -> Vec<PathBuf> {
    let mut objects = objects_of_pids(pids);
    for pid in pids {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let words: Vec<String> = cmdline
            .split(|&b| b == 0)
            .filter(|w| !w.is_empty())
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect();
        objects.extend(objects_of_command(&words));
    }
    dedup(objects)
}

/// `programs` and the libraries they link, each once, programs first.
fn with_libraries(programs: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut objects = programs.clone();
    for program in &programs {
        let Ok(out) = std::process::Command::new("ldd").arg(program).output() else {
            continue;
        };
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            // `libm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x...)`, or the loader's path.
            let path = match line.split_once("=>") {
                Some((_, rest)) => rest.split_whitespace().next(),
                None => line.split_whitespace().next(),
            };
            if let Some(path) = path.filter(|p| p.starts_with('/')) {
                objects.push(PathBuf::from(path));
            }
        }
    }
    dedup(objects)
}

/// `paths` without repeats, the same file by two paths counting as one (the first of each
/// kept): a function found twice in one file would be taken for two.
pub fn dedup(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut files: Vec<PathBuf> = Vec::new();
    for p in paths {
        let file = p.canonicalize().unwrap_or_else(|_| p.clone());
        if !files.contains(&file) {
            files.push(file);
            out.push(p);
        }
    }
    out
}

/// Whether `path` is an ELF file. Only a regular file is opened: a FIFO a command names
/// (a job waiting on one) would block the open.
fn is_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::metadata(path).is_ok_and(|m| m.is_file())
        && std::fs::File::open(path)
            .and_then(|mut f| f.read_exact(&mut magic))
            .is_ok()
        && magic == *b"\x7fELF"
}

impl Tracer {
    /// Attaches the entry and return probes of procedure number `index` (0 to
    /// [`MAX_PROCEDURES`] - 1, its place in the trace's list) at `found`, for every process
    /// that maps its object (the kernel side keeps to the traced ones).
    pub fn attach_procedure(&mut self, index: usize, found: &FoundProcedure) -> Result<()> {
        ensure!(
            index < MAX_PROCEDURES,
            "lbf-trace follows at most {MAX_PROCEDURES} procedures"
        );
        let point = UProbeAttachPoint {
            location: UProbeAttachLocation::AbsoluteOffset(found.offset),
            cookie: Some(index as u64),
        };
        let (enter, exit) = match self.attach_mode() {
            AttachMode::Multi => ("procedure_enter", "procedure_return"),
            AttachMode::PerPoint => ("procedure_enter_pp", "procedure_return_pp"),
        };
        for name in [enter, exit] {
            let prog: &mut UProbe = program(&mut self.ebpf, name)?;
            match prog.load() {
                Ok(()) | Err(ProgramError::AlreadyLoaded) => {}
                Err(e) => return Err(e).with_context(|| format!("verifying eBPF program {name}")),
            }
        }
        let target = found
            .object
            .canonicalize()
            .with_context(|| format!("procedure {} in {}", found.symbol, found.object.display()))?;
        self.attach_program_at(exit, &target, &[point])?;
        self.attach_program_at(enter, &target, &[point])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_and_manglings() {
        let s: ProcedureSpec = "servBusy1@spa".parse().unwrap();
        assert_eq!(s.what, What::Name("servBusy1".into()));
        assert_eq!(s.object.as_deref(), Some("spa"));
        let a: ProcedureSpec = "0x1139@libfoo".parse().unwrap();
        assert_eq!(a.what, What::Address(0x1139));
        assert!("@spa".parse::<ProcedureSpec>().is_err());
        assert!("0xzz".parse::<ProcedureSpec>().is_err());
        assert!(matches("_ZN2ns4workEi", "ns::work"));
        assert!(matches("_ZN3spa4work17h0123456789abcdefE", "spa::work"));
        assert!(!matches("_ZN2ns5worksEi", "ns::work"));
        assert!(matches("work", "work"));
    }

    /// This test binary's own functions are found in its symbol table; a name found nowhere
    /// lists close ones.
    #[test]
    fn finds_a_function_of_a_program() {
        let me = std::env::current_exe().unwrap();
        let spec: ProcedureSpec = "lbf_probe::procedures::matches".parse().unwrap();
        let found = find(&spec, std::slice::from_ref(&me)).unwrap();
        assert!(
            found
                .symbol
                .starts_with("_ZN9lbf_probe10procedures7matches"),
            "{found:?}"
        );
        let none: ProcedureSpec = "no_such_function_anywhere".parse().unwrap();
        let err = find(&none, &[me]).unwrap_err().to_string();
        assert!(
            err.contains("no function `no_such_function_anywhere`"),
            "{err}"
        );
    }
}
