//! Where the TPC-H tables come from: Parquet files (`--data DIR`, one `TABLE.parquet` per
//! table, as tpchgen-cli and DuckDB write them) or generated inside the source subtasks with
//! the `tpchgen` crate (`--sf N`: subtask `i` of `p` generates part `i` of `p` of the table,
//! dbgen's own rows).
//!
//! A query reads a table through a row type of just the columns it uses: from Parquet only
//! those columns are decoded (the struct's field names are the projection).

use std::path::PathBuf;

use flint::api::{Data, DataSet, Env};
use flint::operators::types::Date;
use tpchgen::generators as g;

/// Where the tables come from.
#[derive(Debug, Clone)]
pub enum Input {
    /// A directory of `TABLE.parquet` files.
    Parquet(PathBuf),
    /// Generated at this scale factor.
    Generated(f64),
}

/// The tables of one run.
pub struct Tables<'a> {
    pub env: &'a Env,
    pub input: Input,
}

/// A decimal of tpchgen (hundredths) as the `f64` a DOUBLE column holds.
pub fn dec(d: tpchgen::decimal::TPCHDecimal) -> f64 {
    d.0 as f64 / 100.0
}

/// A date of tpchgen.
pub fn date(d: tpchgen::dates::TPCHDate) -> Date {
    Date::from_days_since_epoch(d.to_unix_epoch())
}

/// `"<prefix>#<key:09>"`: c_name, s_name.
pub fn padded(prefix: &str, key: i64) -> String {
    format!("{prefix}#{key:09}")
}

/// tpchgen's parts are numbered from 1.
fn part(subtask: u32, parallelism: u32) -> (i32, i32) {
    (subtask as i32 + 1, parallelism.max(1) as i32)
}

macro_rules! table {
    ($method:ident, $file:literal, $generator:ident, $row:ident) => {
        /// The table, as `T` (its fields: the columns read), with `project` making a `T` of a
        /// generated row.
        pub fn $method<T: Data>(&self, project: fn(&g::$row<'_>) -> T) -> DataSet<T> {
            match &self.input {
                Input::Parquet(dir) => self.env.read_parquet::<T>(dir.join($file)),
                Input::Generated(sf) => {
                    let sf = *sf;
                    self.env.generate(move |subtask, parallelism| {
                        let (p, n) = part(subtask, parallelism);
                        g::$generator::new(sf, p, n)
                            .into_iter()
                            .map(move |row| project(&row))
                    })
                }
            }
            .name($file)
        }
    };
}

macro_rules! small_table {
    ($method:ident, $file:literal, $generator:ident, $row:ident) => {
        /// The (fixed-size) table, as `T`; generated only by the first source subtask.
        pub fn $method<T: Data>(&self, project: fn(&g::$row<'_>) -> T) -> DataSet<T> {
            match &self.input {
                Input::Parquet(dir) => self.env.read_parquet::<T>(dir.join($file)),
                Input::Generated(sf) => {
                    let sf = *sf;
                    self.env.generate(move |subtask, _| {
                        g::$generator::new(sf, 1, 1)
                            .into_iter()
                            .take(if subtask == 0 { usize::MAX } else { 0 })
                            .map(move |row| project(&row))
                    })
                }
            }
            .name($file)
        }
    };
}

impl Tables<'_> {
    table!(lineitem, "lineitem.parquet", LineItemGenerator, LineItem);
    table!(orders, "orders.parquet", OrderGenerator, Order);
    table!(customer, "customer.parquet", CustomerGenerator, Customer);
    small_table!(nation, "nation.parquet", NationGenerator, Nation);
    small_table!(region, "region.parquet", RegionGenerator, Region);

    /// The supplier table (its generator's rows hold no borrowed text).
    pub fn supplier<T: Data>(&self, project: fn(&g::Supplier) -> T) -> DataSet<T> {
        match &self.input {
            Input::Parquet(dir) => self.env.read_parquet::<T>(dir.join("supplier.parquet")),
            Input::Generated(sf) => {
                let sf = *sf;
                self.env.generate(move |subtask, parallelism| {
                    let (p, n) = part(subtask, parallelism);
                    g::SupplierGenerator::new(sf, p, n)
                        .into_iter()
                        .map(move |row| project(&row))
                })
            }
        }
        .name("supplier.parquet")
    }
}
