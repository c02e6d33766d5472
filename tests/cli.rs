//! `flint run --embedded` through the built binary: exit codes, messages, and a WordCount whose
//! output equals the sequential count.

use std::path::Path;
use std::process::Command;

use flint::operators::builtin::sequential_word_count;

mod common;
use common::cli::{Run, Scratch};
use common::{read_counts, write_text};

const WORDCOUNT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/wordcount.toml");

fn flint(args: &[&str]) -> Run {
    Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("the flint binary runs")
        .into()
}

/// `examples/stages.toml` as the README runs it: five blocking stages whose exchanges write
/// ~32 MB fit a spill budget of 5 MB per TaskManager (results are deleted as soon as the next
/// stage finished); with 1 MB they do not, and the failure names the key.
#[test]
fn the_stages_example_runs_in_its_spill_budget_and_a_smaller_one_is_named() {
    const STAGES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/stages.toml");
    let run = |budget: &str| -> Run {
        Command::new(env!("CARGO_BIN_EXE_flint"))
            .args([
                "run",
                "--embedded",
                STAGES,
                "--pool-size",
                "4",
                "--slots",
                "1",
                "--param",
                "records=2000",
                "--param",
                "bytes=1000",
                "--timeout",
                "120s",
            ])
            .env_remove("RUST_LOG")
            .env("FLINT_TASKMANAGER_SPILL_BUDGET", budget)
            .output()
            .expect("the flint binary runs")
            .into()
    };
    let fits = run("5mb");
    assert_eq!(fits.code, Some(0), "{fits:?}");
    assert!(fits.stdout.contains("FINISHED"), "{fits:?}");
    let too_small = run("1mb");
    assert_eq!(too_small.code, Some(1), "{too_small:?}");
    assert!(
        format!("{}{}", too_small.stdout, too_small.stderr).contains("taskmanager.spill-budget"),
        "{too_small:?}"
    );
}

/// `examples/take.toml` as the README runs it: consumers that read 10 records (or none) of
/// producers writing a million each end, and so do the producers: the job finishes.
#[test]
fn the_take_example_finishes_though_its_consumers_stop_early() {
    const TAKE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/take.toml");
    for take in ["take=10", "take=0"] {
        let run: Run = Command::new(env!("CARGO_BIN_EXE_flint"))
            .args([
                "run",
                "--embedded",
                TAKE,
                "--pool-size",
                "2",
                "--slots",
                "4",
                "--param",
                take,
                "--timeout",
                "120s",
            ])
            .env_remove("RUST_LOG")
            .output()
            .expect("the flint binary runs")
            .into();
        assert_eq!(run.code, Some(0), "{take}: {run:?}");
        assert!(run.stdout.contains("FINISHED"), "{take}: {run:?}");
    }
}

fn arg(path: &Path) -> String {
    path.display().to_string()
}

/// A text with a skewed vocabulary, unicode, punctuation and uneven lines.
/// Runs WordCount on a generated text with `extra` arguments; checks the counts.
fn wordcount(name: &str, extra: &[&str]) -> Run {
    let dir = Scratch::new(name);
    let input = dir.path("input.txt");
    write_text(&input, 3_000);
    let output = dir.path("out");
    let (input_param, output_param) = (
        format!("input={}", arg(&input)),
        format!("output={}", arg(&output)),
    );
    let mut args = vec![
        "run",
        "--embedded",
        WORDCOUNT,
        "--param",
        &input_param,
        "--param",
        &output_param,
        "--timeout",
        "60s",
    ];
    args.extend_from_slice(extra);
    let run = flint(&args);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(run.stdout.contains("FINISHED"), "{run:?}");
    assert!(run.stdout.contains(&arg(&output)), "output dir: {run:?}");
    assert_eq!(
        read_counts(&output),
        sequential_word_count(&input).unwrap(),
        "{run:?}"
    );
    run
}

#[test]
fn wordcount_equals_the_sequential_count() {
    let run = wordcount("wordcount", &[]);
    assert!(run.stdout.contains("8/8 tasks finished"), "{run:?}");
    for vertex in ["source", "tokenize", "count", "sink"] {
        assert!(run.stdout.contains(vertex), "{vertex}: {run:?}");
    }
}

#[test]
fn one_slot_grows_the_pool_for_the_job() {
    wordcount("one-slot", &["--pool-size", "1", "--slots", "1"]);
}

