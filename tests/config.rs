//! Configuration: precedence (defaults < file < `FLINT_*` variables < flags) through the loader
//! and through `flint config --show`, every invalid-value error (each key with a bad value of
//! each kind it could be given, each rule across keys), unknown keys and variables, and the
//! example `flint.toml`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use flint::ClusterConfig;
use flint::config::keys::{self, Key};
use flint::config::{ConfigError, ConfigSources, ConfigWarning, FlagOverride, Origin};

mod common;
use common::cli::Scratch;

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/flint.toml");

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// `flint ARGS` with exactly the environment `vars` (nothing inherited, so the test's own
/// environment cannot leak in).
fn flint(args: &[&str], vars: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(args)
        .env_clear()
        .envs(vars.iter().copied())
        .output()
        .expect("the flint binary runs");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `flint config --show` output: key → (value, origin). Unset keys are comments: left out.
fn parse_show(text: &str) -> BTreeMap<String, (String, String)> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .map(|line| {
            let (assignment, origin) = line.rsplit_once("  # ").expect("an origin comment");
            let (key, value) = assignment.split_once(" = ").expect("key = value");
            (
                key.to_owned(),
                (value.trim_end().to_owned(), origin.to_owned()),
            )
        })
        .collect()
}

fn show(args: &[&str], vars: &[(&str, &str)]) -> BTreeMap<String, (String, String)> {
    let mut all = vec!["config", "--show"];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = flint(&all, vars);
    assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    parse_show(&stdout)
}

fn entry(value: &str, origin: &str) -> (String, String) {
    (value.to_owned(), origin.to_owned())
}

const LAYERED_FILE: &str = r#"
[heartbeat]
interval = "2s"
[resourcemanager]
pool-size = 3
[taskmanager]
slots = 2
"#;

#[test]
fn flags_win_over_variables_which_win_over_the_file_through_the_binary() {
    let dir = Scratch::new("precedence");
    let file = dir.write("flint.toml", LAYERED_FILE);
    let file_arg = file.display().to_string();
    let shown = show(
        &[
            "--config",
            &file_arg,
            "--slots",
            "7",
            "-D",
            "rest.port=9002",
        ],
        &[
            ("FLINT_RESOURCEMANAGER_POOL_SIZE", "4"),
            ("FLINT_TASKMANAGER_SLOTS", "5"),
            ("FLINT_REST_PORT", "9001"),
            ("FLINT_REST_TOKEN", "hunter2-secret"),
            ("FLINT_SECRET", "cluster-secret"),
        ],
    );
    let from_file = format!("file {file_arg}");
    assert_eq!(shown["heartbeat.interval"], entry("\"2s\"", &from_file));
    assert_eq!(
        shown["resourcemanager.pool-size"],
        entry("4", "env FLINT_RESOURCEMANAGER_POOL_SIZE")
    );
    assert_eq!(shown["taskmanager.slots"], entry("7", "flag --slots"));
    assert_eq!(shown["rest.port"], entry("9002", "flag -D"));
    assert_eq!(shown["heartbeat.timeout"], entry("\"50s\"", "default"));
    assert_eq!(
        shown["rest.token"],
        entry("\"***\"", "env FLINT_REST_TOKEN")
    );
    // A line per key: the ones with a value, and the optional ones unset as comments.
    let optional = keys::keys().iter().filter(|k| k.is_optional()).count();
    assert_eq!(
        shown.len(),
        keys::keys().len() - optional + 1,
        "rest.token is set"
    );
}

#[test]
fn the_shown_configuration_is_a_configuration_file_that_reads_back_the_same() {
    let dir = Scratch::new("show-reads-back");
    let file = dir.write("flint.toml", LAYERED_FILE);
    let (code, stdout, stderr) = flint(
        &[
            "config",
            "--show",
            "--config",
            &file.display().to_string(),
            "--pool-size",
            "6",
        ],
        &[("FLINT_HEARTBEAT_TIMEOUT", "1min"), ("FLINT_SEED", "99")],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stdout.contains("hunter2"));
    let again = dir.write("shown.toml", &stdout);
    let reread = show(&["--config", &again.display().to_string()], &[]);
    let first = parse_show(&stdout);
    assert_eq!(first.len(), reread.len());
    for (key, (value, _)) in &first {
        assert_eq!(&reread[key].0, value, "{key}");
        assert_eq!(reread[key].1, format!("file {}", again.display()), "{key}");
    }
    assert_eq!(first["seed"], entry("99", "env FLINT_SEED"));
    assert_eq!(
        first["resourcemanager.pool-size"],
        entry("6", "flag --pool-size")
    );
}

