//! The registry's invariants, the value formats and the rules of [`ClusterConfig::validate`].
//! The sources, precedence and every error message through the binary: `tests/config.rs`.

use std::collections::BTreeSet;
use std::time::Duration;

use super::kind::{Raw, format_duration, parse_duration};
use super::*;

fn error_key(config: &ClusterConfig) -> String {
    match config.validate() {
        Err(error) => error.key().expect("an error about a key").to_owned(),
        Ok(()) => panic!("expected an invalid key"),
    }
}

/// A configuration with every key away from its default (and valid).
fn everything_changed() -> ClusterConfig {
    let mut c = ClusterConfig::default();
    c.cluster.id = ClusterId::new("prod \"eu\"");
    c.cluster.registration.initial_timeout = Duration::from_millis(250);
    c.cluster.registration.max_timeout = Duration::from_secs(90);
    c.cluster.registration.error_delay = Duration::from_millis(1500);
    c.heartbeat.interval = Duration::from_secs(2);
    c.heartbeat.timeout = Duration::from_secs(3600);
    c.resourcemanager.pool_size = 9;
    c.resourcemanager.max_pool_size = 12;
    c.resourcemanager.max_workers_per_job = 5;
    c.resourcemanager.check_interval = Duration::from_millis(300);
    c.resourcemanager.taskmanager_registration.timeout = Duration::from_secs(61);
    c.resourcemanager.start_worker.initial_backoff = Duration::from_millis(5);
    c.resourcemanager.start_worker.max_backoff = Duration::from_secs(5);
    c.resourcemanager.registration.initial_backoff = Duration::from_millis(7);
    c.resourcemanager.registration.max_backoff = Duration::from_secs(7);
    c.resourcemanager.taskmanager_timeout = Duration::from_secs(120);
    c.resourcemanager.driver = DriverKind::Command;
    c.resourcemanager.command.template = vec!["ssh".into(), "{host}".into(), "a b,c".into()];
    c.resourcemanager.command.hosts = vec!["w1".into(), "w2".into()];
    c.slurm.partition = Some("batch".into());
    c.slurm.account = Some("phys ics".into());
    c.slurm.time_limit = Some("1:30:00".into());
    c.slurm.cpus_per_worker = Some(6);
    c.slurm.memory_per_worker = Some(3 << 30);
    c.slurm.sbatch_options = vec!["--qos=high".into(), "--output=/l/%j.out".into()];
    c.slurm.taskmanager_command = vec!["/opt/prog".into(), "taskmanager".into()];
    c.slurm.poll_interval = Duration::from_millis(2500);
    c.taskmanager.slots = 3;
    c.taskmanager.compute_threads = 5;
    c.jobstore.expiration_time = Duration::from_secs(600);
    c.jobstore.max_capacity = 50;
    c.batch_job_recovery.enabled = false;
    c.batch_job_recovery.previous_worker_recovery_timeout = Duration::from_secs(5);
    c.blob.max_size = 5 << 20;
    c.blob.cache_linger = Duration::from_secs(7);
    c.task.cancellation.interval = Duration::from_secs(5);
    c.task.cancellation.timeout = Duration::from_secs(60);
    c.taskmanager.working_dir = Some("/var/lib/flint dir".into());
    c.taskmanager.spill_threshold = 1000;
    c.taskmanager.spill_budget = Some(3 << 30);
    c.taskmanager.managed_memory = 3 << 30;
    c.taskmanager.network_buffer_size = 4096;
    c.taskmanager.network_buffers_per_channel = 4;
    c.taskmanager.network_floating_buffers_per_gate = 16;
    c.taskmanager.network_gate_window = 1 << 20;
    c.taskmanager.network_output_window = 2 << 20;
    c.taskmanager.network_required_per_gate = 4;
    c.taskmanager.network_required_per_output = 3;
    c.taskmanager.network_memory = 128 << 20;
    c.slot.request.timeout = Duration::from_secs(42);
    c.jobmanager.scheduler.slot_selection = crate::config::SlotSelectionKind::Pack;
    c.jobmanager.scheduler.region_order = crate::config::RegionOrderKind::Fifo;
    c.transport.tls = Some(crate::transport::tls::TlsConfig {
        cert: "/etc/flint/node.pem".into(),
        key: "/etc/flint/node.key".into(),
        ca: "C:\\flint\\ca.pem".into(),
    });
    c.rest.address = "0.0.0.0".into();
    c.rest.port = 0;
    c.rest.token = Some("s3cret".into());
    c.rest.token_file = Some("/etc/flint/rest-token".into());
    c.rest.allowed_hosts = vec!["flint.example".into(), "proxy:8443".into()];
    c.rest.read_without_token = true;
    c.jobmanager.max_subtasks = 5_000;
    c.jobmanager.max_jobs = 7;
    c.job.allowed_paths = vec!["/data/in".into(), "/data out".into()];
    c.high_availability = crate::config::HighAvailabilityConfig {
        kind: crate::config::HighAvailabilityKind::ZooKeeper,
        quorum: Some("zk1:2181,zk2:2182".into()),
        root: "/flint-test".into(),
        cluster_id: Some("ha-one".into()),
        storage_dir: Some("/shared/flint ha".into()),
        session_timeout: Duration::from_secs(2),
        connection_timeout: Duration::from_millis(1500),
        auth_file: Some("/etc/flint/zk auth".into()),
    };
    c.seed = Some(u64::MAX);
    c
}

