//! A simulated coordination service for leader election (high availability): ZooKeeper's
//! model in miniature — sessions kept alive by pings, expired by the server after the session
//! timeout without one, ephemeral sequential latch nodes, the lowest live one leads — with
//! seeded partitions between a contender and the service. Its [`SimLeaderElection`] implements
//! the same [`LeaderElectionService`] trait the real ZooKeeper election does, so the
//! JobManager-side rule ("stop acting as soon as the session is in doubt") is checked against it:
//! [`check_at_most_one_leader`] runs contenders through faults under a paused clock and fails if
//! two ever act at once, or if no leader acts once the faults are over.
//!
//! For the cluster simulation's HA family ([`super::ha`]) it also plays ZooKeeper's other two
//! parts: the published leader (an ephemeral node: [`SimLeaderRetrieval`] follows it, as
//! TaskManagers do) and the job graph pointers ([`SimJobGraphPointers`]); and it keeps the
//! history of every leadership it granted (when granted, when it ended at the service, which
//! `LeaderSessionId` it published), against which the HA invariants judge what was accepted.
//! TaskManagers are never cut from it (only JobManagers are); their retrieval may be delayed on
//! purpose ([`SimCoordination::with_retrieval_delay`]) to show an invariant catching it.
//!
//! The client side doubts its session when it has heard nothing for 2/5 of the session timeout,
//! as `zookeeper-client` does; the server expires it only after the whole timeout. That gap is
//! what the invariant rests on, and what the test would catch if it closed.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

use tokio::time::Instant;

use crate::base::ids::{JobId, LeaderSessionId};
use crate::base::rng::NodeRng;
use crate::ha::election::{LeaderElectionService, Leadership};
use crate::ha::{HaError, JobGraphPointers, LeaderInformation, LeaderRetrievalService};

/// How often pings are delivered and expiries checked (virtual time).
pub const TICK: Duration = Duration::from_millis(20);

#[derive(Debug)]
struct Session {
    last_contact: Instant,
    expired: bool,
}

/// One leadership the service granted, as the HA invariants see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeadershipRecord {
    /// Who was granted it.
    pub contender: usize,
    /// The coordination session that held it.
    pub session: u64,
    /// When `acquire` granted it.
    pub granted_at: Instant,
    /// When its session ended at the service (expired, or closed by its client).
    pub ended_at: Option<Instant>,
    /// The fencing token the leader published with `confirm`, once it did.
    pub leader_session_id: Option<LeaderSessionId>,
    /// When it was published.
    pub published_at: Option<Instant>,
}

#[derive(Debug, Default)]
struct Service {
    next_session: u64,
    next_sequence: i64,
    sessions: BTreeMap<u64, Session>,
    /// Latch sequence → its session (ephemeral: removed with the session).
    latches: BTreeMap<i64, u64>,
    partitioned: BTreeSet<usize>,
    /// Every leadership granted, in grant order.
    leaderships: Vec<LeadershipRecord>,
    /// The published leader and its session (ephemeral: removed with the session), with the
    /// time it was published.
    leader: Option<(u64, LeaderInformation, Instant)>,
    /// Job graph pointers: job id → graph file (persistent).
    pointers: BTreeMap<JobId, String>,
    /// The pool size an operator set last (persistent).
    pool_size: Option<u32>,
    /// Contenders whose client cannot run before the given instant (see
    /// [`SimCoordination::starve`]).
    starved: BTreeMap<usize, Instant>,
    /// Contenders whose session expires at their next `confirm` (see
    /// [`SimCoordination::expire_session_at_next_confirm`]).
    expire_at_confirm: BTreeSet<usize>,
}

impl Service {
    /// A session is gone (expired or closed): its ephemeral nodes go, its leadership ends.
    fn session_ended(&mut self, id: u64, now: Instant) {
        self.latches.retain(|_, owner| *owner != id);
        if self
            .leader
            .as_ref()
            .is_some_and(|(owner, _, _)| *owner == id)
        {
            self.leader = None;
        }
        for record in &mut self.leaderships {
            if record.session == id && record.ended_at.is_none() {
                record.ended_at = Some(now);
            }
        }
    }
}