#[test]
fn flint_config_names_the_file_and_config_wins_over_it() {
    let dir = Scratch::new("flint-config-var");
    let by_var = dir.write("by-var.toml", "[taskmanager]\nslots = 3\n");
    let by_flag = dir.write("by-flag.toml", "[taskmanager]\nslots = 4\n");
    let var = by_var.display().to_string();
    let shown = show(&[], &[("FLINT_CONFIG", &var)]);
    assert_eq!(
        shown["taskmanager.slots"],
        entry("3", &format!("file {var}"))
    );
    let flag = by_flag.display().to_string();
    let shown = show(&["--config", &flag], &[("FLINT_CONFIG", &var)]);
    assert_eq!(
        shown["taskmanager.slots"],
        entry("4", &format!("file {flag}"))
    );
    // --ignore-env: neither FLINT_CONFIG nor the variables count.
    let shown = show(
        &["--ignore-env"],
        &[("FLINT_CONFIG", &var), ("FLINT_TASKMANAGER_SLOTS", "9")],
    );
    assert_eq!(shown["taskmanager.slots"], entry("1", "default"));
}

#[test]
fn the_loader_layers_the_sources_and_records_each_origin() {
    let dir = Scratch::new("loader");
    let file = dir.write("flint.toml", LAYERED_FILE);
    let loaded = ConfigSources {
        file: Some(file.clone()),
        env: env(&[
            ("FLINT_RESOURCEMANAGER_POOL_SIZE", "4"),
            ("FLINT_TASKMANAGER_SLOTS", "5"),
            ("FLINT_HEARTBEAT_TIMEOUT", "30000"),
            ("PATH", "/usr/bin"),
        ]),
        flags: vec![
            FlagOverride::new("taskmanager.slots", "6", "-D"),
            FlagOverride::new("taskmanager.slots", "7", "--slots"),
        ],
    }
    .load()
    .unwrap();
    let config = &loaded.config;
    assert_eq!(config.heartbeat.interval.as_secs(), 2);
    assert_eq!(config.heartbeat.timeout.as_secs(), 30);
    assert_eq!(config.resourcemanager.pool_size, 4);
    assert_eq!(config.taskmanager.slots, 7);
    assert_eq!(*loaded.origin("heartbeat.interval"), Origin::File(file));
    assert_eq!(
        *loaded.origin("resourcemanager.pool-size"),
        Origin::Env("FLINT_RESOURCEMANAGER_POOL_SIZE".into())
    );
    assert_eq!(
        *loaded.origin("taskmanager.slots"),
        Origin::Flag("--slots".into())
    );
    assert_eq!(*loaded.origin("rest.port"), Origin::Default);
    assert!(!loaded.is_set("rest.port"));
    assert_eq!(loaded.origins.len(), keys::keys().len());
    assert!(loaded.warnings.is_empty());
}

#[test]
fn no_sources_is_the_defaults() {
    let loaded = ConfigSources::default().load().unwrap();
    assert_eq!(loaded.config, ClusterConfig::default());
    assert!(loaded.origins.values().all(|o| *o == Origin::Default));
}

/// Loads `vars` alone; the error's text.
fn env_error(var: &str, value: &str) -> String {
    ConfigSources {
        env: env(&[(var, value)]),
        ..ConfigSources::default()
    }
    .load()
    .map(|_| ())
    .expect_err(&format!("{var}={value} is refused"))
    .to_string()
}

/// Loads a file holding `key = value` alone; the error's text.
fn file_error(dir: &Scratch, key: &str, value: &str) -> String {
    let path = dir.write("bad.toml", &format!("{key} = {value}\n"));
    ConfigSources {
        file: Some(path),
        ..ConfigSources::default()
    }
    .load()
    .map(|_| ())
    .expect_err(&format!("{key} = {value} is refused"))
    .to_string()
}

