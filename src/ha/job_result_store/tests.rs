//! The job result store on files and in memory: dirty, clean, read back by a new leader,
//! expired by age and count (clean results only), damaged files still mark their job ended.

use std::time::Duration;

use super::*;
use crate::job::states::JobStatus;

/// A job that ended `status` at `ended_at_ms`.
fn ended(id: u128, status: JobStatus, ended_at_ms: u64) -> JobDetails {
    let mut details = crate::messages::tests::job_details();
    details.summary.job_id = JobId::from_u128(id);
    details.summary.status = status;
    details.status_timestamps.push((status, ended_at_ms));
    details.summarized()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("flint-jrs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_result_is_written_dirty_then_marked_clean_and_a_new_leader_reads_both_states() {
    let dir = scratch("states");
    let store = JobResultStore::open(&dir).unwrap();
    let (a, b) = (JobId::from_u128(1), JobId::from_u128(2));
    store
        .create_dirty_result(&ended(1, JobStatus::Finished, 10))
        .unwrap();
    store
        .create_dirty_result(&ended(2, JobStatus::Failed, 20))
        .unwrap();
    assert_eq!(
        files(&dir),
        [format!("{a}_DIRTY.json"), format!("{b}_DIRTY.json")]
    );
    store.mark_result_as_clean(a).unwrap();
    assert_eq!(
        files(&dir),
        [format!("{a}.json"), format!("{b}_DIRTY.json")]
    );
    // The first result of a job stands: a second one changes nothing.
    store
        .create_dirty_result(&ended(1, JobStatus::Canceled, 30))
        .unwrap();

    let next_leader = JobResultStore::open(&dir).unwrap();
    assert!(next_leader.has_job_result_entry(a) && next_leader.has_job_result_entry(b));
    assert!(!next_leader.has_dirty_job_result_entry(a));
    assert_eq!(next_leader.dirty_job_ids(), [b]);
    let details = next_leader.details(a).unwrap();
    assert_eq!(details.summary.status, JobStatus::Finished);
    assert!(details.vertices.iter().all(|v| v.subtasks.is_empty()));
    assert_eq!(details.vertices[0].summary().parallelism, 1);
    assert_eq!(next_leader.summaries().len(), 2);
    assert!(!next_leader.has_job_result_entry(JobId::from_u128(3)));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn clean_results_expire_by_age_and_by_count_and_dirty_ones_never() {
    let dir = scratch("expire");
    for store in [
        JobResultStore::in_memory(),
        JobResultStore::open(&dir).unwrap(),
    ] {
        let config = JobStoreConfig {
            expiration_time: Duration::from_secs(60),
            max_capacity: 2,
        };
        for (id, at) in [(1, 1_000), (2, 2_000), (3, 3_000)] {
            store
                .create_dirty_result(&ended(id, JobStatus::Finished, at))
                .unwrap();
        }
        // Three dirty results over a capacity of two: none may go.
        assert!(store.expire(1_000_000, config).is_empty());
        for id in [1, 2, 3] {
            store.mark_result_as_clean(JobId::from_u128(id)).unwrap();
        }
        // Over capacity: the first to end goes.
        assert_eq!(store.expire(3_000, config), [JobId::from_u128(1)]);
        // 60 s after it ended, the second.
        assert!(store.expire(61_999, config).is_empty());
        assert_eq!(store.expire(62_000, config), [JobId::from_u128(2)]);
        assert_eq!(store.len(), 1);
        store
            .create_dirty_result(&ended(4, JobStatus::Canceled, 100_000))
            .unwrap();
        assert_eq!(store.expire(100_000, config), [JobId::from_u128(3)]);
        assert!(store.has_dirty_job_result_entry(JobId::from_u128(4)));
    }
    let reopened = JobResultStore::open(&dir).unwrap();
    assert_eq!(reopened.dirty_job_ids(), [JobId::from_u128(4)]);
    assert_eq!(files(&dir).len(), 1, "expired files are removed");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_damaged_result_file_still_marks_its_job_as_ended() {
    let dir = scratch("damaged");
    std::fs::create_dir_all(&dir).unwrap();
    let job = JobId::from_u128(7);
    std::fs::write(dir.join(format!("{job}.json")), b"{\"summary\": ").unwrap();
    std::fs::write(dir.join("notes.txt"), b"not ours").unwrap();
    std::fs::write(dir.join("x.partial"), b"a write cut short").unwrap();
    let store = JobResultStore::open(&dir).unwrap();
    assert!(
        store.has_job_result_entry(job),
        "a job with a result never runs again"
    );
    assert_eq!(store.details(job), None);
    assert!(store.summaries().is_empty());
    assert_eq!(store.len(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn what_a_jobs_tasks_sent_back_is_kept_beside_its_result_and_forgotten_with_it() {
    let dir = scratch("records");
    let store = JobResultStore::open(&dir).unwrap();
    let (with, without) = (JobId::from_u128(1), JobId::from_u128(2));
    let sent = JobResults {
        status: Some(JobStatus::Finished),
        vertices: BTreeMap::from([(
            "collect".to_owned(),
            vec![Some(bytes::Bytes::from_static(b"rows")), None],
        )]),
    };
    store
        .create_dirty_result_with(&ended(1, JobStatus::Finished, 10), Some(&sent))
        .unwrap();
    // Nothing sent back: no file.
    store
        .create_dirty_result_with(
            &ended(2, JobStatus::Finished, 20),
            Some(&JobResults::default()),
        )
        .unwrap();
    assert_eq!(
        files(&dir),
        [
            format!("{with}.results"),
            format!("{with}_DIRTY.json"),
            format!("{without}_DIRTY.json")
        ]
    );
    assert_eq!(store.results(with).unwrap(), Some(sent.clone()));
    assert_eq!(store.results(without).unwrap(), None);

    // A new leader reads them back; they go when the result expires.
    let next_leader = JobResultStore::open(&dir).unwrap();
    assert_eq!(next_leader.results(with).unwrap(), Some(sent.clone()));
    next_leader.mark_result_as_clean(with).unwrap();
    let config = JobStoreConfig {
        expiration_time: Duration::from_secs(1),
        max_capacity: 10,
    };
    assert_eq!(next_leader.expire(1_000_000, config), [with]);
    assert_eq!(files(&dir), [format!("{without}_DIRTY.json")]);
    assert_eq!(next_leader.results(with).unwrap(), None);

    // A damaged file is an error naming the job, not an empty answer.
    let damaged = JobId::from_u128(3);
    store
        .create_dirty_result_with(&ended(3, JobStatus::Finished, 30), Some(&sent))
        .unwrap();
    std::fs::write(dir.join(format!("{damaged}.results")), b"\xff\xff\xff").unwrap();
    let error = store.results(damaged).unwrap_err().to_string();
    assert!(error.contains(&damaged.to_string()), "{error}");

    // An earlier run's records left behind by a leader that died before keeping its result:
    // a result without records of its own does not take them for its own.
    let rerun = JobId::from_u128(4);
    std::fs::write(dir.join(format!("{rerun}.results")), b"stale").unwrap();
    store
        .create_dirty_result_with(&ended(4, JobStatus::Failed, 40), None)
        .unwrap();
    assert!(!dir.join(format!("{rerun}.results")).exists());
    assert_eq!(
        JobResultStore::open(&dir).unwrap().results(rerun).unwrap(),
        None
    );

    // In memory nothing is copied: the JobManager's execution graph answers.
    let memory = JobResultStore::in_memory();
    memory
        .create_dirty_result_with(&ended(1, JobStatus::Finished, 10), Some(&sent))
        .unwrap();
    assert_eq!(memory.results(with).unwrap(), None);
    std::fs::remove_dir_all(&dir).unwrap();
}
