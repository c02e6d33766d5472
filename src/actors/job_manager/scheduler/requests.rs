//! What a bulk of slot requests asks for: its shape (slots per group), its distinct preferred
//! locations, and the locality a placement achieved.

use std::collections::{BTreeMap, BTreeSet};

use super::{MAX_PREFERRED_LOCATIONS, SlotRequest};
use crate::base::ids::ResourceId;
use crate::messages::job_manager::Locality;

/// Tasks per (group, vertex), sorted, and the slots they need with no shared slot open: per
/// group, the vertex with the most tasks.
pub(super) fn bulk_shape(
    requests: &[SlotRequest],
    groups: &[usize],
) -> (Vec<(usize, usize, u64)>, u64) {
    let mut counts: BTreeMap<(usize, usize), u64> = BTreeMap::new();
    for (request, group) in requests.iter().zip(groups) {
        *counts.entry((*group, request.task.vertex)).or_default() += 1;
    }
    let mut per_group: BTreeMap<usize, u64> = BTreeMap::new();
    for ((group, _), count) in &counts {
        let largest = per_group.entry(*group).or_default();
        *largest = (*largest).max(*count);
    }
    let need = per_group.values().sum();
    let per_vertex = counts
        .into_iter()
        .map(|((group, vertex), count)| (group, vertex, count))
        .collect();
    (per_vertex, need)
}

pub(super) fn distinct_preferences(preferred: &[ResourceId]) -> Vec<ResourceId> {
    let distinct: BTreeSet<&ResourceId> = preferred.iter().collect();
    if distinct.len() > MAX_PREFERRED_LOCATIONS {
        Vec::new()
    } else {
        // Keep the caller's order (first producer first), without repeats.
        let mut seen = BTreeSet::new();
        preferred
            .iter()
            .filter(|tm| seen.insert(*tm))
            .cloned()
            .collect()
    }
}

pub(super) fn locality(preferred: &[ResourceId], placed: &ResourceId) -> Locality {
    if preferred.is_empty() {
        return Locality::Unconstrained;
    }
    let distinct: BTreeSet<&ResourceId> = preferred.iter().collect();
    if distinct.is_empty() || distinct.len() > MAX_PREFERRED_LOCATIONS {
        Locality::Unconstrained
    } else if distinct.contains(placed) {
        Locality::Local
    } else {
        Locality::NonLocal
    }
}
