//! The row deserializer: one row of a decoded batch handed to a row type's `Deserialize`.
//!
//! A row is offered as a *sequence* of field values in declaration order, not as a map of
//! names: derived `Deserialize` impls accept both, and the sequence skips matching every field
//! name of every row against the struct's names. The columns were put in field order when the
//! file was opened (`reader.rs`), and the probe (`probe.rs`) made sure that order is the one the
//! visitor asks in (no aliases, no flatten).
//!
//! Each value is a match on the column's typed buffer and a call to the visitor: no allocation
//! except the `String`s a row type asks for. Conversions follow `column::accepts`.

use std::fmt;

use serde::de::{self, DeserializeSeed, IntoDeserializer, SeqAccess, Visitor};
use serde::forward_to_deserialize_any;

use super::column::{Column, Values};
use super::probe::{DecimalParts, Want};
use crate::operators::types::{DATE_TOKEN, Date};
use crate::operators::types::{DECIMAL_TOKEN, Decimal};

/// Why one value could not be handed over; `reader.rs` adds the file, column and row.
///
/// Boxed so that it is one pointer: a field's `Result<Option<f64>, DeError>` is then 16 bytes
/// and comes back in registers, where a 48-byte error made every field's result go through
/// memory. Errors are rare; their allocation does not matter.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeError(pub(crate) Box<DeErrorKind>);

/// What went wrong with one value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum DeErrorKind {
    /// The column's type cannot fill the field (caught before reading unless the probe could not
    /// see the field's type).
    Mismatch { field: usize, want: Want },
    /// A null for a field that is not an `Option`.
    Null { field: usize, want: Want },
    /// A value outside the field type's range (`-1` for a `u32`, `"AB"` for a `char`).
    OutOfRange {
        field: usize,
        value: String,
        want: Want,
    },
    /// The field's own `Deserialize` refused the value (an unparsable date string, an unknown
    /// enum variant), or the struct's visitor failed (`field` is then `None`).
    Custom {
        field: Option<usize>,
        message: String,
    },
}

impl DeError {
    #[cold]
    fn new(kind: DeErrorKind) -> DeError {
        DeError(Box::new(kind))
    }

    #[cold]
    fn at_field(mut self, at: usize) -> DeError {
        if let DeErrorKind::Custom {
            field: field @ None,
            ..
        } = self.0.as_mut()
        {
            *field = Some(at);
        }
        self
    }
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_ref() {
            DeErrorKind::Mismatch { field, want } => write!(f, "field {field} cannot be {want}"),
            DeErrorKind::Null { field, want } => write!(f, "field {field} is null, wants {want}"),
            DeErrorKind::OutOfRange { field, value, want } => {
                write!(f, "field {field}: {value} does not fit {want}")
            }
            DeErrorKind::Custom { message, .. } => f.write_str(message),
        }
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    #[cold]
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DeError::new(DeErrorKind::Custom {
            field: None,
            message: msg.to_string(),
        })
    }
}

/// Row `row` of `columns` (one column per field, in field order).
///
/// A thin reference and a row number: 16 bytes, which Rust passes in two registers. At 24 bytes
/// (a slice) it went through the stack into the row type's non-inlined `deserialize`, and the
/// reload stalling on store forwarding was the hottest instruction of the Q1 profile.
#[derive(Clone, Copy)]
pub(crate) struct RowDeserializer<'a> {
    pub(crate) columns: &'a Vec<Column>,
    pub(crate) row: usize,
}

impl<'de> de::Deserializer<'de> for RowDeserializer<'_> {
    type Error = DeError;

    // Inline into the row type's `deserialize`, so the row visitor runs in the same frame.
    #[inline(always)]
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_seq(RowSeq {
            columns: self.columns,
            // Proof of the cast: rows of a batch are below its size, which the reader caps at
            // u32::MAX (`ReadOptions::batch_size`).
            row: self.row as u32,
            next: 0,
        })
    }

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, DeError> {
        // Unreachable in practice: the probe admits only row types that ask for a struct.
        Err(de::Error::custom(
            "a row type must be a struct with named fields",
        ))
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }

    fn is_human_readable(&self) -> bool {
        false
    }
}

