//! The row deserializer against the conversion table, value by value.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::types::{Decimal32Type, Decimal64Type, Decimal128Type};
use arrow_array::{
    ArrayRef, BinaryArray, BinaryViewArray, BooleanArray, Date32Array, Decimal64Array,
    Float32Array, Float64Array, Int8Array, Int16Array, Int32Array, Int64Array, LargeBinaryArray,
    LargeStringArray, PrimitiveArray, StringArray, StringViewArray, UInt8Array, UInt16Array,
    UInt32Array, UInt64Array,
};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::*;
use crate::operators::parquet::column::{Kind, accepts};
use crate::operators::parquet::probe::RowShape;

/// A row of one field of type `T`.
#[derive(Debug, Deserialize)]
struct One<T> {
    #[allow(dead_code)]
    v: T,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
enum Flag {
    A,
}

fn decimal<T: arrow_array::types::DecimalType>(value: T::Native, scale: i8) -> ArrayRef {
    let array = PrimitiveArray::<T>::from_iter_values([value])
        .with_precision_and_scale(9, scale)
        .expect("valid precision and scale");
    Arc::new(array)
}

/// One single-row column of every Arrow type the reader produces.
fn columns() -> Vec<(&'static str, ArrayRef)> {
    vec![
        ("Boolean", Arc::new(BooleanArray::from(vec![true]))),
        ("Int8", Arc::new(Int8Array::from(vec![1]))),
        ("Int16", Arc::new(Int16Array::from(vec![1]))),
        ("Int32", Arc::new(Int32Array::from(vec![1]))),
        ("Int64", Arc::new(Int64Array::from(vec![1]))),
        ("UInt8", Arc::new(UInt8Array::from(vec![1]))),
        ("UInt16", Arc::new(UInt16Array::from(vec![1]))),
        ("UInt32", Arc::new(UInt32Array::from(vec![1]))),
        ("UInt64", Arc::new(UInt64Array::from(vec![1]))),
        ("Float32", Arc::new(Float32Array::from(vec![1.0]))),
        ("Float64", Arc::new(Float64Array::from(vec![1.0]))),
        ("Decimal32(9,2)", decimal::<Decimal32Type>(100, 2)),
        ("Decimal64(9,2)", decimal::<Decimal64Type>(100, 2)),
        ("Decimal128(9,2)", decimal::<Decimal128Type>(100, 2)),
        ("Decimal64(9,0)", decimal::<Decimal64Type>(1, 0)),
        ("Decimal128(9,0)", decimal::<Decimal128Type>(1, 0)),
        ("Date32", Arc::new(Date32Array::from(vec![1]))),
        ("Utf8", Arc::new(StringArray::from(vec!["A"]))),
        ("LargeUtf8", Arc::new(LargeStringArray::from(vec!["A"]))),
        ("Utf8View", Arc::new(StringViewArray::from(vec!["A"]))),
        ("Binary", Arc::new(BinaryArray::from(vec![b"A".as_slice()]))),
        (
            "LargeBinary",
            Arc::new(LargeBinaryArray::from(vec![b"A".as_slice()])),
        ),
        (
            "BinaryView",
            Arc::new(BinaryViewArray::from(vec![b"A".as_slice()])),
        ),
    ]
}

/// Whether reading `One<T>` from the column fails with a mismatch (as opposed to succeeding,
/// or failing on the value: "A" is no date, but a VARCHAR column may hold dates).
fn mismatches<T: DeserializeOwned>(array: &ArrayRef) -> bool {
    let columns = vec![Column::new(array).expect("a known type")];
    match One::<T>::deserialize(RowDeserializer {
        columns: &columns,
        row: 0,
    }) {
        Ok(_) => false,
        Err(DeError(kind)) => matches!(*kind, DeErrorKind::Mismatch { .. }),
    }
}

/// The check before reading (`accepts`) and the deserializer agree for every pair of column
/// type and field type.
fn agree<T: DeserializeOwned>(checked: &mut usize) {
    let shape = RowShape::of::<One<T>>().expect("a struct");
    let want = shape.fields[0].want;
    for (name, array) in columns() {
        let kind = Kind::of(array.data_type());
        assert_eq!(
            accepts(kind, want),
            !mismatches::<T>(&array),
            "column {name}, field {}",
            std::any::type_name::<T>()
        );
        *checked += 1;
    }
}

#[test]
fn the_conversion_table_is_what_the_deserializer_does() {
    let mut checked = 0;
    agree::<bool>(&mut checked);
    agree::<i8>(&mut checked);
    agree::<i16>(&mut checked);
    agree::<i32>(&mut checked);
    agree::<i64>(&mut checked);
    agree::<i128>(&mut checked);
    agree::<u8>(&mut checked);
    agree::<u16>(&mut checked);
    agree::<u32>(&mut checked);
    agree::<u64>(&mut checked);
    agree::<u128>(&mut checked);
    agree::<f32>(&mut checked);
    agree::<f64>(&mut checked);
    agree::<char>(&mut checked);
    agree::<String>(&mut checked);
    agree::<Date>(&mut checked);
    agree::<Decimal>(&mut checked);
    agree::<Flag>(&mut checked);
    agree::<Vec<i32>>(&mut checked);
    agree::<BTreeMap<String, i32>>(&mut checked);
    agree::<()>(&mut checked);
    agree::<Option<f64>>(&mut checked);
    agree::<Option<Date>>(&mut checked);
    assert_eq!(checked, 23 * columns().len());
}

#[test]
fn the_table_admits_the_mappings_of_the_brief() {
    let date = Kind::Date;
    let double = Kind::F64;
    let decimal = Kind::Decimal { scale: 2 };
    let varchar = Kind::Str;
    for (kind, want) in [
        (Kind::Int, Want::I32),
        (Kind::Int, Want::I64),
        (Kind::Int, Want::U32),
        (Kind::Int, Want::U64),
        (double, Want::F64),
        (decimal, Want::F64),
        (decimal, Want::Decimal),
        (date, Want::Date),
        (date, Want::String),
        (varchar, Want::String),
        (varchar, Want::Char),
    ] {
        assert!(accepts(kind, want), "{kind:?} into {want}");
    }
    for (kind, want) in [
        (date, Want::F64),
        (double, Want::Decimal),
        (decimal, Want::I64),
        (varchar, Want::F64),
    ] {
        assert!(!accepts(kind, want), "{kind:?} into {want}");
    }
}

#[test]
fn nulls_are_none_or_errors() {
    let array: ArrayRef = Arc::new(Int32Array::from(vec![Some(1), None]));
    let columns = vec![Column::new(&array).expect("known")];
    let row = |row| RowDeserializer {
        columns: &columns,
        row,
    };
    assert_eq!(
        One::<Option<i32>>::deserialize(row(0)).map(|o| o.v).ok(),
        Some(Some(1))
    );
    assert_eq!(
        One::<Option<i32>>::deserialize(row(1)).map(|o| o.v).ok(),
        Some(None)
    );
    let error = One::<i32>::deserialize(row(1)).expect_err("null");
    assert_eq!(
        *error.0,
        DeErrorKind::Null {
            field: 0,
            want: Want::I32
        }
    );
}

// Measurements: the per-row cost of the deserializer alone, on a decoded batch held in cache
// (`cargo test --release --lib operators::parquet::de::tests::q1_row_cost -- --ignored
// --nocapture`; likewise `q3_row_cost`). `ROW_COST_ROUNDS` sets the passes over the batch (fewer
// for callgrind, which counts instructions exactly where timings on a shared machine wander),
// `ROW_COST_ONLY` picks the row types whose label contains it.

#[derive(Deserialize)]
struct Q1 {
    l_quantity: f64,
    l_extendedprice: f64,
    l_discount: f64,
    l_tax: f64,
    l_returnflag: String,
    l_linestatus: String,
    l_shipdate: Date,
}

#[derive(Deserialize)]
struct Q1Char {
    l_quantity: f64,
    l_extendedprice: f64,
    l_discount: f64,
    l_tax: f64,
    l_returnflag: char,
    l_linestatus: char,
    l_shipdate: Date,
}

#[derive(Deserialize)]
struct Q3 {
    l_orderkey: i64,
    l_extendedprice: f64,
    l_discount: f64,
    l_shipdate: Date,
}

/// What a consumer does with a row: read every field (which also keeps the compiler from
/// skipping the work).
trait Touch {
    fn touch(&self) -> f64;
}

impl Touch for Q1 {
    fn touch(&self) -> f64 {
        self.l_quantity
            + self.l_extendedprice
            + self.l_discount
            + self.l_tax
            + (self.l_returnflag.len() + self.l_linestatus.len()) as f64
            + f64::from(self.l_shipdate.days_since_epoch())
    }
}

impl Touch for Q1Char {
    fn touch(&self) -> f64 {
        self.l_quantity
            + self.l_extendedprice
            + self.l_discount
            + self.l_tax
            + f64::from(u32::from(self.l_returnflag) + u32::from(self.l_linestatus))
            + f64::from(self.l_shipdate.days_since_epoch())
    }
}

impl Touch for Q3 {
    fn touch(&self) -> f64 {
        self.l_orderkey as f64
            + self.l_extendedprice
            + self.l_discount
            + f64::from(self.l_shipdate.days_since_epoch())
    }
}

/// Deserializes the `rows` rows of `columns` as `T`, `ROW_COST_ROUNDS` (or `rounds`) times, and
/// prints the time per row.
#[allow(clippy::ptr_arg)] // a `RowDeserializer` holds a `&Vec`: one word, not two
fn row_cost<T: DeserializeOwned + Touch>(
    label: &str,
    columns: &Vec<Column>,
    rows: usize,
    rounds: usize,
) {
    if !label.contains(std::env::var("ROW_COST_ONLY").unwrap_or_default().as_str()) {
        return;
    }
    let rounds = std::env::var("ROW_COST_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(rounds);
    #[allow(clippy::disallowed_methods)] // a measurement of real time
    let start = Instant::now();
    let mut sum = 0.0;
    for _ in 0..rounds {
        for row in 0..rows {
            let value = T::deserialize(RowDeserializer { columns, row }).expect("fits");
            sum += value.touch();
        }
    }
    black_box(sum);
    let ns = start.elapsed().as_nanos() as f64 / (rounds * rows).max(1) as f64;
    println!("{label}: {ns:.2} ns per row");
}

#[test]
#[ignore = "a measurement, not a test"]
fn q3_row_cost() {
    let n = 8192;
    let arrays: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(0..n as i64)),
        Arc::new(
            Decimal64Array::from_iter_values((0..n as i64).map(|i| i * 7))
                .with_precision_and_scale(15, 2)
                .expect("valid"),
        ),
        Arc::new(
            Decimal64Array::from_iter_values((0..n as i64).map(|i| i % 11))
                .with_precision_and_scale(15, 2)
                .expect("valid"),
        ),
        Arc::new(Date32Array::from_iter_values(
            (0..n as i32).map(|i| 8000 + i % 2000),
        )),
    ];
    let columns: Vec<Column> = arrays
        .iter()
        .map(|a| Column::new(a).expect("known type"))
        .collect();
    row_cost::<Q3>("Q3", &columns, n, 2000);
}