/// Bad values for a key of this kind, as text (variables, flags) and as TOML (the file).
fn bad_values(key: &Key) -> (Vec<String>, Vec<String>) {
    let (mut text, mut toml): (Vec<String>, Vec<String>) = match key.kind_name() {
        "duration" => (
            vec![
                "ten".into(),
                "0".into(),
                "0s".into(),
                "-5s".into(),
                "5 parsecs".into(),
            ],
            vec![
                "-1".into(),
                "0".into(),
                "true".into(),
                "1.5".into(),
                "\"ten\"".into(),
            ],
        ),
        "integer" => (
            vec!["x".into(), "-1".into(), "1.5".into(), "".into()],
            vec!["-1".into(), "\"four\"".into(), "2.0".into(), "[1]".into()],
        ),
        "size" => (
            vec!["0".into(), "64 parsecs".into(), "-1mb".into()],
            vec!["0".into(), "-1".into(), "\"lots\"".into(), "false".into()],
        ),
        "port" => (
            vec!["65536".into(), "http".into(), "-1".into()],
            vec!["65536".into(), "-80".into(), "\"http\"".into()],
        ),
        "string" | "path" => (
            vec!["".into(), "   ".into()],
            vec!["5".into(), "\"\"".into(), "[\"a\"]".into()],
        ),
        "enum" => (
            vec!["kubernetes".into(), "".into()],
            vec!["\"kubernetes\"".into(), "1".into()],
        ),
        "boolean" => (
            vec!["yes".into(), "1".into(), "".into()],
            vec!["1".into(), "\"maybe\"".into(), "[true]".into()],
        ),
        "list" => (
            vec!["[1, 2]".into(), "[unclosed".into()],
            vec!["\"ssh\"".into(), "[1, 2]".into(), "5".into()],
        ),
        other => panic!("a kind without bad values: {other}"),
    };
    // Integers out of their range, where the range is narrower than the type.
    if let Some(range) = key.accepts().strip_prefix("a whole number from ") {
        let (min, max) = range.split_once(" to ").unwrap();
        let (min, max): (u64, u64) = (min.parse().unwrap(), max.parse().unwrap());
        if max < u64::MAX {
            text.push((max + 1).to_string());
            toml.push((max + 1).to_string());
        }
        if min > 0 {
            text.push((min - 1).to_string());
            toml.push((min - 1).to_string());
        }
    }
    (text, toml)
}

#[test]
fn every_key_refuses_bad_values_from_every_source_naming_key_value_source_and_what_it_accepts() {
    let dir = Scratch::new("bad-values");
    let mut checked = 0;
    for key in keys::keys() {
        let (text, toml) = bad_values(key);
        for value in text {
            let var = key.env_var();
            let error = env_error(&var, &value);
            let shown = if key.secret {
                "***".to_owned()
            } else {
                value.clone()
            };
            let expected = format!(
                "invalid configuration: {} = \"{}\" (from env {var}): expected {}",
                key.name,
                shown,
                key.accepts()
            );
            assert_eq!(error, expected);
            checked += 1;
        }
        for value in toml {
            let error = file_error(&dir, key.name, &value);
            let shown = if key.secret {
                "\"***\"".to_owned()
            } else {
                value.clone()
            };
            let prefix = format!("invalid configuration: {} = {shown} (from file ", key.name);
            assert!(
                error.starts_with(&prefix),
                "{error}\n  expected it to start with {prefix}"
            );
            assert!(
                error.ends_with(&format!(": expected {}", key.accepts())),
                "{error}"
            );
            checked += 1;
        }
    }
    assert!(checked > 200, "only {checked} bad values");
}