#[test]
fn every_key_has_a_unique_name_and_variable_and_a_doc() {
    let names: BTreeSet<_> = keys::keys().iter().map(|k| k.name).collect();
    let vars: BTreeSet<_> = keys::keys().iter().map(|k| k.env_var()).collect();
    assert_eq!(names.len(), keys::keys().len());
    assert_eq!(vars.len(), keys::keys().len(), "two keys share a variable");
    for key in keys::keys() {
        assert!(
            !key.doc.is_empty() && key.doc.ends_with('.'),
            "{}",
            key.name
        );
        assert!(key.env_var().starts_with("FLINT_"), "{}", key.name);
        assert_eq!(
            key.default_value().is_none(),
            key.is_optional(),
            "{}",
            key.name
        );
        assert!(
            !NOT_CONFIG_VARS.contains(&key.env_var().as_str())
                && !NOT_CONFIG_PREFIXES
                    .iter()
                    .any(|p| key.env_var().starts_with(p)),
            "{} collides with a variable that is not configuration",
            key.name
        );
    }
}

#[test]
fn the_issue_names_its_keys_exactly() {
    for name in [
        "heartbeat.interval",
        "heartbeat.timeout",
        "cluster.registration.initial-timeout",
        "slot.request.timeout",
        "resourcemanager.pool-size",
        "resourcemanager.max-pool-size",
        "taskmanager.slots",
        "resourcemanager.driver",
        "rest.address",
        "rest.port",
        "rest.token",
    ] {
        assert!(keys::find(name).is_some(), "{name}");
    }
    assert_eq!(
        keys::find("heartbeat.interval").unwrap().env_var(),
        "FLINT_HEARTBEAT_INTERVAL"
    );
    assert_eq!(
        keys::find("resourcemanager.pool-size").unwrap().env_var(),
        "FLINT_RESOURCEMANAGER_POOL_SIZE"
    );
}

#[test]
fn integer_ranges_fit_their_fields() {
    for key in keys::keys() {
        if let kind::Kind::Integer { min, max, .. } = key.kind {
            assert!(min <= max && max <= u64::from(u32::MAX), "{}", key.name);
        }
    }
}