/// The simulated service; clones share it.
#[derive(Debug, Clone)]
pub struct SimCoordination {
    service: Rc<RefCell<Service>>,
    session_timeout: Duration,
    /// How long a client hears nothing before it doubts its session (2/5 of the timeout).
    doubt_after: Duration,
    /// How long a published leader stays unseen by retrieval (zero: seen at the next tick).
    retrieval_delay: Duration,
    /// What a lease renewal promises (the client's doubt margin unless broken on purpose).
    lease_length: Option<Duration>,
    /// The pool size an operator set is not kept (broken on purpose).
    forget_pool_size: bool,
    /// Job graph pointers are not kept (broken on purpose).
    forget_job_graphs: bool,
    /// Job graph pointers cannot be removed (broken on purpose).
    fail_job_graph_removals: bool,
    /// `confirm` publishes without the latch (broken on purpose).
    confirm_without_latch: bool,
    /// How long reading one job graph pointer takes (a slow or distant ensemble).
    read_latency: Duration,
}

impl SimCoordination {
    /// A service whose sessions expire after `session_timeout` without a ping.
    pub fn new(session_timeout: Duration) -> Self {
        Self {
            service: Rc::default(),
            session_timeout,
            doubt_after: session_timeout * 2 / 5,
            retrieval_delay: Duration::ZERO,
            lease_length: None,
            forget_pool_size: false,
            forget_job_graphs: false,
            fail_job_graph_removals: false,
            confirm_without_latch: false,
            read_latency: Duration::ZERO,
        }
    }

    /// Reading a job graph pointer takes `latency` (a slow or distant ensemble: a large job
    /// store takes long to recover).
    pub fn with_read_latency(mut self, latency: Duration) -> Self {
        self.read_latency = latency;
        self
    }

    /// `confirm` publishes even when the session lost its latch node, opening a new session
    /// (a test breaks the election with it, as Flint's ZooKeeper election did before).
    pub fn confirming_without_latch(mut self) -> Self {
        self.confirm_without_latch = true;
        self
    }

    /// `contender`'s session expires at the service the moment its next `confirm` reaches it.
    pub fn expire_session_at_next_confirm(&self, contender: usize) {
        self.service
            .borrow_mut()
            .expire_at_confirm
            .insert(contender);
    }

    /// Why the published leader does not hold the latch, if it does not: its session must own
    /// the lowest latch node (the election's winner).
    pub fn leader_without_latch(&self) -> Option<String> {
        let service = self.service.borrow();
        let (owner, info, _) = service.leader.as_ref()?;
        let lowest = service.latches.iter().next().map(|(_, session)| *session);
        (lowest != Some(*owner)).then(|| {
            format!(
                "{} (leader session {}) is published by coordination session {owner}, but the lowest latch node is {lowest:?}'s",
                info.address, info.leader_session_id
            )
        })
    }

    /// Removing a job graph pointer always fails (a storage error: the JobManager's cleanup
    /// retries it for ever, and the graph stays in the store).
    pub fn failing_job_graph_removals(mut self) -> Self {
        self.fail_job_graph_removals = true;
        self
    }

    /// Job graph pointers are never kept (a test breaks the store with it: a JobManager runs
    /// jobs a new leader cannot recover).
    pub fn forgetting_job_graphs(mut self) -> Self {
        self.forget_job_graphs = true;
        self
    }

    /// The pool size an operator set is never kept (a test breaks the store with it, so a new
    /// leader starts from the configured size).
    pub fn forgetting_pool_size(mut self) -> Self {
        self.forget_pool_size = true;
        self
    }

    /// Lease renewals promise `length` (a test breaks the lease with an hour, to see a paused
    /// leader act the instant it resumes).
    pub fn with_lease_length(mut self, length: Duration) -> Self {
        self.lease_length = Some(length);
        self
    }