#[test]
fn the_messages_say_what_is_accepted_in_words() {
    assert_eq!(
        env_error("FLINT_HEARTBEAT_INTERVAL", "ten"),
        "invalid configuration: heartbeat.interval = \"ten\" (from env FLINT_HEARTBEAT_INTERVAL): \
         expected a duration above zero such as \"10s\", \"500ms\", \"5min\" or an integer of \
         milliseconds"
    );
    assert_eq!(
        env_error("FLINT_TASKMANAGER_SLOTS", "0"),
        "invalid configuration: taskmanager.slots = \"0\" (from env FLINT_TASKMANAGER_SLOTS): \
         expected a whole number from 1 to 4096"
    );
    assert_eq!(
        env_error("FLINT_RESOURCEMANAGER_DRIVER", "yarn"),
        "invalid configuration: resourcemanager.driver = \"yarn\" (from env \
         FLINT_RESOURCEMANAGER_DRIVER): expected one of \"local_process\", \"command\", \
         \"slurm\", \"standalone\""
    );
    assert_eq!(
        env_error("FLINT_REST_PORT", "99999"),
        "invalid configuration: rest.port = \"99999\" (from env FLINT_REST_PORT): expected a \
         port number from 0 to 65535 (0 picks a free port)"
    );
    assert_eq!(
        env_error("FLINT_REST_TOKEN", ""),
        "invalid configuration: rest.token = \"***\" (from env FLINT_REST_TOKEN): expected a \
         non-empty string"
    );
    assert_eq!(
        env_error("FLINT_REST_ADDRESS", ""),
        "invalid configuration: rest.address = \"\" (from env FLINT_REST_ADDRESS): expected a \
         non-empty string"
    );
}

#[test]
fn values_are_read_alike_from_every_source() {
    for (var, value) in [
        ("FLINT_HEARTBEAT_INTERVAL", "500"),
        ("FLINT_HEARTBEAT_INTERVAL", "500ms"),
        ("FLINT_RESOURCEMANAGER_DRIVER", "Standalone"),
        ("FLINT_RESOURCEMANAGER_COMMAND_HOSTS", "a, b"),
        ("FLINT_RESOURCEMANAGER_COMMAND_HOSTS", "[\"a\", \"b\"]"),
        ("FLINT_TASKMANAGER_SPILL_THRESHOLD", "1mb"),
    ] {
        let loaded = ConfigSources {
            env: env(&[(var, value)]),
            ..ConfigSources::default()
        }
        .load()
        .unwrap_or_else(|e| panic!("{var}={value}: {e}"));
        let c = loaded.config;
        match var {
            "FLINT_HEARTBEAT_INTERVAL" => assert_eq!(c.heartbeat.interval.as_millis(), 500),
            "FLINT_RESOURCEMANAGER_DRIVER" => {
                assert_eq!(
                    c.resourcemanager.driver,
                    flint::config::DriverKind::Standalone
                )
            }
            "FLINT_RESOURCEMANAGER_COMMAND_HOSTS" => {
                assert_eq!(c.resourcemanager.command.hosts, ["a", "b"])
            }
            _ => assert_eq!(c.taskmanager.spill_threshold, 1 << 20),
        }
    }
}

/// One rule across keys: the variables that break it, the key named, its value, what it
/// accepts and the other key with its source.
struct Rule {
    vars: &'static [(&'static str, &'static str)],
    key: &'static str,
    value: &'static str,
    expected: &'static str,
    related: &'static str,
}