#[test]
fn every_key_reads_back_what_it_writes() {
    let changed = everything_changed();
    changed.validate().unwrap();
    for key in keys::keys() {
        let mut config = ClusterConfig::default();
        if key.name.starts_with("transport.tls.") {
            config.transport.tls = changed.transport.tls.clone();
        }
        let written = key.value(&changed).expect("every key is set");
        let value: toml::Value = written.parse().unwrap_or_else(|e| panic!("{written}: {e}"));
        key.kind
            .apply(&mut config, Raw::Toml(&value))
            .unwrap_or_else(|_| panic!("{} refused its own {written}", key.name));
        assert_eq!(key.value(&config), Some(written), "{}", key.name);
        assert_ne!(
            key.value(&changed),
            key.default_value(),
            "{} unchanged",
            key.name
        );
    }
}

#[test]
fn the_childrens_file_reads_back_as_the_same_configuration_without_the_token() {
    let changed = everything_changed();
    let text = changed.to_toml_without_secrets();
    assert!(!text.contains("s3cret"), "{text}");
    let read = ClusterConfig::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let mut expected = changed;
    expected.rest.token = None;
    assert_eq!(read, expected);
    let defaults = ClusterConfig::default().to_toml_without_secrets();
    assert_eq!(
        ClusterConfig::from_toml_str(&defaults).unwrap(),
        ClusterConfig::default()
    );
}

#[test]
fn durations_read_as_flink_writes_them_and_print_in_one_unit() {
    assert_eq!(parse_duration("500"), Some(Duration::from_millis(500)));
    assert_eq!(parse_duration(" 10s "), Some(Duration::from_secs(10)));
    assert_eq!(parse_duration("5min"), Some(Duration::from_secs(300)));
    assert_eq!(parse_duration("1h 30min"), Some(Duration::from_secs(5400)));
    assert_eq!(parse_duration("ten"), None);
    assert_eq!(parse_duration("-1"), None);
    assert_eq!(format_duration(Duration::from_secs(300)), "5min");
    assert_eq!(format_duration(Duration::from_secs(7200)), "2h");
    assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
    assert_eq!(format_duration(Duration::from_micros(1500)), "1ms 500us");
    assert_eq!(format_duration(Duration::ZERO), "0ms");
}

#[test]
fn sizes_read_flinks_units() {
    let read = |text: &str| {
        let mut config = ClusterConfig::default();
        let key = keys::find("taskmanager.spill-threshold").unwrap();
        key.kind
            .apply(&mut config, Raw::Text(text))
            .ok()
            .map(|()| config.taskmanager.spill_threshold)
    };
    assert_eq!(read("64mb"), Some(64 << 20));
    assert_eq!(read("512 KiB"), Some(512 << 10));
    assert_eq!(read("1g"), Some(1 << 30));
    assert_eq!(read("4096"), Some(4096));
    assert_eq!(read("0"), None);
    assert_eq!(read("64 parsecs"), None);
    assert_eq!(read("99999999999tb"), None);
    let key = keys::find("taskmanager.spill-threshold").unwrap();
    assert_eq!(key.default_value().as_deref(), Some("\"64mb\""));
}

#[test]
fn defaults_are_valid_and_flink_like() {
    let config = ClusterConfig::default();
    config.validate().unwrap();
    assert_eq!(config.heartbeat.interval, Duration::from_secs(10));
    assert_eq!(config.heartbeat.timeout, Duration::from_secs(50));
    assert_eq!(config.slot.request.timeout, Duration::from_secs(300));
    assert_eq!(
        config.cluster.registration.initial_timeout,
        Duration::from_millis(100)
    );
    assert_eq!(
        config.cluster.registration.max_timeout,
        Duration::from_secs(30)
    );
    assert_eq!(
        (config.rest.address.as_str(), config.rest.port),
        ("127.0.0.1", 8081)
    );
}

