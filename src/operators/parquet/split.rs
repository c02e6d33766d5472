//! Splitting Parquet files across the parallel subtasks of a source, by whole row groups.
//!
//! Every subtask computes its own split from the files' footers alone, so the assignment must be
//! a pure function of (files in order, their row groups' row counts, parallelism): the same on
//! every machine, with no coordination. Row groups are the unit because they are the unit a
//! Parquet reader can start at without decoding what lies before.
//!
//! The row groups of all files form one sequence; a group goes to the subtask whose equal share
//! of the total row count holds the group's middle row. Each subtask thus gets a contiguous run
//! of groups (sequential reads), shares follow row counts rather than group counts (a file of one
//! big group and many small ones still balances), and no subtask is more than about one row
//! group away from `total / parallelism` rows.

use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};

use parquet::file::metadata::ParquetMetaDataReader;
use serde::{Deserialize, Serialize};

use super::error::ParquetError;

/// The row groups of one file that one subtask reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitPart {
    /// The file, as given to [`ParquetSplit::plan`].
    pub file: PathBuf,
    /// Indices of its row groups to read, ascending.
    pub row_groups: Vec<usize>,
    /// Rows in those row groups.
    pub rows: u64,
}

/// What one subtask of a Parquet source reads: row groups of one or more files.
///
/// Serializable so that a planner may compute all splits once and ship each to its subtask;
/// [`ParquetSplit::for_subtask`] computes the same split locally instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParquetSplit {
    /// This split's subtask index, `0..parallelism`.
    pub subtask: usize,
    /// The number of subtasks the files were split across.
    pub parallelism: usize,
    /// The file parts to read, in file order; files with no row group here are left out.
    pub parts: Vec<SplitPart>,
}

impl ParquetSplit {
    /// Splits `files` across `parallelism` subtasks: element `i` is subtask `i`'s split.
    ///
    /// Reads only the footers. Every subtask must see the same files in the same order (use
    /// [`parquet_files_in`] for a directory). A parallelism of 0 is an error; with more subtasks
    /// than row groups some splits are empty.
    pub fn plan<P: AsRef<Path>>(
        files: &[P],
        parallelism: usize,
    ) -> Result<Vec<ParquetSplit>, ParquetError> {
        if parallelism == 0 {
            return Err(ParquetError::NoSuchSubtask {
                subtask: 0,
                parallelism,
            });
        }
        let mut groups = Vec::new(); // (file index, row group index, rows), in sequence order
        for (f, file) in files.iter().enumerate() {
            for (g, rows) in row_group_rows(file.as_ref())?.into_iter().enumerate() {
                groups.push((f, g, rows));
            }
        }
        let counts: Vec<u64> = groups.iter().map(|&(_, _, rows)| rows).collect();
        let ranges = assign(&counts, parallelism);
        Ok(ranges
            .into_iter()
            .enumerate()
            .map(|(subtask, range)| {
                let mut parts: Vec<SplitPart> = Vec::new();
                // `assign` returns ranges within 0..groups.len(), and f indexes `files`.
                for &(f, g, rows) in &groups[range] {
                    match parts.last_mut() {
                        Some(part) if part.file == files[f].as_ref() => {
                            part.row_groups.push(g);
                            part.rows += rows;
                        }
                        _ => parts.push(SplitPart {
                            file: files[f].as_ref().to_path_buf(),
                            row_groups: vec![g],
                            rows,
                        }),
                    }
                }
                ParquetSplit {
                    subtask,
                    parallelism,
                    parts,
                }
            })
            .collect())
    }

    /// Subtask `subtask`'s split of `files` across `parallelism` subtasks: the same as
    /// `plan(files, parallelism)?[subtask]`, computed where the subtask runs.
    pub fn for_subtask<P: AsRef<Path>>(
        files: &[P],
        subtask: usize,
        parallelism: usize,
    ) -> Result<ParquetSplit, ParquetError> {
        if subtask >= parallelism {
            return Err(ParquetError::NoSuchSubtask {
                subtask,
                parallelism,
            });
        }
        let mut splits = Self::plan(files, parallelism)?;
        Ok(splits.swap_remove(subtask))
    }

    /// The rows this split reads.
    pub fn row_count(&self) -> u64 {
        self.parts.iter().map(|p| p.rows).sum()
    }
}

/// The `*.parquet` files directly in `dir`, sorted by name: a deterministic file list for
/// [`ParquetSplit::plan`] (tpchgen-cli `--parts` and Spark-style outputs are such directories).
pub fn parquet_files_in(dir: &Path) -> Result<Vec<PathBuf>, ParquetError> {
    let open_error = |source| ParquetError::Open {
        file: dir.to_path_buf(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(open_error)? {
        let path = entry.map_err(open_error)?.path();
        if path.extension().is_some_and(|e| e == "parquet") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Row counts of a file's row groups, from its footer.
fn row_group_rows(file: &Path) -> Result<Vec<u64>, ParquetError> {
    let handle = File::open(file).map_err(|source| ParquetError::Open {
        file: file.to_path_buf(),
        source,
    })?;
    let metadata = ParquetMetaDataReader::new()
        .parse_and_finish(&handle)
        .map_err(|source| ParquetError::Metadata {
            file: file.to_path_buf(),
            source,
        })?;
    Ok(metadata
        .row_groups()
        .iter()
        // A negative row count is a corrupt footer; reading that group will say so.
        .map(|g| u64::try_from(g.num_rows()).unwrap_or(0))
        .collect())
}

/// Assigns a sequence of row groups with the given row counts to `parallelism` subtasks:
/// element `i` is the range of group indices subtask `i` reads.
///
/// Group `g` covers rows `start_g .. start_g + rows_g` of the whole sequence; it goes to subtask
/// `floor(middle_g * parallelism / total)`, `middle_g = start_g + rows_g / 2`. The subtask index
/// never decreases along the sequence, so the ranges are contiguous, disjoint and cover every
/// group exactly once. Empty groups (and, when `total` is 0, all groups) go with their
/// neighbourhood by the same formula, with `total` taken as at least 1.
pub(crate) fn assign(rows: &[u64], parallelism: usize) -> Vec<Range<usize>> {
    let p = parallelism.max(1) as u128;
    let total = u128::from(rows.iter().sum::<u64>()).max(1);
    let mut ranges = vec![0..0; parallelism.max(1)];
    let mut start: u128 = 0;
    let mut first_of_next = 0; // first group index not yet given to a subtask
    let mut subtask = 0;
    for (g, &count) in rows.iter().enumerate() {
        let middle = start + u128::from(count) / 2;
        // Proof of the cast: the min keeps the value below p, which came from a usize.
        let owner = ((middle * p / total).min(p - 1)) as usize;
        while subtask < owner {
            ranges[subtask] = first_of_next..g;
            first_of_next = g;
            subtask += 1;
        }
        start += u128::from(count);
    }
    // The last owner (and any subtasks after it) close at the end of the sequence.
    ranges[subtask] = first_of_next..rows.len();
    for range in ranges.iter_mut().skip(subtask + 1) {
        *range = rows.len()..rows.len();
    }
    ranges
}

#[cfg(test)]
mod tests;
