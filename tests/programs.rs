//! Typed programs on an embedded cluster: every operator of the dataflow API against a plain
//! sequential computation of the same data, chaining, and the errors a user can cause.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use flint::ClusterConfig;
use flint::api::{Env, Order, Program, ProgramError, Programs};
use flint::cluster::embedded::EmbeddedCluster;
use flint::job::graph::RestartStrategyConfig;
use serde::{Deserialize, Serialize};

/// Runs `program` with `args` on a fresh embedded cluster of 2 TaskManagers × 4 slots.
fn run(program: Program, args: &[&str]) -> Result<(), ProgramError> {
    let programs = Programs::new().with(program.clone());
    let mut config = ClusterConfig::default();
    config.resourcemanager.pool_size = 2;
    config.taskmanager.slots = 4;
    let cluster = EmbeddedCluster::start(config, programs.registry()).expect("cluster starts");
    let env = Env::new(
        program.identity(),
        args.iter().map(|a| (*a).to_owned()).collect(),
        Box::new(cluster),
    );
    program.run(&env)
}

/// A slot the program writes its answer into (on the client only: TaskManagers stop at
/// `execute`).
type Slot<T> = Arc<Mutex<Option<T>>>;

fn answer<T: Send + 'static>() -> (Slot<T>, Slot<T>) {
    let slot = Arc::new(Mutex::new(None));
    (slot.clone(), slot)
}

fn take<T>(slot: &Arc<Mutex<Option<T>>>) -> T {
    slot.lock()
        .unwrap()
        .take()
        .expect("the program ran to its end")
}

/// A deterministic stream of numbers.
fn numbers(seed: u64, n: usize) -> Vec<u64> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x >> 33
        })
        .collect()
}

#[test]
fn typed_word_count_matches_a_sequential_count() {
    let dir = tempdir();
    let input = dir.join("book.txt");
    let text: String = (0..3000)
        .map(|i| {
            format!(
                "the quick brown fox {} jumps over the {} lazy dog\n",
                i % 17,
                i % 5
            )
        })
        .collect();
    std::fs::write(&input, &text).unwrap();
    type Counts = BTreeMap<String, u64>;
    let (slot, out) = answer::<(Counts, Counts, Counts)>();
    let program = Program::new("wordcount", move |env: &Env| {
        env.set_parallelism(3);
        let path = env.args()[0].clone();
        let pairs = env.read_text_file(path).flat_map(|line: String| {
            line.split_whitespace()
                .map(|w| (w.to_owned(), 1u64))
                .collect::<Vec<_>>()
        });
        let counts = pairs
            .key_by(|(w, _): &(String, u64)| w.clone())
            .reduce(|(w, a), (_, b)| (w, a + b))
            .collect();
        // The same on the pairs' own keys.
        let by_key = pairs.reduce_by_key(|a, b| a + b).collect();
        // The same with the words emitted by reference from one buffer.
        let fused = env
            .read_text_file(env.args()[0].clone())
            .flat_map_reduce_by_key(
                |line: String, emit: &mut dyn FnMut(&str, u64)| {
                    let mut word = String::new();
                    for w in line.split_whitespace() {
                        word.clear();
                        word.push_str(w);
                        emit(&word, 1);
                    }
                },
                |a, b| a + b,
            )
            .collect();
        let result = env.execute("wordcount")?;
        let fused: Counts = result.get(&fused)?.into_iter().collect();
        assert_eq!(
            result.get(&counts)?.len(),
            fused.len(),
            "one record per word"
        );
        *slot.lock().unwrap() = Some((
            result.get(&counts)?.into_iter().collect(),
            result.get(&by_key)?.into_iter().collect(),
            fused,
        ));
        Ok(())
    });
    run(program, &[input.to_str().unwrap()]).unwrap();
    let mut expected = BTreeMap::new();
    for word in text.split_whitespace() {
        *expected.entry(word.to_owned()).or_insert(0u64) += 1;
    }
    let (counts, by_key, fused) = take(&out);
    assert_eq!(counts, expected);
    assert_eq!(by_key, expected);
    assert_eq!(fused, expected);
}