#[test]
fn reads_toml_with_flink_keys_sections_and_dotted_keys() {
    let config = ClusterConfig::from_toml_str(
        r#"
        seed = 7
        slot.request.timeout = "1min"
        [cluster]
        id = "prod"
        [heartbeat]
        interval = 500
        timeout = "2s"
        [resourcemanager]
        pool-size = 4
        driver = "Standalone"
        taskmanager-registration.timeout = "1min"
        [taskmanager]
        slots = 3
        spill-threshold = "1mb"
        "#,
    )
    .unwrap();
    assert_eq!(config.cluster.id, ClusterId::new("prod"));
    assert_eq!(config.heartbeat.interval, Duration::from_millis(500));
    assert_eq!(config.heartbeat.timeout, Duration::from_secs(2));
    assert_eq!(config.resourcemanager.pool_size, 4);
    assert_eq!(config.resourcemanager.driver, DriverKind::Standalone);
    assert_eq!(
        config.resourcemanager.taskmanager_registration.timeout,
        Duration::from_secs(60)
    );
    assert_eq!(config.slot.request.timeout, Duration::from_secs(60));
    assert_eq!(config.taskmanager.slots, 3);
    assert_eq!(config.taskmanager.spill_threshold, 1 << 20);
    assert_eq!(config.seed, Some(7));
}

#[test]
fn the_command_driver_needs_a_template_and_hosts() {
    let config = ClusterConfig::from_toml_str(
        "[resourcemanager]\ndriver = \"command\"\n[resourcemanager.command]\ntemplate = [\"ssh\", \"{host}\"]\n",
    );
    let text = config.unwrap_err().to_string();
    assert!(
        text.contains("resourcemanager.command.hosts = []"),
        "{text}"
    );
    let config = ClusterConfig::from_toml_str(
        "[resourcemanager]\ndriver = \"command\"\n[resourcemanager.command]\ntemplate = [\"ssh\", \"{host}\"]\nhosts = [\"a\"]\n",
    )
    .unwrap();
    assert_eq!(config.resourcemanager.driver, DriverKind::Command);
    let text = ClusterConfig::from_toml_str("[resourcemanager]\ndriver = \"kubernetes\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        text.contains(r#"resourcemanager.driver = "kubernetes": expected one of "local_process", "command", "slurm", "standalone""#),
        "{text}"
    );
}

#[test]
fn zero_slots_names_the_key() {
    let mut config = ClusterConfig::default();
    config.taskmanager.slots = 0;
    assert_eq!(error_key(&config), "taskmanager.slots");
}

/// A network buffer must fit one message between TaskManagers: 8 MiB is the most.
#[test]
fn a_buffer_size_over_the_largest_record_names_the_key() {
    let mut config = ClusterConfig::default();
    config.taskmanager.network_buffer_size = crate::exchange::MAX_RECORD_BYTES as u64;
    config.taskmanager.network_memory = 1 << 30;
    assert!(config.validate().is_ok(), "{:?}", config.validate());
    config.taskmanager.network_buffer_size += 1;
    assert_eq!(error_key(&config), "taskmanager.network.buffer-size");
}

#[test]
fn zero_or_too_small_network_settings_name_the_key() {
    for (key, change) in [
        (
            "taskmanager.network.buffer-size",
            (|c: &mut ClusterConfig| c.taskmanager.network_buffer_size = 0)
                as fn(&mut ClusterConfig),
        ),
        ("taskmanager.network.buffers-per-channel", |c| {
            c.taskmanager.network_buffers_per_channel = 0
        }),
        ("taskmanager.network.floating-buffers-per-gate", |c| {
            c.taskmanager.network_floating_buffers_per_gate = 0
        }),
        ("taskmanager.network.memory", |c| {
            c.taskmanager.network_memory = 0
        }),
        ("taskmanager.network.required-buffers-per-gate", |c| {
            c.taskmanager.network_required_per_gate = 0
        }),
        ("taskmanager.network.required-buffers-per-output", |c| {
            c.taskmanager.network_required_per_output = 0
        }),
        ("taskmanager.network.memory", |c| {
            c.taskmanager.network_memory = 150 << 10 // < (2 + 2) × 4/3 + 1 buffers of 32 KiB
        }),
    ] {
        let mut config = ClusterConfig::default();
        change(&mut config);
        assert_eq!(error_key(&config), key);
    }
}

