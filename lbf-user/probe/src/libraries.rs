//! Finding MPI libraries to probe: those a running process has mapped, and those the dynamic
//! linker would find (`ldconfig -p`) for programs that start later. An object counts as an MPI
//! library when it defines `PMPI_Init` in its dynamic symbol table, so a program linked
//! statically against MPI is found too.

use std::{collections::BTreeSet, path::PathBuf, process::Command};

use anyhow::{Context, Result};

use super::{procfs, symbols};

/// The symbol that marks an MPI library.
const MARKER: &str = "PMPI_Init";

/// Sonames of MPI libraries the dynamic linker may resolve: Open MPI (`libmpi.so.40`),
/// MPICH (`libmpich.so.12`, and its `libmpi.so.12` alias), and others of those families.
const SONAME_PREFIXES: &[&str] = &["libmpi.so", "libmpich.so"];

/// The MPI libraries (or statically linked executables) mapped by process `pid`.
pub fn mapped_by(pid: u32) -> Result<Vec<PathBuf>> {
    Ok(procfs::executable_mappings(pid)?
        .into_iter()
        .filter(|p| symbols::defines(p, MARKER))
        .collect())
}

/// The MPI libraries installed where the dynamic linker finds them, each file once.
pub fn installed() -> Result<Vec<PathBuf>> {
    let out = Command::new("ldconfig")
        .arg("-p")
        .output()
        .or_else(|_| Command::new("/sbin/ldconfig").arg("-p").output())
        .context("running `ldconfig -p` to find the installed MPI libraries")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut found = BTreeSet::new();
    for path in parse_ldconfig(&text) {
        if let Ok(real) = path.canonicalize() {
            if symbols::defines(&real, MARKER) {
                found.insert(real);
            }
        }
    }
    Ok(found.into_iter().collect())
}

/// Paths of 64-bit MPI library candidates in `ldconfig -p` output.
fn parse_ldconfig(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|line| {
            let (lhs, path) = line.split_once("=>")?;
            let soname = lhs.split_whitespace().next()?;
            let is_mpi = SONAME_PREFIXES.iter().any(|p| soname.starts_with(p));
            (is_mpi && lhs.contains("x86-64")).then(|| PathBuf::from(path.trim()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_mpi_sonames_only() {
        let text = "\tlibmpich.so.12 (libc6,x86-64) => /lib/x86_64-linux-gnu/libmpich.so.12\n\
                    \tlibmpi.so.40 (libc6,x86-64) => /lib/x86_64-linux-gnu/libmpi.so.40\n\
                    \tlibmpi_cxx.so.40 (libc6,x86-64) => /lib/x86_64-linux-gnu/libmpi_cxx.so.40\n\
                    \tlibm.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libm.so.6\n";
        let got = parse_ldconfig(text);
        assert_eq!(
            got,
            vec![
                PathBuf::from("/lib/x86_64-linux-gnu/libmpich.so.12"),
                PathBuf::from("/lib/x86_64-linux-gnu/libmpi.so.40"),
            ]
        );
    }
}
