//! What a column holds, which field types it can fill, and typed access to a decoded batch.
//!
//! The one table of which column type fills which field type is [`accepts`]: the file is checked
//! against it before reading, and the row deserializer (`de.rs`) follows it value by value (a
//! test in `de.rs` holds the two to each other). Types are judged on the Arrow type the Parquet
//! reader produces, which folds the Parquet physical and logical types into one: `DECIMAL(15,2)`
//! is `Decimal128(15, 2)` whether it is stored as INT32, INT64 or FIXED_LEN_BYTE_ARRAY.

use parquet::arrow::arrow_reader::ArrowReaderMetadata;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Decimal32Type, Decimal64Type, Decimal128Type, Float32Type, Float64Type, Int8Type,
    Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{
    Array, ArrayRef, BinaryArray, BinaryViewArray, BooleanArray, LargeBinaryArray,
    LargeStringArray, StringArray, StringViewArray,
};
use arrow_buffer::{NullBuffer, ScalarBuffer};
use arrow_schema::DataType;

use super::probe::Want;
use crate::operators::types::{MAX_SCALE, POW10_F64, scaled_f64};

/// The kinds of column the reader fills fields from, as far as field types care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Bool,
    /// Any integer column (INT8..INT64, signed or not).
    Int,
    F32,
    F64,
    /// DECIMAL with a non-negative scale of at most 38.
    Decimal {
        scale: u8,
    },
    Date,
    Str,
    Bytes,
    /// Nested, temporal other than DATE, and so on: never filled, only named in errors.
    Unsupported,
}

impl Kind {
    pub(crate) fn of(data_type: &DataType) -> Kind {
        match data_type {
            DataType::Boolean => Kind::Bool,
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64 => Kind::Int,
            DataType::Float32 => Kind::F32,
            DataType::Float64 => Kind::F64,
            DataType::Decimal32(_, scale)
            | DataType::Decimal64(_, scale)
            | DataType::Decimal128(_, scale) => match u8::try_from(*scale) {
                Ok(scale) if scale <= MAX_SCALE => Kind::Decimal { scale },
                _ => Kind::Unsupported,
            },
            DataType::Date32 => Kind::Date,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Kind::Str,
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView => Kind::Bytes,
            _ => Kind::Unsupported,
        }
    }
}

