//! The Parquet source: rows of a serde type, read from a share of the row groups of one or more
//! files, decoding only the columns the type names.
//!
//! ```no_run
//! use flint::operators::parquet::{ParquetError, ParquetSplit};
//! use flint::operators::types::Date;
//! use serde::Deserialize;
//!
//! #[derive(Deserialize)]
//! struct LineItem {
//!     l_quantity: f64,      // DECIMAL(15,2) or DOUBLE
//!     l_extendedprice: f64,
//!     l_returnflag: char,   // or String: `char` allocates nothing per row
//!     l_shipdate: Date,     // DATE: days since 1970-01-01, prints as 1998-09-02
//! }
//!
//! # fn main() -> Result<(), ParquetError> {
//! // Subtask 2 of 4 reads its share of the row groups (balanced by row count), from the
//! // footers alone.
//! let split = ParquetSplit::for_subtask(&["lineitem.parquet"], 2, 4)?;
//! let mut sum = 0.0;
//! split.read(|row: LineItem| {
//!     sum += row.l_extendedprice;
//!     Ok::<_, ParquetError>(())
//! })?;
//! // or: for row in split.rows::<LineItem>()? { let row = row?; ... }
//! # Ok(()) }
//! ```
//!
//! ## API
//!
//! | item | what it does |
//! | --- | --- |
//! | [`ParquetSplit::plan`]`(files, parallelism)` | splits the row groups of `files` (in the given order) across `parallelism` subtasks; reads footers only |
//! | [`ParquetSplit::for_subtask`]`(files, subtask, parallelism)` | the same split, computed by the subtask itself (`plan(..)[subtask]`) |
//! | [`ParquetSplit`]` { subtask, parallelism, parts: Vec<SplitPart> }` | serde-serializable, so a planner may ship it in a deployment descriptor instead |
//! | [`ParquetSplit::rows`]`::<T>() -> RowReader<T>` | `Iterator<Item = Result<T, ParquetError>>`; checks the first file against `T` before returning |
//! | [`ParquetSplit::read`]`::<T, E>(f)` / [`RowReader::try_for_each_row`] | calls `f(row)` per row; stops at the first error of either side (`E: From<ParquetError>`) |
//! | [`RowReader::open`]`(split, ReadOptions { batch_size })` | explicit options (default batch 8192 rows) |
//! | [`RowReader::projected_columns`] | the Parquet columns being decoded (exactly `T`'s fields) |
//! | [`RowShape::of`]`::<T>()` | what the probe learns from `T`: column names, field types, optionality |
//! | [`parquet_files_in`]`(dir)` | the `*.parquet` files of a directory, sorted: a deterministic file list |
//! | [`arrow_reader_metadata`]`(file)` | the Arrow decoding settings the reader uses, for code that wants batches |
//!
//! The value types for DATE and DECIMAL columns are the general record types
//! [`Date`](crate::operators::types::Date) and [`Decimal`](crate::operators::types::Decimal).
//!
//! ## Splits
//!
//! All files' row groups form one sequence; group *g* goes to the subtask whose equal share of
//! the total row count holds the group's middle row (`floor((start_g + rows_g/2) * P / total)`).
//! So each subtask reads a contiguous run of row groups, shares follow row counts (a file of one
//! huge and many small groups still balances), each share is within about one row group of
//! `total / P`, and the assignment is a pure function of the footers: every subtask computes the
//! same plan alone. Whole row groups are the unit, so with fewer row groups than subtasks some
//! subtasks read nothing (DuckDB writes 122,880-row groups, tpchgen-cli ~113,000-row groups at
//! its default 7 MiB: 49 and 53 groups for SF1 lineitem).
//!
//! ## Type mapping
//!
//! Judged on the Arrow type the reader produces, so the Parquet physical type does not matter
//! (`DECIMAL(15,2)` is the same whether stored as INT32, INT64 or FIXED_LEN_BYTE_ARRAY).
//!
//! | column | field types |
//! | --- | --- |
//! | INT8..INT64, UINT8..UINT64 | any integer type (range-checked per value: `-5` into `u32` is an error naming the row), `f64`/`f32`, `Decimal` (scale 0) |
//! | DOUBLE, FLOAT | `f64`, `f32` |
//! | DECIMAL(p,s) | `f64`/`f32` (the nearest float: DECIMAL 24710.35 gives the same `f64` as DuckDB's DOUBLE column), `Decimal` (exact), `String` (`"24710.35"`), integers only when s = 0 |
//! | DATE | `Date`, `String` (`"1998-09-02"`), integers (days since 1970-01-01) |
//! | VARCHAR | `String`, `char` (checked to be one character), fieldless enums by variant name, and by parsing `Date` and `Decimal` |
//! | BLOB | bytes (`deserialize_bytes`) |
//! | BOOLEAN | `bool` |
//! | any of these, nullable | `Option<T>`; a null in a non-`Option` field is an error naming column and row |
//!
//! `deserialize_any` types (`serde_json::Value`, untagged enums) get the column's own type; user
//! newtypes (`struct Price(f64)`) read what their inner type reads. Never: a DOUBLE into
//! `Decimal` (it would invent digits), nested columns (LIST, STRUCT, MAP), other temporal types.
//! Row types must be structs with named fields; `#[serde(flatten)]` and `#[serde(alias)]` are
//! refused (they hide which column a field reads), `#[serde(rename)]`, `skip` and `default` work.
//!
//! ## Errors
//!
//! One `thiserror` enum, [`ParquetError`]; every message starts with the file:
//!
//! ```text
//! lineitem.parquet: column l_shipdate is DATE, the row type wants f64
//! lineitem.parquet: the row type wants column L_SHIPDATE, which the file does not have (it has l_shipdate: names are case-sensitive)
//! orders.parquet: the row type wants column l_orderkey, which the file does not have (it has: o_orderkey, o_custkey, ...)
//! types.parquet: column maybe_i32 is null in row 1, the row type wants i32 (make the field an Option)
//! types.parquet: column neg_i32, row 0: -5 does not fit u32
//! types.parquet: column date_text, row 1: "not a date" is not a date of the form YYYY-MM-DD
//! ```
//!
//! Type and column errors come from `rows()`/`read()` before any page is decoded (files after
//! the first: when the reader reaches them). Value errors (null, out of range, unparsable) are
//! per row: the iterator yields the error and goes on; any other error ends it.
//! [`ParquetError::is_retryable`] is true only for `Open` (the file may appear, a network file
//! system may recover).
//!
//! ## Design
//!
//! **How the projection is found.** A derived `Deserialize` calls
//! `deserialize_struct(name, FIELDS, visitor)`; a probing deserializer records `FIELDS`, then
//! plays one stand-in value per field through the visitor to learn which serde method each field
//! calls (`deserialize_f64`, `deserialize_option` + `deserialize_string`, the `Date` newtype,
//! ...). That gives the projection mask and the early, column-naming type check (`probe`,
//! checked against each file in `schema` before any page is read).
//!
//! **How rows are built.** Rows are handed to the visitor as a *sequence* (the derive accepts
//! both), so no field name is matched per row. Each value is a match on the column's typed
//! buffer and one visitor call (`de`). Callgrind counts drove the hot path: forcing
//! `next_element` inline, two-word value deserializers that travel in registers, the DECIMAL
//! divisor looked up once per batch, inline fast paths for DOUBLE, DECIMAL(p<=18) and
//! `Utf8View`.
//!
//! **Decoding: the `parquet` crate's Arrow reader**, chosen over its low-level column readers
//! (as fast on numbers, 2.8x slower on strings: their byte-array values are reference-counted
//! slices, an atomic increment each, where the Arrow reader hands out 16-byte views into the
//! dictionary page) and over `serde_arrow` (2.4x slower on the Q1 row, and it cannot produce
//! `f64` from DECIMAL nor a `Date`). The Arrow path also brings page skipping and row selection
//! for later predicate pushdown. VARCHAR/BLOB columns decode as views (`Utf8View`), DECIMALs
//! stored as INT32/INT64 as `Decimal32`/`Decimal64` (zero-copy instead of widening to `i128`),
//! in batches of 8192 rows. The figures: `benches/RESULTS.md`, "Parquet source".
//!
//! Layout: `probe` learns a row type's columns and field types from its `Deserialize` impl;
//! `column` holds the table of which column type fills which field type; `split` assigns row
//! groups to subtasks; `schema` settles what to decode from a file and checks it against the row
//! type; `reader` decodes batches with the Arrow reader and walks them; `de` hands one row of a
//! batch to the row type.
//!
//! ## Using it in an operator
//!
//! Reading is blocking file I/O and CPU work: it belongs on the task thread, never on an actor's.
//! In `Operator::run(&mut self, io)`: `ParquetSplit::for_subtask(&files, io.subtask() as usize,
//! io.parallelism() as usize)`, then `split.read(|row: T| ...)`, checking `io.is_cancelled()`
//! every few thousand rows. The file list must be the same on every subtask: resolve a directory
//! with [`parquet_files_in`] once (in the job graph, or at submission), not per subtask on
//! different machines.
//!
//! ## Caveats
//!
//! - Whole row groups only: no splitting inside a group, so balance is within one group's rows
//!   and P larger than the number of groups leaves subtasks idle.
//! - No predicate pushdown yet (row group statistics, page index); no async reader; local files.
//! - No nested columns; one column feeds one field; `alias`/`flatten` refused.
//! - Codecs: SNAPPY and ZSTD (what DuckDB and tpchgen-cli write); GZIP, LZ4 and BROTLI files fail
//!   with a `Decode` error naming the codec.
//! - Integers beyond 2^53 into `f64` round to the nearest float, as `as f64` does.

mod column;
mod de;
mod error;
mod probe;
mod reader;
mod schema;
mod split;

pub use error::{FormatError, ParquetError};
pub use probe::{FieldShape, RowShape, ShapeError, Want};
pub use reader::{ReadOptions, RowReader};
pub use schema::arrow_reader_metadata;
pub use split::{ParquetSplit, SplitPart, parquet_files_in};
