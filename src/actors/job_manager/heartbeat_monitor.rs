//! Liveness bookkeeping: when each peer was last heard from, and who has been silent too long.
//! Pure data on `tokio::time::Instant`, so it follows a paused clock in tests.

use std::collections::BTreeMap;
use std::time::Duration;

use actix::clock::Instant;

/// Last-heard times of peers keyed by `K`.
#[derive(Debug, Clone)]
pub struct HeartbeatMonitor<K: Ord + Clone> {
    timeout: Duration,
    last_heard: BTreeMap<K, Instant>,
}

impl<K: Ord + Clone> HeartbeatMonitor<K> {
    /// A monitor that declares a peer lost after `timeout` of silence.
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            last_heard: BTreeMap::new(),
        }
    }

    /// `peer` was heard from at `now` (starts monitoring it if new).
    pub fn record(&mut self, peer: K, now: Instant) {
        self.last_heard.insert(peer, now);
    }

    /// Stops monitoring `peer`.
    pub fn remove(&mut self, peer: &K) {
        self.last_heard.remove(peer);
    }

    /// Peers not heard from within `silence` at `now` (still monitored).
    pub fn silent_for(&self, now: Instant, silence: Duration) -> Vec<K> {
        self.last_heard
            .iter()
            .filter(|(_, heard)| now.saturating_duration_since(**heard) > silence)
            .map(|(peer, _)| peer.clone())
            .collect()
    }

    /// Peers silent for longer than the timeout at `now`; they stop being monitored.
    pub fn take_expired(&mut self, now: Instant) -> Vec<K> {
        let expired: Vec<K> = self
            .last_heard
            .iter()
            .filter(|(_, heard)| now.saturating_duration_since(**heard) > self.timeout)
            .map(|(peer, _)| peer.clone())
            .collect();
        for peer in &expired {
            self.last_heard.remove(peer);
        }
        expired
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silent_peers_are_listed_but_still_monitored() {
        let start = Instant::now();
        let mut monitor = HeartbeatMonitor::new(Duration::from_secs(5));
        monitor.record("a", start);
        monitor.record("b", start + Duration::from_secs(1));
        let at = start + Duration::from_millis(1_500);
        assert!(
            monitor
                .silent_for(at, Duration::from_millis(1_500))
                .is_empty()
        );
        assert_eq!(monitor.silent_for(at, Duration::from_secs(1)), ["a"]);
        assert_eq!(monitor.silent_for(at, Duration::from_secs(1)), ["a"]);
        assert_eq!(
            monitor.take_expired(start + Duration::from_millis(5_001)),
            ["a"]
        );
    }

    #[test]
    fn a_peer_expires_only_after_the_timeout_of_silence() {
        let start = Instant::now();
        let mut monitor = HeartbeatMonitor::new(Duration::from_secs(5));
        monitor.record("a", start);
        monitor.record("b", start);
        monitor.record("b", start + Duration::from_secs(4));
        assert!(
            monitor
                .take_expired(start + Duration::from_secs(5))
                .is_empty()
        );
        assert_eq!(
            monitor.take_expired(start + Duration::from_millis(5_001)),
            ["a"]
        );
        assert!(
            monitor
                .take_expired(start + Duration::from_secs(6))
                .is_empty()
        );
        assert_eq!(
            monitor.take_expired(start + Duration::from_millis(9_001)),
            ["b"]
        );
        monitor.record("c", start);
        monitor.remove(&"c");
        assert!(
            monitor
                .take_expired(start + Duration::from_secs(60))
                .is_empty()
        );
    }
}