/// More keys than the combiner holds (65,536): it flushes partial sums on the way, and the
/// final merge still gives each key one exact value.
#[test]
fn reduce_by_key_over_more_keys_than_its_combiner_holds_is_exact() {
    let (slot, out) = answer::<Vec<(u64, u64)>>();
    let program = Program::new("by-key", move |env: &Env| {
        env.set_parallelism(1);
        let sums = env
            .generate(|_, _| (0..200_000u64).map(|i| (i % 70_001, i)))
            .reduce_by_key(|a, b| a + b)
            .collect();
        let result = env.execute("by-key")?;
        let mut rows = result.get(&sums)?;
        rows.sort();
        *slot.lock().unwrap() = Some(rows);
        Ok(())
    });
    run(program, &[]).unwrap();
    let mut expected: BTreeMap<u64, u64> = BTreeMap::new();
    for i in 0..200_000u64 {
        *expected.entry(i % 70_001).or_default() += i;
    }
    assert_eq!(take(&out), expected.into_iter().collect::<Vec<_>>());
}

/// The same with keys emitted by reference (`flat_map_reduce_by_key`), two keys per record:
/// its combiner flushes as well, and every key still ends with one exact sum.
#[test]
fn flat_map_reduce_by_key_over_more_keys_than_its_combiner_holds_is_exact() {
    let (slot, out) = answer::<Vec<(String, u64)>>();
    let program = Program::new("by-ref", move |env: &Env| {
        env.set_parallelism(2);
        let sums = env
            .generate(|subtask, parallelism| {
                (u64::from(subtask)..300_000u64).step_by(parallelism as usize)
            })
            .flat_map_reduce_by_key(
                |i: u64, emit: &mut dyn FnMut(&str, u64)| {
                    emit(&format!("k{}", i % 140_001), i);
                    emit("all", 1);
                },
                |a, b| a + b,
            )
            .collect();
        let result = env.execute("by-ref")?;
        let mut rows = result.get(&sums)?;
        rows.sort();
        *slot.lock().unwrap() = Some(rows);
        Ok(())
    });
    run(program, &[]).unwrap();
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for i in 0..300_000u64 {
        *expected.entry(format!("k{}", i % 140_001)).or_default() += i;
    }
    expected.insert("all".to_owned(), 300_000);
    assert_eq!(take(&out), expected.into_iter().collect::<Vec<_>>());
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
struct Order_ {
    id: u64,
    customer: u64,
    amount: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
struct Customer {
    id: u64,
    name: String,
}

fn orders() -> Vec<Order_> {
    numbers(7, 2000)
        .into_iter()
        .enumerate()
        .map(|(i, n)| Order_ {
            id: i as u64,
            customer: n % 150,
            amount: n % 1000,
        })
        .collect()
}

fn customers() -> Vec<Customer> {
    (0..120)
        .map(|id| Customer {
            id,
            name: format!("customer {id}"),
        })
        .collect()
}

#[test]
fn inner_and_left_outer_joins_give_every_matching_pair_exactly_once() {
    type Rows = (Vec<(u64, String)>, Vec<(u64, Option<String>)>);
    let (slot, out) = answer::<Rows>();
    let program = Program::new("joins", move |env: &Env| {
        env.set_parallelism(3);
        let orders = env.from_collection(orders());
        let customers = env.from_collection(customers()).parallelism(2);
        let inner = orders
            .join(&customers, |o: &Order_| o.customer, |c: &Customer| c.id)
            .inner(|o, c| (o.id, c.name))
            .collect();
        let outer = orders
            .join(&customers, |o: &Order_| o.customer, |c: &Customer| c.id)
            .left_outer(|o, c| (o.id, c.map(|c| c.name)))
            .collect();
        let result = env.execute("joins")?;
        let mut inner = result.get(&inner)?;
        let mut outer = result.get(&outer)?;
        inner.sort();
        outer.sort();
        *slot.lock().unwrap() = Some((inner, outer));
        Ok(())
    });
    run(program, &[]).unwrap();
    let by_id: BTreeMap<u64, String> = customers().into_iter().map(|c| (c.id, c.name)).collect();
    let mut inner = Vec::new();
    let mut outer = Vec::new();
    for o in orders() {
        let name = by_id.get(&o.customer).cloned();
        if let Some(name) = &name {
            inner.push((o.id, name.clone()));
        }
        outer.push((o.id, name));
    }
    inner.sort();
    outer.sort();
    let (got_inner, got_outer) = take(&out);
    assert_eq!(got_inner, inner);
    assert_eq!(got_outer, outer);
}

#[test]
fn a_broadcast_join_and_a_co_group_agree_with_the_hash_join() {
    type Rows = (Vec<(u64, String)>, Vec<(u64, usize, usize)>);
    let (slot, out) = answer::<Rows>();
    let program = Program::new("co_group", move |env: &Env| {
        env.set_parallelism(2);
        let orders = env.from_collection(orders());
        let customers = env.from_collection(customers());
        let broadcast = orders
            .join(&customers, |o: &Order_| o.customer, |c: &Customer| c.id)
            .broadcast_right()
            .inner(|o, c| (o.id, c.name))
            .collect();
        let grouped = orders
            .co_group(
                &customers,
                |o: &Order_| o.customer,
                |c: &Customer| c.id,
                |key: &u64, os: Vec<Order_>, cs: Vec<Customer>| {
                    std::iter::once((*key, os.len(), cs.len()))
                },
            )
            .collect();
        let result = env.execute("co_group")?;
        let mut broadcast = result.get(&broadcast)?;
        broadcast.sort();
        let mut grouped = result.get(&grouped)?;
        grouped.sort();
        *slot.lock().unwrap() = Some((broadcast, grouped));
        Ok(())
    });
    run(program, &[]).unwrap();
    let (broadcast, grouped) = take(&out);
    let ids: BTreeSet<u64> = customers().iter().map(|c| c.id).collect();
    let expected: Vec<(u64, String)> = {
        let mut rows: Vec<_> = orders()
            .into_iter()
            .filter(|o| ids.contains(&o.customer))
            .map(|o| (o.id, format!("customer {}", o.customer)))
            .collect();
        rows.sort();
        rows
    };
    assert_eq!(broadcast, expected);
    let mut counts: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
    for o in orders() {
        counts.entry(o.customer).or_default().0 += 1;
    }
    for c in customers() {
        counts.entry(c.id).or_default().1 += 1;
    }
    let expected: Vec<(u64, usize, usize)> =
        counts.into_iter().map(|(k, (a, b))| (k, a, b)).collect();
    assert_eq!(grouped, expected);
}

#[test]
fn aggregations_groupings_and_distinct_match_sequential_ones() {
    type Rows = (
        Vec<(u64, u64)>,
        Vec<(u64, u64)>,
        Vec<(u64, Vec<u64>)>,
        Vec<u64>,
        Vec<(u64, u64)>,
    );
    let (slot, out) = answer::<Rows>();
    let program = Program::new("aggregations", move |env: &Env| {
        env.set_parallelism(3);
        let values = env.from_collection(numbers(3, 5000));
        let sums = values
            .key_by(|v: &u64| v % 37)
            .aggregate(|| 0u64, |sum, v| *sum += v, |sum, other| *sum += other)
            .collect();
        let counts = values.key_by(|v: &u64| v % 11).count().collect();
        let groups = values
            .key_by(|v: &u64| v % 5)
            .group_reduce(|key: &u64, vs: &mut dyn Iterator<Item = u64>| {
                let mut vs: Vec<u64> = vs.collect();
                vs.sort();
                vs.truncate(3);
                std::iter::once((*key, vs))
            })
            .collect();
        let distinct = values.map(|v| v % 100).distinct().collect();
        let folded = values
            .key_by(|v: &u64| v % 3)
            .fold(|| 0u64, |n, _| *n += 1)
            .collect();
        let result = env.execute("aggregations")?;
        let mut rows = (
            result.get(&sums)?,
            result.get(&counts)?,
            result.get(&groups)?,
            result.get(&distinct)?,
            result.get(&folded)?,
        );
        rows.0.sort();
        rows.1.sort();
        rows.2.sort();
        rows.3.sort();
        rows.4.sort();
        *slot.lock().unwrap() = Some(rows);
        Ok(())
    });
    run(program, &[]).unwrap();
    let values = numbers(3, 5000);
    let mut sums: BTreeMap<u64, u64> = BTreeMap::new();
    let mut counts: BTreeMap<u64, u64> = BTreeMap::new();
    let mut groups: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut folded: BTreeMap<u64, u64> = BTreeMap::new();
    for v in &values {
        *sums.entry(v % 37).or_default() += v;
        *counts.entry(v % 11).or_default() += 1;
        groups.entry(v % 5).or_default().push(*v);
        *folded.entry(v % 3).or_default() += 1;
    }
    let groups: Vec<(u64, Vec<u64>)> = groups
        .into_iter()
        .map(|(k, mut vs)| {
            vs.sort();
            vs.truncate(3);
            (k, vs)
        })
        .collect();
    let distinct: BTreeSet<u64> = values.iter().map(|v| v % 100).collect();
    let (got_sums, got_counts, got_groups, got_distinct, got_folded) = take(&out);
    assert_eq!(got_sums, sums.into_iter().collect::<Vec<_>>());
    assert_eq!(got_counts, counts.into_iter().collect::<Vec<_>>());
    assert_eq!(got_groups, groups);
    assert_eq!(got_distinct, distinct.into_iter().collect::<Vec<_>>());
    assert_eq!(got_folded, folded.into_iter().collect::<Vec<_>>());
}

#[test]
fn sorts_first_n_and_top_k_give_the_orders_asked_for() {
    type Rows = (Vec<u64>, Vec<u64>, Vec<u64>, usize);
    let dir = tempdir();
    let ranges = dir.join("ranges");
    let (slot, out) = answer::<Rows>();
    let written = ranges.clone();
    let program = Program::new("orders", move |env: &Env| {
        env.set_parallelism(3);
        let values = env.from_collection(numbers(11, 4000));
        let sorted = values.sort_by(|v: &u64| *v, Order::Ascending).collect();
        let top = values.top_k(10, |v: &u64| *v, Order::Descending).collect();
        let all = values.sort_all(|v: &u64| *v, Order::Descending).collect();
        let first = values.first_n(7).collect();
        // Each partition of a global sort holds one range of keys.
        values
            .sort_by(|v: &u64| *v, Order::Ascending)
            .parallelism(4)
            .write_text(&written, |v| v.to_string());
        let result = env.execute("orders")?;
        *slot.lock().unwrap() = Some((
            result.get(&sorted)?,
            result.get(&top)?,
            result.get(&all)?,
            result.get(&first)?.len(),
        ));
        Ok(())
    });
    run(program, &[]).unwrap();
    let mut expected = numbers(11, 4000);
    expected.sort();
    let (sorted, top, all, first) = take(&out);
    assert_eq!(
        sorted, expected,
        "a global sort, read partition by partition"
    );
    let mut descending = expected.clone();
    descending.reverse();
    assert_eq!(top, descending[..10].to_vec());
    assert_eq!(all, descending);
    assert_eq!(first, 7);
    let parts: Vec<Vec<u64>> = (0..4)
        .map(|i| {
            std::fs::read_to_string(ranges.join(format!("part-{i:05}")))
                .unwrap()
                .lines()
                .map(|l| l.parse().unwrap())
                .collect()
        })
        .collect();
    assert!(parts.iter().all(|p| !p.is_empty()), "every range gets keys");
    assert!(
        parts.iter().all(|p| p.windows(2).all(|w| w[0] <= w[1])),
        "sorted ranges"
    );
    assert!(
        parts.windows(2).all(|w| w[0].last() <= w[1].first()),
        "ranges in order"
    );
    assert_eq!(parts.concat(), expected);
}

#[test]
fn unions_repartitions_and_a_broadcast_side_input_keep_every_record() {
    type Rows = (Vec<u64>, Vec<(u64, u64)>, Vec<u64>);
    let (slot, out) = answer::<Rows>();
    let program = Program::new("repartition", move |env: &Env| {
        env.set_parallelism(3);
        let a = env.from_collection((0..500u64).collect::<Vec<_>>());
        let b = env
            .from_collection((500..800u64).collect::<Vec<_>>())
            .parallelism(2);
        let all = a
            .union(&[&b])
            .rebalance()
            .partition_custom(|v: &u64, n| (*v as usize) % n)
            .partition_by_key(|v: &u64| v % 13)
            .collect();
        let thresholds = env.from_collection(vec![100u64, 600]);
        let banded = a
            .union(&[&b])
            .map_with_broadcast(&thresholds, |v, ts: &[u64]| {
                (v, ts.iter().filter(|t| v >= **t).count() as u64)
            })
            .collect();
        let generated = env.generate(|subtask, parallelism| {
            (0..100u64).filter(move |i| i % u64::from(parallelism) == u64::from(subtask))
        });
        let generated = generated.collect();
        let result = env.execute("repartition")?;
        let mut all = result.get(&all)?;
        all.sort();
        let mut banded = result.get(&banded)?;
        banded.sort();
        let mut generated = result.get(&generated)?;
        generated.sort();
        *slot.lock().unwrap() = Some((all, banded, generated));
        Ok(())
    });
    run(program, &[]).unwrap();
    let (all, banded, generated) = take(&out);
    assert_eq!(all, (0..800).collect::<Vec<_>>());
    let expected: Vec<(u64, u64)> = (0..800)
        .map(|v| (v, u64::from(v >= 100) + u64::from(v >= 600)))
        .collect();
    assert_eq!(banded, expected);
    assert_eq!(generated, (0..100).collect::<Vec<_>>());
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Row {
    name: String,
    amount: f64,
    count: u32,
}

#[test]
fn csv_files_round_trip_and_a_bad_row_names_its_file_line_and_column() {
    let dir = tempdir();
    let rows: Vec<Row> = (0..300)
        .map(|i| Row {
            name: format!("name, {i}"),
            amount: f64::from(i) / 4.0,
            count: i,
        })
        .collect();
    let (slot, out) = answer::<Vec<Row>>();
    let (input, output) = (rows.clone(), dir.join("rows"));
    let read_back = output.clone();
    let program = Program::new("csv", move |env: &Env| {
        env.set_parallelism(2);
        env.from_collection(input.clone()).write_csv(&output);
        env.execute("write")?;
        let back = env
            .read_csv::<Row>(output.join("part-00000"))
            .union(&[&env.read_csv::<Row>(output.join("part-00001"))])
            .collect();
        let result = env.execute("read")?;
        *slot.lock().unwrap() = Some(result.get(&back)?);
        Ok(())
    });
    run(program, &[]).unwrap();
    let mut back = take(&out);
    back.sort_by_key(|r| r.count);
    assert_eq!(back, rows);
    assert!(read_back.join("part-00000").exists());

    let bad = dir.join("bad.csv");
    std::fs::write(&bad, "name,amount,count\na,1.5,1\nb,not a number,2\n").unwrap();
    let path = bad.clone();
    let program = Program::new("bad_csv", move |env: &Env| {
        env.set_restart_strategy(RestartStrategyConfig::None);
        let _ = env.read_csv::<Row>(&path).collect();
        env.execute("bad csv")?;
        Ok(())
    });
    let error = run(program, &[]).unwrap_err().to_string();
    assert!(error.contains("bad.csv"), "{error}");
    assert!(error.contains("line 3"), "{error}");
    assert!(error.contains("column `amount`"), "{error}");
}

#[test]
fn a_panicking_function_fails_the_job_with_its_message_and_the_cluster_runs_on() {
    let program = Program::new("panics", move |env: &Env| {
        env.set_restart_strategy(RestartStrategyConfig::None);
        let _ = env
            .from_collection(vec![1u64, 2, 3])
            .map(|v| {
                if v == 2 {
                    panic!("two is not allowed");
                }
                v
            })
            .collect();
        env.execute("panics")?;
        Ok(())
    });
    let error = run(program, &[]).unwrap_err().to_string();
    assert!(error.contains("two is not allowed"), "{error}");

    let program = Program::new("bounded", move |env: &Env| {
        env.set_restart_strategy(RestartStrategyConfig::None);
        let _ = env
            .from_collection((0..10_000u64).collect::<Vec<_>>())
            .collect_bounded(1000);
        env.execute("bounded")?;
        Ok(())
    });
    let error = run(program, &[]).unwrap_err().to_string();
    assert!(error.contains("bounded to 1000 bytes"), "{error}");
}

/// A collect subtask sends its records back in its final report, one message: at most 8 MiB
/// each, whatever the bound. Past it the job fails naming the cap and the way out; spread
/// over more subtasks the same records are collected.
#[test]
fn a_collect_subtask_sends_back_at_most_its_report_can_carry() {
    let collect = |parallelism: u32| {
        Program::new("large_collect", move |env: &Env| {
            env.set_restart_strategy(RestartStrategyConfig::None);
            env.set_parallelism(parallelism);
            let collected = env
                .from_collection((0..100_000u64).collect::<Vec<_>>())
                .map(|i| format!("{i:0>100}"))
                .collect_bounded(1 << 30);
            let result = env.execute("large collect")?;
            assert_eq!(result.get(&collected)?.len(), 100_000);
            Ok(())
        })
    };
    let error = run(collect(1), &[]).unwrap_err().to_string();
    assert!(
        error.contains("at most 8388608 bytes of encoded records back from each of its 1 subtasks"),
        "{error}"
    );
    run(collect(2), &[]).unwrap();
}

#[test]
fn chained_operators_pass_records_without_serializing_them() {
    let (slot, out) = answer::<(usize, usize, Vec<Vec<String>>)>();
    let program = Program::new("chaining", move |env: &Env| {
        let declare = |env: &Env| {
            let _ = env
                .from_collection((0..1000u64).collect::<Vec<_>>())
                .map(|v| v * 3)
                .filter(|v| v % 2 == 0)
                .map(|v| v + 1)
                .collect();
        };
        declare(env);
        let chained = env.job_graph("chained")?;
        env.set_chaining(false);
        let unchained = env.job_graph("unchained")?;
        *slot.lock().unwrap() = Some((
            chained.vertices.len(),
            unchained.vertices.len(),
            chained.vertices.iter().map(|v| v.chain.clone()).collect(),
        ));
        Ok(())
    });
    run(program, &[]).unwrap();
    let (chained, unchained, chains) = take(&out);
    assert_eq!(
        chained, 2,
        "source, map, filter, map in one task; collect in its own"
    );
    assert_eq!(unchained, 5);
    assert_eq!(chains[0], ["collection", "map", "filter", "map"]);
}

/// A broadcast join's probe side runs in its source's task (no serialization of the larger
/// side), except where that task also feeds the build side: the task reads the build side to
/// its end before its source runs, so chaining there would wait on itself.
#[test]
fn a_broadcast_joins_probe_side_chains_into_its_source_unless_that_source_feeds_the_build() {
    type Rows = (
        Vec<Vec<String>>,
        Vec<Vec<String>>,
        Vec<(u64, String)>,
        Vec<(u64, u64)>,
    );
    let (slot, out) = answer::<Rows>();
    let program = Program::new("probe_chaining", move |env: &Env| {
        env.set_parallelism(2);
        let orders = env.from_collection(orders()).filter(|o| o.amount % 3 != 0);
        let customers = env.from_collection(customers());
        let joined = orders
            .join(&customers, |o: &Order_| o.customer, |c: &Customer| c.id)
            .broadcast_right()
            .inner(|o, c| (o.id, c.name))
            .collect();
        let chains = |graph: flint::job::graph::JobGraph| {
            let mut chains: Vec<Vec<String>> =
                graph.vertices.iter().map(|v| v.chain.clone()).collect();
            chains.sort();
            chains
        };
        let probe_chained = chains(env.job_graph("probe chained")?);
        let result = env.execute("probe chained")?;
        let mut joined = result.get(&joined)?;
        joined.sort();
        // The build side comes from the probe side's source through another task (a
        // shuffle): chained, the task would wait for the build side before running the source
        // the build side waits for.
        let numbers = env.from_collection((0..500u64).collect::<Vec<_>>());
        let evens = numbers.filter(|n| n % 2 == 0).distinct();
        let pairs = numbers
            .join(&evens, |n: &u64| n / 2, |e: &u64| *e)
            .broadcast_right()
            .inner(|n, e| (n, e))
            .collect();
        let self_fed = chains(env.job_graph("self-fed")?);
        if !self_fed.iter().any(|chain| chain == &["join"]) {
            // Not run: it would never end.
            return Err(ProgramError::Invalid(format!(
                "a join whose build side comes from its probe side's task shares that task: \
                 {self_fed:?}"
            )));
        }
        let result = env.execute("self-fed")?;
        let mut pairs = result.get(&pairs)?;
        pairs.sort();
        *slot.lock().unwrap() = Some((probe_chained, self_fed, joined, pairs));
        Ok(())
    });
    run(program, &[]).unwrap();
    let (probe_chained, self_fed, joined, pairs) = take(&out);
    assert_eq!(
        probe_chained,
        [
            vec!["collect"],
            vec!["collection"],
            vec!["collection", "filter", "join"]
        ],
        "the orders source, its filter and the join in one task"
    );
    assert!(self_fed.iter().any(|chain| chain == &["join"]));
    let ids: BTreeSet<u64> = customers().iter().map(|c| c.id).collect();
    let mut expected: Vec<(u64, String)> = orders()
        .into_iter()
        .filter(|o| o.amount % 3 != 0 && ids.contains(&o.customer))
        .map(|o| (o.id, format!("customer {}", o.customer)))
        .collect();
    expected.sort();
    assert_eq!(joined, expected);
    let mut expected: Vec<(u64, u64)> = (0..500u64)
        .filter(|n| (n / 2) % 2 == 0)
        .map(|n| (n, n / 2))
        .collect();
    expected.sort();
    assert_eq!(pairs, expected);
}

/// A fresh directory, removed with everything in it when dropped.
struct TempDir(std::path::PathBuf);

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir() -> TempDir {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "flint-programs-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    TempDir(dir)
}

#[test]
fn a_later_job_built_from_an_earlier_ones_results_runs_on_the_same_values() {
    // Job 2's collection and its filter's threshold come from job 1's results: TaskManagers
    // rebuild job 2's plan from the results the client read, not from empty ones.
    let (slot, out) = answer::<Vec<u64>>();
    let program = Program::new("iterative", move |env: &Env| {
        env.set_parallelism(3);
        let firsts = env
            .from_collection(numbers(5, 500))
            .map(|v| v % 1000)
            .top_k(20, |v: &u64| *v, Order::Descending)
            .collect();
        let largest = env.execute("largest")?.get(&firsts)?;
        let threshold = largest[10];
        let kept = env
            .from_collection(largest)
            .filter(move |v| *v > threshold)
            .collect();
        let result = env.execute("kept")?;
        if env.on_client() {
            *slot.lock().unwrap() = Some(result.get(&kept)?);
        }
        Ok(())
    });
    run(program, &[]).unwrap();
    let mut expected: Vec<u64> = numbers(5, 500).iter().map(|v| v % 1000).collect();
    expected.sort_unstable_by(|a, b| b.cmp(a));
    let threshold = expected[10];
    let mut kept = take(&out);
    kept.sort_unstable_by(|a, b| b.cmp(a));
    let want: Vec<u64> = expected[..20]
        .iter()
        .copied()
        .filter(|v| *v > threshold)
        .collect();
    assert!(!want.is_empty());
    assert_eq!(kept, want);
}

#[test]
fn a_program_that_declares_another_plan_on_a_task_manager_is_refused_by_name() {
    use std::sync::atomic::{AtomicU32, Ordering};
    // Each run of the function declares one more map: the TaskManagers' rebuilt plan differs.
    static RUNS: AtomicU32 = AtomicU32::new(0);
    let program = Program::new("unsteady", move |env: &Env| {
        env.set_restart_strategy(RestartStrategyConfig::None);
        let mut numbers = env.from_collection(vec![1u64, 2, 3]);
        for _ in 0..RUNS.fetch_add(1, Ordering::SeqCst) {
            numbers = numbers.map(|v| v + 1);
        }
        let _ = numbers.collect();
        env.execute("unsteady")?;
        Ok(())
    });
    let error = run(program, &[]).unwrap_err().to_string();
    assert!(error.contains("declared another plan for job 0"), "{error}");
}

/// A `first_n` fed by the network stops reading once it has its n (issue 32): the rebalanced
/// producers, half a million records each, discard the rest instead of waiting for it, and the
/// answer is still exactly n records of the input.
#[test]
fn first_n_after_a_shuffle_stops_reading_and_its_producers_finish() {
    let (slot, out) = answer::<Vec<u64>>();
    let program = Program::new("first-after-shuffle", move |env: &Env| {
        env.set_parallelism(2);
        let values =
            env.generate(|subtask, _| (0..500_000u64).map(move |i| i * 2 + u64::from(subtask)));
        let first = values.rebalance().first_n(3).collect();
        let result = env.execute("first-after-shuffle")?;
        *slot.lock().unwrap() = Some(result.get(&first)?);
        Ok(())
    });
    run(program, &[]).unwrap();
    let first = take(&out);
    assert_eq!(first.len(), 3, "{first:?}");
    assert!(first.iter().all(|v| *v < 1_000_000), "{first:?}");
}
