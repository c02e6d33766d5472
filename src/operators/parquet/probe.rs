//! Learning a row type's shape from its `Deserialize` impl, without running it on data.
//!
//! A derived `Deserialize` for a struct calls `deserialize_struct(name, FIELDS, visitor)`:
//! `FIELDS` is the projection. Driving the visitor once over a sequence of stand-in values then
//! shows, field by field, which serde method each field type calls (`deserialize_f64`,
//! `deserialize_option` + `deserialize_string`, the `Date` newtype, ...): that is what lets a file
//! be checked against the row type before any page is decoded, with an error naming the column.
//!
//! The probe never sees data and so cannot fail on it; a field whose `Deserialize` rejects the
//! stand-in value (say a `NonZeroU8` given 1 is fine, a custom type may not be) leaves that field
//! and the ones after it [`Want::Unknown`]: they are checked value by value while reading instead.

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::StrDeserializer;
use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, SeqAccess, Visitor};
use serde::forward_to_deserialize_any;

use crate::operators::types::DATE_TOKEN;
use crate::operators::types::DECIMAL_TOKEN;

/// What a field's type asks of the deserializer: the serde method it calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// `bool`.
    Bool,
    /// `i8`.
    I8,
    /// `i16`.
    I16,
    /// `i32`.
    I32,
    /// `i64`.
    I64,
    /// `i128`.
    I128,
    /// `u8`.
    U8,
    /// `u16`.
    U16,
    /// `u32`.
    U32,
    /// `u64`.
    U64,
    /// `u128`.
    U128,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
    /// `char`.
    Char,
    /// A borrowed or owned string (`deserialize_str`: `Cow<str>`, `Box<str>` via string, ...).
    Str,
    /// `String`.
    String,
    /// Bytes (`serde_bytes::ByteBuf`, `Vec<u8>` with `serde_bytes`).
    Bytes,
    /// [`Date`](crate::operators::types::Date).
    Date,
    /// [`Decimal`](crate::operators::types::Decimal).
    Decimal,
    /// A fieldless enum, read from a string column by variant name.
    Enum,
    /// `deserialize_any` (`serde_json::Value`, untagged enums): the column's own type decides.
    Any,
    /// `()` or a unit struct: no column can fill it.
    Unit,
    /// A nested struct, tuple, sequence or map: not a flat column.
    Nested(&'static str),
    /// Not known before reading (the probe could not get past an earlier field).
    Unknown,
}

impl fmt::Display for Want {
    /// The Rust type, as a user would write it in the row struct.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Want::Bool => "bool",
            Want::I8 => "i8",
            Want::I16 => "i16",
            Want::I32 => "i32",
            Want::I64 => "i64",
            Want::I128 => "i128",
            Want::U8 => "u8",
            Want::U16 => "u16",
            Want::U32 => "u32",
            Want::U64 => "u64",
            Want::U128 => "u128",
            Want::F32 => "f32",
            Want::F64 => "f64",
            Want::Char => "char",
            Want::Str => "a string",
            Want::String => "String",
            Want::Bytes => "bytes",
            Want::Date => "Date",
            Want::Decimal => "Decimal",
            Want::Enum => "an enum",
            Want::Any => "any value",
            Want::Unit => "()",
            Want::Nested(what) => what,
            Want::Unknown => "an unknown type",
        };
        f.write_str(name)
    }
}

/// One field of a row type: the column it reads and what it wants from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldShape {
    /// The serde name of the field: the column it is read from.
    pub name: &'static str,
    /// The type the field asks for.
    pub want: Want,
    /// Whether the field is an `Option`, so a null is `None` rather than an error.
    pub optional: bool,
}

impl FieldShape {
    /// `Option<f64>` / `f64`, for messages.
    pub fn type_display(&self) -> String {
        if self.optional {
            format!("Option<{}>", self.want)
        } else {
            self.want.to_string()
        }
    }
}

/// The columns a row type reads, in the order its `Deserialize` visits them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowShape {
    /// The serde name of the struct.
    pub type_name: &'static str,
    /// Its fields in declaration order (the order the row deserializer hands out values).
    pub fields: Vec<FieldShape>,
}

/// Why a type cannot be a row type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct ShapeError {
    reason: String,
}

