//! When a finished region's results may be dropped (Flink's `RegionPartitionGroupReleaseStrategy`):
//! once the region and every region reading its blocking results have finished, nothing of the
//! running job reads them again unless a failover makes them needed, and then their producer
//! runs again (see [`PartitionReleaseStrategy::needs_rerun`]). Releasing them then, rather than when
//! the job ends, bounds the disk a long multi-stage batch job holds by its live stages.
//!
//! Tracked incrementally, like [`RegionProgress`](super::regions::RegionProgress): a finished
//! consumer counts down its input groups, a group read to its end counts down its producers'
//! open outputs, so a job of R regions costs O(R + group sizes) overall, even when an all-to-all
//! edge puts P producers and P consumers in one group.

use super::regions::{PipelinedRegions, RegionId};

/// See the module docs.
#[derive(Debug, Clone)]
pub struct PartitionReleaseStrategy {
    /// Consumer regions not finished, per consumed group.
    unconsumed: Vec<usize>,
    /// Output groups of each region that some consumer has not finished reading.
    open_outputs: Vec<usize>,
    finished: Vec<bool>,
    /// The results of the region's latest attempts are released (or were superseded and
    /// released as it restarted); cleared when it finishes again.
    released: Vec<bool>,
}

impl PartitionReleaseStrategy {
    /// Nothing finished, nothing released.
    pub fn new(regions: &PipelinedRegions) -> Self {
        Self {
            unconsumed: regions.groups.iter().map(|g| g.consumers.len()).collect(),
            open_outputs: regions
                .regions
                .iter()
                .map(|r| r.output_groups.len())
                .collect(),
            finished: vec![false; regions.regions.len()],
            released: vec![false; regions.regions.len()],
        }
    }

    /// Every task of `region` finished. Returns the regions whose results nobody reads any more,
    /// now marked released: `region` itself when nothing reads its blocking results (its
    /// pipelined ones were read by its own tasks), and producers whose last consumer it was.
    pub fn finished(&mut self, regions: &PipelinedRegions, region: RegionId) -> Vec<RegionId> {
        if std::mem::replace(&mut self.finished[region.0], true) {
            return Vec::new();
        }
        self.released[region.0] = false;
        let mut release = Vec::new();
        for &group in &regions.regions[region.0].input_groups {
            self.unconsumed[group] -= 1;
            if self.unconsumed[group] == 0 {
                for &producer in &regions.groups[group].producers {
                    self.open_outputs[producer.0] -= 1;
                    if self.open_outputs[producer.0] == 0 {
                        self.mark(producer, &mut release);
                    }
                }
            }
        }
        if self.open_outputs[region.0] == 0 {
            self.mark(region, &mut release);
        }
        release
    }

    fn mark(&mut self, region: RegionId, release: &mut Vec<RegionId>) {
        if self.finished[region.0] && !self.released[region.0] {
            self.released[region.0] = true;
            release.push(region);
        }
    }

    /// `region` runs again (failover): its consumers read its new results, and it reads its
    /// inputs again, so producers it had finished reading are needed once more. Those whose
    /// results were released must run again too: see [`needs_rerun`](Self::needs_rerun).
    pub fn reset(&mut self, regions: &PipelinedRegions, region: RegionId) {
        if !std::mem::replace(&mut self.finished[region.0], false) {
            return;
        }
        for &group in &regions.regions[region.0].input_groups {
            if self.unconsumed[group] == 0 {
                for &producer in &regions.groups[group].producers {
                    self.open_outputs[producer.0] += 1;
                }
            }
            self.unconsumed[group] += 1;
        }
    }

    /// Whether `region` finished and its results were released since: a region about to read
    /// them again needs it to run again first.
    pub fn needs_rerun(&self, region: RegionId) -> bool {
        self.finished[region.0] && self.released[region.0]
    }

    /// `region`'s tasks start again as new attempts: returns whether the old attempts' results
    /// are still to be released (once; they are superseded).
    pub fn supersede(&mut self, region: RegionId) -> bool {
        !std::mem::replace(&mut self.released[region.0], true)
    }
}

#[cfg(test)]
mod tests;
