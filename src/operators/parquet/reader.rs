//! Reading a split's rows into a serde row type: open each file part, check it against the row
//! type, decode only the row type's columns batch by batch, and deserialize rows from a batch.
//!
//! Decoding is Parquet's Arrow reader (dictionary pages, RLE, codecs: the `parquet` crate's
//! best-tuned path, chosen over its low-level column readers and over serde_arrow: the module
//! docs); this module drives it and walks the decoded columns. It never decodes a column the row
//! type does not name: the projection mask built in `PartReader::open` is the reader's whole
//! column list.

use std::fs::File;
use std::marker::PhantomData;
use std::path::PathBuf;

use arrow_array::RecordBatch;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use serde::de::DeserializeOwned;

use super::column::{Column, ColumnInfo, sql_type_name};
use super::de::{DeError, DeErrorKind, RowDeserializer};
use super::error::ParquetError;
use super::probe::{RowShape, Want};
use super::schema::{arrow_reader_metadata, check_schema};
use super::split::{ParquetSplit, SplitPart};

/// How to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadOptions {
    /// Rows decoded per batch (at most `u32::MAX`). Larger batches amortise per-batch work;
    /// smaller ones keep the decoded columns in cache while rows are built from them. 8192 (the
    /// default) takes 3% fewer instructions per row than 1024, Arrow's default, and a batch of
    /// the Q1 columns stays within L2, unlike 65536 (benches/RESULTS.md, "Parquet source").
    pub batch_size: usize,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions { batch_size: 8192 }
    }
}

impl ParquetSplit {
    /// The rows of this split as `T`, in file and row group order.
    ///
    /// Fails at once if `T` is not a struct with named fields, or a file lacks one of `T`'s
    /// columns or has one of a type `T`'s field cannot take (files after the first are checked
    /// when the iterator reaches them).
    pub fn rows<T: DeserializeOwned>(&self) -> Result<RowReader<T>, ParquetError> {
        RowReader::open(self, ReadOptions::default())
    }

    /// Calls `f` with each row of this split as `T`, stopping at the first error of either.
    ///
    /// The same rows as [`ParquetSplit::rows`], without an iterator between the batches and `f`.
    pub fn read<T, E, F>(&self, f: F) -> Result<(), E>
    where
        T: DeserializeOwned,
        E: From<ParquetError>,
        F: FnMut(T) -> Result<(), E>,
    {
        RowReader::open(self, ReadOptions::default())?.try_for_each_row(f)
    }
}

/// An iterator over the rows of a [`ParquetSplit`] as `T`.
///
/// An error about one value (a null for a non-`Option` field, a value out of range) is returned
/// for that row and reading goes on with the next row; after any other error the iterator ends.
pub struct RowReader<T> {
    shape: RowShape,
    options: ReadOptions,
    parts: std::vec::IntoIter<SplitPart>,
    current: Option<PartReader>,
    /// The current batch's columns, one per field of `T` in field order.
    columns: Vec<Column>,
    /// The next row of the current batch, and its number of rows.
    next_row: usize,
    batch_rows: usize,
    row: PhantomData<fn() -> T>,
}

impl<T: DeserializeOwned> RowReader<T> {
    /// Opens the first file of `split` (so an unfit file fails here, not at the first row).
    pub fn open(split: &ParquetSplit, options: ReadOptions) -> Result<RowReader<T>, ParquetError> {
        let shape = RowShape::of::<T>().map_err(|source| ParquetError::RowType {
            type_name: std::any::type_name::<T>(),
            source,
        })?;
        let mut reader = RowReader {
            shape,
            options,
            parts: split.parts.clone().into_iter(),
            current: None,
            columns: Vec::new(),
            next_row: 0,
            batch_rows: 0,
            row: PhantomData,
        };
        reader.open_next_part()?;
        Ok(reader)
    }

    /// The columns the reader decodes from the current file (Parquet leaf paths, in file
    /// order): exactly the row type's fields. `None` once every file is read.
    pub fn projected_columns(&self) -> Option<&[String]> {
        self.current.as_ref().map(|p| p.projected.as_slice())
    }

    /// The row type's shape as probed: its columns and what each field asks for.
    pub fn shape(&self) -> &RowShape {
        &self.shape
    }

    /// Calls `f` with each row, stopping at the first error of either.
    pub fn try_for_each_row<E, F>(mut self, mut f: F) -> Result<(), E>
    where
        E: From<ParquetError>,
        F: FnMut(T) -> Result<(), E>,
    {
        loop {
            // Rows left in a batch by earlier `next` calls first; `self` is consumed, so an
            // early return needs no bookkeeping.
            for row in self.next_row..self.batch_rows {
                f(self.deserialize(row)?)?;
            }
            self.next_row = self.batch_rows;
            if !self.next_batch()? {
                return Ok(());
            }
        }
    }

