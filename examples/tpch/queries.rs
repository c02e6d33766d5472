//! TPC-H Q1, Q3, Q5, Q6, Q10 and Q18 with the specification's validation parameters, written
//! with Flint's dataflow API only: filters, keyed aggregations, hash and broadcast joins, top-k.
//! Each query declares its job and returns how to turn the job's result into its answer CSV
//! (columns named and ordered as in the specification's answer set).

use flint::api::{Env, JobResult, Order, OrderedF64, ProgramError};
use flint::operators::types::Date;
use serde::{Deserialize, Serialize};

use crate::answer::{Csv, money};
use crate::tables::{Tables, date, dec, padded};

/// Turns a job's result into the query's answer (a CSV with a header).
pub type Answer = Box<dyn FnOnce(&JobResult) -> Result<String, ProgramError>>;

fn day(y: i32, m: u32, d: u32) -> Date {
    Date::from_ymd(y, m, d).expect("a valid calendar date")
}

/// The query called `name` (`Q1`, `q3`, ...).
pub fn declare(name: &str, tables: &Tables<'_>) -> Result<Answer, ProgramError> {
    Ok(match name.to_ascii_uppercase().as_str() {
        "Q1" => q1(tables),
        "Q3" => q3(tables),
        "Q5" => q5(tables),
        "Q6" => q6(tables),
        "Q10" => q10(tables),
        "Q18" => q18(tables),
        other => {
            return Err(ProgramError::Usage(format!(
                "unknown query `{other}`: Q1, Q3, Q5, Q6, Q10 or Q18"
            )));
        }
    })
}