fn q1_columns(n: usize) -> Vec<Column> {
    let price = |f: fn(i64) -> i64| -> ArrayRef {
        Arc::new(
            Decimal64Array::from_iter_values((0..n as i64).map(f))
                .with_precision_and_scale(15, 2)
                .expect("valid"),
        )
    };
    let flags = |letters: &'static [&'static str]| -> ArrayRef {
        Arc::new(StringViewArray::from_iter_values(
            (0..n).map(|i| letters[i % letters.len()]),
        ))
    };
    let arrays: Vec<ArrayRef> = vec![
        price(|i| (i % 50 + 1) * 100),
        price(|i| i * 7 + 90_000),
        price(|i| i % 11),
        price(|i| i % 9),
        flags(&["A", "N", "R", "N"]),
        flags(&["F", "O"]),
        Arc::new(Date32Array::from_iter_values(
            (0..n as i32).map(|i| 8000 + i % 2000),
        )),
    ];
    arrays
        .iter()
        .map(|a| Column::new(a).expect("known type"))
        .collect()
}

#[test]
#[ignore = "a measurement, not a test"]
fn q1_row_cost() {
    let n = 8192;
    let columns = q1_columns(n);
    row_cost::<Q1>("Q1 (String flags)", &columns, n, 500);
    row_cost::<Q1Char>("Q1 (char flags)", &columns, n, 500);
}