    /// Leader retrieval learns of a change of leader only `delay` after the new one was
    /// published (the first leader a client sees, at once): a test breaks the TaskManagers' side
    /// with it, they keep working for a leader that was replaced.
    pub fn with_retrieval_delay(mut self, delay: Duration) -> Self {
        self.retrieval_delay = delay;
        self
    }

    /// The session timeout.
    pub fn session_timeout(&self) -> Duration {
        self.session_timeout
    }

    /// Every leadership granted so far, in grant order.
    pub fn leaderships(&self) -> Vec<LeadershipRecord> {
        self.service.borrow().leaderships.clone()
    }

    /// When the next leadership after the one that published `leader_session_id` was granted
    /// (if one was): from then on, anything accepted under this session is a second leader
    /// acting.
    pub fn superseded_at(&self, leader_session_id: LeaderSessionId) -> Option<Instant> {
        let service = self.service.borrow();
        let index = service
            .leaderships
            .iter()
            .position(|r| r.leader_session_id == Some(leader_session_id))?;
        service
            .leaderships
            .get(index + 1)
            .map(|next| next.granted_at)
    }

    /// The published leader, if any.
    pub fn published_leader(&self) -> Option<LeaderInformation> {
        self.service
            .borrow()
            .leader
            .as_ref()
            .map(|(_, info, _)| info.clone())
    }

    /// A leader retrieval client (a TaskManager's).
    pub fn retrieval(&self) -> SimLeaderRetrieval {
        SimLeaderRetrieval {
            coordination: self.clone(),
            last: None,
        }
    }

    /// The job graph pointers as `contender` reaches them: failing while it is cut off.
    pub fn job_graph_pointers(&self, contender: usize) -> SimJobGraphPointers {
        SimJobGraphPointers {
            coordination: self.clone(),
            contender,
        }
    }

    /// Clients doubt their session only after `doubt_after` of silence (a test breaks the
    /// rule with a value above the session timeout to see the check fail).
    pub fn with_client_doubt_after(mut self, doubt_after: Duration) -> Self {
        self.doubt_after = doubt_after;
        self
    }

    /// `contender`'s client does not run before `until`: its node is paused, and after it
    /// resumes the client is the last to be scheduled (the node's actors run on meanwhile).
    pub fn starve(&self, contender: usize, until: Instant) {
        self.service.borrow_mut().starved.insert(contender, until);
    }

    /// Waits until `contender`'s client may run.
    async fn run_client(&self, contender: usize) {
        let until = self.service.borrow().starved.get(&contender).copied();
        if let Some(until) = until.filter(|until| *until > Instant::now()) {
            tokio::time::sleep_until(until).await;
        }
    }

    /// Cuts (or heals) the link between `contender` and the service.
    pub fn partition(&self, contender: usize, cut: bool) {
        let mut service = self.service.borrow_mut();
        if cut {
            service.partitioned.insert(contender);
        } else {
            service.partitioned.remove(&contender);
        }
    }

    /// One tick of the service: sessions silent for the session timeout expire (and their
    /// ephemeral nodes go). Pings come from the clients while they run (a paused or killed
    /// JobManager pings no more; one its client gave up on neither).
    fn tick(&self, now: Instant) {
        let mut service = self.service.borrow_mut();
        let Service { sessions, .. } = &mut *service;
        let mut expired = Vec::new();
        for (id, session) in sessions.iter_mut() {
            if session.expired {
                continue;
            }
            if now.duration_since(session.last_contact) > self.session_timeout {
                session.expired = true;
                expired.push(*id);
            }
        }
        for id in expired {
            service.session_ended(id, now);
        }
    }

    /// Runs the service's ticks forever (spawn it next to the contenders).
    pub async fn run(self) {
        loop {
            self.tick(Instant::now());
            tokio::time::sleep(TICK).await;
        }
    }

    /// A contender's election client.
    pub fn election(&self, contender: usize) -> SimLeaderElection {
        SimLeaderElection {
            coordination: self.clone(),
            contender,
            session: None,
            sequence: None,
        }
    }

