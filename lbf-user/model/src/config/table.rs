//! Communication tables as written in TOML: `[[bytes, seconds], ...]`, shared by target files
//! (`[network] local`/`remote`) and cluster files (`[[host]] local`, `[[network]] table`).

use crate::target::CommTable;

/// The most points a table in a file may have: checked before the table is built.
pub const MAX_TABLE_POINTS: usize = 4096;

/// The table `points` describe; `what` names it in errors (`[network] remote`).
pub(super) fn comm_table(points: &[Vec<f64>], what: &str) -> Result<CommTable, String> {
    if points.len() > MAX_TABLE_POINTS {
        return Err(format!(
            "{what}: {} points is more than a table may have (at most {MAX_TABLE_POINTS})",
            points.len()
        ));
    }
    let pairs = points
        .iter()
        .enumerate()
        .map(|(i, p)| match p[..] {
            [bytes, seconds] => Ok((bytes, seconds)),
            _ => Err(format!(
                "{what}: point {} has {} numbers; each point is [bytes, seconds]",
                i + 1,
                p.len()
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    CommTable::new(pairs).map_err(|e| format!("{what}: {e}"))
}
