use super::*;
use crate::messages::job_manager::SubtaskDetails;

#[test]
fn params_split_at_the_first_equals_sign() {
    assert_eq!(
        parse_param("input=a=b.txt").unwrap(),
        ("input".to_owned(), "a=b.txt".to_owned())
    );
    assert_eq!(
        parse_param("output=").unwrap(),
        ("output".to_owned(), String::new())
    );
    assert_eq!(
        parse_param("input"),
        Err(UsageError::ParamWithoutEquals {
            arg: "input".to_owned()
        })
    );
    assert!(matches!(
        parse_param("=x"),
        Err(UsageError::BadParamName { .. })
    ));
    assert!(matches!(
        parse_param("in put=x"),
        Err(UsageError::BadParamName { .. })
    ));
    let message = parse_param("input").unwrap_err().to_string();
    assert!(message.contains("`input`"), "{message}");
}

#[test]
fn a_param_given_twice_is_refused() {
    let pair = |n: &str, v: &str| (n.to_owned(), v.to_owned());
    let map = collect_params([pair("a", "1"), pair("b", "2")]).unwrap();
    assert_eq!(map.len(), 2);
    let err = collect_params([pair("a", "1"), pair("a", "2")]).unwrap_err();
    assert_eq!(
        err,
        UsageError::DuplicateParam {
            name: "a".to_owned(),
            first: "1".to_owned(),
            second: "2".to_owned()
        }
    );
}

fn options(pool_size: Option<u32>, slots: Option<u32>, env: &[(&str, &str)]) -> RunOptions {
    RunOptions {
        job_file: PathBuf::from("job.toml"),
        params: BTreeMap::new(),
        pool_size,
        slots,
        config: None,
        env: env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        overrides: Vec::new(),
        timeout: Duration::from_secs(1),
    }
}

fn resolved(options: &RunOptions, slots: u64) -> Result<ClusterConfig, RunError> {
    let needs = SlotNeeds {
        peak: slots,
        largest_region: slots,
    };
    let (config, explicit) = load_config(options)?;
    resolve_config(config, explicit, needs)
}

#[test]
fn a_job_wider_than_the_largest_pool_gets_that_pool_and_runs_in_waves() {
    let env = [("FLINT_RESOURCEMANAGER_MAX_POOL_SIZE", "2")];
    let (config, explicit) = load_config(&options(None, Some(4), &env)).unwrap();
    let needs = SlotNeeds {
        peak: 10_000,
        largest_region: 1,
    };
    let config = resolve_config(config, explicit, needs).unwrap();
    assert_eq!(config.resourcemanager.pool_size, 2);
}

#[test]
fn default_pool_holds_the_peak_slots() {
    let config = resolved(&options(None, None, &[]), 5).unwrap();
    assert_eq!(config.taskmanager.slots, DEFAULT_SLOTS);
    assert_eq!(config.resourcemanager.pool_size, 3);
}

#[test]
fn flags_win_over_the_environment_and_any_source_over_the_runs_defaults() {
    let env = [
        ("FLINT_TASKMANAGER_SLOTS", "4"),
        ("FLINT_RESOURCEMANAGER_POOL_SIZE", "7"),
    ];
    let from_env = resolved(&options(None, None, &env), 8).unwrap();
    assert_eq!(from_env.taskmanager.slots, 4);
    assert_eq!(from_env.resourcemanager.pool_size, 7);
    let from_flags = resolved(&options(Some(1), Some(1), &env), 8).unwrap();
    assert_eq!(from_flags.taskmanager.slots, 1);
    assert_eq!(from_flags.resourcemanager.pool_size, 1);
    // Set by neither: the run's defaults.
    let defaults = resolved(&options(None, None, &[]), 8).unwrap();
    assert_eq!(defaults.taskmanager.slots, DEFAULT_SLOTS);
    assert_eq!(defaults.resourcemanager.pool_size, 4);
}

#[test]
fn zero_slots_names_the_key_and_the_flag_instead_of_dividing_by_zero() {
    let err = resolved(&options(None, Some(0), &[]), 4).unwrap_err();
    assert_eq!(err.exit_code(), EXIT_USAGE);
    let text = err.to_string();
    assert!(
        text.contains("taskmanager.slots = \"0\" (from flag --slots)"),
        "{text}"
    );
}

#[test]
fn a_job_larger_than_the_largest_pool_is_refused_up_front() {
    let env = [("FLINT_RESOURCEMANAGER_MAX_POOL_SIZE", "2")];
    let err = resolved(&options(None, Some(2), &env), 5).unwrap_err();
    assert!(
        matches!(
            err,
            RunError::TooLarge {
                needed: 5,
                offered: 4,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.exit_code(), EXIT_USAGE);
}

fn subtask(state: ExecutionState, timestamps: &[(ExecutionState, u64)]) -> SubtaskDetails {
    SubtaskDetails {
        subtask: 0,
        attempt_number: 0,
        state,
        resource_id: None,
        locality: None,
        timestamps: timestamps.to_vec(),
        error: None,
        io: None,
        restored: false,
    }
}

#[test]
fn vertex_time_runs_from_first_deploy_to_last_finish() {
    use ExecutionState::*;
    let vertex = VertexDetails {
        name: "count".to_owned(),
        chain: Vec::new(),
        operator: "count-by-key".to_owned(),
        io: Default::default(),
        summary: None,
        subtasks: vec![
            subtask(
                Finished,
                &[(Deploying, 1_000), (Running, 1_100), (Finished, 1_500)],
            ),
            // No DEPLOYING recorded: RUNNING counts as the start.
            subtask(Finished, &[(Running, 900), (Finished, 2_250)]),
        ],
    };
    let timing = VertexTiming::of(&vertex);
    assert_eq!(timing.duration, Some(Duration::from_millis(1_350)));
    assert_eq!(timing.parallelism, 2);
    assert_eq!(timing.states, BTreeMap::from([(Finished, 2)]));

    let failed = VertexDetails {
        subtasks: vec![
            subtask(Finished, &[(Deploying, 1_000), (Finished, 1_500)]),
            subtask(Failed, &[(Deploying, 1_000), (Failed, 1_200)]),
        ],
        ..vertex
    };
    let timing = VertexTiming::of(&failed);
    assert_eq!(timing.duration, None);
    assert_eq!(timing.states, BTreeMap::from([(Finished, 1), (Failed, 1)]));
}

#[test]
fn progress_lines_are_aligned() {
    assert_eq!(
        progress_line(Duration::from_millis(1_230), JobStatus::Running, 5, 8),
        "[  1.2s] RUNNING  5/8 tasks finished"
    );
}

#[test]
fn exit_codes_follow_the_final_status() {
    let report = |status| RunReport {
        job_id: JobId::from_u128(1),
        name: "j".to_owned(),
        status,
        elapsed: Duration::ZERO,
        tasks_finished: 0,
        tasks_total: 0,
        restarts: 0,
        failure: None,
        vertices: Vec::new(),
        outputs: Vec::new(),
    };
    assert_eq!(report(JobStatus::Finished).exit_code(), EXIT_FINISHED);
    assert_eq!(report(JobStatus::Failed).exit_code(), EXIT_JOB_FAILED);
    assert_eq!(report(JobStatus::Canceled).exit_code(), EXIT_JOB_FAILED);
}
