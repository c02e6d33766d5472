//! What to decode from a file for a row type: the Arrow types its columns decode into, which
//! root column feeds which field, and whether each column's type can fill its field's type.
//!
//! Everything here runs once per file, before any page is read, so that a file that does not
//! fit the row type fails with a message naming the column instead of a row later.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::basic::Type as PhysicalType;

use super::column::{ColumnInfo, Kind, accepts, find_root, sql_type_name};
use super::error::ParquetError;
use super::probe::RowShape;

/// Reads a file's footer and fixes the Arrow types its columns decode into, whatever the file's
/// embedded Arrow schema says:
///
/// - VARCHAR and BLOB as views (`Utf8View`, `BinaryView`): a dictionary-encoded page (DuckDB and
///   tpchgen-cli write every low-cardinality string column that way) then decodes to 16-byte
///   views into the dictionary instead of a copy of each value's bytes.
/// - DECIMAL stored as INT64 or INT32 as `Decimal64` / `Decimal32`: the decoded values are the
///   stored integers as they are, where `Decimal128` would widen each one to 16 bytes.
///
/// Together they take decoding the Q1 columns of SF1 lineitem from 0.15 s to 0.11 s (DuckDB's
/// file) and from 0.23 s to 0.20 s (tpchgen-cli's) (benches/RESULTS.md, "Parquet source").
/// Public so that code wanting Arrow batches of a file (the benchmark's floor, say) decodes
/// exactly as the row reader does.
pub fn arrow_reader_metadata(
    handle: &File,
) -> Result<ArrowReaderMetadata, super::error::FormatError> {
    let metadata = ArrowReaderMetadata::load(handle, ArrowReaderOptions::new())?;
    let parquet_schema = metadata.parquet_schema();
    // The physical type of each top-level primitive column (nested ones stay as they are).
    let mut physical = vec![None; metadata.schema().fields().len()];
    for (leaf, column) in parquet_schema.columns().iter().enumerate() {
        let root = parquet_schema.get_column_root_idx(leaf);
        let primitive = parquet_schema
            .root_schema()
            .get_fields()
            .get(root)
            .is_some_and(|f| f.is_primitive());
        if let (true, Some(slot)) = (primitive, physical.get_mut(root)) {
            *slot = Some(column.physical_type());
        }
    }
    let better = |data_type: &DataType, stored: Option<PhysicalType>| match (data_type, stored) {
        (DataType::Utf8 | DataType::LargeUtf8, _) => Some(DataType::Utf8View),
        (DataType::Binary | DataType::LargeBinary, _) => Some(DataType::BinaryView),
        (DataType::Decimal128(p, s), Some(PhysicalType::INT64)) => {
            Some(DataType::Decimal64(*p, *s))
        }
        (DataType::Decimal128(p, s), Some(PhysicalType::INT32)) => {
            Some(DataType::Decimal32(*p, *s))
        }
        _ => None,
    };
    let schema = metadata.schema();
    let changes: Vec<Option<DataType>> = schema
        .fields()
        .iter()
        .zip(&physical)
        .map(|(f, stored)| better(f.data_type(), *stored))
        .collect();
    if changes.iter().all(Option::is_none) {
        return Ok(metadata);
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .zip(changes)
        .map(|(f, change)| match change {
            Some(data_type) => f.as_ref().clone().with_data_type(data_type),
            None => f.as_ref().clone(),
        })
        .collect();
    let schema = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
    let options = ArrowReaderOptions::new().with_schema(schema);
    ArrowReaderMetadata::try_new(Arc::clone(metadata.metadata()), options)
}

/// Resolves every field of the row type to a column of the file and checks it can fill it.
pub(crate) fn check_schema(
    file: &Path,
    metadata: &ArrowReaderMetadata,
    shape: &RowShape,
) -> Result<Vec<ColumnInfo>, ParquetError> {
    shape
        .fields
        .iter()
        .map(|field| {
            let Some((root, data_type)) = find_root(metadata, field.name) else {
                let available: Vec<String> = metadata
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| f.name().clone())
                    .collect();
                let similar = available
                    .iter()
                    .find(|name| name.eq_ignore_ascii_case(field.name))
                    .cloned();
                return Err(ParquetError::MissingColumn {
                    file: file.to_path_buf(),
                    column: field.name.to_owned(),
                    similar,
                    available,
                });
            };
            let type_name = sql_type_name(&data_type);
            if !accepts(Kind::of(&data_type), field.want) {
                return Err(ParquetError::TypeMismatch {
                    file: file.to_path_buf(),
                    column: field.name.to_owned(),
                    column_type: type_name,
                    wanted: field.type_display(),
                });
            }
            Ok(ColumnInfo {
                name: field.name.to_owned(),
                type_name,
                root,
            })
        })
        .collect()
}