#[test]
fn a_missing_input_fails_the_job_with_exit_1() {
    let dir = Scratch::new("missing-input");
    let input = dir.path("no-such-input.txt");
    let run = flint(&[
        "run",
        "--embedded",
        WORDCOUNT,
        "--param",
        &format!("input={}", arg(&input)),
        "--param",
        &format!("output={}", arg(&dir.path("out"))),
        "--timeout",
        "60s",
    ]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(run.stdout.contains("FAILED"), "{run:?}");
    assert!(
        run.stdout.contains(&arg(&input)) || run.stderr.contains(&arg(&input)),
        "the path is named: {run:?}"
    );
    // Each failure that made the job restart (3 under the example's strategy) is shown as it
    // happens, naming the task, its attempt and the missing file; the last is the report's.
    let shown: Vec<&str> = run
        .stdout
        .lines()
        .filter(|line| line.contains(", failed: ") && line.contains(&arg(&input)))
        .collect();
    assert_eq!(shown.len(), 3, "{run:?}");
    for (attempt, line) in shown.iter().enumerate() {
        assert!(
            line.contains(&format!("/2), attempt {attempt} on ")),
            "attempt {attempt} is shown: {run:?}"
        );
    }
}

/// An invalid operator configuration fails every attempt alike: the job fails at its first
/// attempt with exit 1 and the operator's message, although the job file keeps Flink's default
/// restart strategy (exponential delay, never giving up). Before, it restarted for ever.
#[test]
fn an_invalid_operator_configuration_fails_the_job_at_once_with_its_reason() {
    let dir = Scratch::new("bad-config");
    let job = dir.write(
        "bad.toml",
        r#"
        name = "bad-config"
        [[vertex]]
        name = "source"
        operator = "noop"
        parallelism = 2
        config.count = "10"
        config.payload-bytes = "2000000"
        [[vertex]]
        name = "sink"
        operator = "noop"
        [[edge]]
        from = "source"
        to = "sink"
        pattern = "all-to-all"
        "#,
    );
    let run = flint(&["run", "--embedded", &arg(&job), "--timeout", "60s"]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(run.stdout.contains("FAILED"), "{run:?}");
    assert!(run.stdout.contains("0 restarts"), "{run:?}");
    assert!(
        run.stdout
            .contains("`payload-bytes` must be at most 1048576, got 2000000")
            && run.stdout.contains("not restarted"),
        "the reason is named: {run:?}"
    );
    // So is a directory given as the input file, though the example allows 3 restarts.
    let run = flint(&[
        "run",
        "--embedded",
        WORDCOUNT,
        "--param",
        &format!("input={}", arg(&dir.path(""))),
        "--param",
        &format!("output={}", arg(&dir.path("out"))),
        "--timeout",
        "60s",
    ]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stdout.contains("0 restarts")
            && run
                .stdout
                .contains("is a directory; text-source reads one file"),
        "{run:?}"
    );
}

#[test]
fn a_job_over_its_timeout_is_cancelled_with_exit_3() {
    let dir = Scratch::new("timeout");
    let job = dir.write(
        "slow.toml",
        r#"
        name = "slow"
        [[vertex]]
        name = "wait"
        operator = "sleep"
        config.ms = "30000"
        "#,
    );
    let run = flint(&["run", "--embedded", &arg(&job), "--timeout", "300ms"]);
    assert_eq!(run.code, Some(3), "{run:?}");
    assert!(run.stderr.contains("--timeout"), "{run:?}");
}

#[test]
fn the_config_file_sets_slots_and_flags_override_it() {
    let dir = Scratch::new("config");
    let job = dir.write(
        "noop.toml",
        r#"
        name = "noop"
        [[vertex]]
        name = "generate"
        operator = "noop"
        parallelism = 3
        config.count = "10"
        "#,
    );
    let config = dir.write("cluster.toml", "[taskmanager]\nslots = 3\n");
    let run = flint(&["run", "--embedded", &arg(&job), "--config", &arg(&config)]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(
        run.stdout.contains("1 TaskManager × 3 slots"),
        "slots from the file, pool from the job: {run:?}"
    );
    let run = flint(&[
        "run",
        "--embedded",
        &arg(&job),
        "--config",
        &arg(&config),
        "--slots",
        "1",
    ]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(run.stdout.contains("3 TaskManagers × 1 slot"), "{run:?}");
}

/// Runs flint with `args`, expecting a usage error (exit 2) whose message contains every one of
/// `needles`, before anything started.
fn usage_error(args: &[&str], needles: &[&str]) {
    let run = flint(args);
    assert_eq!(run.code, Some(2), "{run:?}");
    for needle in needles {
        assert!(run.stderr.contains(needle), "`{needle}` in: {run:?}");
    }
    assert!(run.stdout.is_empty(), "nothing started: {run:?}");
}

#[test]
fn a_missing_job_file_is_named() {
    let dir = Scratch::new("missing-job");
    let job = arg(&dir.path("absent.toml"));
    usage_error(&["run", "--embedded", &job], &[&job]);
}

#[test]
fn malformed_toml_points_at_the_line() {
    let dir = Scratch::new("malformed");
    let job = dir.write("bad.toml", "name = \"bad\"\n[[vertex]\nname = \"x\"\n");
    usage_error(
        &["run", "--embedded", &arg(&job)],
        &["invalid job file", "line 2"],
    );
}

#[test]
fn a_missing_parameter_is_named() {
    usage_error(
        &["run", "--embedded", WORDCOUNT, "--param", "output="],
        &["${input}", "not given"],
    );
}

#[test]
fn a_param_without_equals_is_named() {
    usage_error(
        &["run", "--embedded", WORDCOUNT, "--param", "input"],
        &["--param", "`input`", "="],
    );
}

#[test]
fn a_param_given_twice_is_refused() {
    usage_error(
        &[
            "run",
            "--embedded",
            WORDCOUNT,
            "--param",
            "input=a",
            "--param",
            "input=b",
            "--param",
            "output=c",
        ],
        &["`input`", "twice"],
    );
}

#[test]
fn an_unknown_operator_is_named() {
    let dir = Scratch::new("unknown-op");
    let job = dir.write(
        "nope.toml",
        "name = \"nope\"\n[[vertex]]\nname = \"v\"\noperator = \"nope\"\n",
    );
    usage_error(&["run", "--embedded", &arg(&job)], &["`nope`", "operator"]);
}

#[test]
fn a_cycle_is_refused() {
    let dir = Scratch::new("cycle");
    let job = dir.write(
        "cycle.toml",
        r#"
        name = "cycle"
        [[vertex]]
        name = "a"
        operator = "noop"
        [[vertex]]
        name = "b"
        operator = "noop"
        [[edge]]
        from = "a"
        to = "b"
        pattern = "forward"
        [[edge]]
        from = "b"
        to = "a"
        pattern = "forward"
        "#,
    );
    usage_error(&["run", "--embedded", &arg(&job)], &["cycle"]);
}

#[test]
fn zero_slots_names_the_config_key() {
    usage_error(
        &[
            "run",
            "--embedded",
            WORDCOUNT,
            "--param",
            "input=a",
            "--param",
            "output=b",
            "--slots",
            "0",
        ],
        &["taskmanager.slots"],
    );
}

#[test]
fn a_bad_config_file_is_named() {
    let dir = Scratch::new("bad-config");
    let config = dir.write("cluster.toml", "[taskmanager]\nslotz = 2\n");
    usage_error(
        &[
            "run",
            "--embedded",
            WORDCOUNT,
            "--param",
            "input=a",
            "--param",
            "output=b",
            "--config",
            &arg(&config),
        ],
        &[&arg(&config), "slotz"],
    );
}

#[test]
fn unusable_tls_files_stop_a_node_before_it_listens() {
    let dir = Scratch::new("bad-tls");
    let cert = dir.write("node.pem", "not a certificate\n");
    let config = dir.write(
        "cluster.toml",
        &format!(
            "[transport.tls]\ncert = \"{}\"\nkey = \"{}\"\nca = \"{}\"\n",
            arg(&cert),
            arg(&dir.path("node.key")),
            arg(&dir.path("ca.pem"))
        ),
    );
    usage_error(
        &[
            "jobmanager",
            "--bind",
            "127.0.0.1:0",
            "--config",
            &arg(&config),
        ],
        &["cannot set up TLS", &arg(&cert), "no CERTIFICATE block"],
    );
}

#[test]
fn embedded_only_flags_need_embedded() {
    let run = flint(&["run", WORDCOUNT, "--slots", "2"]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(run.stderr.contains("--embedded"), "{run:?}");
}

#[test]
fn help_mentions_embedded_and_exit_codes() {
    for args in [&["--help"][..], &["run", "--help"]] {
        let run = flint(args);
        assert_eq!(run.code, Some(0), "{run:?}");
        assert!(run.stdout.contains("--embedded"), "{run:?}");
        assert!(run.stdout.contains("Exit codes"), "{run:?}");
    }
    let run = flint(&["run", "--help"]);
    assert!(run.stdout.contains("Example"), "{run:?}");
}

#[test]
fn no_subcommand_prints_help() {
    let run = flint(&[]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(run.stderr.contains("Usage: flint"), "{run:?}");
}

/// The binary allocates with jemalloc with small thread caches (flint::process::allocator): jemalloc reads
/// the options Flint exports under its prefixed symbol name, or silently ignores them under
/// any other. Its statistics at exit (asked for through the run-time variable, which adds to
/// the compiled-in options) show what it read.
#[test]
fn the_binary_allocates_with_jemalloc_with_small_bounded_thread_caches() {
    let output = Command::new(env!("CARGO_BIN_EXE_flint"))
        .arg("--version")
        .env("_RJEM_MALLOC_CONF", "stats_print:true")
        .output()
        .expect("the flint binary runs");
    assert!(output.status.success());
    let stats = String::from_utf8_lossy(&output.stderr);
    for option in [
        "opt.tcache: true",
        "opt.tcache_max: 1024",
        "opt.tcache_nslots_small_max: 16",
    ] {
        assert!(stats.contains(option), "{option} missing: {stats}");
    }
}

/// Issue 32: a flint process started under the common soft open-files limit of 1,024 raises
/// it to the hard limit (read from the running process's `/proc/PID/limits`).
#[test]
fn a_flint_process_raises_its_open_files_limit_to_the_hard_one() {
    let hard = Command::new("sh")
        .args(["-c", "ulimit -Hn"])
        .output()
        .expect("sh runs");
    let hard = String::from_utf8_lossy(&hard.stdout).trim().to_owned();
    if hard == "unlimited" || hard.parse::<u64>().is_ok_and(|h| h <= 1024) {
        eprintln!("SKIPPED: the hard open-files limit is {hard}: nothing to raise to");
        return;
    }
    let dir = Scratch::new("nofile");
    let config = dir.path("flint.toml");
    std::fs::write(&config, "[rest]\nport = 0\n").unwrap();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -Sn 1024 && exec {} jobmanager --bind 127.0.0.1:0 --pool-size 0 --insecure \
             --config {}",
            env!("CARGO_BIN_EXE_flint"),
            arg(&config)
        ))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("flint jobmanager starts");
    // Its first line says it is ready, after the limit was raised.
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let open_files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a Max open files line");
    let numbers: Vec<&str> = open_files.split_whitespace().skip(3).take(2).collect();
    assert_eq!(
        numbers,
        [hard.as_str(), hard.as_str()],
        "{open_files} (ready: {line})"
    );
}

/// Issue 32 item 2: a blocking all-to-all of P = 256 (65,536 channels, every buffer written to
/// disk) runs in a process whose open-files limit, soft and hard, is 1,024. With a spill file per
/// subpartition, kept open until the partition was released, the first wave of producers
/// needed thousands and failed naming the limit; with one per partition, closed once its
/// producer finished, the process holds about one per running producer. Network memory is
/// raised (a separate matter: the per-gate requirement).
#[test]
#[allow(clippy::disallowed_methods)] // waits for a real process in real time
fn a_blocking_all_to_all_of_p_256_runs_under_an_open_files_limit_of_1024() {
    const WIDE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/wide-blocking.toml");
    let hard = Command::new("sh")
        .args(["-c", "ulimit -Hn"])
        .output()
        .expect("sh runs");
    let hard = String::from_utf8_lossy(&hard.stdout).trim().to_owned();
    if hard.parse::<u64>().is_ok_and(|h| h < 1024) {
        eprintln!("SKIPPED: the hard open-files limit is {hard}, below the 1,024 this test sets");
        return;
    }
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n 1024 && exec {} run --embedded {WIDE} --pool-size 2 --slots 16 \
             --param records=1024 --param bytes=100 --timeout 300s",
            env!("CARGO_BIN_EXE_flint"),
        ))
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("flint runs");
    let open = |pid: u32| std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count);
    let mut most_open = 0;
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(300);
    while child.try_wait().unwrap().is_none() {
        most_open = most_open.max(open(child.id()));
        assert!(std::time::Instant::now() < give_up, "the job never ended");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let run: Run = child.wait_with_output().unwrap().into();
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(run.stdout.contains("FINISHED"), "{run:?}");
    // (Shown, not asserted: the limit itself is the bound, and the job fails if it is hit.)
    eprintln!("P = 256 blocking all-to-all: at most {most_open} files open");
}