#[test]
fn absurd_pool_sizes_name_the_key() {
    let mut config = ClusterConfig::default();
    config.resourcemanager.pool_size = 4_000_000_000;
    assert_eq!(error_key(&config), "resourcemanager.pool-size");
    let mut config = ClusterConfig::default();
    config.resourcemanager.max_pool_size = 4_000_000_000;
    assert_eq!(error_key(&config), "resourcemanager.max-pool-size");
    let mut config = ClusterConfig::default();
    config.resourcemanager.max_pool_size = 2;
    config.resourcemanager.pool_size = 3;
    let text = config.validate().unwrap_err().to_string();
    assert_eq!(
        text,
        "invalid configuration: resourcemanager.pool-size = 3: expected a whole number from 0 to \
         resourcemanager.max-pool-size (2)"
    );
}

#[test]
fn a_negative_pool_size_in_a_file_names_key_value_and_range() {
    let err = ClusterConfig::from_toml_str("[resourcemanager]\npool-size = -1\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid configuration: resourcemanager.pool-size = -1: expected a whole number from 0 \
         to 100000"
    );
}

#[test]
fn heartbeat_timeout_must_exceed_interval() {
    let mut config = ClusterConfig::default();
    config.heartbeat.timeout = config.heartbeat.interval;
    assert_eq!(error_key(&config), "heartbeat.timeout");
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("heartbeat.timeout = \"10s\""), "{err}");
    assert!(
        err.contains("more than heartbeat.interval (\"10s\")"),
        "{err}"
    );
}

#[test]
fn task_cancellation_keys_have_flinks_defaults_and_are_checked() {
    let config = ClusterConfig::default();
    assert_eq!(config.task.cancellation.interval, Duration::from_secs(30));
    assert_eq!(config.task.cancellation.timeout, Duration::from_secs(180));
    let config = ClusterConfig::from_toml_str(
        "[task.cancellation]\ninterval = \"100ms\"\ntimeout = \"1s\"\n",
    )
    .unwrap();
    assert_eq!(
        config.task.cancellation.interval,
        Duration::from_millis(100)
    );
    assert_eq!(config.task.cancellation.timeout, Duration::from_secs(1));
    config.validate().unwrap();
    let mut short = ClusterConfig::default();
    short.task.cancellation.timeout = Duration::from_secs(1);
    assert_eq!(error_key(&short), "task.cancellation.timeout");
    let err = short.validate().unwrap_err().to_string();
    assert!(
        err.contains("at least task.cancellation.interval (\"30s\")"),
        "{err}"
    );
}

#[test]
fn zero_durations_and_inverted_backoffs_name_the_key() {
    let mut config = ClusterConfig::default();
    config.heartbeat.interval = Duration::ZERO;
    assert_eq!(error_key(&config), "heartbeat.interval");

    let mut config = ClusterConfig::default();
    config.cluster.registration.max_timeout = Duration::from_millis(10);
    assert_eq!(error_key(&config), "cluster.registration.max-timeout");

    let mut config = ClusterConfig::default();
    config.resourcemanager.start_worker.initial_backoff = Duration::ZERO;
    assert_eq!(
        error_key(&config),
        "resourcemanager.start-worker.initial-backoff"
    );
}

#[test]
fn tls_files_go_together() {
    let err = ClusterConfig::from_toml_str("[transport.tls]\ncert = \"a.pem\"\nca = \"ca.pem\"\n")
        .unwrap_err();
    assert_eq!(err.key(), Some("transport.tls.key"));
    assert!(err.to_string().contains("go together"), "{err}");
}

