//! Resolving function names to the file offsets uprobes attach at, from an object's DYNAMIC
//! symbol table (the table the dynamic linker uses; other objects' PLT stubs of the same name
//! are not definitions and are skipped), and data symbols to the GOT slots that hold their
//! addresses at run time.

use std::{collections::HashMap, fs, path::Path};

use anyhow::{Context, Result};
use object::{
    Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, ReadCache, RelocationFlags,
    RelocationTarget, SymbolKind,
};

/// A defined dynamic function symbol: where uprobes attach to it and where it lies in the
/// object's address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Function {
    /// Its offset in the file (uprobes attach at file offsets).
    pub offset: u64,
    /// Its address as the object's ELF headers give it (the load address added at run time).
    pub address: u64,
}

/// The defined dynamic function symbols of `path` whose names are in `names`.
pub(crate) fn dynamic_functions(path: &Path, names: &[&str]) -> Result<HashMap<String, Function>> {
    let data = open(path)?;
    let file = parse(path, &data)?;
    let mut found = HashMap::new();
    for sym in file.dynamic_symbols() {
        if !sym.is_definition() || sym.kind() != SymbolKind::Text {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        if !names.contains(&name) {
            continue;
        }
        let Some(section) = sym
            .section_index()
            .and_then(|i| file.section_by_index(i).ok())
        else {
            continue;
        };
        let Some((file_off, _)) = section.file_range() else {
            continue;
        };
        let function = Function {
            offset: sym.address() - section.address() + file_off,
            address: sym.address(),
        };
        found.insert(name.to_string(), function);
    }
    Ok(found)
}

/// File offsets of the defined dynamic function symbols of `path` whose names are in `names`.
pub(crate) fn dynamic_function_offsets(
    path: &Path,
    names: &[&str],
) -> Result<HashMap<String, u64>> {
    let functions = dynamic_functions(path, names)?;
    Ok(functions
        .into_iter()
        .map(|(name, f)| (name, f.offset))
        .collect())
}

/// The address (as the ELF headers give it) of the GOT slot through which the code of `path`
/// finds its data symbol `name`: the dynamic linker fills it at load time with the variable's
/// address, wherever the variable ends up (a program referring to it gets a copy in its own
/// data, which the library then uses). `None` if `path` has no such slot.
pub(crate) fn got_slot(path: &Path, name: &str) -> Result<Option<u64>> {
    let data = open(path)?;
    let file = parse(path, &data)?;
    let Some(relocations) = file.dynamic_relocations() else {
        return Ok(None);
    };
    let symbols = file.dynamic_symbol_table();
    for (address, relocation) in relocations {
        let RelocationTarget::Symbol(index) = relocation.target() else {
            continue;
        };
        let is_slot = matches!(
            relocation.flags(),
            RelocationFlags::Elf {
                r_type: object::elf::R_X86_64_GLOB_DAT
            }
        );
        let named = symbols
            .as_ref()
            .and_then(|t| t.symbol_by_index(index).ok())
            .is_some_and(|s| s.name() == Ok(name));
        if is_slot && named {
            return Ok(Some(address));
        }
    }
    Ok(None)
}

/// The object file at `path`, read as far as it is parsed: MPI libraries with their debug
/// information run to tens of megabytes (MPICH's to 41), of which only the headers and the
/// dynamic symbols are needed.
fn open(path: &Path) -> Result<ReadCache<fs::File>> {
    let file = fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(ReadCache::new(file))
}

/// `data`, the contents of `path`, as an object file.
fn parse<'a>(
    path: &Path,
    data: &'a ReadCache<fs::File>,
) -> Result<object::File<'a, &'a ReadCache<fs::File>>> {
    object::File::parse(data)
        .with_context(|| format!("parsing {} as an object file", path.display()))
}

/// Whether `path` defines `name` as a dynamic function symbol (false if unreadable).
pub(crate) fn defines(path: &Path, name: &str) -> bool {
    dynamic_function_offsets(path, &[name]).is_ok_and(|m| m.contains_key(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The PVM library's receive buffer variable is found through its GOT slot, whose
    /// distance from `pvm_recv` is what the kernel side adds to the function's address.
    #[test]
    fn the_got_slot_of_a_library_variable_is_found() {
        let lib = Path::new("/usr/lib/x86_64-linux-gnu/libpvm3.so.3");
        if !lib.exists() {
            eprintln!("skipping: no libpvm3");
            return;
        }
        let slot = got_slot(lib, "pvmrbuf")
            .unwrap()
            .expect("pvmrbuf has a GOT slot");
        let recv = dynamic_functions(lib, &["pvm_recv"]).unwrap()["pvm_recv"];
        assert_ne!(slot, recv.address);
        assert_eq!(got_slot(lib, "no_such_variable").unwrap(), None);
    }
}