    fn reachable(&self, contender: usize) -> bool {
        !self.service.borrow().partitioned.contains(&contender)
    }
}

/// A contender's client of [`SimCoordination`]; see the module docs.
#[derive(Debug)]
pub struct SimLeaderElection {
    coordination: SimCoordination,
    contender: usize,
    session: Option<u64>,
    sequence: Option<i64>,
}

impl SimLeaderElection {
    /// Whether this client doubts its session: it heard nothing for 2/5 of the timeout, or
    /// (reachable) it learns the session expired.
    fn doubted(&self, now: Instant) -> bool {
        let Some(id) = self.session else {
            return true;
        };
        let service = self.coordination.service.borrow();
        let Some(session) = service.sessions.get(&id) else {
            return true;
        };
        let reachable = !service.partitioned.contains(&self.contender);
        (reachable && session.expired)
            || now.duration_since(session.last_contact) > self.coordination.doubt_after
    }

    /// The client's ping, each tick it runs: it reaches the service unless cut off. A client
    /// checks its doubt before it pings, so one that was paused past its doubt finds out first.
    fn ping(&self) {
        let Some(id) = self.session else {
            return;
        };
        if !self.coordination.reachable(self.contender) {
            return;
        }
        let mut service = self.coordination.service.borrow_mut();
        if let Some(session) = service.sessions.get_mut(&id)
            && !session.expired
        {
            session.last_contact = Instant::now();
        }
    }

    /// Gives the session up: closed if the service is reachable (its latch node goes at once),
    /// else left to expire.
    fn lost(&mut self) -> HaError {
        if let Some(id) = self.session {
            let reachable = self.coordination.reachable(self.contender);
            let mut service = self.coordination.service.borrow_mut();
            if reachable {
                service.sessions.remove(&id);
                service.session_ended(id, Instant::now());
            }
        }
        self.session = None;
        self.sequence = None;
        HaError::SessionLost {
            state: "simulated session in doubt".to_owned(),
        }
    }
}

/// What one `confirm` round found.
enum Confirmed {
    Published,
    /// This session's latch node is gone: it is not the leader.
    NoLatch,
    /// Another live session's leader node is there: wait for it to go.
    HeldByAnother,
}

impl SimLeaderElection {
    /// One round of `confirm` at the service (see there).
    fn try_publish(&mut self, info: &LeaderInformation, now: Instant) -> Confirmed {
        let mut session = self.session.unwrap_or_default();
        let mut service = self.coordination.service.borrow_mut();
        if service.expire_at_confirm.remove(&self.contender) {
            if let Some(expired) = service.sessions.get_mut(&session) {
                expired.expired = true;
            }
            service.session_ended(session, now);
        }
        let holds_latch = self
            .sequence
            .is_some_and(|sequence| service.latches.get(&sequence) == Some(&session));
        if !holds_latch {
            if !self.coordination.confirm_without_latch {
                return Confirmed::NoLatch;
            }
            // Broken: a fresh session, published regardless.
            session = service.next_session;
            service.next_session += 1;
            service.sessions.insert(
                session,
                Session {
                    last_contact: now,
                    expired: false,
                },
            );
            self.session = Some(session);
        }
        let held_by_another = service.leader.as_ref().is_some_and(|(owner, _, _)| {
            *owner != session && service.sessions.get(owner).is_some_and(|s| !s.expired)
        });
        if held_by_another {
            return Confirmed::HeldByAnother;
        }
        service.leader = Some((session, info.clone(), now));
        if let Some(record) = service
            .leaderships
            .iter_mut()
            .rev()
            .find(|r| r.session == session)
        {
            record.leader_session_id = Some(info.leader_session_id);
            record.published_at = Some(now);
        }
        Confirmed::Published
    }
}