// ---- Q1: pricing summary report ----

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Q1Line {
    l_quantity: f64,
    l_extendedprice: f64,
    l_discount: f64,
    l_tax: f64,
    // One-letter flags as `char`: read without an allocation per row (the key is then a pair
    // of `char`s, copied, not cloned).
    l_returnflag: char,
    l_linestatus: char,
    l_shipdate: Date,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Q1Sums {
    qty: f64,
    base: f64,
    disc_price: f64,
    charge: f64,
    discount: f64,
    count: u64,
}

fn q1(t: &Tables<'_>) -> Answer {
    let cutoff = day(1998, 9, 2);
    let rows = t
        .lineitem(|l| Q1Line {
            l_quantity: l.l_quantity as f64,
            l_extendedprice: dec(l.l_extendedprice),
            l_discount: dec(l.l_discount),
            l_tax: dec(l.l_tax),
            l_returnflag: flag(l.l_returnflag),
            l_linestatus: flag(l.l_linestatus),
            l_shipdate: date(l.l_shipdate),
        })
        .filter(move |l| l.l_shipdate <= cutoff)
        .key_by(|l: &Q1Line| (l.l_returnflag, l.l_linestatus))
        .aggregate(
            Q1Sums::default,
            |s, l| {
                let disc_price = l.l_extendedprice * (1.0 - l.l_discount);
                s.qty += l.l_quantity;
                s.base += l.l_extendedprice;
                s.disc_price += disc_price;
                s.charge += disc_price * (1.0 + l.l_tax);
                s.discount += l.l_discount;
                s.count += 1;
            },
            |s, o| {
                s.qty += o.qty;
                s.base += o.base;
                s.disc_price += o.disc_price;
                s.charge += o.charge;
                s.discount += o.discount;
                s.count += o.count;
            },
        )
        .collect();
    Box::new(move |result| {
        let mut rows = result.get(&rows)?;
        rows.sort_by_key(|a| a.0);
        let mut csv = Csv::new(&[
            "l_returnflag",
            "l_linestatus",
            "sum_qty",
            "sum_base_price",
            "sum_disc_price",
            "sum_charge",
            "avg_qty",
            "avg_price",
            "avg_disc",
            "count_order",
        ]);
        for ((flag, status), s) in rows {
            let n = s.count as f64;
            csv.row(&[
                flag.to_string(),
                status.to_string(),
                money(s.qty),
                money(s.base),
                money(s.disc_price),
                money(s.charge),
                money(s.qty / n),
                money(s.base / n),
                money(s.discount / n),
                s.count.to_string(),
            ]);
        }
        Ok(csv.finish())
    })
}

/// A one-letter flag of a generated row.
fn flag(text: &str) -> char {
    text.chars().next().unwrap_or(' ')
}

// ---- Q3: shipping priority ----

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Q3Customer {
    c_custkey: i64,
    c_mktsegment: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Q3Order {
    o_orderkey: i64,
    o_custkey: i64,
    o_orderdate: Date,
    o_shippriority: i32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Q3Line {
    l_orderkey: i64,
    l_extendedprice: f64,
    l_discount: f64,
    l_shipdate: Date,
}

fn q3(t: &Tables<'_>) -> Answer {
    let cut = day(1995, 3, 15);
    let customers = t
        .customer(|c| Q3Customer {
            c_custkey: c.c_custkey,
            c_mktsegment: c.c_mktsegment.to_owned(),
        })
        .filter(|c| c.c_mktsegment == "BUILDING");
    let orders = t
        .orders(|o| Q3Order {
            o_orderkey: o.o_orderkey,
            o_custkey: o.o_custkey,
            o_orderdate: date(o.o_orderdate),
            o_shippriority: o.o_shippriority,
        })
        .filter(move |o| o.o_orderdate < cut)
        .join(
            &customers,
            |o: &Q3Order| o.o_custkey,
            |c: &Q3Customer| c.c_custkey,
        )
        // One segment's customers (a fifth) go to every subtask; orders stay where they are read.
        .broadcast_right()
        .inner(|o, _| o);
    let rows = t
        .lineitem(|l| Q3Line {
            l_orderkey: l.l_orderkey,
            l_extendedprice: dec(l.l_extendedprice),
            l_discount: dec(l.l_discount),
            l_shipdate: date(l.l_shipdate),
        })
        .filter(move |l| l.l_shipdate > cut)
        .join(
            &orders,
            |l: &Q3Line| l.l_orderkey,
            |o: &Q3Order| o.o_orderkey,
        )
        // The qualifying orders are a tenth of the table: broadcast them rather than shuffle
        // every lineitem row (a plan DuckDB and DataFusion pick themselves).
        .broadcast_right()
        .inner(|l, o| {
            (
                (l.l_orderkey, o.o_orderdate, o.o_shippriority),
                l.l_extendedprice * (1.0 - l.l_discount),
            )
        })
        .key_by(|(key, _): &((i64, Date, i32), f64)| *key)
        .aggregate(
            || 0.0f64,
            |sum, (_, r)| *sum += r,
            |sum, other| *sum += other,
        )
        .top_k(
            10,
            |((_, orderdate, _), revenue): &((i64, Date, i32), f64)| {
                (std::cmp::Reverse(OrderedF64(*revenue)), *orderdate)
            },
            Order::Ascending,
        )
        .collect();
    Box::new(move |result| {
        let mut csv = Csv::new(&["l_orderkey", "revenue", "o_orderdate", "o_shippriority"]);
        for ((orderkey, orderdate, priority), revenue) in result.get(&rows)? {
            csv.row(&[
                orderkey.to_string(),
                money(revenue),
                orderdate.to_string(),
                priority.to_string(),
            ]);
        }
        Ok(csv.finish())
    })
}

// ---- Q5: local supplier volume ----

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Q5Nation {
    n_nationkey: i64,
    n_name: String,
    n_regionkey: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Q5Region {
    r_regionkey: i64,
    r_name: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Q5Supplier {
    s_suppkey: i64,
    s_nationkey: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Q5Customer {
    c_custkey: i64,
    c_nationkey: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Q5Order {
    o_orderkey: i64,
    o_custkey: i64,
    o_orderdate: Date,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Q5Line {
    l_orderkey: i64,
    l_suppkey: i64,
    l_extendedprice: f64,
    l_discount: f64,
}

fn q5(t: &Tables<'_>) -> Answer {
    let (from, to) = (day(1994, 1, 1), day(1995, 1, 1));
    let asia = t
        .region(|r| Q5Region {
            r_regionkey: r.r_regionkey,
            r_name: r.r_name.to_owned(),
        })
        .filter(|r| r.r_name == "ASIA");
    let nations = t
        .nation(|n| Q5Nation {
            n_nationkey: n.n_nationkey,
            n_name: n.n_name.to_owned(),
            n_regionkey: n.n_regionkey,
        })
        .join(
            &asia,
            |n: &Q5Nation| n.n_regionkey,
            |r: &Q5Region| r.r_regionkey,
        )
        .broadcast_right()
        .inner(|n, _| n);
    let suppliers = t
        .supplier(|s| Q5Supplier {
            s_suppkey: s.s_suppkey,
            s_nationkey: s.s_nationkey,
        })
        .join(
            &nations,
            |s: &Q5Supplier| s.s_nationkey,
            |n: &Q5Nation| n.n_nationkey,
        )
        .broadcast_right()
        .inner(|s, n| (s.s_suppkey, s.s_nationkey, n.n_name));
    let customers = t
        .customer(|c| Q5Customer {
            c_custkey: c.c_custkey,
            c_nationkey: c.c_nationkey,
        })
        .join(
            &nations,
            |c: &Q5Customer| c.c_nationkey,
            |n: &Q5Nation| n.n_nationkey,
        )
        .broadcast_right()
        .inner(|c, _| c);
    let orders = t
        .orders(|o| Q5Order {
            o_orderkey: o.o_orderkey,
            o_custkey: o.o_custkey,
            o_orderdate: date(o.o_orderdate),
        })
        .filter(move |o| o.o_orderdate >= from && o.o_orderdate < to)
        .join(
            &customers,
            |o: &Q5Order| o.o_custkey,
            |c: &Q5Customer| c.c_custkey,
        )
        .broadcast_right()
        .inner(|o, c| (o.o_orderkey, c.c_nationkey));
    let rows = t
        .lineitem(|l| Q5Line {
            l_orderkey: l.l_orderkey,
            l_suppkey: l.l_suppkey,
            l_extendedprice: dec(l.l_extendedprice),
            l_discount: dec(l.l_discount),
        })
        .join(&orders, |l: &Q5Line| l.l_orderkey, |(o, _): &(i64, i64)| *o)
        .broadcast_right()
        .inner(|l, (_, nation)| {
            (
                (l.l_suppkey, nation),
                l.l_extendedprice * (1.0 - l.l_discount),
            )
        })
        .join(
            &suppliers,
            |(key, _): &((i64, i64), f64)| *key,
            |(s, nation, _): &(i64, i64, String)| (*s, *nation),
        )
        .broadcast_right()
        .inner(|(_, revenue), (_, _, name)| (name, revenue))
        .key_by(|(name, _): &(String, f64)| name.clone())
        .aggregate(
            || 0.0f64,
            |sum, (_, r)| *sum += r,
            |sum, other| *sum += other,
        )
        .collect();
    Box::new(move |result| {
        let mut rows = result.get(&rows)?;
        rows.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let mut csv = Csv::new(&["n_name", "revenue"]);
        for (name, revenue) in rows {
            csv.row(&[name, money(revenue)]);
        }
        Ok(csv.finish())
    })
}

// ---- Q6: forecasting revenue change ----

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Q6Line {
    l_quantity: f64,
    l_extendedprice: f64,
    l_discount: f64,
    l_shipdate: Date,
}

fn q6(t: &Tables<'_>) -> Answer {
    let (from, to) = (day(1994, 1, 1), day(1995, 1, 1));
    let rows = t
        .lineitem(|l| Q6Line {
            l_quantity: l.l_quantity as f64,
            l_extendedprice: dec(l.l_extendedprice),
            l_discount: dec(l.l_discount),
            l_shipdate: date(l.l_shipdate),
        })
        .filter(move |l| {
            // `between 0.06 - 0.01 and 0.06 + 0.01` in whole hundredths: in f64, 0.06 + 0.01 is
            // below 0.07 and would drop every discount of 0.07. The year first (a seventh of
            // the rows pass it), and rounding by a cast (a discount is never negative; `round`
            // is a libm call).
            l.l_shipdate >= from
                && l.l_shipdate < to
                && l.l_quantity < 24.0
                && (5..=7).contains(&((l.l_discount * 100.0 + 0.5) as i64))
        })
        .key_by(|_: &Q6Line| ())
        .aggregate(
            || 0.0f64,
            |sum, l| *sum += l.l_extendedprice * l.l_discount,
            |sum, other| *sum += other,
        )
        .collect();
    Box::new(move |result| {
        let revenue: f64 = result.get(&rows)?.into_iter().map(|(_, r)| r).sum();
        let mut csv = Csv::new(&["revenue"]);
        csv.row(&[money(revenue)]);
        Ok(csv.finish())
    })
}

// ---- Q10: returned item reporting ----

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Q10Customer {
    c_custkey: i64,
    c_name: String,
    c_address: String,
    c_nationkey: i64,
    c_phone: String,
    c_acctbal: f64,
    c_comment: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Q10Order {
    o_orderkey: i64,
    o_custkey: i64,
    o_orderdate: Date,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Q10Line {
    l_orderkey: i64,
    l_extendedprice: f64,
    l_discount: f64,
    l_returnflag: char,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Q10Nation {
    n_nationkey: i64,
    n_name: String,
}

type Q10Row = (Q10Customer, String, f64);

fn q10(t: &Tables<'_>) -> Answer {
    let (from, to) = (day(1993, 10, 1), day(1994, 1, 1));
    let orders = t
        .orders(|o| Q10Order {
            o_orderkey: o.o_orderkey,
            o_custkey: o.o_custkey,
            o_orderdate: date(o.o_orderdate),
        })
        .filter(move |o| o.o_orderdate >= from && o.o_orderdate < to);
    let revenue = t
        .lineitem(|l| Q10Line {
            l_orderkey: l.l_orderkey,
            l_extendedprice: dec(l.l_extendedprice),
            l_discount: dec(l.l_discount),
            l_returnflag: flag(l.l_returnflag),
        })
        .filter(|l| l.l_returnflag == 'R')
        .join(
            &orders,
            |l: &Q10Line| l.l_orderkey,
            |o: &Q10Order| o.o_orderkey,
        )
        // A quarter's orders: broadcast, the returned lineitem rows stay put.
        .broadcast_right()
        .inner(|l, o| (o.o_custkey, l.l_extendedprice * (1.0 - l.l_discount)))
        .key_by(|(custkey, _): &(i64, f64)| *custkey)
        .aggregate(
            || 0.0f64,
            |sum, (_, r)| *sum += r,
            |sum, other| *sum += other,
        );
    let nations = t.nation(|n| Q10Nation {
        n_nationkey: n.n_nationkey,
        n_name: n.n_name.to_owned(),
    });
    let rows = t
        .customer(|c| Q10Customer {
            c_custkey: c.c_custkey,
            c_name: padded("Customer", c.c_custkey),
            c_address: c.c_address.to_string(),
            c_nationkey: c.c_nationkey,
            c_phone: c.c_phone.to_string(),
            c_acctbal: dec(c.c_acctbal),
            c_comment: c.c_comment.to_owned(),
        })
        .join(
            &revenue,
            |c: &Q10Customer| c.c_custkey,
            |(k, _): &(i64, f64)| *k,
        )
        // The quarter's returning customers (a quarter of them, a key and a sum each) go to
        // every subtask: the customer rows, with their text columns, are not shuffled.
        .broadcast_right()
        .inner(|c, (_, revenue)| (c, revenue))
        .join(
            &nations,
            |(c, _): &(Q10Customer, f64)| c.c_nationkey,
            |n: &Q10Nation| n.n_nationkey,
        )
        .broadcast_right()
        .inner(|(c, revenue), n| (c, n.n_name, revenue))
        .top_k(
            20,
            |(c, _, revenue): &Q10Row| (std::cmp::Reverse(OrderedF64(*revenue)), c.c_custkey),
            Order::Ascending,
        )
        .collect();
    Box::new(move |result| {
        let mut csv = Csv::new(&[
            "c_custkey",
            "c_name",
            "revenue",
            "c_acctbal",
            "n_name",
            "c_address",
            "c_phone",
            "c_comment",
        ]);
        for (c, nation, revenue) in result.get(&rows)? {
            csv.row(&[
                c.c_custkey.to_string(),
                c.c_name,
                money(revenue),
                money(c.c_acctbal),
                nation,
                c.c_address,
                c.c_phone,
                c.c_comment,
            ]);
        }
        Ok(csv.finish())
    })
}

// ---- Q18: large volume customer ----

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Q18Line {
    l_orderkey: i64,
    l_quantity: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Q18Order {
    o_orderkey: i64,
    o_custkey: i64,
    o_orderdate: Date,
    o_totalprice: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Q18Customer {
    c_custkey: i64,
    c_name: String,
}

type Q18Row = (String, i64, i64, Date, f64, f64);

fn q18(t: &Tables<'_>) -> Answer {
    let large = t
        .lineitem(|l| Q18Line {
            l_orderkey: l.l_orderkey,
            l_quantity: l.l_quantity as f64,
        })
        .key_by(|l: &Q18Line| l.l_orderkey)
        .aggregate(
            || 0.0f64,
            |sum, l| *sum += l.l_quantity,
            |sum, other| *sum += other,
        )
        .filter(|(_, quantity)| *quantity > 300.0);
    let orders = t
        .orders(|o| Q18Order {
            o_orderkey: o.o_orderkey,
            o_custkey: o.o_custkey,
            o_orderdate: date(o.o_orderdate),
            o_totalprice: dec(o.o_totalprice),
        })
        .join(
            &large,
            |o: &Q18Order| o.o_orderkey,
            |(k, _): &(i64, f64)| *k,
        )
        .broadcast_right()
        .inner(|o, (_, quantity)| (o, quantity));
    let rows = t
        .customer(|c| Q18Customer {
            c_custkey: c.c_custkey,
            c_name: padded("Customer", c.c_custkey),
        })
        .join(
            &orders,
            |c: &Q18Customer| c.c_custkey,
            |(o, _): &(Q18Order, f64)| o.o_custkey,
        )
        .broadcast_right()
        .inner(|c, (o, quantity)| {
            (
                c.c_name,
                c.c_custkey,
                o.o_orderkey,
                o.o_orderdate,
                o.o_totalprice,
                quantity,
            )
        })
        .top_k(
            100,
            |row: &Q18Row| (std::cmp::Reverse(OrderedF64(row.4)), row.3, row.2),
            Order::Ascending,
        )
        .collect();
    Box::new(move |result| {
        let mut csv = Csv::new(&[
            "c_name",
            "c_custkey",
            "o_orderkey",
            "o_orderdate",
            "o_totalprice",
            "sum(l_quantity)",
        ]);
        for (name, custkey, orderkey, orderdate, totalprice, quantity) in result.get(&rows)? {
            csv.row(&[
                name,
                custkey.to_string(),
                orderkey.to_string(),
                orderdate.to_string(),
                money(totalprice),
                money(quantity),
            ]);
        }
        Ok(csv.finish())
    })
}

/// The environment's declared query, ready to execute (for `main` and the tests).
pub fn run(env: &Env, query: &str, tables: &Tables<'_>) -> Result<String, ProgramError> {
    let answer = declare(query, tables)?;
    let result = env.execute(&format!("TPC-H {}", query.to_ascii_uppercase()))?;
    answer(&result)
}