/// The fields of one row, in order. Rows of a batch are numbered in `u32` (the reader caps the
/// batch size) so that this and [`ValueDeserializer`] stay two registers wide.
struct RowSeq<'a> {
    columns: &'a Vec<Column>,
    row: u32,
    next: u32,
}

impl<'a> RowSeq<'a> {
    /// The next field's value, and the field's number.
    #[inline(always)]
    fn next_value(&mut self) -> Option<(ValueDeserializer<'a>, u32)> {
        let field = self.next;
        let column = self.columns.get(field as usize)?;
        self.next += 1;
        Some((ValueDeserializer::new(column, self.row, field), field))
    }
}

impl<'de> SeqAccess<'de> for RowSeq<'_> {
    type Error = DeError;

    #[inline(always)]
    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, DeError> {
        let Some((value, field)) = self.next_value() else {
            return Ok(None);
        };
        match seed.deserialize(value) {
            Ok(value) => Ok(Some(value)),
            Err(e) => Err(e.at_field(field as usize)),
        }
    }

    /// What the default `next_element` does (`next_element_seed(PhantomData)`), forced inline
    /// and without the seed layer: the derived `visit_seq` calls it once per field, and out of
    /// line each call cost a function frame and a trip of the value through memory (callgrind:
    /// 390 -> 329 instructions per row of the Q1 row type with `char` flags).
    #[inline(always)]
    fn next_element<T: serde::Deserialize<'de>>(&mut self) -> Result<Option<T>, DeError> {
        let Some((value, field)) = self.next_value() else {
            return Ok(None);
        };
        match T::deserialize(value) {
            Ok(value) => Ok(Some(value)),
            Err(e) => Err(e.at_field(field as usize)),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.columns.len().saturating_sub(self.next as usize))
    }
}

/// One value: row `row` of `column`, which feeds field number `field`.
///
/// The indexing `v[row]` in the methods below cannot panic: `row` is below the batch's row
/// count, and every column of a batch has that many values.
///
/// Row and field share one word so that the whole is two words, which Rust passes in registers
/// to the field type's (out-of-line) `Deserialize`; three fields went through the stack.
struct ValueDeserializer<'a> {
    column: &'a Column,
    /// `row | field << 32`.
    at: u64,
}