impl LeaderElectionService for SimLeaderElection {
    async fn acquire(&mut self) -> Result<Leadership, HaError> {
        // Connecting needs the service.
        while !self.coordination.reachable(self.contender) {
            tokio::time::sleep(TICK).await;
        }
        if self.session.is_none() {
            let mut service = self.coordination.service.borrow_mut();
            let id = service.next_session;
            let sequence = service.next_sequence;
            service.next_session += 1;
            service.next_sequence += 1;
            service.sessions.insert(
                id,
                Session {
                    last_contact: Instant::now(),
                    expired: false,
                },
            );
            service.latches.insert(sequence, id);
            self.session = Some(id);
            self.sequence = Some(sequence);
        }
        loop {
            self.coordination.run_client(self.contender).await;
            if self.doubted(Instant::now()) {
                return Err(self.lost());
            }
            self.ping();
            // Reading the latch nodes is a round trip: only when reachable.
            if self.coordination.reachable(self.contender) {
                let service = self.coordination.service.borrow();
                let lowest = service.latches.keys().next().copied();
                if lowest.is_some() && lowest == self.sequence {
                    drop(service);
                    let session = self.session.unwrap_or_default();
                    let token = (u128::from(session) << 64)
                        | u128::from(self.sequence.unwrap_or_default() as u64);
                    let mut service = self.coordination.service.borrow_mut();
                    if !service.leaderships.iter().any(|r| r.session == session) {
                        service.leaderships.push(LeadershipRecord {
                            contender: self.contender,
                            session,
                            granted_at: Instant::now(),
                            ended_at: None,
                            leader_session_id: None,
                            published_at: None,
                        });
                    }
                    return Ok(Leadership { token });
                }
            }
            tokio::time::sleep(TICK).await;
        }
    }

    /// As the ZooKeeper election: publishes only while this session's latch node exists, and
    /// waits while another live session's leader node is there.
    async fn confirm(&mut self, info: &LeaderInformation) -> Result<(), HaError> {
        loop {
            self.coordination.run_client(self.contender).await;
            let now = Instant::now();
            if !self.coordination.reachable(self.contender) || self.doubted(now) {
                return Err(self.lost());
            }
            match self.try_publish(info, now) {
                Confirmed::Published => return Ok(()),
                Confirmed::NoLatch => return Err(self.lost()),
                Confirmed::HeldByAnother => tokio::time::sleep(TICK).await,
            }
        }
    }

    async fn renew(&mut self) -> Result<Duration, HaError> {
        self.coordination.run_client(self.contender).await;
        // A round trip: it reaches the service unless cut off, and proves the session alive
        // (the service expires it only a session timeout after this contact).
        if self.session.is_some()
            && self.coordination.reachable(self.contender)
            && !self.doubted(Instant::now())
        {
            self.ping();
            Ok(self
                .coordination
                .lease_length
                .unwrap_or(self.coordination.doubt_after))
        } else {
            Err(HaError::SessionLost {
                state: "simulated session in doubt".to_owned(),
            })
        }
    }

    async fn revoked(&mut self) -> HaError {
        loop {
            self.coordination.run_client(self.contender).await;
            if self.doubted(Instant::now()) {
                break;
            }
            self.ping();
            tokio::time::sleep(TICK).await;
        }
        self.lost()
    }

    async fn resign(&mut self) {
        if let (Some(id), true) = (self.session, self.coordination.reachable(self.contender)) {
            let mut service = self.coordination.service.borrow_mut();
            service.sessions.remove(&id);
            service.session_ended(id, Instant::now());
        }
        self.session = None;
        self.sequence = None;
    }
}

/// A leader retrieval client of [`SimCoordination`]: reports each newly published leader (or
/// that none is published) at the tick it sees the change.
#[derive(Debug)]
pub struct SimLeaderRetrieval {
    coordination: SimCoordination,
    /// What it reported last (`Some(None)`: that there is no leader).
    last: Option<Option<LeaderInformation>>,
}

