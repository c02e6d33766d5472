//! The job event log: frames appended and read back in order, a torn tail dropped, replay
//! honouring resets, files private.

use std::os::unix::fs::PermissionsExt as _;

use super::*;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("flint-jel-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn finished(region: u32, attempt: u128, tm: &str) -> JobEvent {
    JobEvent::RegionFinished {
        region,
        tasks: vec![FinishedTask {
            vertex: region,
            subtask: 0,
            attempt: ExecutionAttemptId::from_u128(attempt),
            attempt_number: 0,
            resource_id: ResourceId::new(tm),
            result: (region == 2).then(|| vec![1, 2, 3]),
        }],
    }
}

#[test]
fn batches_read_back_in_order_and_a_reset_undoes_a_finished_region() {
    let dir = scratch("order");
    let log = JobEventLog::new(&dir);
    let job = JobId::from_u128(9);
    assert_eq!(log.read(job).unwrap(), Vec::new(), "no log: no events");
    log.append(job, &[finished(0, 1, "tm-a"), finished(1, 2, "tm-b")])
        .unwrap();
    log.append(job, &[JobEvent::RegionsReset { regions: vec![1] }])
        .unwrap();
    log.append(job, &[finished(2, 3, "tm-a"), finished(1, 4, "tm-a")])
        .unwrap();
    let events = log.read(job).unwrap();
    assert_eq!(events.len(), 5);
    let regions = replay(&events);
    assert_eq!(regions.keys().copied().collect::<Vec<_>>(), vec![0, 1, 2]);
    assert_eq!(
        regions[&1][0].attempt,
        ExecutionAttemptId::from_u128(4),
        "the attempt after the reset counts"
    );
    assert_eq!(regions[&2][0].result, Some(vec![1, 2, 3]));
    let mode = std::fs::metadata(log.file_of(job)).unwrap().permissions();
    assert_eq!(mode.mode() & 0o777, 0o600);
    log.remove(job).unwrap();
    log.remove(job).unwrap();
    assert_eq!(log.read(job).unwrap(), Vec::new());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_torn_last_frame_is_dropped_and_the_frames_before_it_count() {
    let dir = scratch("torn");
    let log = JobEventLog::new(&dir);
    let job = JobId::from_u128(1);
    log.append(job, &[finished(0, 1, "tm-a")]).unwrap();
    log.append(job, &[finished(1, 2, "tm-a")]).unwrap();
    let path = log.file_of(job);
    let bytes = std::fs::read(&path).unwrap();
    // A leader killed in the middle of its second append.
    std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
    assert_eq!(log.read(job).unwrap(), vec![finished(0, 1, "tm-a")]);
    // Garbage instead of a frame ends the log there too.
    let mut garbage = bytes[..bytes.len() / 2].to_vec();
    garbage.truncate(4);
    garbage.extend_from_slice(&[0xff; 64]);
    std::fs::write(&path, &garbage).unwrap();
    assert_eq!(log.read(job).unwrap(), Vec::new());
    let _ = std::fs::remove_dir_all(&dir);
}