const RULES: &[Rule] = &[
    Rule {
        vars: &[
            ("FLINT_RESOURCEMANAGER_MAX_POOL_SIZE", "2"),
            ("FLINT_RESOURCEMANAGER_POOL_SIZE", "3"),
        ],
        key: "resourcemanager.pool-size",
        value: "3",
        expected: "a whole number from 0 to resourcemanager.max-pool-size (2)",
        related: "resourcemanager.max-pool-size from env FLINT_RESOURCEMANAGER_MAX_POOL_SIZE",
    },
    Rule {
        vars: &[("FLINT_HEARTBEAT_INTERVAL", "1min")],
        key: "heartbeat.timeout",
        value: "\"50s\"",
        expected: "more than heartbeat.interval (\"1min\")",
        related: "heartbeat.interval from env FLINT_HEARTBEAT_INTERVAL",
    },
    Rule {
        vars: &[("FLINT_RESOURCEMANAGER_DRIVER", "command")],
        key: "resourcemanager.command.template",
        value: "[]",
        expected: "the program and its arguments when resourcemanager.driver is \"command\", \
                   e.g. [\"ssh\", \"{host}\", \"flint\", \"taskmanager\", ...]",
        related: "resourcemanager.driver from env FLINT_RESOURCEMANAGER_DRIVER",
    },
    Rule {
        vars: &[
            ("FLINT_RESOURCEMANAGER_DRIVER", "command"),
            ("FLINT_RESOURCEMANAGER_COMMAND_TEMPLATE", "ssh,{host}"),
        ],
        key: "resourcemanager.command.hosts",
        value: "[]",
        expected: "at least one host when resourcemanager.driver is \"command\"",
        related: "resourcemanager.driver from env FLINT_RESOURCEMANAGER_DRIVER",
    },
    Rule {
        vars: &[("FLINT_RESOURCEMANAGER_START_WORKER_INITIAL_BACKOFF", "1min")],
        key: "resourcemanager.start-worker.max-backoff",
        value: "\"30s\"",
        expected: "at least resourcemanager.start-worker.initial-backoff (\"1min\")",
        related: "resourcemanager.start-worker.initial-backoff from env \
                  FLINT_RESOURCEMANAGER_START_WORKER_INITIAL_BACKOFF",
    },
    Rule {
        vars: &[("FLINT_RESOURCEMANAGER_REGISTRATION_MAX_BACKOFF", "10ms")],
        key: "resourcemanager.registration.max-backoff",
        value: "\"10ms\"",
        expected: "at least resourcemanager.registration.initial-backoff (\"100ms\")",
        related: "",
    },
    Rule {
        vars: &[("FLINT_CLUSTER_REGISTRATION_INITIAL_TIMEOUT", "1h")],
        key: "cluster.registration.max-timeout",
        value: "\"30s\"",
        expected: "at least cluster.registration.initial-timeout (\"1h\")",
        related: "cluster.registration.initial-timeout from env \
                  FLINT_CLUSTER_REGISTRATION_INITIAL_TIMEOUT",
    },
    Rule {
        vars: &[("FLINT_TRANSPORT_TLS_CERT", "/etc/flint/node.pem")],
        key: "transport.tls.key",
        value: "(not set)",
        expected: "a path: transport.tls.cert, transport.tls.key and transport.tls.ca go together",
        related: "transport.tls.cert from env FLINT_TRANSPORT_TLS_CERT",
    },
];

#[test]
fn every_rule_across_keys_names_both_keys_and_their_sources() {
    for rule in RULES {
        let error = ConfigSources {
            env: env(rule.vars),
            ..ConfigSources::default()
        }
        .load()
        .expect_err(rule.key);
        assert_eq!(error.key(), Some(rule.key), "{error}");
        let text = error.to_string();
        let from = rule
            .vars
            .iter()
            .find(|(var, _)| keys::find_env(var).is_some_and(|k| k.name == rule.key))
            .map_or(" (default)".to_owned(), |(var, _)| {
                format!(" (from env {var})")
            });
        let mut expected = format!(
            "invalid configuration: {} = {}{from}: expected {}",
            rule.key, rule.value, rule.expected
        );
        if !rule.related.is_empty() {
            expected = format!("{expected} ({})", rule.related);
        }
        assert!(text.starts_with(&expected), "{text}\n  expected {expected}");
    }
}

#[test]
fn unknown_keys_in_the_file_and_flags_are_errors_naming_the_closest() {
    let dir = Scratch::new("unknown");
    let path = dir.write("flint.toml", "[slot]\nrequest-timeout = \"1min\"\n");
    let error = ConfigSources {
        file: Some(path.clone()),
        ..ConfigSources::default()
    }
    .load()
    .unwrap_err();
    assert!(matches!(error, ConfigError::UnknownKey { .. }), "{error:?}");
    assert_eq!(
        error.to_string(),
        format!(
            "unknown configuration key slot.request-timeout (from file {}): did you mean \
             slot.request.timeout?",
            path.display()
        )
    );
    let error = ConfigSources {
        flags: vec![FlagOverride::new("pool-size", "3", "-D")],
        ..ConfigSources::default()
    }
    .load()
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "unknown configuration key pool-size (from flag -D): did you mean \
         resourcemanager.pool-size?"
    );
    let error = ConfigSources {
        flags: vec![FlagOverride::new("parallelism.default", "3", "-D")],
        ..ConfigSources::default()
    }
    .load()
    .unwrap_err();
    assert!(
        error
            .to_string()
            .ends_with("(flint config --show lists every key)"),
        "{error}"
    );
}

