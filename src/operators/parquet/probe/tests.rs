use serde::Deserialize;

use super::*;
use crate::operators::types::{Date, Decimal};

#[derive(Deserialize)]
#[allow(dead_code)]
struct Price(f64);

#[derive(Deserialize)]
#[allow(dead_code)]
struct Row {
    id: i64,
    #[serde(rename = "l_price")]
    price: Price,
    shipped: Option<Date>,
    #[serde(skip)]
    cached: u32,
    #[serde(default)]
    total: Option<Decimal>,
    flag: char,
    name: String,
}

#[test]
fn fields_come_with_names_types_and_optionality() {
    let shape = RowShape::of::<Row>().expect("a struct");
    assert_eq!(shape.type_name, "Row");
    let fields: Vec<(&str, String)> = shape
        .fields
        .iter()
        .map(|f| (f.name, f.type_display()))
        .collect();
    assert_eq!(
        fields,
        [
            ("id", "i64".to_owned()),
            ("l_price", "f64".to_owned()),
            ("shipped", "Option<Date>".to_owned()),
            ("total", "Option<Decimal>".to_owned()),
            ("flag", "char".to_owned()),
            ("name", "String".to_owned()),
        ],
        "renamed as the column, skipped fields left out, newtypes seen through"
    );
}

#[test]
fn a_field_the_probe_cannot_pass_leaves_the_rest_unknown() {
    /// Refuses every value, so the probe stops here.
    struct Picky;
    impl<'de> Deserialize<'de> for Picky {
        fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Picky, D::Error> {
            let _ = u16::deserialize(d)?;
            Err(de::Error::custom("never"))
        }
    }
    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Row {
        a: f64,
        b: Picky,
        c: String,
    }
    let shape = RowShape::of::<Row>().expect("still a struct");
    let wants: Vec<Want> = shape.fields.iter().map(|f| f.want).collect();
    assert_eq!(wants, [Want::F64, Want::U16, Want::Unknown]);
}
