//! Value types for the fields of users' serde rows, beyond Rust's own: [`Date`] (a calendar
//! date) and [`Decimal`] (an exact fixed-point number), as TPC-H's tables and SQL engines have
//! them. The Parquet source ([`super::parquet`]) fills them from DATE and DECIMAL columns.
//!
//! **`Date`** is a newtype over `i32`, days since 1970-01-01 (Parquet's DATE), and not
//! `chrono::NaiveDate`: rows cross the network encoded by [`crate::base::codec`], where an `i32`
//! costs 1–5 bytes (2–3 for any TPC-H date) and a formatted date 11; comparisons and `+ days` are
//! integer operations; and what dataflow programs do with dates (compare, bucket by year, print)
//! needs no calendar crate.
//!
//! **`Decimal`** is an `i128` unscaled value and a `u8` scale: Parquet DECIMAL goes up to
//! precision 38, which is what fits an `i128` (an `i64` would cover TPC-H's DECIMAL(15,2) but
//! silently not other files). The scale travels with the value because one program may read
//! columns of different scales, and printing needs it. Arithmetic is left to the user
//! (`unscaled()` is an exact integer); most programs sum unscaled values of one column or
//! convert to `f64`.
//!
//! **Serde form.** Human-readable formats (JSON, TOML) see the text, `"1998-09-02"` and
//! `"123.45"`. Binary formats (the codec, the Parquet row deserializer) see a newtype struct of
//! the day number, and a tuple struct `(unscaled, scale)` (two varints in the codec: 6 bytes for
//! a TPC-H price like 90827.50), so a DATE or DECIMAL column becomes a value without any
//! formatting or parsing.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::{SerializeTupleStruct, Serializer};
use serde::{Deserialize, Serialize};

/// The serde name of [`Date`]. Binary formats ignore it; the Parquet source's row deserializer
/// recognises it to fill a `Date` from a DATE column, or parse one from a VARCHAR column. The `$`
/// keeps it from clashing with a user type's name.
pub(crate) const DATE_TOKEN: &str = "$flint::Date";

/// A calendar date (proleptic Gregorian), stored as days since 1970-01-01 like Parquet's DATE.
///
/// `Display` and `FromStr` use `YYYY-MM-DD`; years outside 0..=9999 print with their sign.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Date(i32);

impl Date {
    /// 1970-01-01.
    pub const EPOCH: Date = Date(0);

    /// The date `days` days after 1970-01-01 (before it when negative).
    pub const fn from_days_since_epoch(days: i32) -> Date {
        Date(days)
    }

    /// Days since 1970-01-01: the value Parquet stores.
    pub const fn days_since_epoch(self) -> i32 {
        self.0
    }

    /// The date of a year, month (1–12) and day (1–31), or `None` when it does not exist
    /// (2023-02-29) or lies outside the `i32` day range.
    ///
    /// `const`, so a query's constants are dates:
    /// `const CUTOFF: Option<Date> = Date::from_ymd(1998, 12, 1);`.
    pub const fn from_ymd(year: i32, month: u32, day: u32) -> Option<Date> {
        if month < 1 || month > 12 || day == 0 || day > days_in_month(year, month) {
            return None;
        }
        let days = days_from_civil(year as i64, month, day);
        if days < i32::MIN as i64 || days > i32::MAX as i64 {
            return None;
        }
        // Proof of the cast: the check above keeps `days` within the i32 range.
        Some(Date(days as i32))
    }

    /// `(year, month, day)` of this date.
    pub const fn ymd(self) -> (i32, u32, u32) {
        let (year, month, day) = civil_from_days(self.0 as i64);
        // Proof: |days| < 2^31 spans fewer than 6 million years, so the year fits an i32.
        (year as i32, month, day)
    }

    /// The year of this date (what TPC-H queries group by).
    pub const fn year(self) -> i32 {
        self.ymd().0
    }

    /// This date moved by `days` (negative: earlier), or `None` past the `i32` range.
    pub const fn checked_add_days(self, days: i32) -> Option<Date> {
        match self.0.checked_add(days) {
            Some(moved) => Some(Date(moved)),
            None => None,
        }
    }
}

const fn is_leap_year(year: i32) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

const fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        2 if is_leap_year(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a civil date: Howard Hinnant's `days_from_civil`, exact for all
/// inputs (no floating point, no tables), in i64 so no intermediate can overflow.
const fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400); // [0, 399]
    let m = month as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day as i64 - 1; // [0, 365]
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy; // [0, 146096]
    era * 146_097 + doe - 719_468
}

/// The inverse of [`days_from_civil`] (Hinnant's `civil_from_days`).
const fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11]
    let day = doy - (153 * mp + 2) / 5 + 1; // [1, 31]
    let month = if mp < 10 { mp + 3 } else { mp - 9 }; // [1, 12]
    let year = yoe + era * 400 + (month <= 2) as i64;
    // Proof: the comments above bound day to 1..=31 and month to 1..=12.
    (year, month as u32, day as u32)
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (year, month, day) = self.ymd();
        if (0..=9999).contains(&year) {
            write!(f, "{year:04}-{month:02}-{day:02}")
        } else {
            // At least four digits after the sign, so that the string parses back.
            write!(f, "{year:+05}-{month:02}-{day:02}")
        }
    }
}

impl fmt::Debug for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Why a string is not a date; the message quotes the string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a date of the form YYYY-MM-DD")]
pub struct ParseDateError {
    input: String,
}

impl FromStr for Date {
    type Err = ParseDateError;

    /// Parses `YYYY-MM-DD` (a sign before the year is allowed for years outside 0..=9999).
    fn from_str(s: &str) -> Result<Date, ParseDateError> {
        let error = || ParseDateError {
            input: s.to_owned(),
        };
        let (sign, unsigned) = match s.as_bytes().first() {
            Some(b'-') => (-1, &s[1..]),
            Some(b'+') => (1, &s[1..]),
            _ => (1, s),
        };
        let mut parts = unsigned.splitn(3, '-');
        let (Some(y), Some(m), Some(d)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(error());
        };
        let digits = |part: &str, len: std::ops::RangeInclusive<usize>| {
            len.contains(&part.len()) && part.bytes().all(|b| b.is_ascii_digit())
        };
        if !digits(y, 4..=7) || !digits(m, 2..=2) || !digits(d, 2..=2) {
            return Err(error());
        }
        // The digit checks above leave only in-range decimal numbers to parse.
        let year: i32 = y.parse().map_err(|_| error())?;
        let month: u32 = m.parse().map_err(|_| error())?;
        let day: u32 = d.parse().map_err(|_| error())?;
        Date::from_ymd(sign * year, month, day).ok_or_else(error)
    }
}

impl Serialize for Date {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            serializer.collect_str(self)
        } else {
            serializer.serialize_newtype_struct(DATE_TOKEN, &self.0)
        }
    }
}

impl<'de> Deserialize<'de> for Date {
    #[inline]
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Date, D::Error> {
        if deserializer.is_human_readable() {
            deserializer.deserialize_str(DateVisitor)
        } else {
            deserializer.deserialize_newtype_struct(DATE_TOKEN, DateVisitor)
        }
    }
}

/// Accepts a day number (binary formats, DATE columns) or a `YYYY-MM-DD` string (JSON,
/// VARCHAR columns).
struct DateVisitor;

impl<'de> Visitor<'de> for DateVisitor {
    type Value = Date;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a date (days since 1970-01-01 or a YYYY-MM-DD string)")
    }

    #[inline]
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Date, D::Error> {
        i32::deserialize(d).map(Date)
    }

    #[inline]
    fn visit_i32<E: de::Error>(self, days: i32) -> Result<Date, E> {
        Ok(Date(days))
    }

    fn visit_i64<E: de::Error>(self, days: i64) -> Result<Date, E> {
        i32::try_from(days)
            .map(Date)
            .map_err(|_| E::invalid_value(de::Unexpected::Signed(days), &self))
    }

    fn visit_u64<E: de::Error>(self, days: u64) -> Result<Date, E> {
        i32::try_from(days)
            .map(Date)
            .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(days), &self))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Date, E> {
        s.parse().map_err(E::custom)
    }
}

/// The serde name of [`Decimal`]; the Parquet source's row deserializer only hands a DECIMAL
/// column's parts to a tuple struct of this name, so a user's own two-field tuple struct is not
/// filled by accident.
pub(crate) const DECIMAL_TOKEN: &str = "$flint::Decimal";