/// The SQL name of a column type, as DuckDB prints it: what error messages show.
pub(crate) fn sql_type_name(data_type: &DataType) -> String {
    match data_type {
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Int8 => "TINYINT".into(),
        DataType::Int16 => "SMALLINT".into(),
        DataType::Int32 => "INT32".into(),
        DataType::Int64 => "INT64".into(),
        DataType::UInt8 => "UTINYINT".into(),
        DataType::UInt16 => "USMALLINT".into(),
        DataType::UInt32 => "UINT32".into(),
        DataType::UInt64 => "UINT64".into(),
        DataType::Float32 => "FLOAT".into(),
        DataType::Float64 => "DOUBLE".into(),
        DataType::Decimal32(p, s)
        | DataType::Decimal64(p, s)
        | DataType::Decimal128(p, s)
        | DataType::Decimal256(p, s) => format!("DECIMAL({p},{s})"),
        DataType::Date32 | DataType::Date64 => "DATE".into(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "VARCHAR".into(),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "BLOB".into(),
        DataType::FixedSizeBinary(n) => format!("FIXED_LEN_BYTE_ARRAY({n})"),
        DataType::Timestamp(..) => "TIMESTAMP".into(),
        DataType::Time32(_) | DataType::Time64(_) => "TIME".into(),
        DataType::Struct(_) => "STRUCT".into(),
        DataType::List(_) | DataType::LargeList(_) | DataType::ListView(_) => "LIST".into(),
        DataType::Map(..) => "MAP".into(),
        other => other.to_string(),
    }
}

/// Whether a column of `kind` can fill a field that wants `want`: the conversion table.
///
/// Integers are range-checked per value, so they fit any integer field; DECIMAL fits integer
/// fields only at scale 0 (no silent truncation). DECIMAL and integers fit `f64` (scaled; the
/// nearest `f64`). DATE fits `Date`, integer fields (days since 1970-01-01) and strings
/// (`YYYY-MM-DD`). VARCHAR fits strings, `char` (checked to be one character per value), and
/// `Date`, `Decimal` and fieldless enums by parsing. A DOUBLE never fills a `Decimal`: that
/// would invent digits.
pub(crate) fn accepts(kind: Kind, want: Want) -> bool {
    use Want as W;
    match want {
        W::Any | W::Unknown => kind != Kind::Unsupported,
        W::Bool => kind == Kind::Bool,
        W::I8 | W::I16 | W::I32 | W::I64 | W::I128 | W::U8 | W::U16 | W::U32 | W::U64 | W::U128 => {
            matches!(kind, Kind::Int | Kind::Date | Kind::Decimal { scale: 0 })
        }
        W::F64 | W::F32 => matches!(
            kind,
            Kind::Int | Kind::F32 | Kind::F64 | Kind::Decimal { .. }
        ),
        W::Char | W::Enum => kind == Kind::Str,
        W::Str | W::String => matches!(kind, Kind::Str | Kind::Date | Kind::Decimal { .. }),
        W::Bytes => matches!(kind, Kind::Str | Kind::Bytes),
        W::Date => matches!(kind, Kind::Date | Kind::Str),
        W::Decimal => matches!(kind, Kind::Decimal { .. } | Kind::Int | Kind::Str),
        W::Unit | W::Nested(_) => false,
    }
}

/// A DECIMAL column's scale with its divisor, looked up once per batch instead of per value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Scale {
    /// Digits after the point.
    pub(crate) digits: u8,
    /// `10^digits`.
    pub(crate) divisor: f64,
}

impl Scale {
    /// `None` beyond [`MAX_SCALE`].
    pub(crate) fn new(digits: u8) -> Option<Scale> {
        let divisor = *POW10_F64.get(usize::from(digits))?;
        Some(Scale { digits, divisor })
    }

    /// `unscaled / 10^digits` as the nearest `f64`: the same number as `Decimal::to_f64`.
    #[inline(always)]
    pub(crate) fn f64_of(self, unscaled: i128) -> f64 {
        scaled_f64(unscaled, self.divisor)
    }

    /// [`Scale::f64_of`] for DECIMAL(p <= 18) columns, which decode to `i64`.
    #[inline(always)]
    pub(crate) fn f64_of_i64(self, unscaled: i64) -> f64 {
        unscaled as f64 / self.divisor
    }
}

/// The projection of a file for a row type: for each field, which root column feeds it.
#[derive(Debug, Clone)]
pub(crate) struct ColumnInfo {
    /// The column's name in the file (= the field's serde name).
    pub(crate) name: String,
    /// Its SQL type name, for errors.
    pub(crate) type_name: String,
    /// Its index among the file's root (top-level) columns.
    pub(crate) root: usize,
}

/// Looks up a root column by name in the Arrow view of a file's schema.
pub(crate) fn find_root(metadata: &ArrowReaderMetadata, name: &str) -> Option<(usize, DataType)> {
    let schema = metadata.schema();
    let (root, field) = schema.fields().find(name)?;
    Some((root, field.data_type().clone()))
}

/// One column of the current batch, typed once per batch so each value is a plain index.
///
/// The buffers are reference-counted slices of the batch (cloning them copies no data); owning
/// them keeps the row iterator free of self-references to the batch.
pub(crate) struct Column {
    pub(crate) values: Values,
    /// `None` when the batch has no null in this column (DuckDB marks every column OPTIONAL, so
    /// the null check must be cheap when nothing is null).
    pub(crate) nulls: Option<NullBuffer>,
}