#[test]
fn malformed_and_missing_files_are_named() {
    let dir = Scratch::new("malformed");
    let path = dir.write("flint.toml", "[heartbeat\ninterval = 1\n");
    let error = ConfigSources {
        file: Some(path.clone()),
        ..ConfigSources::default()
    }
    .load()
    .unwrap_err();
    assert!(matches!(error, ConfigError::Syntax { .. }), "{error:?}");
    assert!(error.to_string().contains(&path.display().to_string()));
    let missing = dir.0.join("nowhere.toml");
    let error = ConfigSources {
        file: Some(missing.clone()),
        ..ConfigSources::default()
    }
    .load()
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("cannot read the configuration file {}", missing.display())
    );
}

#[test]
fn an_unknown_flint_variable_is_a_warning_naming_the_closest_and_others_are_ignored() {
    let sources = ConfigSources {
        env: env(&[
            ("FLINT_HEARTBEAT_INTERVALL", "5s"),
            ("FLINT_SLOTS", "4"),
            ("FLINT_SECRET", "x"),
            ("FLINT_JOBMANAGER", "127.0.0.1:8081"),
            ("FLINT_SIM_SEED", "3"),
            ("FLINT_BENCH_SEEDS", "3"),
            ("FLINTY", "1"),
        ]),
        ..ConfigSources::default()
    };
    let loaded = sources.load().unwrap();
    assert_eq!(loaded.config, ClusterConfig::default());
    assert_eq!(
        loaded.warnings,
        vec![
            ConfigWarning::UnknownEnv {
                var: "FLINT_HEARTBEAT_INTERVALL".into(),
                suggestion: Some(("FLINT_HEARTBEAT_INTERVAL".into(), "heartbeat.interval")),
            },
            ConfigWarning::UnknownEnv {
                var: "FLINT_SLOTS".into(),
                suggestion: Some(("FLINT_TASKMANAGER_SLOTS".into(), "taskmanager.slots")),
            },
        ]
    );
    // Through the binary: printed, and the command still succeeds.
    let (code, _, stderr) = flint(
        &["config", "--show"],
        &[("FLINT_HEARTBEAT_INTERVALL", "5s")],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains(
            "warning: ignoring the environment variable FLINT_HEARTBEAT_INTERVALL: no \
             configuration key is set by it (did you mean FLINT_HEARTBEAT_INTERVAL, for \
             heartbeat.interval?)"
        ),
        "{stderr}"
    );
}

#[test]
fn the_binary_exits_2_with_the_message_for_a_bad_value_and_never_prints_a_secret() {
    let (code, stdout, stderr) = flint(
        &["config", "--show", "--slots", "many"],
        &[("FLINT_REST_TOKEN", "hunter2")],
    );
    assert_eq!(code, Some(2));
    assert!(stdout.is_empty(), "{stdout}");
    assert_eq!(
        stderr.trim_end(),
        "flint: invalid configuration: taskmanager.slots = \"many\" (from flag --slots): \
         expected a whole number from 1 to 4096"
    );
    let (code, stdout, _) = flint(&["config", "--show"], &[("FLINT_REST_TOKEN", "hunter2")]);
    assert_eq!(code, Some(0));
    assert!(!stdout.contains("hunter2"), "{stdout}");
    assert!(stdout.contains("rest.token = \"***\""), "{stdout}");
    // A node process refuses the same way before it starts anything.
    let (code, _, stderr) = flint(
        &["taskmanager", "--jobmanager", "127.0.0.1:1"],
        &[("FLINT_HEARTBEAT_TIMEOUT", "1s")],
    );
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("heartbeat.timeout = \"1s\" (from env FLINT_HEARTBEAT_TIMEOUT)"),
        "{stderr}"
    );
}