/// The largest scale a Parquet DECIMAL can have (its precision is at most 38).
pub const MAX_SCALE: u8 = 38;

/// An exact decimal number: `unscaled / 10^scale`.
///
/// Equality and hashing are on the representation: `1.0` (scale 1) and `1.00` (scale 2) differ,
/// as in a Parquet column, where every value of a column has the column's scale.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Decimal {
    unscaled: i128,
    scale: u8,
}

impl Decimal {
    /// `unscaled / 10^scale`, or `None` when `scale` exceeds [`MAX_SCALE`].
    pub const fn new(unscaled: i128, scale: u8) -> Option<Decimal> {
        if scale > MAX_SCALE {
            None
        } else {
            Some(Decimal { unscaled, scale })
        }
    }

    /// The integer the column stores: the value times `10^scale`.
    pub const fn unscaled(self) -> i128 {
        self.unscaled
    }

    /// Digits after the decimal point.
    pub const fn scale(self) -> u8 {
        self.scale
    }

    /// The nearest `f64` (exact division of two exactly representable numbers when the unscaled
    /// value is below 2^53, so `12.34` becomes the same `f64` as the literal `12.34`).
    pub fn to_f64(self) -> f64 {
        // Proof of the index: `scale <= MAX_SCALE` holds for every Decimal, and the table has
        // MAX_SCALE + 1 entries.
        scaled_f64(self.unscaled, POW10_F64[self.scale as usize])
    }
}

/// `10^scale` as `f64` for every legal scale: exact up to 10^22, correctly rounded beyond.
pub(crate) const POW10_F64: [f64; MAX_SCALE as usize + 1] = {
    let mut table = [1.0; MAX_SCALE as usize + 1];
    let mut i = 1;
    while i < table.len() {
        table[i] = table[i - 1] * 10.0;
        i += 1;
    }
    table
};

/// `unscaled / divisor` (a power of ten from [`POW10_F64`]) as the nearest `f64`: what
/// [`Decimal::to_f64`] gives, and what the Parquet source gives a DECIMAL column read into `f64`
/// (with the divisor looked up once per batch).
#[inline(always)]
pub(crate) fn scaled_f64(unscaled: i128, divisor: f64) -> f64 {
    match i64::try_from(unscaled) {
        // `i64 as f64` is one instruction, `i128 as f64` a library call; both round to nearest.
        Ok(small) => small as f64 / divisor,
        Err(_) => unscaled as f64 / divisor,
    }
}

impl fmt::Display for Decimal {
    /// Prints all `scale` digits after the point: `DECIMAL(15,2)` 5 prints as `0.05`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digits = self.unscaled.unsigned_abs().to_string();
        let scale = usize::from(self.scale);
        let sign = if self.unscaled < 0 { "-" } else { "" };
        if scale == 0 {
            return write!(f, "{sign}{digits}");
        }
        let padded = format!("{digits:0>width$}", width = scale + 1);
        let (int, frac) = padded.split_at(padded.len() - scale);
        write!(f, "{sign}{int}.{frac}")
    }
}

impl fmt::Debug for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Why a string is not a decimal number; the message quotes the string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{input:?} is not a decimal number (digits with an optional sign and point, at most 38 after it)"
)]
pub struct ParseDecimalError {
    input: String,
}

impl FromStr for Decimal {
    type Err = ParseDecimalError;

    /// Parses `-123.45`; the scale is the number of digits after the point.
    fn from_str(s: &str) -> Result<Decimal, ParseDecimalError> {
        let error = || ParseDecimalError {
            input: s.to_owned(),
        };
        let (negative, unsigned) = match s.as_bytes().first() {
            Some(b'-') => (true, &s[1..]),
            Some(b'+') => (false, &s[1..]),
            _ => (false, s),
        };
        let (int, frac) = unsigned.split_once('.').unwrap_or((unsigned, ""));
        let all_digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
        if int.is_empty() && frac.is_empty() || !all_digits(int) || !all_digits(frac) {
            return Err(error());
        }
        let scale = u8::try_from(frac.len()).map_err(|_| error())?;
        // Accumulated as a negative number, whose range includes i128::MIN.
        let mut negated: i128 = 0;
        for b in int.bytes().chain(frac.bytes()) {
            negated = negated
                .checked_mul(10)
                .and_then(|v| v.checked_sub(i128::from(b - b'0')))
                .ok_or_else(error)?;
        }
        let unscaled = if negative {
            negated
        } else {
            negated.checked_neg().ok_or_else(error)?
        };
        Decimal::new(unscaled, scale).ok_or_else(error)
    }
}

