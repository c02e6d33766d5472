//! The dataflow examples (`examples/wordcount_typed.rs`, `examples/join_aggregate.rs`,
//! `examples/top_k.rs`) run as a user runs them: their binary, on its embedded cluster, with
//! small inputs. What each prints and writes is checked against a plain sequential computation
//! of the same data here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

fn example(name: &str) -> PathBuf {
    common::example_binary(name)
}

/// A directory of its own under the system temp directory, removed when dropped unless the
/// test failed (its files are then kept for reading; the failure names them).
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        // Unique: one directory per test name and test process (a leftover of an earlier
        // process of the same id is removed first).
        let dir = std::env::temp_dir().join(format!("flint-example-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept {} for reading", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Runs example `name` with `args` on its embedded cluster; its stdout, once it succeeded.
fn run(name: &str, args: &[&str]) -> String {
    let out = Command::new(example(name))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot start example {name}: {e}"));
    assert!(
        out.status.success(),
        "example {name} {args:?} failed: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// The `part-NNNNN` files of `dir`, in name order.
fn part_files(dir: &Path) -> Vec<PathBuf> {
    let mut parts: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    parts.sort();
    let names: Vec<String> = parts
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names.is_empty() && names.iter().all(|n| n.starts_with("part-")),
        "{} should hold only part files: {names:?}",
        dir.display()
    );
    parts
}

/// The rows of CSV part files (each with `header`), part after part.
fn csv_rows(parts: &[PathBuf], header: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for part in parts {
        let text = std::fs::read_to_string(part).expect("a part file");
        let mut lines = text.lines();
        match lines.next() {
            // A subtask that got no records writes an empty file.
            None => continue,
            Some(first) => assert_eq!(first, header, "the header of {}", part.display()),
        }
        rows.extend(lines.map(|l| l.split(',').map(str::to_owned).collect()));
    }
    rows
}

/// A deterministic pseudo-random sequence (an LCG), independent of the examples' own.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

#[test]
fn wordcount_typed_counts_every_word_of_a_directory() {
    let scratch = Scratch::new("wordcount");
    let input = scratch.0.join("input");
    std::fs::create_dir_all(&input).unwrap();
    // Skewed words, mixed case, unicode, punctuation: the example's words are maximal runs of
    // alphanumeric characters, lowercased.
    let vocabulary = [
        "the",
        "The",
        "THE",
        "flint",
        "Flink",
        "data-flow",
        "it's",
        "Straße",
        "ÉCOLE",
        "école",
        "x2",
        "日本",
        "Ωmega",
        "job",
        "task",
        "slot",
    ];
    let mut rng = Lcg(7);
    let mut all_text = String::new();
    for file in ["a.txt", "b.txt", "c.log"] {
        let mut text = String::new();
        for line in 0..400 {
            for _ in 0..(line * 7) % 11 {
                // Squaring skews the choice toward the first words.
                let r = rng.next() % 256;
                text.push_str(vocabulary[(r * r / 4096) as usize]);
                text.push_str(if rng.next().is_multiple_of(4) {
                    ", "
                } else {
                    " "
                });
            }
            text.push('\n');
        }
        std::fs::write(input.join(file), &text).unwrap();
        all_text.push_str(&text);
    }
    // Hidden files are not read.
    std::fs::write(input.join(".hidden"), "hidden hidden hidden\n").unwrap();

    let output = scratch.0.join("counts");
    let stdout = run(
        "wordcount_typed",
        &[
            input.to_str().unwrap(),
            output.to_str().unwrap(),
            "--parallelism",
            "3",
        ],
    );

    // The sequential count.
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for word in all_text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        *expected.entry(word.to_lowercase()).or_default() += 1;
    }
    let total: u64 = expected.values().sum();
    let mut ranked: Vec<(&String, &u64)> = expected.iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let mut want = format!(
        "{total} words, {} distinct; counts written to {}\ntop 10:\n",
        expected.len(),
        output.display()
    );
    for (word, count) in &ranked[..10] {
        want.push_str(&format!("{word}\t{count}\n"));
    }
    assert_eq!(stdout, want);

    // The CSV part files hold every word once, with its count.
    let parts = part_files(&output);
    assert_eq!(parts.len(), 3, "one part file per sink subtask");
    let mut written: BTreeMap<String, u64> = BTreeMap::new();
    for row in csv_rows(&parts, "word,count") {
        let [word, count] = <[String; 2]>::try_from(row).expect("two columns");
        let count = count.parse().expect("a count");
        assert!(
            written.insert(word.clone(), count).is_none(),
            "{word} twice"
        );
    }
    assert_eq!(written, expected);
}

/// The examples' mixing function (splitmix64's finalizer), as join_aggregate documents it.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[test]
fn join_aggregate_prints_the_revenue_of_each_country_and_the_best_customers() {
    let (orders, customers) = (3000u64, 40u64);
    let stdout = run(
        "join_aggregate",
        &[
            &orders.to_string(),
            &customers.to_string(),
            "--parallelism",
            "3",
        ],
    );

    // The same data as the example documents it, joined and summed in a loop.
    let countries = [
        "Argentina",
        "Brazil",
        "Canada",
        "Denmark",
        "Egypt",
        "France",
        "Germany",
        "Japan",
    ];
    let country = |c: u64| countries[(mix(c) % 8) as usize];
    let mut per_country: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    let mut per_customer: BTreeMap<u64, u64> = BTreeMap::new();
    for id in 0..orders {
        let m = mix(id);
        let (customer, cents) = (m % customers, 100 + m / customers % 100_000);
        let entry = per_country.entry(country(customer)).or_default();
        entry.0 += 1;
        entry.1 += cents;
        *per_customer.entry(customer).or_default() += cents;
    }
    let money = |cents: u64| format!("{}.{:02}", cents / 100, cents % 100);
    let mut countries: Vec<_> = per_country.into_iter().collect();
    countries.sort_by(|a, b| b.1.1.cmp(&a.1.1).then(a.0.cmp(b.0)));
    let mut best: Vec<_> = per_customer.into_iter().collect();
    best.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));

    let mut want = format!(
        "revenue per country ({orders} orders of {customers} customers):\ncountry\torders\trevenue\n"
    );
    for (name, (n, cents)) in &countries {
        want.push_str(&format!("{name}\t{n}\t{}\n", money(*cents)));
    }
    want.push_str("best customers:\ncustomer\tcountry\trevenue\n");
    for (customer, cents) in &best[..5] {
        want.push_str(&format!(
            "customer-{customer}\t{}\t{}\n",
            country(*customer),
            money(*cents)
        ));
    }
    assert_eq!(stdout, want);
}