#[test]
fn unknown_keys_name_the_closest_and_bad_durations_what_is_accepted() {
    let err = ClusterConfig::from_toml_str("[heartbeat]\nintervall = 5\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown configuration key heartbeat.intervall: did you mean heartbeat.interval?"
    );
    let err = ClusterConfig::from_toml_str("[slot]\nrequest-timeout = \"1s\"\n").unwrap_err();
    assert!(
        err.to_string()
            .contains("did you mean slot.request.timeout?"),
        "{err}"
    );
    let err = ClusterConfig::from_toml_str("[heartbeats]\ninterval = 5\n").unwrap_err();
    assert!(err.to_string().contains("did you mean heartbeat?"), "{err}");
    let err = ClusterConfig::from_toml_str("[heartbeat]\ninterval = \"soon\"\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid configuration: heartbeat.interval = \"soon\": expected a duration above zero \
         such as \"10s\", \"500ms\", \"5min\" or an integer of milliseconds"
    );
    let err = ClusterConfig::from_toml_str("[heartbeat.interval]\nx = 1\n").unwrap_err();
    assert_eq!(err.key(), Some("heartbeat.interval"));
}

#[test]
fn a_secret_is_never_in_an_error() {
    let err = ClusterConfig::from_toml_str("[rest]\ntoken = 12345\n").unwrap_err();
    assert!(!err.to_string().contains("12345"), "{err}");
    assert!(err.to_string().contains("rest.token = \"***\""), "{err}");
}

#[test]
fn a_secret_given_as_a_flag_is_a_warning_that_names_the_safe_ways() {
    let sources = super::sources::ConfigSources {
        file: None,
        env: Vec::new(),
        flags: vec![
            super::sources::FlagOverride::new("rest.token", "s3cret", "-D"),
            super::sources::FlagOverride::new("taskmanager.slots", "2", "--slots"),
        ],
    };
    let warnings: Vec<String> = sources.warnings().iter().map(|w| w.to_string()).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let warning = &warnings[0];
    assert!(
        warning.contains("rest.token was given on the command line (-D)"),
        "{warning}"
    );
    assert!(warning.contains("rest.token-file"), "{warning}");
    assert!(warning.contains("FLINT_REST_TOKEN"), "{warning}");
    assert!(!warning.contains("s3cret"), "{warning}");
    // The same token from the environment is no warning.
    let from_env = super::sources::ConfigSources {
        file: None,
        env: vec![("FLINT_REST_TOKEN".into(), "s3cret".into())],
        flags: Vec::new(),
    };
    assert!(from_env.warnings().is_empty());
}

/// A key earlier versions had (here the refused-registration pause, gone with issue 12: a
/// refused TaskManager stops) is ignored with a warning, in a file and as a `-D` flag, so an old
/// configuration keeps working; an unknown key is still an error.
#[test]
fn a_retired_key_is_a_warning_not_an_error() {
    let dir = std::env::temp_dir().join(format!("flint-retired-key-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("old.toml");
    std::fs::write(
        &file,
        "[cluster.registration]\nrefused-registration-delay = \"30s\"\n",
    )
    .unwrap();
    let sources = super::sources::ConfigSources {
        file: Some(file.clone()),
        env: Vec::new(),
        flags: vec![super::sources::FlagOverride::new(
            "cluster.registration.refused-registration-delay",
            "5s",
            "-D",
        )],
    };
    let loaded = sources.load().expect("an old configuration still loads");
    let warnings: Vec<String> = loaded.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings
            .iter()
            .all(|w| w.contains("refused-registration-delay") && w.contains("no longer used")),
        "{warnings:?}"
    );
    std::fs::write(&file, "[cluster.registration]\nrefused-delay = \"30s\"\n").unwrap();
    let sources = super::sources::ConfigSources {
        file: Some(file),
        env: Vec::new(),
        flags: Vec::new(),
    };
    assert!(sources.load().is_err(), "an unknown key is an error");
    let _ = std::fs::remove_dir_all(&dir);
}