impl Serialize for Decimal {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            serializer.collect_str(self)
        } else {
            let mut tuple = serializer.serialize_tuple_struct(DECIMAL_TOKEN, 2)?;
            tuple.serialize_field(&self.unscaled)?;
            tuple.serialize_field(&self.scale)?;
            tuple.end()
        }
    }
}

impl<'de> Deserialize<'de> for Decimal {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Decimal, D::Error> {
        if deserializer.is_human_readable() {
            deserializer.deserialize_str(DecimalVisitor)
        } else {
            deserializer.deserialize_tuple_struct(DECIMAL_TOKEN, 2, DecimalVisitor)
        }
    }
}

/// Accepts `(unscaled, scale)` (binary formats, DECIMAL and integer columns) or a string.
struct DecimalVisitor;

impl<'de> Visitor<'de> for DecimalVisitor {
    type Value = Decimal;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a decimal number ((unscaled, scale) or a string like \"12.34\")")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Decimal, A::Error> {
        let unscaled: i128 = seq
            .next_element()?
            .ok_or_else(|| de::Error::invalid_length(0, &self))?;
        let scale: u8 = seq
            .next_element()?
            .ok_or_else(|| de::Error::invalid_length(1, &self))?;
        Decimal::new(unscaled, scale).ok_or_else(|| {
            de::Error::invalid_value(de::Unexpected::Unsigned(u64::from(scale)), &self)
        })
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Decimal, E> {
        s.parse().map_err(E::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::codec;

    // Date.

    #[test]
    fn epoch_and_tpch_dates_print_and_parse() {
        assert_eq!(Date::EPOCH.to_string(), "1970-01-01");
        for (days, text) in [
            (8035, "1992-01-01"),
            (10471, "1998-09-02"),
            (10561, "1998-12-01"),
            (-1, "1969-12-31"),
            (11016, "2000-02-29"),
            (-719_528, "0000-01-01"),
        ] {
            let date = Date::from_days_since_epoch(days);
            assert_eq!(date.to_string(), text);
            assert_eq!(text.parse::<Date>(), Ok(date));
        }
    }

    #[test]
    fn every_day_of_four_centuries_round_trips() {
        // 1900-01-01 .. 2300-01-01 covers every leap-year rule (100 and 400 year ones).
        let start = Date::from_ymd(1900, 1, 1).map(Date::days_since_epoch);
        let start = start.expect("1900-01-01 exists");
        let mut expected = (1900, 1, 1);
        for days in start..start + 146_097 {
            let date = Date::from_days_since_epoch(days);
            assert_eq!(date.ymd(), expected, "day {days}");
            assert_eq!(date.to_string().parse::<Date>(), Ok(date));
            let (y, m, d) = expected;
            expected = if d < days_in_month(y, m) {
                (y, m, d + 1)
            } else if m < 12 {
                (y, m + 1, 1)
            } else {
                (y + 1, 1, 1)
            };
        }
    }

    #[test]
    fn extreme_days_print_with_a_sign_and_parse_back() {
        for days in [i32::MIN, i32::MAX, -719_529] {
            let date = Date::from_days_since_epoch(days);
            let text = date.to_string();
            assert!(text.starts_with('-') || text.starts_with('+'), "{text}");
            assert_eq!(text.parse::<Date>(), Ok(date), "{text}");
        }
    }

    #[test]
    fn malformed_dates_are_rejected_with_the_input() {
        for text in [
            "",
            "1998",
            "1998-09",
            "1998-9-02",
            "1998-13-01",
            "1998-02-29",
            "1998-09-02x",
            "98-09-02",
            "1998/09/02",
            "1998-09-00",
        ] {
            let error = text.parse::<Date>().expect_err(text);
            assert!(error.to_string().contains(&format!("{text:?}")), "{error}");
        }
    }

    #[test]
    fn json_sees_the_date_text() {
        let date: Date = "1998-09-02".parse().expect("a valid date");
        let json = serde_json::to_string(&date).expect("encodes");
        assert_eq!(json, "\"1998-09-02\"");
        assert_eq!(serde_json::from_str::<Date>(&json).expect("decodes"), date);
        assert!(serde_json::from_str::<Date>("\"1998-02-30\"").is_err());
    }

    #[test]
    fn the_codec_stores_the_day_number_compactly() {
        let date: Date = "1998-09-02".parse().expect("a valid date");
        let bytes = codec::encode(&date).expect("encodes");
        assert_eq!(bytes.len(), 3, "a zig-zag varint of 10471, not a string");
        assert_eq!(codec::decode::<Date>(&bytes).expect("decodes"), date);
    }

    #[test]
    fn dates_are_constants_and_compare_as_days() {
        const CUTOFF: Option<Date> = Date::from_ymd(1998, 12, 1);
        const EARLIER: Option<Date> = match CUTOFF {
            Some(date) => date.checked_add_days(-90),
            None => None,
        };
        let (cutoff, earlier) = (CUTOFF.expect("exists"), EARLIER.expect("exists"));
        assert_eq!(earlier.to_string(), "1998-09-02");
        assert!(earlier < cutoff && cutoff > Date::EPOCH);
        assert_eq!(cutoff.year(), 1998);
        assert_eq!(Date::from_ymd(2023, 2, 29), None);
        assert_eq!(Date::from_ymd(1998, 0, 1), None);
        assert_eq!(Date::from_ymd(1998, 13, 1), None);
        assert_eq!(
            Date::from_ymd(i32::MAX, 1, 1),
            None,
            "beyond the i32 day range"
        );
        assert_eq!(
            Date::from_days_since_epoch(i32::MAX).checked_add_days(1),
            None
        );
    }

    // Decimal.

    fn dec(unscaled: i128, scale: u8) -> Decimal {
        Decimal::new(unscaled, scale).expect("scale within 38")
    }

    #[test]
    fn display_keeps_the_scale() {
        for (value, text) in [
            (dec(1234, 2), "12.34"),
            (dec(5, 2), "0.05"),
            (dec(-5, 2), "-0.05"),
            (dec(-1234, 2), "-12.34"),
            (dec(100, 2), "1.00"),
            (dec(0, 2), "0.00"),
            (dec(42, 0), "42"),
            (
                dec(i128::MIN, 38),
                "-1.70141183460469231731687303715884105728",
            ),
        ] {
            assert_eq!(value.to_string(), text);
            assert_eq!(text.parse::<Decimal>(), Ok(value), "{text}");
        }
    }

    #[test]
    fn parse_takes_the_scale_from_the_digits() {
        assert_eq!("12.5".parse::<Decimal>(), Ok(dec(125, 1)));
        assert_eq!(".5".parse::<Decimal>(), Ok(dec(5, 1)));
        assert_eq!("+7.".parse::<Decimal>(), Ok(dec(7, 0)));
        for bad in [
            "",
            ".",
            "-",
            "1.2.3",
            "1e5",
            "abc",
            "1,5",
            "0.000000000000000000000000000000000000001",
        ] {
            let error = bad.parse::<Decimal>().expect_err(bad);
            assert!(error.to_string().contains(&format!("{bad:?}")), "{error}");
        }
    }

    #[test]
    fn to_f64_matches_the_literal() {
        assert_eq!(dec(1234, 2).to_f64(), 12.34);
        assert_eq!(dec(-7, 3).to_f64(), -0.007);
        assert_eq!(dec(9_000_000, 2).to_f64(), 90000.0);
        assert_eq!(Decimal::new(1, 39), None);
    }

    #[test]
    fn json_sees_the_decimal_text() {
        let price = dec(-1234, 2);
        let json = serde_json::to_string(&price).expect("encodes");
        assert_eq!(json, "\"-12.34\"");
        assert_eq!(
            serde_json::from_str::<Decimal>(&json).expect("decodes"),
            price
        );
    }

    #[test]
    fn the_codec_stores_two_varints() {
        let price = dec(9_082_750, 2); // 90827.50, a TPC-H extended price
        let bytes = codec::encode(&price).expect("encodes");
        assert!(bytes.len() <= 6, "{bytes:?}");
        assert_eq!(codec::decode::<Decimal>(&bytes).expect("decodes"), price);
    }
}
