//! The HA family's invariants, checked after every cluster event, action and 50 ms (safety) and
//! at the end of a run (liveness, final statuses): what the module docs of [`super`] list.

use super::*;

impl HaRun {
    /// The safety invariants: (a), (b) and (d), pools within bounds, jobs seen terminal.
    pub(super) async fn check_safety(&mut self) {
        let shared = Rc::clone(&self.shared);
        shared.cluster.reap_stopped_task_managers();
        let now = Instant::now();
        let max = shared.cluster.config.resourcemanager.max_pool_size;
        let ids: Vec<JobId> = shared.jobs.borrow().iter().filter_map(|j| j.id).collect();
        for (index, leader) in shared.leaders() {
            let status = leader.job_manager.get_status.send(GetJobManagerStatus);
            let pool = leader
                .resource_manager
                .get_status
                .send(GetResourceManagerStatus);
            let details: Vec<_> = ids
                .iter()
                .map(|id| {
                    leader
                        .job_manager
                        .request_job_status
                        .send(RequestJobStatus { job_id: *id })
                })
                .collect();
            if let Ok(status) = status.await {
                let session = status.leader_session_id;
                let ended = shared
                    .coordination
                    .leaderships()
                    .into_iter()
                    .find(|r| r.leader_session_id == Some(session))
                    .and_then(|r| r.ended_at);
                let running_since = shared.hosts.borrow()[index].running_since;
                if let Some(ended) = ended
                    && now.saturating_duration_since(ended.max(running_since)) > STEP_DOWN
                {
                    shared.violation(format!(
                        "(a) at most one leader: jobmanager-{index} still leads session {session} {:?} after its leadership ended at the coordination service",
                        now - ended
                    ));
                }
            }
            if let Ok(pool) = pool.await
                && let Err(what) = invariants::pool_within_bounds(&pool, max)
            {
                shared.violation(format!("jobmanager-{index}: {what}"));
            }
            for (id, answer) in ids.iter().zip(details) {
                if let Ok(Ok(details)) = answer.await
                    && let Some(job) = shared
                        .jobs
                        .borrow_mut()
                        .iter_mut()
                        .find(|j| j.id == Some(*id))
                {
                    let status = details.summary.status;
                    job.last_status = Some(status);
                    job.seen_terminal |= status.is_globally_terminal();
                    if status.is_globally_terminal()
                        && job.result_kept_at.is_none()
                        && shared.result_kept(index, *id)
                    {
                        job.result_kept_at = Some((now, status));
                        if shared.lose_collected {
                            let incarnation = shared.hosts.borrow()[index].incarnation;
                            let records = shared
                                .job_results_dir(index, incarnation)
                                .join(format!("{id}.results"));
                            let _ = std::fs::remove_file(records);
                        }
                    }
                }
            }
        }
        // (e) the published leader holds the latch.
        if let Some(what) = shared.coordination.leader_without_latch() {
            shared.violation(format!("(e) the published leader holds no latch: {what}"));
        }
        if self.clean {
            self.read_event_logs();
        }
        // (a) where it leaves the node: no deployment written by a deposed leader. (d) no
        // deployment of a job whose result was kept. (f) no finished subtask a new leader
        // could take back deployed again.
        for sent in shared.cluster.network.take_deployments_sent() {
            if let Some((logged, seen)) = (self.logged)
                .get(&(sent.job_id, sent.vertex.to_string(), sent.subtask))
                .copied()
                && logged != sent.attempt
                && shared
                    .coordination
                    .leaderships()
                    .iter()
                    .find(|r| r.leader_session_id == Some(sent.leader_session_id))
                    .is_some_and(|r| r.granted_at > seen)
            {
                shared.violation(format!(
                    "(f) finished work runs again: {} sent attempt {} of {} {} of job {} under leader session {}, granted after the job's event log named attempt {logged} finished, and every result survived",
                    sent.from,
                    sent.attempt,
                    sent.vertex,
                    sent.subtask,
                    sent.job_id,
                    sent.leader_session_id
                ));
            }
            let kept = shared
                .jobs
                .borrow()
                .iter()
                .find(|j| j.id == Some(sent.job_id))
                .and_then(|j| j.result_kept_at.map(|(at, _)| at));
            if let Some(kept) = kept
                && kept <= sent.at
            {
                shared.violation(format!(
                    "(d) an ended job runs again: {} sent attempt {} of job {} to {} under leader session {}, {:?} after the job's result was kept",
                    sent.from,
                    sent.attempt,
                    sent.job_id,
                    sent.to,
                    sent.leader_session_id,
                    sent.at - kept
                ));
            }
            if let Some(superseded) = shared.coordination.superseded_at(sent.leader_session_id)
                && superseded <= sent.at
            {
                shared.violation(format!(
                    "(a) at most one leader: {} sent attempt {} to {} under leader session {} {:?} after a later leadership was granted",
                    sent.from,
                    sent.attempt,
                    sent.to,
                    sent.leader_session_id,
                    sent.at - superseded
                ));
            }
        }
        // Job → session → since when the TaskManagers running its attempts under it run.
        let mut sessions_of_job: BTreeMap<JobId, BTreeMap<LeaderSessionId, Instant>> =
            BTreeMap::new();
        for (id, task_manager, running_since) in shared.cluster.running_task_managers() {
            let Ok(status) = task_manager.send(GetTaskManagerStatus).await else {
                continue;
            };
            let booted = now - shared.cluster.now().saturating_sub(running_since);
            let booted = booted.max(start_of(&shared));
            let previous = self
                .last_poll
                .insert(id.clone(), now)
                .map_or(booted, |at| at.max(booted));
            let Some(session) = status.leader_session_id else {
                continue;
            };
            for task in &status.running {
                let since = sessions_of_job
                    .entry(task.job_id)
                    .or_default()
                    .entry(session)
                    .or_insert(booted);
                *since = (*since).min(booted);
                if self.seen_attempts.insert(task.attempt)
                    && let Some(superseded) = shared.coordination.superseded_at(session)
                    && superseded < previous
                {
                    let late = previous - superseded;
                    let what = format!(
                        "{id} started attempt {} of job {} for leader session {session} {late:?} after a later leadership was granted",
                        task.attempt, task.job_id,
                    );
                    if late > self.accept_grace {
                        shared.violation(format!("(a) at most one leader: {what}"));
                    } else {
                        // Written before, delivered after: see the module docs.
                        *shared.deposed_deployments.borrow_mut() += 1;
                        shared
                            .cluster
                            .trace
                            .record(format!("deposed leader: {what}"));
                    }
                }
            }
        }
        let leaderships = shared.coordination.leaderships();
        let order = |session: &LeaderSessionId| {
            leaderships
                .iter()
                .position(|r| r.leader_session_id == Some(*session))
        };
        for (job, sessions) in sessions_of_job {
            if sessions.len() < 2 {
                continue;
            }
            let Some(newest) = sessions.keys().max_by_key(|s| order(s)) else {
                continue;
            };
            let Some(published) = order(newest).and_then(|i| leaderships[i].published_at) else {
                continue;
            };
            let overdue = sessions.iter().any(|(session, since)| {
                session != newest
                    && now.saturating_duration_since(published.max(*since)) > RETRIEVAL_GRACE
            });
            if overdue {
                shared.violation(format!(
                    "(b) job {job} has attempts of {} leader sessions running at once, {:?} after the newest ({newest}) was published: {:?}",
                    sessions.len(),
                    now - published,
                    sessions.keys().collect::<Vec<_>>()
                ));
            }
        }
    }