    #[inline]
    fn deserialize(&self, row: usize) -> Result<T, ParquetError> {
        T::deserialize(RowDeserializer {
            columns: &self.columns,
            row,
        })
        .map_err(|e| self.row_error(e, row))
    }

    /// Moves to the next non-empty batch, opening files as needed; `false` at the end.
    fn next_batch(&mut self) -> Result<bool, ParquetError> {
        loop {
            let Some(part) = self.current.as_mut() else {
                return Ok(false);
            };
            match part.next_batch() {
                Ok(Some(batch)) if batch.num_rows() == 0 => continue,
                Ok(Some(batch)) => {
                    self.columns = part.columns(&batch)?;
                    self.batch_rows = batch.num_rows();
                    self.next_row = 0;
                    return Ok(true);
                }
                Ok(None) => self.open_next_part()?,
                Err(e) => {
                    self.stop();
                    return Err(e);
                }
            }
        }
    }

    fn open_next_part(&mut self) -> Result<(), ParquetError> {
        self.current = None;
        self.columns.clear();
        self.batch_rows = 0;
        self.next_row = 0;
        if let Some(part) = self.parts.next() {
            match PartReader::open(&part, &self.shape, self.options) {
                Ok(reader) => self.current = Some(reader),
                Err(e) => {
                    self.stop();
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn stop(&mut self) {
        self.current = None;
        self.parts = Vec::new().into_iter();
        self.columns.clear();
        self.batch_rows = 0;
        self.next_row = 0;
    }

    /// Names the file, column and file row of a value error.
    #[cold]
    fn row_error(&self, error: DeError, row_in_batch: usize) -> ParquetError {
        let Some(part) = self.current.as_ref() else {
            // Rows are only deserialized while a part is open; keep the message regardless.
            return ParquetError::Row {
                file: PathBuf::new(),
                row: row_in_batch as u64,
                message: error.to_string(),
            };
        };
        let file = part.file.clone();
        let row = part.file_row(row_in_batch);
        // Field indices come from the row's columns, one per field, so `get` always finds one.
        let info = |field: usize| part.fields.get(field);
        let column = |field: usize| info(field).map(|c| c.name.clone()).unwrap_or_default();
        let field_type = |field: usize| {
            self.shape
                .fields
                .get(field)
                .map(|f| f.type_display())
                .unwrap_or_default()
        };
        match *error.0 {
            DeErrorKind::Mismatch { field, want } => ParquetError::TypeMismatch {
                file,
                column: column(field),
                column_type: info(field).map(|c| c.type_name.clone()).unwrap_or_default(),
                wanted: want_display(want, &self.shape, field),
            },
            DeErrorKind::Null { field, .. } => ParquetError::Null {
                file,
                column: column(field),
                row,
                wanted: field_type(field),
            },
            DeErrorKind::OutOfRange { field, value, want } => ParquetError::OutOfRange {
                file,
                column: column(field),
                row,
                value,
                wanted: want.to_string(),
            },
            DeErrorKind::Custom {
                field: Some(field),
                message,
            } => ParquetError::Value {
                file,
                column: column(field),
                row,
                message,
            },
            DeErrorKind::Custom {
                field: None,
                message,
            } => ParquetError::Row { file, row, message },
        }
    }
}

/// The probed type of a field where it is known, else what the deserializer was asked for.
fn want_display(asked: Want, shape: &RowShape, field: usize) -> String {
    match shape.fields.get(field) {
        Some(f) if f.want != Want::Unknown && f.want != Want::Any => f.type_display(),
        _ => asked.to_string(),
    }
}

impl<T: DeserializeOwned> Iterator for RowReader<T> {
    type Item = Result<T, ParquetError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.next_row >= self.batch_rows {
            match self.next_batch() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => return Some(Err(e)),
            }
        }
        let row = self.next_row;
        self.next_row += 1;
        Some(self.deserialize(row))
    }
}

/// One file part being read.
struct PartReader {
    file: PathBuf,
    batches: ParquetRecordBatchReader,
    /// Per field of the row type: its column.
    fields: Vec<ColumnInfo>,
    /// Per field: its column's position in a decoded batch (columns come in file order).
    batch_column: Vec<usize>,
    /// The Parquet leaf columns decoded, for [`RowReader::projected_columns`].
    projected: Vec<String>,
    /// `(first file row, rows)` of each row group read, in order, to number rows in errors.
    groups: Vec<(u64, u64)>,
    /// Rows of this part before the current batch.
    rows_before_batch: u64,
    /// Rows of the current batch.
    batch_rows: u64,
}

impl PartReader {
    /// Opens a file part: reads the footer, checks the row type against the schema, and builds
    /// a reader of only the row type's columns in only the part's row groups.
    fn open(
        part: &SplitPart,
        shape: &RowShape,
        options: ReadOptions,
    ) -> Result<PartReader, ParquetError> {
        let file = part.file.clone();
        crate::env::files::check(&file)?;
        let handle = File::open(&file).map_err(|source| ParquetError::Open {
            file: file.clone(),
            source,
        })?;
        let metadata = arrow_reader_metadata(&handle).map_err(|source| ParquetError::Metadata {
            file: file.clone(),
            source,
        })?;
        let row_groups = metadata.metadata().row_groups();
        let mut first_rows = Vec::with_capacity(row_groups.len());
        let mut next_first = 0u64;
        for group in row_groups {
            first_rows.push(next_first);
            next_first += u64::try_from(group.num_rows()).unwrap_or(0);
        }
        let mut groups = Vec::with_capacity(part.row_groups.len());
        for &g in &part.row_groups {
            let Some(&first) = first_rows.get(g) else {
                return Err(ParquetError::NoSuchRowGroup {
                    file,
                    row_group: g,
                    row_groups: row_groups.len(),
                });
            };
            let rows = u64::try_from(row_groups[g].num_rows()).unwrap_or(0);
            groups.push((first, rows));
        }

        let fields = check_schema(&file, &metadata, shape)?;
        let mut roots: Vec<usize> = fields.iter().map(|c| c.root).collect();
        roots.sort_unstable();
        roots.dedup();
        let batch_column = fields
            .iter()
            .map(|c| roots.binary_search(&c.root).unwrap_or(0))
            .collect();
        let mask = ProjectionMask::roots(metadata.parquet_schema(), roots.iter().copied());
        let projected = metadata
            .parquet_schema()
            .columns()
            .iter()
            .enumerate()
            .filter(|(leaf, _)| mask.leaf_included(*leaf))
            .map(|(_, column)| column.path().string())
            .collect();

        let batches = ParquetRecordBatchReaderBuilder::new_with_metadata(handle, metadata)
            .with_projection(mask)
            .with_row_groups(part.row_groups.clone())
            .with_batch_size(options.batch_size.clamp(1, u32::MAX as usize))
            .build()
            .map_err(|source| ParquetError::Decode {
                file: file.clone(),
                source,
            })?;
        Ok(PartReader {
            file,
            batches,
            fields,
            batch_column,
            projected,
            groups,
            rows_before_batch: 0,
            batch_rows: 0,
        })
    }

    fn next_batch(&mut self) -> Result<Option<RecordBatch>, ParquetError> {
        self.rows_before_batch += self.batch_rows;
        self.batch_rows = 0;
        match self.batches.next() {
            None => Ok(None),
            Some(Ok(batch)) => {
                self.batch_rows = batch.num_rows() as u64;
                Ok(Some(batch))
            }
            Some(Err(e)) => Err(ParquetError::Decode {
                file: self.file.clone(),
                source: e.into(),
            }),
        }
    }

    /// The batch's columns in field order, typed.
    fn columns(&self, batch: &RecordBatch) -> Result<Vec<Column>, ParquetError> {
        self.batch_column
            .iter()
            .zip(&self.fields)
            .map(|(&position, info)| {
                batch
                    .columns()
                    .get(position)
                    .and_then(Column::new)
                    // The schema check admitted only types Column::new knows, so this is a
                    // reader that decoded another type than its schema said.
                    .ok_or_else(|| ParquetError::TypeMismatch {
                        file: self.file.clone(),
                        column: info.name.clone(),
                        column_type: batch
                            .columns()
                            .get(position)
                            .map(|a| sql_type_name(a.data_type()))
                            .unwrap_or_default(),
                        wanted: "a column type that the schema announced".into(),
                    })
            })
            .collect()
    }

    /// The file row number of row `row_in_batch` of the current batch.
    fn file_row(&self, row_in_batch: usize) -> u64 {
        let mut offset = self.rows_before_batch + row_in_batch as u64;
        for &(first, rows) in &self.groups {
            if offset < rows {
                return first + offset;
            }
            offset -= rows;
        }
        offset
    }
}