impl<'a> ValueDeserializer<'a> {
    #[inline(always)]
    fn new(column: &'a Column, row: u32, field: u32) -> ValueDeserializer<'a> {
        ValueDeserializer {
            column,
            at: u64::from(row) | u64::from(field) << 32,
        }
    }

    #[inline(always)]
    fn row(&self) -> usize {
        // Proof of the cast: the low half of `at` is a u32.
        (self.at & u64::from(u32::MAX)) as usize
    }

    #[inline(always)]
    fn field(&self) -> usize {
        (self.at >> 32) as usize
    }

    #[cold]
    fn mismatch<T>(&self, want: Want) -> Result<T, DeError> {
        Err(DeError::new(DeErrorKind::Mismatch {
            field: self.field(),
            want,
        }))
    }

    #[cold]
    fn out_of_range(&self, value: impl fmt::Display, want: Want) -> DeError {
        DeError::new(DeErrorKind::OutOfRange {
            field: self.field(),
            value: value.to_string(),
            want,
        })
    }

    /// Every field that is not an `Option` goes through here first.
    #[inline(always)]
    fn not_null(&self, want: Want) -> Result<(), DeError> {
        if self.column.is_null(self.row()) {
            Err(DeError::new(DeErrorKind::Null {
                field: self.field(),
                want,
            }))
        } else {
            Ok(())
        }
    }

    /// The value of an integer-like column (integers, DATE as days, DECIMAL of scale 0).
    #[inline(never)]
    fn integer(&self, want: Want) -> Result<i128, DeError> {
        let r = self.row();
        Ok(match &self.column.values {
            Values::I8(v) => v[r].into(),
            Values::I16(v) => v[r].into(),
            Values::I32(v) | Values::Date(v) => v[r].into(),
            Values::Decimal32(v, s) if s.digits == 0 => v[r].into(),
            Values::I64(v) => v[r].into(),
            Values::Decimal64(v, s) if s.digits == 0 => v[r].into(),
            Values::U8(v) => v[r].into(),
            Values::U16(v) => v[r].into(),
            Values::U32(v) => v[r].into(),
            Values::U64(v) => v[r].into(),
            Values::Decimal128(v, s) if s.digits == 0 => v[r],
            _ => return self.mismatch(want),
        })
    }

    /// The value of a numeric column as the nearest `f64` (DECIMAL scaled).
    ///
    /// DOUBLE and DECIMAL(p <= 18) (what DuckDB and tpchgen-cli write) inline; the rest out of
    /// line, which keeps the inlined part small enough for LLVM to inline the whole field into
    /// the row.
    #[inline(always)]
    fn float(&self, want: Want) -> Result<f64, DeError> {
        match &self.column.values {
            Values::F64(v) => Ok(v[self.row()]),
            Values::Decimal64(v, s) => Ok(s.f64_of_i64(v[self.row()])),
            _ => self.float_other(want),
        }
    }

    #[inline(never)]
    fn float_other(&self, want: Want) -> Result<f64, DeError> {
        let r = self.row();
        Ok(match &self.column.values {
            Values::F64(v) => v[r],
            Values::F32(v) => v[r].into(),
            Values::Decimal64(v, s) => s.f64_of_i64(v[r]),
            Values::Decimal128(v, s) => s.f64_of(v[r]),
            Values::Decimal32(v, s) => s.f64_of_i64(v[r].into()),
            Values::I32(v) => v[r].into(),
            Values::I64(v) => v[r] as f64,
            Values::I8(v) => v[r].into(),
            Values::I16(v) => v[r].into(),
            Values::U8(v) => v[r].into(),
            Values::U16(v) => v[r].into(),
            Values::U32(v) => v[r].into(),
            Values::U64(v) => v[r] as f64,
            _ => return self.mismatch(want),
        })
    }

    /// An integer-like value range-checked into `T` (the out-of-line path of integer fields).
    #[inline(never)]
    fn fitted<T: TryFrom<i128>>(&self, want: Want) -> Result<T, DeError> {
        let value = self.integer(want)?;
        T::try_from(value).map_err(|_| self.out_of_range(value, want))
    }

    /// The value of a VARCHAR column, or `None` for any other column.
    #[inline]
    fn str(&self) -> Option<&str> {
        let r = self.row();
        match &self.column.values {
            Values::Utf8View(a) => Some(a.value(r)),
            Values::Utf8(a) => Some(a.value(r)),
            Values::LargeUtf8(a) => Some(a.value(r)),
            _ => None,
        }
    }

    /// The value of a DECIMAL column, or `None` for any other column.
    fn decimal(&self) -> Option<Decimal> {
        let r = self.row();
        let (unscaled, scale) = match &self.column.values {
            Values::Decimal32(v, s) => (i128::from(v[r]), s.digits),
            Values::Decimal64(v, s) => (i128::from(v[r]), s.digits),
            Values::Decimal128(v, s) => (v[r], s.digits),
            _ => return None,
        };
        Decimal::new(unscaled, scale)
    }

    /// Text for string fields: VARCHAR as is, DATE as `YYYY-MM-DD`, DECIMAL with its scale.
    fn visit_text<'de, V: Visitor<'de>>(
        &self,
        visitor: V,
        want: Want,
    ) -> Result<V::Value, DeError> {
        self.not_null(want)?;
        if let Some(s) = self.str() {
            return visitor.visit_str(s);
        }
        match &self.column.values {
            Values::Date(v) => {
                visitor.visit_string(Date::from_days_since_epoch(v[self.row()]).to_string())
            }
            _ => match self.decimal() {
                Some(d) => visitor.visit_string(d.to_string()),
                None => self.mismatch(want),
            },
        }
    }
}

/// Integer fields: the exact type straight through, everything else range-checked.
macro_rules! deserialize_integer {
    ($($method:ident, $visit:ident, $ty:ty, $want:ident, $same:ident;)*) => {$(
        #[inline]
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
            self.not_null(Want::$want)?;
            if let Values::$same(v) = &self.column.values {
                return visitor.$visit(v[self.row()]);
            }
            visitor.$visit(self.fitted::<$ty>(Want::$want)?)
        }
    )*};
}

