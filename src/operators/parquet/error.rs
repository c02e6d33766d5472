//! The one error type of the Parquet source: every variant names the file, and where a column is at
//! fault the column, so a user can fix their row type or their data without a debugger.

use std::fmt;
use std::path::PathBuf;

use super::probe::ShapeError;

/// Errors of the Parquet file reader underneath (corrupt pages, unsupported codecs, I/O).
pub use parquet::errors::ParquetError as FormatError;

/// Everything that can go wrong planning splits of, or reading rows from, Parquet files.
///
/// Messages start with the file as given to [`ParquetSplit::plan`](super::ParquetSplit::plan), e.g.
/// `lineitem.parquet: column l_shipdate is DATE, the row type wants f64`. Row numbers count from
/// 0 at the start of the file (DuckDB's `file_row_number`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ParquetError {
    /// The file is outside `job.allowed-paths`.
    #[error(transparent)]
    NotAllowed(#[from] crate::env::files::FilesError),

    /// The file could not be opened.
    #[error("{}: cannot open: {source}", file.display())]
    Open {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The file's footer could not be read: not a Parquet file, truncated, or unsupported.
    #[error("{}: cannot read the Parquet footer: {source}", file.display())]
    Metadata {
        file: PathBuf,
        #[source]
        source: FormatError,
    },

    /// Decoding column data failed (a corrupt page, a codec this build lacks, an I/O error).
    #[error("{}: cannot decode: {source}", file.display())]
    Decode {
        file: PathBuf,
        #[source]
        source: FormatError,
    },

    /// A split names a row group the file does not have: the file changed after planning.
    #[error(
        "{}: the split wants row group {row_group}, the file has {row_groups} (changed since planning?)",
        file.display()
    )]
    NoSuchRowGroup {
        file: PathBuf,
        row_group: usize,
        row_groups: usize,
    },

    /// The row type is not a plain struct with named fields.
    #[error("{type_name} cannot be a row type: {source}")]
    RowType {
        type_name: &'static str,
        #[source]
        source: ShapeError,
    },

    /// The row type has a field for which the file has no column.
    #[error("{}: the row type wants column {column}, which the file does not have{}", file.display(), Suggestion(.similar, .available))]
    MissingColumn {
        file: PathBuf,
        column: String,
        /// A column whose name differs only in case, if any.
        similar: Option<String>,
        /// All top-level columns of the file.
        available: Vec<String>,
    },

    /// A column's type cannot fill the field's type.
    #[error("{}: column {column} is {column_type}, the row type wants {wanted}", file.display())]
    TypeMismatch {
        file: PathBuf,
        column: String,
        column_type: String,
        wanted: String,
    },

    /// A null in a column whose field is not an `Option`.
    #[error(
        "{}: column {column} is null in row {row}, the row type wants {wanted} (make the field an Option)",
        file.display()
    )]
    Null {
        file: PathBuf,
        column: String,
        row: u64,
        wanted: String,
    },

    /// A value that does not fit the field's type (a negative number for a `u32`, a two-letter
    /// string for a `char`).
    #[error("{}: column {column}, row {row}: {value} does not fit {wanted}", file.display())]
    OutOfRange {
        file: PathBuf,
        column: String,
        row: u64,
        value: String,
        wanted: String,
    },

    /// A field's `Deserialize` refused a value (say an unparsable date in a VARCHAR column).
    #[error("{}: column {column}, row {row}: {message}", file.display())]
    Value {
        file: PathBuf,
        column: String,
        row: u64,
        message: String,
    },

    /// The row type's `Deserialize` refused a whole row (a check in a custom impl).
    #[error("{}: row {row}: {message}", file.display())]
    Row {
        file: PathBuf,
        row: u64,
        message: String,
    },

    /// A subtask index outside `0..parallelism`, or a parallelism of 0.
    #[error("subtask {subtask} does not exist at parallelism {parallelism}")]
    NoSuchSubtask { subtask: usize, parallelism: usize },
}

impl ParquetError {
    /// Whether trying again may succeed: only when the file could not be opened (it may be on
    /// its way, or a network file system hiccupped). Every other error is in the file or in the
    /// row type and will repeat.
    pub fn is_retryable(&self) -> bool {
        matches!(self, ParquetError::Open { .. })
    }
}

/// The tail of a missing-column message: a near miss if there is one, else the columns there are.
struct Suggestion<'a>(&'a Option<String>, &'a Vec<String>);

impl fmt::Display for Suggestion<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(similar) => write!(f, " (it has {similar}: names are case-sensitive)"),
            None => write!(f, " (it has: {})", self.1.join(", ")),
        }
    }
}
