//! Resolving function names to the file offsets uprobes attach at, from an object's DYNAMIC
//! symbol table (the table the dynamic linker uses; other objects' PLT stubs of the same name
//! are not definitions and are skipped).

use std::{collections::HashMap, fs, path::Path};

use anyhow::{Context, Result};
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

/// File offsets of the defined dynamic function symbols of `path` whose names are in `names`.
pub fn dynamic_function_offsets(path: &Path, names: &[&str]) -> Result<HashMap<String, u64>> {
    let data = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let file = object::File::parse(&*data)
        .with_context(|| format!("parsing {} as an object file", path.display()))?;
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
        found.insert(
            name.to_string(),
            sym.address() - section.address() + file_off,
        );
    }
    Ok(found)
}

/// Whether `path` defines `name` as a dynamic function symbol (false if unreadable).
pub fn defines(path: &Path, name: &str) -> bool {
    dynamic_function_offsets(path, &[name]).is_ok_and(|m| m.contains_key(name))
}