#[test]
fn top_k_prints_the_largest_and_first_events_and_writes_them_sorted_in_ranges() {
    let scratch = Scratch::new("top-k");
    let output = scratch.0.join("sorted");
    let events = 5000u64;
    let stdout = run(
        "top_k",
        &[
            &events.to_string(),
            output.to_str().unwrap(),
            "--k",
            "7",
            "--parallelism",
            "3",
        ],
    );

    // Every event as the example documents it, sorted by (value, id).
    let event = |id: u64| {
        let m = mix(id);
        (id, m % 100, m / 100 % 1_000_000)
    };
    let mut sorted: Vec<(u64, u64, u64)> = (0..events).map(event).collect();
    sorted.sort_by_key(|&(id, _, value)| (value, id));
    let line = |(id, sensor, value): (u64, u64, u64)| format!("{id}\t{sensor}\t{value}");

    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2 + 7 + 2 + 5 + 1, "{stdout}");
    assert_eq!(lines[0], format!("the 7 largest of {events} events:"));
    assert_eq!(lines[1], "id\tsensor\tvalue");
    // The largest values first; ties, the smaller id first.
    let mut largest = sorted.clone();
    largest.sort_by_key(|&(id, _, value)| (std::cmp::Reverse(value), id));
    let want: Vec<String> = largest[..7].iter().map(|&e| line(e)).collect();
    assert_eq!(lines[2..9], want);
    assert_eq!(lines[9], "the first 5 events delivered:");
    assert_eq!(lines[10], "id\tsensor\tvalue");
    // Any five events, but real ones and each once.
    let first: BTreeSet<&str> = lines[11..16].iter().copied().collect();
    assert_eq!(first.len(), 5, "{stdout}");
    for printed in &first {
        let id: u64 = printed.split('\t').next().unwrap().parse().unwrap();
        assert!(id < events, "{printed}");
        assert_eq!(*printed, line(event(id)));
    }
    assert_eq!(
        lines[16],
        format!("all events sorted by value: {}/part-*", output.display())
    );

    // One part file per range, in order: read in name order they are every event, sorted.
    let parts = part_files(&output);
    assert_eq!(parts.len(), 3, "one part file per sort subtask");
    let written: Vec<(u64, u64, u64)> = csv_rows(&parts, "id,sensor,value")
        .into_iter()
        .map(|row| {
            let [id, sensor, value] = <[String; 3]>::try_from(row).expect("three columns");
            (
                id.parse().unwrap(),
                sensor.parse().unwrap(),
                value.parse().unwrap(),
            )
        })
        .collect();
    assert_eq!(written, sorted);
}