impl RowShape {
    /// Probes `T`'s `Deserialize` impl. Fails for anything but a struct with named fields and no
    /// `#[serde(flatten)]` or `#[serde(alias)]` (both hide which column a field reads).
    pub fn of<T: DeserializeOwned>() -> Result<RowShape, ShapeError> {
        let mut probe = StructProbe::default();
        let outcome = T::deserialize(&mut probe);
        let Some((type_name, names)) = probe.struct_seen else {
            let reason = match (probe.not_a_struct, outcome) {
                (Some(what), _) => {
                    format!("it deserializes as {what}, not as a struct with named fields")
                }
                (None, Err(e)) => {
                    format!("its Deserialize impl failed before asking for a struct: {e}")
                }
                (None, Ok(_)) => "its Deserialize impl asks for no fields".to_owned(),
            };
            return Err(ShapeError { reason });
        };
        let seen = probe.fields.len();
        if outcome.is_ok() && seen != names.len() {
            return Err(ShapeError {
                reason: format!(
                    "{type_name} lists {} names for {seen} fields: #[serde(alias)] is not supported, \
                     rename the field to the column's name instead",
                    names.len()
                ),
            });
        }
        let fields = names
            .iter()
            .enumerate()
            .map(|(i, &name)| {
                let (want, optional) = probe
                    .fields
                    .get(i)
                    .copied()
                    .unwrap_or((Want::Unknown, false));
                FieldShape {
                    name,
                    want,
                    optional,
                }
            })
            .collect();
        Ok(RowShape { type_name, fields })
    }

    /// The column names, in field order.
    pub fn column_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.fields.iter().map(|f| f.name)
    }
}

/// The error of the probe run; its text only ends up in a [`ShapeError`].
#[derive(Debug)]
struct ProbeError(String);

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ProbeError {}

impl de::Error for ProbeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        ProbeError(msg.to_string())
    }
}

/// Stands in for the whole row: records the struct's name and field list, then plays a sequence
/// of one stand-in value per field.
#[derive(Default)]
struct StructProbe {
    struct_seen: Option<(&'static str, &'static [&'static str])>,
    not_a_struct: Option<&'static str>,
    fields: Vec<(Want, bool)>,
}

impl StructProbe {
    fn refuse<T>(&mut self, what: &'static str) -> Result<T, ProbeError> {
        self.not_a_struct = Some(what);
        Err(ProbeError(format!(
            "a row type must be a struct, not {what}"
        )))
    }
}

impl<'de> de::Deserializer<'de> for &mut StructProbe {
    type Error = ProbeError;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, ProbeError> {
        self.refuse("a self-describing value (deserialize_any)")
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ProbeError> {
        self.struct_seen = Some((name, fields));
        visitor.visit_seq(ProbeSeq {
            remaining: fields.len(),
            fields: &mut self.fields,
        })
    }

    fn deserialize_map<V: Visitor<'de>>(self, _: V) -> Result<V::Value, ProbeError> {
        self.refuse("a map (a struct with #[serde(flatten)] deserializes as one)")
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: V,
    ) -> Result<V::Value, ProbeError> {
        self.refuse("a newtype struct")
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: usize,
        _: V,
    ) -> Result<V::Value, ProbeError> {
        self.refuse("a tuple struct (its fields have no names to match columns)")
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _: usize, _: V) -> Result<V::Value, ProbeError> {
        self.refuse("a tuple (its fields have no names to match columns)")
    }

    fn deserialize_seq<V: Visitor<'de>>(self, _: V) -> Result<V::Value, ProbeError> {
        self.refuse("a sequence")
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct enum identifier ignored_any
    }
}

/// The stand-in row: one [`FieldProbe`] per listed field.
struct ProbeSeq<'a> {
    remaining: usize,
    fields: &'a mut Vec<(Want, bool)>,
}

impl<'de> SeqAccess<'de> for ProbeSeq<'_> {
    type Error = ProbeError;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, ProbeError> {
        if self.remaining == 0 {
            return Ok(None);
        }
        self.remaining -= 1;
        let probe = FieldProbe {
            fields: self.fields,
            optional: false,
        };
        seed.deserialize(probe).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.remaining)
    }
}

/// Stands in for one field's value: records the method called and answers with a harmless value
/// of the asked-for type (1 rather than 0, so `NonZero*` fields pass).
struct FieldProbe<'a> {
    fields: &'a mut Vec<(Want, bool)>,
    optional: bool,
}

impl FieldProbe<'_> {
    fn record(self, want: Want) {
        self.fields.push((want, self.optional));
    }

    fn nested<T>(self, what: &'static str) -> Result<T, ProbeError> {
        self.record(Want::Nested(what));
        Err(ProbeError(format!("{what} cannot be read from a column")))
    }
}