/// The example with its commented-out `# key = value` lines (the optional keys) uncommented.
fn uncommented(text: &str) -> String {
    text.lines()
        .map(|line| match line.strip_prefix("# ") {
            Some(rest)
                if rest.split_once(" = ").is_some_and(|(key, _)| {
                    !key.is_empty()
                        && key
                            .chars()
                            .all(|c| c.is_ascii_alphabetic() || c == '-' || c == '.')
                }) =>
            {
                rest
            }
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_example_file_holds_the_defaults_and_documents_every_key() {
    let text = std::fs::read_to_string(EXAMPLE).unwrap();
    let loaded = ConfigSources {
        file: Some(PathBuf::from(EXAMPLE)),
        ..ConfigSources::default()
    }
    .load()
    .unwrap();
    assert_eq!(loaded.config, ClusterConfig::default());
    for key in keys::keys() {
        let set = loaded.is_set(key.name);
        assert_eq!(set, !key.is_optional(), "{}: in the file: {set}", key.name);
    }
    // Uncommented, the optional keys' examples are valid and every key is set by the file.
    let dir = Scratch::new("example");
    let path = dir.write("uncommented.toml", &uncommented(&text));
    let loaded = ConfigSources {
        file: Some(path),
        ..ConfigSources::default()
    }
    .load()
    .unwrap_or_else(|e| panic!("{e}"));
    for key in keys::keys() {
        assert!(loaded.is_set(key.name), "{} is not in flint.toml", key.name);
    }
    // Each key has a comment right above it (or above its section's first key).
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let bare = line.strip_prefix("# ").unwrap_or(line);
        if bare.contains(" = ") && !bare.starts_with(' ') && i > 0 {
            assert!(
                lines[i - 1].starts_with('#'),
                "no comment above line {}: {line}",
                i + 1
            );
        }
    }
}

/// Kills the process when dropped, so a failing test leaves nothing running.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_jobmanager_hands_its_children_its_effective_configuration() {
    use std::io::BufRead as _;

    let dir = Scratch::new("children");
    let work = dir.0.join("work");
    let file = dir.write(
        "flint.toml",
        &format!(
            "[taskmanager]\nslots = 2\nworking-dir = \"{}\"\n",
            work.display()
        ),
    );
    let file_arg = file.display().to_string();
    let args = [
        "--config",
        &file_arg,
        "--pool-size",
        "0",
        "-D",
        "heartbeat.interval=2s",
        "-D",
        "rest.port=0",
    ];
    let vars = [
        ("FLINT_HEARTBEAT_TIMEOUT", "1min"),
        ("FLINT_REST_TOKEN", "hunter2"),
        ("FLINT_SECRET", "the-cluster-secret"),
    ];
    let mut command = Command::new(env!("CARGO_BIN_EXE_flint"));
    command
        .args(["jobmanager", "--bind", "127.0.0.1:0"])
        .args(args)
        .env_clear()
        .envs(vars)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut jm = Running(command.spawn().expect("flint jobmanager starts"));
    // The file is written before the JobManager says it listens.
    let mut line = String::new();
    std::io::BufReader::new(jm.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("flint jobmanager listening on"), "{line}");
    // In the JobManager's private working directory, made in the configured one.
    let private: Vec<PathBuf> = std::fs::read_dir(&work)
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("flint-jm-"))
        })
        .collect();
    assert_eq!(private.len(), 1, "{private:?}");
    let child_file = private[0].join("taskmanager.toml");
    let child_text = std::fs::read_to_string(&child_file).unwrap();
    drop(jm);
    assert!(!child_text.contains("hunter2"), "{child_text}");

    let mut effective = show(&args, &vars);
    // What a child sees: the file alone, whatever its inherited environment says.
    let child_arg = child_file.display().to_string();
    let child = show(
        &["--config", &child_arg, "--ignore-env"],
        &[
            ("FLINT_HEARTBEAT_INTERVAL", "7s"),
            ("FLINT_TASKMANAGER_SLOTS", "9"),
        ],
    );
    assert_eq!(effective.remove("rest.token").unwrap().0, "\"***\"");
    // The children work inside the JobManager's private directory.
    let mut child = child;
    assert_eq!(
        child.remove("taskmanager.working-dir").unwrap().0,
        format!("{:?}", private[0].display().to_string())
    );
    effective.remove("taskmanager.working-dir");
    assert_eq!(effective.len(), child.len());
    for (key, (value, _)) in &effective {
        assert_eq!(&child[key].0, value, "{key}");
    }
    assert_eq!(child["heartbeat.interval"].0, "\"2s\"");
    assert_eq!(child["heartbeat.timeout"].0, "\"1min\"");
    assert_eq!(child["taskmanager.slots"].0, "2");
}