impl LeaderRetrievalService for SimLeaderRetrieval {
    async fn next_leader(&mut self) -> Result<Option<LeaderInformation>, HaError> {
        loop {
            let now = Instant::now();
            let seen = {
                let service = self.coordination.service.borrow();
                // The delay (a broken watch) hides changes, not the first leader a client sees.
                let delay = if self.last.is_some() {
                    self.coordination.retrieval_delay
                } else {
                    Duration::ZERO
                };
                match &service.leader {
                    Some((_, info, published)) if now.duration_since(*published) >= delay => {
                        Some(Some(info.clone()))
                    }
                    // Published but not seen yet: nothing changed for this client.
                    Some(_) => None,
                    None => Some(None),
                }
            };
            if let Some(seen) = seen
                && self.last.as_ref() != Some(&seen)
                && (self.last.is_some() || seen.is_some())
            {
                self.last = Some(seen.clone());
                return Ok(seen);
            }
            tokio::time::sleep(TICK).await;
        }
    }
}

/// The job graph pointers in [`SimCoordination`], as one JobManager reaches them: every
/// operation fails while that JobManager is cut off from the service.
#[derive(Debug, Clone)]
pub struct SimJobGraphPointers {
    coordination: SimCoordination,
    contender: usize,
}

impl SimJobGraphPointers {
    fn reach(&self) -> Result<std::cell::RefMut<'_, Service>, HaError> {
        if self.coordination.reachable(self.contender) {
            Ok(self.coordination.service.borrow_mut())
        } else {
            Err(HaError::SessionLost {
                state: "simulated partition from the coordination service".to_owned(),
            })
        }
    }
}

impl JobGraphPointers for SimJobGraphPointers {
    async fn put(&self, job_id: JobId, file: &str) -> Result<(), HaError> {
        let forget = self.coordination.forget_job_graphs;
        let mut service = self.reach()?;
        if !forget {
            service.pointers.insert(job_id, file.to_owned());
        }
        Ok(())
    }

    async fn remove(&self, job_id: JobId) -> Result<(), HaError> {
        if self.coordination.fail_job_graph_removals {
            return Err(HaError::SessionLost {
                state: "simulated storage error: the pointer cannot be removed".to_owned(),
            });
        }
        self.reach()?.pointers.remove(&job_id);
        Ok(())
    }

    async fn job_ids(&self) -> Result<Vec<JobId>, HaError> {
        Ok(self.reach()?.pointers.keys().copied().collect())
    }

    async fn get(&self, job_id: JobId) -> Result<Option<String>, HaError> {
        if !self.coordination.read_latency.is_zero() {
            tokio::time::sleep(self.coordination.read_latency).await;
        }
        Ok(self.reach()?.pointers.get(&job_id).cloned())
    }

    async fn pool_size(&self) -> Result<Option<u32>, HaError> {
        Ok(self.reach()?.pool_size)
    }

    async fn put_pool_size(&self, size: u32) -> Result<(), HaError> {
        let forget = self.coordination.forget_pool_size;
        let mut service = self.reach()?;
        if !forget {
            service.pool_size = Some(size);
        }
        Ok(())
    }
}

/// What one seeded run saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionRun {
    /// How many leaderships were granted (and acted on).
    pub leaderships: u32,
    /// Who leads at the end, after the quiet phase.
    pub leader_at_end: Option<usize>,
}

