//! A subtask's share of a text file (Flink's delimited input split): subtask `i` of `p` takes
//! the lines that start in the `i`-th `p`-th of the file's bytes, so every line is read exactly
//! once whatever the parallelism. Shared by the built-in `text-source` and the programs'
//! `read_text_file` and `read_csv`.

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::OperatorError;

/// Subtask `subtask`'s byte range `[start, end)` of a `size`-byte file split `parallelism` ways.
fn split_range(size: u64, subtask: u32, parallelism: u32) -> (u64, u64) {
    let at = |i: u32| {
        // u128: size * parallelism can overflow u64 for huge files; the result is <= size.
        (u128::from(size) * u128::from(i) / u128::from(parallelism)) as u64
    };
    (at(subtask), at(subtask + 1))
}

/// The lines of one subtask's share of a file, with the byte offset each starts at.
pub(crate) struct SplitLines {
    path: PathBuf,
    /// Names the reader in its errors (`text-source: cannot read ...`).
    operator: String,
    reader: BufReader<File>,
    position: u64,
    end: u64,
    line: Vec<u8>,
}

impl SplitLines {
    /// Opens `path` for `operator` and positions at subtask `subtask`'s first line. A
    /// directory is a configuration error: every attempt would fail alike.
    pub fn open(
        path: &Path,
        subtask: u32,
        parallelism: u32,
        operator: &str,
    ) -> Result<Self, OperatorError> {
        crate::env::files::check(path)?;
        let file = File::open(path).map_err(|source| OperatorError::Io {
            what: format!("{operator}: cannot open `{}`", path.display()),
            source,
        })?;
        let unreadable = |source| read_error(operator, path, source);
        let metadata = file.metadata().map_err(unreadable)?;
        if metadata.is_dir() {
            return Err(OperatorError::Config {
                operator: operator.to_owned(),
                message: format!(
                    "`{}` is a directory; {operator} reads one file",
                    path.display()
                ),
            });
        }
        let (start, end) = split_range(metadata.len(), subtask, parallelism.max(1));
        let mut reader = BufReader::with_capacity(64 * 1024, file);
        let mut position = start;
        if start > 0 && start < end {
            // The line the byte before `start` belongs to started in an earlier split (or, if
            // that byte is the newline, ended there): skip to just after its newline.
            reader
                .seek(SeekFrom::Start(start - 1))
                .map_err(unreadable)?;
            let skipped = reader.skip_until(b'\n').map_err(unreadable)?;
            position = start - 1 + skipped as u64;
        }
        Ok(Self {
            path: path.to_owned(),
            operator: operator.to_owned(),
            reader,
            position,
            end,
            line: Vec::new(),
        })
    }

    /// The next line and the offset it starts at. Like `str::lines`, without its `\n` or
    /// `\r\n` (a bare `\r` that ends the file stays).
    pub fn next_line(&mut self) -> Result<Option<(u64, &[u8])>, OperatorError> {
        // A line starting before `end` is ours even if it runs past it.
        if self.position >= self.end {
            return Ok(None);
        }
        self.line.clear();
        let start = self.position;
        let read = self
            .reader
            .read_until(b'\n', &mut self.line)
            .map_err(|source| read_error(&self.operator, &self.path, source))?;
        if read == 0 {
            return Ok(None); // The file shrank under us; nothing more to read.
        }
        self.position += read as u64;
        if self.line.last() == Some(&b'\n') {
            self.line.pop();
            if self.line.last() == Some(&b'\r') {
                self.line.pop();
            }
        }
        Ok(Some((start, &self.line)))
    }
}

fn read_error(operator: &str, path: &Path, source: std::io::Error) -> OperatorError {
    OperatorError::Io {
        what: format!("{operator}: cannot read `{}`", path.display()),
        source,
    }
}