macro_rules! probe_scalar {
    ($($method:ident => $want:ident, $visit:ident($($value:expr)?);)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ProbeError> {
            self.record(Want::$want);
            visitor.$visit($($value)?)
        }
    )*};
}

impl<'de> de::Deserializer<'de> for FieldProbe<'_> {
    type Error = ProbeError;

    probe_scalar! {
        deserialize_bool => Bool, visit_bool(false);
        deserialize_i8 => I8, visit_i8(1);
        deserialize_i16 => I16, visit_i16(1);
        deserialize_i32 => I32, visit_i32(1);
        deserialize_i64 => I64, visit_i64(1);
        deserialize_i128 => I128, visit_i128(1);
        deserialize_u8 => U8, visit_u8(1);
        deserialize_u16 => U16, visit_u16(1);
        deserialize_u32 => U32, visit_u32(1);
        deserialize_u64 => U64, visit_u64(1);
        deserialize_u128 => U128, visit_u128(1);
        deserialize_f32 => F32, visit_f32(1.0);
        deserialize_f64 => F64, visit_f64(1.0);
        deserialize_char => Char, visit_char('x');
        deserialize_str => Str, visit_str("x");
        deserialize_string => String, visit_str("x");
        deserialize_bytes => Bytes, visit_bytes(b"x");
        deserialize_byte_buf => Bytes, visit_bytes(b"x");
        deserialize_any => Any, visit_unit();
        deserialize_unit => Unit, visit_unit();
        deserialize_ignored_any => Any, visit_unit();
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ProbeError> {
        visitor.visit_some(FieldProbe {
            fields: self.fields,
            optional: true,
        })
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, ProbeError> {
        self.record(Want::Unit);
        visitor.visit_unit()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, ProbeError> {
        if name == DATE_TOKEN {
            self.record(Want::Date);
            visitor.visit_i32(0)
        } else {
            // A user newtype (`struct Price(f64)`) reads what its inner type reads.
            visitor.visit_newtype_struct(self)
        }
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        _: usize,
        visitor: V,
    ) -> Result<V::Value, ProbeError> {
        if name == DECIMAL_TOKEN {
            self.record(Want::Decimal);
            visitor.visit_seq(DecimalParts::new(0, 0))
        } else {
            self.nested("a tuple struct")
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ProbeError> {
        self.record(Want::Enum);
        let Some(first) = variants.first() else {
            return Err(ProbeError(
                "an enum without variants has no values".to_owned(),
            ));
        };
        let variant: StrDeserializer<'_, ProbeError> = first.into_deserializer();
        visitor.visit_enum(variant)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, _: V) -> Result<V::Value, ProbeError> {
        self.nested("a sequence")
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _: usize, _: V) -> Result<V::Value, ProbeError> {
        self.nested("a tuple")
    }

    fn deserialize_map<V: Visitor<'de>>(self, _: V) -> Result<V::Value, ProbeError> {
        self.nested("a map")
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, ProbeError> {
        self.nested("a struct")
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, _: V) -> Result<V::Value, ProbeError> {
        self.nested("an identifier")
    }

    fn is_human_readable(&self) -> bool {
        // The row deserializer is not human-readable either: Date and Decimal take their
        // compact paths, which is what the probe must see.
        false
    }
}

/// A `Decimal`'s binary form, `(unscaled, scale)`, as the two elements of a sequence: what
/// `Decimal`'s visitor reads. Shared by the probe and the row deserializer, each with its error.
pub(crate) struct DecimalParts<E> {
    unscaled: i128,
    scale: u8,
    next: u8,
    error: PhantomData<E>,
}

impl<E> DecimalParts<E> {
    pub(crate) fn new(unscaled: i128, scale: u8) -> DecimalParts<E> {
        DecimalParts {
            unscaled,
            scale,
            next: 0,
            error: PhantomData,
        }
    }
}

impl<'de, E: de::Error> SeqAccess<'de> for DecimalParts<E> {
    type Error = E;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, E> {
        self.next = self.next.saturating_add(1);
        match self.next {
            1 => seed
                .deserialize(self.unscaled.into_deserializer())
                .map(Some),
            2 => seed.deserialize(self.scale.into_deserializer()).map(Some),
            _ => Ok(None),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(2_usize.saturating_sub(usize::from(self.next)))
    }
}

#[cfg(test)]
mod tests;