/// Runs `contenders` through `fault_time` of seeded partitions (each contender cut and healed at
/// random, the leader more often) and then a quiet phase of ten session timeouts, under a
/// paused clock. Each contender acts as leader from a granted, confirmed leadership until
/// `revoked` resolves, as the JobManager's leader loop does. Fails (with the seed's story) if
/// two contenders ever act at once, or if none leads at the end.
pub async fn check_at_most_one_leader(
    seed: u64,
    contenders: usize,
    coordination: SimCoordination,
    fault_time: Duration,
) -> Result<ElectionRun, String> {
    let session_timeout = coordination.session_timeout;
    let acting: Rc<RefCell<BTreeSet<usize>>> = Rc::default();
    let violation: Rc<RefCell<Option<String>>> = Rc::default();
    let granted = Rc::new(RefCell::new(0u32));
    let local = tokio::task::LocalSet::new();
    local.spawn_local(coordination.clone().run());
    for contender in 0..contenders {
        let mut election = coordination.election(contender);
        let (acting, violation, granted) = (acting.clone(), violation.clone(), granted.clone());
        local.spawn_local(async move {
            loop {
                let Ok(_leadership) = election.acquire().await else {
                    tokio::time::sleep(TICK).await;
                    continue;
                };
                let info = LeaderInformation {
                    address: format!("jm-{contender}"),
                    rest_url: String::new(),
                    leader_session_id: crate::base::ids::LeaderSessionId::from_u128(0),
                };
                if election.confirm(&info).await.is_err() {
                    continue;
                }
                {
                    let mut now_acting = acting.borrow_mut();
                    now_acting.insert(contender);
                    *granted.borrow_mut() += 1;
                    if now_acting.len() > 1 && violation.borrow().is_none() {
                        *violation.borrow_mut() = Some(format!(
                            "at {:?}: {now_acting:?} act as leaders at once",
                            Instant::now()
                        ));
                    }
                }
                let _lost = election.revoked().await;
                acting.borrow_mut().remove(&contender);
            }
        });
    }
    let faults = coordination.clone();
    let fault_acting = acting.clone();
    local
        .run_until(async move {
            let mut rng = NodeRng::seed_from_u64(seed);
            let end = Instant::now() + fault_time;
            while Instant::now() < end {
                let wait = session_timeout.mul_f64(0.2 + (rng.next_u64() % 100) as f64 / 50.0);
                tokio::time::sleep(wait).await;
                // The leader is the interesting victim: cut it more often than the others.
                let leader = fault_acting.borrow().iter().next().copied();
                let victim = match leader {
                    Some(leader) if rng.next_u64().is_multiple_of(2) => leader,
                    _ => (rng.next_u64() % contenders as u64) as usize,
                };
                let cut = !rng.next_u64().is_multiple_of(3);
                faults.partition(victim, cut);
            }
            for contender in 0..contenders {
                faults.partition(contender, false);
            }
            tokio::time::sleep(session_timeout * 10).await;
        })
        .await;
    if let Some(violation) = violation.borrow().clone() {
        return Err(format!("seed {seed}: {violation}"));
    }
    let leader_at_end = acting.borrow().iter().next().copied();
    if leader_at_end.is_none() {
        return Err(format!("seed {seed}: no leader after the quiet phase"));
    }
    let leaderships = *granted.borrow();
    Ok(ElectionRun {
        leaderships,
        leader_at_end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(2);

    async fn run(seed: u64, coordination: SimCoordination) -> Result<ElectionRun, String> {
        check_at_most_one_leader(seed, 3, coordination, Duration::from_secs(30)).await
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_one_leader_acts_at_a_time_through_seeded_partitions() {
        let mut leaderships = 0;
        for seed in 0..60 {
            let run = run(seed, SimCoordination::new(TIMEOUT))
                .await
                .unwrap_or_else(|story| panic!("{story}"));
            leaderships += run.leaderships;
        }
        // The faults moved leadership around: the runs did not just keep the first leader.
        assert!(leaderships > 120, "{leaderships} leaderships in 60 runs");
    }

    #[tokio::test(start_paused = true)]
    async fn the_same_seed_tells_the_same_story() {
        let a = run(7, SimCoordination::new(TIMEOUT)).await;
        let b = run(7, SimCoordination::new(TIMEOUT)).await;
        assert_eq!(a, b);
    }

    /// The rule the invariant rests on, broken on purpose: clients that doubt their session
    /// only after the server expired it let two leaders act at once, and the check says so.
    #[tokio::test(start_paused = true)]
    async fn leaders_that_act_past_their_session_are_caught() {
        let mut caught = 0;
        for seed in 0..20 {
            let broken = SimCoordination::new(TIMEOUT).with_client_doubt_after(TIMEOUT * 3);
            if let Err(story) = run(seed, broken).await {
                assert!(story.contains("at once"), "{story}");
                caught += 1;
            }
        }
        assert!(caught > 0, "two leaders at once went unnoticed in 20 runs");
    }
}