impl<'de> de::Deserializer<'de> for ValueDeserializer<'_> {
    type Error = DeError;

    deserialize_integer! {
        deserialize_i8, visit_i8, i8, I8, I8;
        deserialize_i16, visit_i16, i16, I16, I16;
        deserialize_i32, visit_i32, i32, I32, I32;
        deserialize_i64, visit_i64, i64, I64, I64;
        deserialize_u8, visit_u8, u8, U8, U8;
        deserialize_u16, visit_u16, u16, U16, U16;
        deserialize_u32, visit_u32, u32, U32, U32;
        deserialize_u64, visit_u64, u64, U64, U64;
    }

    fn deserialize_i128<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.not_null(Want::I128)?;
        visitor.visit_i128(self.integer(Want::I128)?)
    }

    fn deserialize_u128<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.not_null(Want::U128)?;
        visitor.visit_u128(self.fitted(Want::U128)?)
    }

    #[inline(always)]
    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.not_null(Want::F64)?;
        visitor.visit_f64(self.float(Want::F64)?)
    }

    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.not_null(Want::F32)?;
        if let Values::F32(v) = &self.column.values {
            return visitor.visit_f32(v[self.row()]);
        }
        // Rounding a wider value to the nearest f32 is what asking for an f32 means.
        visitor.visit_f32(self.float(Want::F32)? as f32)
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.not_null(Want::Bool)?;
        match &self.column.values {
            Values::Bool(a) => visitor.visit_bool(a.value(self.row())),
            _ => self.mismatch(Want::Bool),
        }
    }

    #[inline(always)]
    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        // VARCHAR as the reader decodes it, inline; other text (dates, decimals) out of line.
        if let (Values::Utf8View(a), false) = (&self.column.values, self.column.is_null(self.row()))
        {
            return visitor.visit_str(a.value(self.row()));
        }
        self.visit_text(visitor, Want::String)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.visit_text(visitor, Want::Str)
    }

    #[inline]
    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.not_null(Want::Char)?;
        let Some(s) = self.str() else {
            return self.mismatch(Want::Char);
        };
        if let &[byte] = s.as_bytes() {
            // One byte of valid UTF-8 is an ASCII character: the TPC-H flag columns.
            return visitor.visit_char(char::from(byte));
        }
        let mut chars = s.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) => visitor.visit_char(c),
            _ => Err(self.out_of_range(format_args!("{s:?}"), Want::Char)),
        }
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.not_null(Want::Bytes)?;
        let r = self.row();
        match &self.column.values {
            Values::Binary(a) => visitor.visit_bytes(a.value(r)),
            Values::LargeBinary(a) => visitor.visit_bytes(a.value(r)),
            Values::BinaryView(a) => visitor.visit_bytes(a.value(r)),
            _ => match self.str() {
                Some(s) => visitor.visit_bytes(s.as_bytes()),
                None => self.mismatch(Want::Bytes),
            },
        }
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_bytes(visitor)
    }

    #[inline]
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        if self.column.is_null(self.row()) {
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    #[inline]
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        if name != DATE_TOKEN {
            // A user newtype (`struct Price(f64)`) reads what its inner type reads.
            return visitor.visit_newtype_struct(self);
        }
        self.not_null(Want::Date)?;
        if let Values::Date(v) = &self.column.values {
            return visitor.visit_i32(v[self.row()]);
        }
        match self.str() {
            Some(s) => visitor.visit_str(s),
            None => self.mismatch(Want::Date),
        }
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        _: usize,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        if name != DECIMAL_TOKEN {
            return self.mismatch(Want::Nested("a tuple struct"));
        }
        self.not_null(Want::Decimal)?;
        if let Some(d) = self.decimal() {
            return visitor.visit_seq(DecimalParts::new(d.unscaled(), d.scale()));
        }
        if let Some(s) = self.str() {
            return visitor.visit_str(s);
        }
        if let Values::Date(_) = &self.column.values {
            return self.mismatch(Want::Decimal);
        }
        // Integers are decimals of scale 0.
        visitor.visit_seq(DecimalParts::new(self.integer(Want::Decimal)?, 0))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.not_null(Want::Enum)?;
        match self.str() {
            Some(s) => visitor.visit_enum(s.into_deserializer()),
            None => self.mismatch(Want::Enum),
        }
    }

    /// The column's own type decides: what `serde_json::Value` or an untagged enum gets.
    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        if self.column.is_null(self.row()) {
            return visitor.visit_none();
        }
        let r = self.row();
        match &self.column.values {
            Values::Bool(a) => visitor.visit_bool(a.value(r)),
            Values::I8(v) => visitor.visit_i8(v[r]),
            Values::I16(v) => visitor.visit_i16(v[r]),
            Values::I32(v) => visitor.visit_i32(v[r]),
            Values::I64(v) => visitor.visit_i64(v[r]),
            Values::U8(v) => visitor.visit_u8(v[r]),
            Values::U16(v) => visitor.visit_u16(v[r]),
            Values::U32(v) => visitor.visit_u32(v[r]),
            Values::U64(v) => visitor.visit_u64(v[r]),
            Values::F32(v) => visitor.visit_f32(v[r]),
            Values::F64(v) => visitor.visit_f64(v[r]),
            Values::Decimal32(..) | Values::Decimal64(..) | Values::Decimal128(..) => {
                visitor.visit_f64(self.float(Want::Any)?)
            }
            Values::Date(_) | Values::Utf8(_) | Values::LargeUtf8(_) | Values::Utf8View(_) => {
                self.visit_text(visitor, Want::Any)
            }
            Values::Binary(_) | Values::LargeBinary(_) | Values::BinaryView(_) => {
                self.deserialize_bytes(visitor)
            }
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_unit()
    }

    fn deserialize_unit<V: Visitor<'de>>(self, _: V) -> Result<V::Value, DeError> {
        self.mismatch(Want::Unit)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: V,
    ) -> Result<V::Value, DeError> {
        self.mismatch(Want::Unit)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, _: V) -> Result<V::Value, DeError> {
        self.mismatch(Want::Nested("a sequence"))
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _: usize, _: V) -> Result<V::Value, DeError> {
        self.mismatch(Want::Nested("a tuple"))
    }

    fn deserialize_map<V: Visitor<'de>>(self, _: V) -> Result<V::Value, DeError> {
        self.mismatch(Want::Nested("a map"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, DeError> {
        self.mismatch(Want::Nested("a struct"))
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, _: V) -> Result<V::Value, DeError> {
        self.mismatch(Want::Nested("an identifier"))
    }

    fn is_human_readable(&self) -> bool {
        // Date and Decimal take their compact paths (day number, unscaled + scale).
        false
    }
}

#[cfg(test)]
mod tests;
