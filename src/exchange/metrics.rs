//! [`TaskIoMetrics`]: what one task's exchange does, counted while it runs (Flink's
//! `TaskIOMetricGroup`). The task thread's writer and gate add to it; the TaskManager reads it
//! for its status and turns the backpressured time into Flink's `backPressuredTimeMsPerSecond`
//! between two samples ([`TaskIoMetrics::sample`]).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::messages::TaskIoSnapshot;

/// Counters shared by a running task's thread and its TaskManager (relaxed atomics: each is a
/// figure for people, not a synchronisation point).
#[derive(Debug)]
pub struct TaskIoMetrics {
    records_in: AtomicU64,
    bytes_in: AtomicU64,
    records_out: AtomicU64,
    bytes_out: AtomicU64,
    buffers_in_use: AtomicU64,
    /// Completed waits for room in an output, in all.
    backpressured_ms: AtomicU64,
    /// When the wait going on now began ([`NOT_WAITING`] if none): counted into every sample
    /// taken during it, as Flink's `TimerGauge` does. Counting a wait only once it ended made a
    /// producer whose consumer frees a buffer every few seconds look idle in most samples and
    /// saturated in the next.
    waiting_since_ms: AtomicU64,
}

/// [`TaskIoMetrics::waiting_since_ms`] when the task is not waiting.
const NOT_WAITING: u64 = u64::MAX;

impl Default for TaskIoMetrics {
    fn default() -> Self {
        Self {
            records_in: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            records_out: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            buffers_in_use: AtomicU64::new(0),
            backpressured_ms: AtomicU64::new(0),
            waiting_since_ms: AtomicU64::new(NOT_WAITING),
        }
    }
}

impl TaskIoMetrics {
    /// A buffer of `records` records and `bytes` bytes was consumed from the inputs.
    pub fn read(&self, records: u64, bytes: u64) {
        self.records_in.fetch_add(records, Ordering::Relaxed);
        self.bytes_in.fetch_add(bytes, Ordering::Relaxed);
    }

    /// One record of `bytes` bytes was written to an output.
    pub fn wrote(&self, bytes: u64) {
        self.records_out.fetch_add(1, Ordering::Relaxed);
        self.bytes_out.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The input buffers held now.
    pub fn set_buffers_in_use(&self, buffers: u64) {
        self.buffers_in_use.store(buffers, Ordering::Relaxed);
    }

    /// The task starts waiting for room in an output (at `now_ms`).
    pub fn backpressure_began(&self, now_ms: u64) {
        self.waiting_since_ms.store(now_ms, Ordering::Relaxed);
    }

    /// The wait [`backpressure_began`](Self::backpressure_began) ended (at `now_ms`).
    pub fn backpressure_ended(&self, now_ms: u64) {
        let since = self.waiting_since_ms.swap(NOT_WAITING, Ordering::Relaxed);
        if since != NOT_WAITING {
            self.backpressured_ms
                .fetch_add(now_ms.saturating_sub(since), Ordering::Relaxed);
        }
    }

    /// The counters now; `rate` from the last sample (`(wall ms, backpressured ms)`), which
    /// becomes `(now_ms, backpressured ms now)`. The backpressured time includes the wait
    /// going on now. (A wait ending between the two loads is counted once too few or too many
    /// in this sample, and the next sample makes up for it: relaxed atomics, a figure for
    /// people.)
    pub fn sample(&self, now_ms: u64, last: &mut (u64, u64)) -> TaskIoSnapshot {
        let since = self.waiting_since_ms.load(Ordering::Relaxed);
        let ongoing = if since == NOT_WAITING {
            0
        } else {
            now_ms.saturating_sub(since)
        };
        let backpressured_ms = self.backpressured_ms.load(Ordering::Relaxed) + ongoing;
        let elapsed = now_ms.saturating_sub(last.0);
        let rate = backpressured_ms
            .saturating_sub(last.1)
            .saturating_mul(1000)
            .checked_div(elapsed)
            .map_or(0, |rate| rate.min(1000));
        *last = (now_ms, backpressured_ms);
        TaskIoSnapshot {
            records_in: self.records_in.load(Ordering::Relaxed),
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            records_out: self.records_out.load(Ordering::Relaxed),
            bytes_out: self.bytes_out.load(Ordering::Relaxed),
            buffers_in_use: self.buffers_in_use.load(Ordering::Relaxed),
            backpressured_ms,
            back_pressured_time_ms_per_second: rate,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A completed wait of `ms` (when it happened does not matter once it ended).
    fn waited(metrics: &TaskIoMetrics, ms: u64) {
        metrics.backpressure_began(0);
        metrics.backpressure_ended(ms);
    }

    #[test]
    fn back_pressured_time_per_second_is_the_share_of_the_last_interval() {
        let metrics = TaskIoMetrics::default();
        let mut last = (1_000, 0);
        waited(&metrics, 250);
        let first = metrics.sample(2_000, &mut last);
        assert_eq!(first.back_pressured_time_ms_per_second, 250);
        waited(&metrics, 4_000);
        // Never above a whole second per second.
        assert_eq!(
            metrics
                .sample(4_000, &mut last)
                .back_pressured_time_ms_per_second,
            1000
        );
        assert_eq!(
            metrics
                .sample(5_000, &mut last)
                .back_pressured_time_ms_per_second,
            0
        );
        metrics.read(3, 30);
        metrics.wrote(7);
        let snapshot = metrics.sample(5_000, &mut last);
        assert_eq!(
            (
                snapshot.records_in,
                snapshot.bytes_in,
                snapshot.records_out,
                snapshot.bytes_out
            ),
            (3, 30, 1, 7)
        );
        assert_eq!(snapshot.backpressured_ms, 4_250);
    }

    #[test]
    fn a_wait_longer_than_the_sampling_interval_counts_in_every_sample_it_spans() {
        // A producer whose consumer frees one buffer every few seconds: the old counting (at
        // the end of each wait) showed 0, 0, then 1000 ms/s.
        let metrics = TaskIoMetrics::default();
        let mut last = (0, 0);
        metrics.backpressure_began(100);
        let rates: Vec<u64> = [500, 1_000, 1_500]
            .into_iter()
            .map(|now| {
                metrics
                    .sample(now, &mut last)
                    .back_pressured_time_ms_per_second
            })
            .collect();
        assert_eq!(rates, [800, 1000, 1000]);
        metrics.backpressure_ended(1_750);
        let after = metrics.sample(2_000, &mut last);
        assert_eq!(after.back_pressured_time_ms_per_second, 500);
        assert_eq!(after.backpressured_ms, 1_650, "counted once in all");
    }
}
