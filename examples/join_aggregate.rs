//! Join and aggregate typed records: customers and their orders, revenue per country and the
//! best customers.
//!
//! ```text
//! cargo run --release --example join_aggregate -- [ORDERS [CUSTOMERS]] [--parallelism N]
//! cargo run --release --example join_aggregate -- 1000000 5000
//! ```
//!
//! The data is generated, deterministically, from ORDERS (default 100000) and CUSTOMERS
//! (default 1000): customer `i` lives in `COUNTRIES[mix(i) % 8]`, order `j` belongs to customer
//! `mix(j) % CUSTOMERS` and is worth `100 + mix(j) / CUSTOMERS % 100000` cents (see [`mix`]).
//! The program prints the revenue of every country, largest first, and the five customers who
//! spent most. Numbers come first: an invocation whose first argument starts with `-` is read as
//! one of the binary's cluster subcommands (`join_aggregate join_aggregate --parallelism 2`
//! names the program explicitly).
//!
//! On a process cluster started from this binary (see examples/wordcount_typed.rs):
//!
//! ```text
//! target/release/examples/join_aggregate jobmanager --rest 127.0.0.1:8081 --pool-size 2 --slots 2 &
//! target/release/examples/join_aggregate 1000000 5000 --jobmanager http://127.0.0.1:8081
//! ```

// jemalloc with small thread caches, as the flint binary (see flint::process::allocator).
flint::global_allocator!();

use std::cmp::Reverse;
use std::process::ExitCode;

use flint::api::{Env, Order, Program, ProgramError, Programs};
use serde::{Deserialize, Serialize};

const USAGE: &str =
    "usage: join_aggregate [ORDERS [CUSTOMERS]] [--parallelism N] [--jobmanager URL]";

const COUNTRIES: [&str; 8] = [
    "Argentina",
    "Brazil",
    "Canada",
    "Denmark",
    "Egypt",
    "France",
    "Germany",
    "Japan",
];

/// A customer. Records are plain serde structs.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Customer {
    id: u64,
    name: String,
    country: String,
}

/// An order of a customer, its amount in cents (integers add up exactly).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct OrderLine {
    id: u64,
    customer: u64,
    cents: u64,
}

/// What an order contributes once joined with its customer.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Sale {
    customer: u64,
    name: String,
    country: String,
    cents: u64,
}

/// A country's total: the accumulator of `aggregate`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Revenue {
    orders: u64,
    cents: u64,
}

/// A fixed mixing function (splitmix64's finalizer): the same "random" data on every run and
/// every machine. The program must build the same plan wherever it runs, so no real randomness.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn customer(id: u64) -> Customer {
    Customer {
        id,
        name: format!("customer-{id}"),
        country: COUNTRIES[(mix(id) % COUNTRIES.len() as u64) as usize].to_owned(),
    }
}

fn order(id: u64, customers: u64) -> OrderLine {
    let m = mix(id);
    OrderLine {
        id,
        customer: m % customers,
        cents: 100 + m / customers % 100_000,
    }
}

/// `12345` cents as `123.45`.
fn money(cents: u64) -> String {
    format!("{}.{:02}", cents / 100, cents % 100)
}

fn join_aggregate(env: &Env) -> Result<(), ProgramError> {
    let usage = |message: &str| ProgramError::Usage(format!("{message}\n{USAGE}"));
    let mut args = env.args().into_iter();
    let mut numbers = Vec::new();
    while let Some(arg) = args.next() {
        if arg == "--parallelism" {
            let p = args.next().and_then(|p| p.parse::<u32>().ok());
            env.set_parallelism(
                p.filter(|p| *p > 0)
                    .ok_or_else(|| usage("--parallelism needs a positive number"))?,
            );
        } else {
            let n = arg.parse::<u64>().ok().filter(|n| *n > 0);
            numbers.push(n.ok_or_else(|| usage(&format!("`{arg}` is not a positive number")))?);
        }
    }
    let (orders, customers) = match numbers[..] {
        [] => (100_000, 1_000),
        [orders] => (orders, 1_000),
        [orders, customers] => (orders, customers),
        _ => return Err(usage("too many arguments")),
    };

    // Sources. The customers are few: a collection made here, shipped with the plan and spread
    // over the source's subtasks. The orders are many: each subtask of a parallel generator
    // makes its own share (subtask `s` of `p` makes the orders `s`, `s + p`, `s + 2p`, ...), so
    // nothing large is built on the client.
    let customer_table = env
        .from_collection((0..customers).map(customer).collect())
        .name("customers");
    let order_table = env
        .generate(move |subtask, parallelism| {
            (u64::from(subtask)..orders)
                .step_by(parallelism as usize)
                .map(move |id| order(id, customers))
        })
        .name("orders");

    // An inner join on the customer id: both sides are hash-partitioned by the key; the right
    // side is built into a hash table (spilling past its managed memory) and the left probes it.
    // Put the larger side left. (For a small right side, `.broadcast_right()` sends all of it to
    // every subtask instead and the left side is not shuffled.)
    let sales = order_table
        .join(
            &customer_table,
            |o: &OrderLine| o.customer,
            |c: &Customer| c.id,
        )
        .inner(|o, c| Sale {
            customer: c.id,
            name: c.name,
            country: c.country,
            cents: o.cents,
        });

    // Revenue per country: `aggregate` folds each country's sales into a `Revenue`. `add` is
    // applied before the exchange too (a combiner: each subtask sends one partial `Revenue` per
    // country) and `merge` adds the partial ones up after it.
    let per_country = sales
        .key_by(|s: &Sale| s.country.clone())
        .aggregate(
            Revenue::default,
            |r, s| {
                r.orders += 1;
                r.cents += s.cents;
            },
            |r, other| {
                r.orders += other.orders;
                r.cents += other.cents;
            },
        )
        // All of them (a handful) sorted in one partition, largest revenue first. A large
        // dataset would use `sort_by`, a range-partitioned parallel sort.
        .sort_all(
            |(country, r): &(String, Revenue)| (Reverse(r.cents), country.clone()),
            Order::Ascending,
        )
        .collect();

    // The five best customers: `reduce` sums each customer's sales (it must be associative: it
    // runs as a combiner too), `top_k` keeps the five largest (ties: the smaller id).
    let best = sales
        .key_by(|s: &Sale| s.customer)
        .reduce(|a, b| Sale {
            cents: a.cents + b.cents,
            ..a
        })
        .top_k(
            5,
            |s: &Sale| (Reverse(s.cents), s.customer),
            Order::Ascending,
        )
        .collect();

    let result = env.execute("join and aggregate")?;
    // Reached only on the client (TaskManagers rebuilding the plan stop at `execute`).
    if env.on_client() {
        println!("revenue per country ({orders} orders of {customers} customers):");
        println!("country\torders\trevenue");
        for (country, r) in result.get(&per_country)? {
            println!("{country}\t{}\t{}", r.orders, money(r.cents));
        }
        println!("best customers:");
        println!("customer\tcountry\trevenue");
        for s in result.get(&best)? {
            println!("{}\t{}\t{}", s.name, s.country, money(s.cents));
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let program = Program::new("join_aggregate", join_aggregate)
        .about("revenue per country of generated customers and orders");
    flint::cli::main_with_default(Programs::new().with(program), Some("join_aggregate"))
}