    /// (f): what each batch job's event log names finished now, keeping when each attempt was
    /// first seen there.
    fn read_event_logs(&mut self) {
        let now = Instant::now();
        let log = crate::ha::JobEventLog::new(&self.shared.storage);
        let jobs: Vec<(JobId, Vec<String>)> = (self.shared.jobs.borrow().iter())
            .filter(|j| {
                matches!(
                    j.spec.kind,
                    JobKind::BatchWordCount | JobKind::PacedBatchWordCount
                )
            })
            .filter_map(|j| {
                let names = j.spec.graph.vertices.iter().map(|v| v.name.clone());
                Some((j.id?, names.collect()))
            })
            .collect();
        for (job_id, names) in jobs {
            let Ok(events) = log.read(job_id) else {
                continue;
            };
            let finished = crate::ha::job_event_log::replay(&events);
            self.logged.retain(|(job, _, _), _| *job != job_id);
            for task in finished.values().flatten() {
                let Some(name) = names.get(task.vertex as usize) else {
                    continue;
                };
                let key = (job_id, name.clone(), task.subtask);
                let seen = *(self.seen_logged)
                    .entry((key.clone(), task.attempt))
                    .or_insert(now);
                self.logged.insert(key, (task.attempt, seen));
            }
        }
    }

    /// (c): one leader, the published one; every stored job that was not seen terminal is
    /// known to it and ended; its pool back and registered.
    pub(super) async fn check_liveness(&mut self) -> Result<(), String> {
        let shared = Rc::clone(&self.shared);
        let leaders = shared.leaders();
        let [(index, leader)] = leaders.as_slice() else {
            return Err(format!("{} JobManagers lead", leaders.len()));
        };
        let published = shared
            .coordination
            .published_leader()
            .ok_or("no leader published")?;
        let status = leader
            .job_manager
            .get_status
            .send(GetJobManagerStatus)
            .await
            .map_err(|e| format!("the leader does not answer: {e}"))?;
        if status.leader_session_id != published.leader_session_id {
            return Err(format!(
                "jobmanager-{index} leads session {}, the service publishes {}",
                status.leader_session_id, published.leader_session_id
            ));
        }
        let pool = leader
            .resource_manager
            .get_status
            .send(GetResourceManagerStatus)
            .await
            .map_err(|e| format!("the leader's resource manager does not answer: {e}"))?;
        let pending = shared.jobs.borrow().iter().filter(|j| !j.answered).count();
        if pending > 0 {
            return Err(format!("{pending} submissions unanswered"));
        }
        let (kept_size, resizing) = *shared.pool_size.borrow();
        if resizing {
            return Err("a pool resize is still being retried".to_owned());
        }
        if let Some(size) = kept_size
            && pool.designated_pool_size != size
        {
            return Err(format!(
                "jobmanager-{index}'s pool size is {}, the operator set {size} (not kept across leaders)",
                pool.designated_pool_size
            ));
        }
        let expected: Vec<(JobId, bool, Option<JobStatus>)> = shared
            .jobs
            .borrow()
            .iter()
            .filter(|j| j.stored)
            .filter_map(|j| Some((j.id?, j.seen_terminal, j.result_kept_at.map(|(_, s)| s))))
            .collect();
        let mut jobs = Vec::new();
        for (id, seen_terminal, kept) in expected {
            match leader
                .job_manager
                .request_job_status
                .send(RequestJobStatus { job_id: id })
                .await
            {
                Ok(Ok(details)) => {
                    if !details.summary.status.is_globally_terminal() {
                        return Err(format!(
                            "job {id} is still {:?} at jobmanager-{index}",
                            details.summary.status
                        ));
                    }
                    if let Some(kept) = kept
                        && kept != details.summary.status
                    {
                        return Err(format!(
                            "job {id} ended {kept:?} (its result kept) but jobmanager-{index} says {:?}",
                            details.summary.status
                        ));
                    }
                    jobs.push(details);
                }
                // Without a kept result (a deposed leader's end), it may be unknown.
                _ if seen_terminal && kept.is_none() => {}
                _ if kept.is_some() => {
                    return Err(format!(
                        "job {id} ended with its result kept, and jobmanager-{index} does not know it (the job result store lost it)"
                    ));
                }
                _ => {
                    return Err(format!(
                        "job {id} was stored and never ended, and jobmanager-{index} does not know it (not recovered)"
                    ));
                }
            }
        }
        invariants::pool_converged(&JobManagerSnapshot {
            pool,
            cluster: status,
            jobs,
        })
    }