/// The typed values of a [`Column`].
pub(crate) enum Values {
    Bool(BooleanArray),
    I8(ScalarBuffer<i8>),
    I16(ScalarBuffer<i16>),
    I32(ScalarBuffer<i32>),
    I64(ScalarBuffer<i64>),
    U8(ScalarBuffer<u8>),
    U16(ScalarBuffer<u16>),
    U32(ScalarBuffer<u32>),
    U64(ScalarBuffer<u64>),
    F32(ScalarBuffer<f32>),
    F64(ScalarBuffer<f64>),
    Decimal32(ScalarBuffer<i32>, Scale),
    Decimal64(ScalarBuffer<i64>, Scale),
    Decimal128(ScalarBuffer<i128>, Scale),
    Date(ScalarBuffer<i32>),
    Utf8(StringArray),
    LargeUtf8(LargeStringArray),
    Utf8View(StringViewArray),
    Binary(BinaryArray),
    LargeBinary(LargeBinaryArray),
    BinaryView(BinaryViewArray),
}

impl Column {
    /// Types an array of the batch, or `None` for a type outside [`Kind`] (which the check
    /// against the file schema has already turned into an error, so this is a second guard).
    pub(crate) fn new(array: &ArrayRef) -> Option<Column> {
        let scale = |s: &i8| u8::try_from(*s).ok().and_then(Scale::new);
        let values = match array.data_type() {
            DataType::Boolean => Values::Bool(array.as_boolean_opt()?.clone()),
            DataType::Int8 => Values::I8(array.as_primitive_opt::<Int8Type>()?.values().clone()),
            DataType::Int16 => Values::I16(array.as_primitive_opt::<Int16Type>()?.values().clone()),
            DataType::Int32 => Values::I32(array.as_primitive_opt::<Int32Type>()?.values().clone()),
            DataType::Int64 => Values::I64(array.as_primitive_opt::<Int64Type>()?.values().clone()),
            DataType::UInt8 => Values::U8(array.as_primitive_opt::<UInt8Type>()?.values().clone()),
            DataType::UInt16 => {
                Values::U16(array.as_primitive_opt::<UInt16Type>()?.values().clone())
            }
            DataType::UInt32 => {
                Values::U32(array.as_primitive_opt::<UInt32Type>()?.values().clone())
            }
            DataType::UInt64 => {
                Values::U64(array.as_primitive_opt::<UInt64Type>()?.values().clone())
            }
            DataType::Float32 => {
                Values::F32(array.as_primitive_opt::<Float32Type>()?.values().clone())
            }
            DataType::Float64 => {
                Values::F64(array.as_primitive_opt::<Float64Type>()?.values().clone())
            }
            DataType::Decimal32(_, s) => Values::Decimal32(
                array.as_primitive_opt::<Decimal32Type>()?.values().clone(),
                scale(s)?,
            ),
            DataType::Decimal64(_, s) => Values::Decimal64(
                array.as_primitive_opt::<Decimal64Type>()?.values().clone(),
                scale(s)?,
            ),
            DataType::Decimal128(_, s) => Values::Decimal128(
                array.as_primitive_opt::<Decimal128Type>()?.values().clone(),
                scale(s)?,
            ),
            DataType::Date32 => {
                Values::Date(array.as_primitive_opt::<Date32Type>()?.values().clone())
            }
            DataType::Utf8 => Values::Utf8(array.as_string_opt::<i32>()?.clone()),
            DataType::LargeUtf8 => Values::LargeUtf8(array.as_string_opt::<i64>()?.clone()),
            DataType::Utf8View => Values::Utf8View(array.as_string_view_opt()?.clone()),
            DataType::Binary => Values::Binary(array.as_binary_opt::<i32>()?.clone()),
            DataType::LargeBinary => Values::LargeBinary(array.as_binary_opt::<i64>()?.clone()),
            DataType::BinaryView => Values::BinaryView(array.as_binary_view_opt()?.clone()),
            _ => return None,
        };
        let nulls = array.logical_nulls().filter(|n| n.null_count() > 0);
        Some(Column { values, nulls })
    }

    #[inline]
    pub(crate) fn is_null(&self, row: usize) -> bool {
        self.nulls.as_ref().is_some_and(|n| n.is_null(row))
    }
}
