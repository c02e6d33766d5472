use super::*;

/// A small deterministic generator, so the test needs no rand dependency.
fn lcg(seed: &mut u64) -> u64 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *seed >> 33
}

fn check_exact_cover(rows: &[u64], parallelism: usize) {
    let ranges = assign(rows, parallelism);
    assert_eq!(ranges.len(), parallelism);
    let mut next = 0;
    for range in &ranges {
        assert_eq!(range.start, next, "contiguous, in order: {ranges:?}");
        assert!(range.start <= range.end);
        next = range.end;
    }
    assert_eq!(next, rows.len(), "every group assigned: {ranges:?}");
}

#[test]
fn every_group_goes_to_exactly_one_subtask() {
    let mut seed = 7;
    for p in 1..=7 {
        for len in 0..40 {
            let rows: Vec<u64> = (0..len).map(|_| lcg(&mut seed) % 1000).collect();
            check_exact_cover(&rows, p);
        }
    }
    check_exact_cover(&[0, 0, 0], 3);
    check_exact_cover(&[u64::MAX / 2, u64::MAX / 2], 7);
}

#[test]
fn shares_follow_row_counts_not_group_counts() {
    // One group as big as the ten others together: it is half of all rows.
    let rows = [1000, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100];
    let ranges = assign(&rows, 2);
    assert_eq!(ranges, vec![0..1, 1..11]);
}

#[test]
fn each_share_is_within_one_group_of_the_ideal() {
    let mut seed = 11;
    for p in 1..=7 {
        for _ in 0..50 {
            let len = 1 + (lcg(&mut seed) % 60) as usize;
            let rows: Vec<u64> = (0..len).map(|_| 1 + lcg(&mut seed) % 500).collect();
            let total: u64 = rows.iter().sum();
            let biggest = *rows.iter().max().expect("at least one group");
            let ideal = total as f64 / p as f64;
            for range in assign(&rows, p) {
                let share: u64 = rows[range].iter().sum();
                assert!(
                    (share as f64 - ideal).abs() <= biggest as f64,
                    "share {share}, ideal {ideal}, biggest group {biggest}"
                );
            }
        }
    }
}

#[test]
fn equal_groups_split_evenly() {
    // DuckDB's SF1 lineitem: 48 groups of 122,880 rows and one of 102,975.
    let mut rows = vec![122_880; 48];
    rows.push(102_975);
    let ranges = assign(&rows, 7);
    let sizes: Vec<usize> = ranges.iter().map(|r| r.len()).collect();
    assert_eq!(sizes.iter().sum::<usize>(), 49);
    assert!(sizes.iter().all(|&n| n == 7), "{sizes:?}");
}

#[test]
fn more_subtasks_than_groups_leaves_some_empty() {
    let ranges = assign(&[10, 10], 5);
    assert_eq!(ranges.iter().filter(|r| !r.is_empty()).count(), 2);
    check_exact_cover(&[10, 10], 5);
}