    /// Each job's final status at the leader (or `None`), each FAILED job's reason, and the
    /// subtasks taken back after a failover; every FINISHED WordCount wrote exactly the
    /// sequential count (a batch one too, whatever was taken back).
    pub(super) async fn final_statuses(
        &mut self,
    ) -> (
        Vec<(JobKind, Option<JobStatus>)>,
        Vec<(JobKind, String)>,
        u64,
    ) {
        let shared = Rc::clone(&self.shared);
        let leader = shared.leaders().into_iter().next();
        let jobs: Vec<(Option<JobId>, JobSpec, Option<JobStatus>)> = shared
            .jobs
            .borrow()
            .iter()
            .map(|j| (j.id, j.spec.clone(), j.last_status))
            .collect();
        let mut out = Vec::new();
        let mut failures = Vec::new();
        let mut restored = 0;
        for (id, JobSpec { kind, files, .. }, last_status) in jobs {
            let details = match (id, &leader) {
                (Some(id), Some((_, leader))) => match leader
                    .job_manager
                    .request_job_status
                    .send(RequestJobStatus { job_id: id })
                    .await
                {
                    Ok(Ok(details)) => Some(details),
                    _ => None,
                },
                _ => None,
            };
            // A job that ended at an earlier leader left the store: the last status seen.
            let status = details.as_ref().map(|d| d.summary.status).or(last_status);
            let taken_back = (details.iter())
                .flat_map(|d| &d.vertices)
                .flat_map(|v| &v.subtasks)
                .filter(|s| s.restored)
                .count();
            if taken_back > 0 {
                shared
                    .cluster
                    .trace
                    .record(format!("job {id:?}: {taken_back} subtasks taken back"));
            }
            restored += taken_back as u64;
            shared
                .cluster
                .trace
                .record(format!("job {kind:?} {id:?}: {status:?}"));
            if status == Some(JobStatus::Finished)
                && let Some((input, output)) = &files
                && let Err(what) = jobs::check_output(kind, input, output)
            {
                shared.violation(format!("{kind:?} job {id:?}: {what}"));
            }
            // (g) what a finished join collected, from whichever leader it ended under.
            if kind == JobKind::TypedJoin
                && details.as_ref().map(|d| d.summary.status) == Some(JobStatus::Finished)
                && let (Some(id), Some((_, leader)), Some((expected, _))) = (id, &leader, &files)
            {
                let answer = leader
                    .job_manager
                    .request_job_results
                    .send(crate::messages::job_manager::RequestJobResults { job_id: id })
                    .await;
                let checked = match answer {
                    Ok(Ok(results)) => jobs::check_collected(expected, &results),
                    Ok(Err(error)) => Err(format!("its results were refused: {error}")),
                    Err(error) => Err(format!("the leader did not answer: {error}")),
                };
                if let Err(what) = checked {
                    shared.violation(format!(
                        "(g) collected records lost: {kind:?} job {id}: {what}"
                    ));
                }
            }
            if status == Some(JobStatus::Failed) {
                failures.push((kind, details.and_then(|d| d.failure).unwrap_or_default()));
            }
            out.push((kind, status));
        }
        (out, failures, restored)
    }
}
