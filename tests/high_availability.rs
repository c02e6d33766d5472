//! High availability against a real ZooKeeper (Debian's package, started per test on a free
//! port; see tests/common/zookeeper.rs): two `flint jobmanager` processes of one cluster id,
//! TaskManager processes that find the leader through ZooKeeper, and the leader killed, paused
//! or cut off from ZooKeeper. Everything is asked over the REST API, as an operator would.

use std::process::Command;

use flint::operators::builtin::sequential_word_count;

mod common;
use common::ha::{
    HaCluster, get, leads, no_redirects, signal, submit_wordcount, submit_wordcount_named,
    wait_until,
};
use common::read_counts;
use common::rest::{JobManagerChild, request};
use common::scratch;

#[test]
#[allow(clippy::disallowed_methods)] // measures real processes in real time
fn the_standby_takes_over_after_kill_9_of_the_leader_and_finishes_its_wordcount_exactly() {
    let Some(mut cluster) = HaCluster::start("ha-kill-9") else {
        return;
    };
    let (a_url, b_url) = (cluster.a.url(), cluster.b.url());
    // The standby points every request with the token at the leader; without the token it
    // says nothing, not even where the leader is.
    let redirect = get(&b_url, "/overview");
    assert_eq!(redirect.status, 307, "{}", redirect.body);
    let anonymous = request(
        &no_redirects(),
        "GET",
        &format!("{b_url}/overview"),
        None,
        None,
    );
    assert_eq!(anonymous.status, 401, "{}", anonymous.body);
    let followed = get(&a_url, "/overview").expect(200);
    assert_eq!(followed.json()["taskmanagers"], 2, "{}", followed.body);

    // The dashboard too: a browser lands on the leader's page (whose API calls are then
    // the leader's own).
    let page = request(
        &common::rest::agent(),
        "GET",
        &format!("{b_url}/"),
        None,
        None,
    )
    .expect(200);
    assert!(
        page.content_type.starts_with("text/html"),
        "{}",
        page.content_type
    );
    assert_eq!(get(&b_url, "/").status, 307);

    // The CLI against the standby stops at the redirect, naming the leader: its token goes
    // only where it was told to go.
    let flint = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_flint"))
            .args(args)
            .env_remove("FLINT_JOBMANAGER")
            .env_remove("FLINT_CONFIG")
            .output()
            .expect("flint runs")
    };
    let list = flint(&["list", "--jobmanager", &b_url]);
    let said = String::from_utf8_lossy(&list.stderr);
    assert_eq!(list.status.code(), Some(5), "{said}");
    assert!(
        said.contains(&format!("--jobmanager {a_url}")),
        "flint list against the standby: {said}"
    );
    // Submitted with the CLI to the leader.
    let (job, input, output) = submit_wordcount(&a_url, &cluster.dir, 200_000);
    cluster.wait_for_job(&a_url, &job, "the job runs", |j| j["state"] == "RUNNING");
    let list = flint(&["list", "--jobmanager", &a_url]);
    let listed = String::from_utf8_lossy(&list.stdout);
    assert!(
        list.status.success(),
        "{listed}{}",
        String::from_utf8_lossy(&list.stderr)
    );
    assert!(listed.contains(&job), "flint list: {listed}");
    // An operator's resize outlives the leader: the new one keeps it.
    let resize = flint(&["pool-size", "3", "--jobmanager", &a_url]);
    assert!(
        resize.status.success(),
        "{}{}",
        String::from_utf8_lossy(&resize.stdout),
        String::from_utf8_lossy(&resize.stderr)
    );
    signal(&cluster.a.child, "-KILL");
    let _ = cluster.a.child.wait();
    let killed_at = std::time::Instant::now();

    wait_until("the standby leads", || leads(&b_url).then_some(()));
    cluster.wait_for_pool(&b_url);
    let pool_back = killed_at.elapsed();
    let pool_size = get(&b_url, "/cluster/pool-size");
    assert_eq!(
        pool_size.json()["size"],
        3,
        "the new leader did not keep the operator's pool size: {}",
        pool_size.body
    );
    let done = cluster.wait_for_job(&b_url, &job, "the recovered job ends", |j| {
        matches!(
            j["state"].as_str(),
            Some("FINISHED" | "FAILED" | "CANCELED")
        )
    });
    eprintln!(
        "kill -9 of the leader: new leader serving REST with the pool back after {pool_back:?}, \
         recovered WordCount FINISHED after {:?}",
        killed_at.elapsed()
    );
    assert_eq!(done["state"], "FINISHED", "{done:#}");
    assert!(
        done["recovered-at"].is_u64(),
        "not marked recovered: {done:#}"
    );
    // The CLI with the cluster's HA keys (and no --jobmanager) finds the new leader itself.
    let list = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(["list", "--output", "json", "--config"])
        .arg(cluster.dir.join("taskmanager.toml"))
        .env_remove("FLINT_JOBMANAGER")
        .env_remove("FLINT_CONFIG")
        .output()
        .expect("flint list runs");
    let listed = String::from_utf8_lossy(&list.stdout);
    assert!(
        list.status.success(),
        "{listed}{}",
        String::from_utf8_lossy(&list.stderr)
    );
    assert!(
        listed.contains("FINISHED") && listed.contains(&job),
        "{listed}"
    );
    assert_eq!(
        read_counts(&output),
        sequential_word_count(&input).unwrap(),
        "the recovered job's output is not the exact count"
    );
}

#[test]
fn a_leader_paused_past_its_session_timeout_steps_down_when_it_resumes() {
    let Some(cluster) = HaCluster::start("ha-sigstop") else {
        return;
    };
    let (a_url, b_url) = (cluster.a.url(), cluster.b.url());
    let (job, input, output) = submit_wordcount(&a_url, &cluster.dir, 200_000);
    cluster.wait_for_job(&a_url, &job, "the job runs", |j| j["state"] == "RUNNING");
    signal(&cluster.a.child, "-STOP");
    wait_until("the standby leads while the leader is paused", || {
        leads(&b_url).then_some(())
    });
    cluster.wait_for_pool(&b_url);
    signal(&cluster.a.child, "-CONT");
    // Resumed, the old leader finds its session gone and stands by: it redirects to b.
    wait_until("the resumed old leader steps down", || {
        (get(&a_url, "/overview").status == 307).then_some(())
    });
    let done = cluster.wait_for_job(&b_url, &job, "the recovered job ends", |j| {
        matches!(
            j["state"].as_str(),
            Some("FINISHED" | "FAILED" | "CANCELED")
        )
    });
    assert_eq!(done["state"], "FINISHED", "{done:#}");
    // Whatever the resumed old leader sent (a Disconnect, a CancelTasks for its old attempts)
    // was refused: the new leader's run of the job was never disturbed.
    assert_eq!(done["restarts"], 0, "{done:#}");
    assert_eq!(
        read_counts(&output),
        sequential_word_count(&input).unwrap(),
        "the output is not the exact count"
    );
    let refused = std::fs::read_dir(&cluster.dir)
        .unwrap()
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("tm-"))
        .filter_map(|entry| std::fs::read_to_string(entry.path()).ok())
        .map(|log| log.matches("from stale leader session").count())
        .sum::<usize>();
    eprintln!("messages of the old leader refused by fencing: {refused}");
    assert!(
        cluster.a.log().contains("leadership lost"),
        "the old leader never said it suspended: {}",
        cluster.a.log()
    );
    // b still leads: nothing the old leader did after resuming took its place.
    assert!(leads(&b_url));
}

/// Also the regression test of a deadlock found on the way: the job graph store shared the
/// election's first session, kept it alive after the election gave it up, and its latch node
/// then stood before every contender forever once ZooKeeper came back.
#[test]
fn a_zookeeper_restart_suspends_leadership_and_loses_no_job() {
    let Some(mut cluster) = HaCluster::start("ha-zk-restart") else {
        return;
    };
    let (a_url, b_url) = (cluster.a.url(), cluster.b.url());
    let (job, input, output) = submit_wordcount(&a_url, &cluster.dir, 200_000);
    cluster.wait_for_job(&a_url, &job, "the job runs", |j| j["state"] == "RUNNING");
    cluster.zk.stop();
    wait_until("the leader suspends without ZooKeeper", || {
        (!leads(&a_url)).then_some(())
    });
    cluster.zk.restart();
    let leader = wait_until("a JobManager leads again", || {
        [&a_url, &b_url].into_iter().find(|url| leads(url)).cloned()
    });
    cluster.wait_for_pool(&leader);
    let done = cluster.wait_for_job(&leader, &job, "the recovered job ends", |j| {
        matches!(
            j["state"].as_str(),
            Some("FINISHED" | "FAILED" | "CANCELED")
        )
    });
    assert_eq!(done["state"], "FINISHED", "{done:#}");
    assert_eq!(
        read_counts(&output),
        sequential_word_count(&input).unwrap(),
        "the output is not the exact count"
    );
}

#[test]
fn a_corrupted_job_graph_fails_that_job_with_the_reason_and_the_others_recover() {
    let Some(mut cluster) = HaCluster::start("ha-corrupted") else {
        return;
    };
    let (a_url, b_url) = (cluster.a.url(), cluster.b.url());
    let (good, input, output) = submit_wordcount_named(&a_url, &cluster.dir, "good", 200_000);
    let (bad, _, _) = submit_wordcount_named(&a_url, &cluster.dir, "bad", 200_000);
    cluster.wait_for_job(&a_url, &good, "the good job runs", |j| {
        j["state"] == "RUNNING"
    });
    let stored = cluster
        .dir
        .join("ha-storage")
        .join("default")
        .join(format!("job-{bad}.json"));
    assert!(
        stored.is_file(),
        "the graph was not persisted at {}",
        stored.display()
    );
    std::fs::write(&stored, b"{\"name\": \"bad\", \"vert").unwrap();
    signal(&cluster.a.child, "-KILL");
    let _ = cluster.a.child.wait();

    wait_until("the standby leads", || leads(&b_url).then_some(()));
    let failed = cluster.wait_for_job(&b_url, &bad, "the corrupted job is reported", |j| {
        j["state"] == "FAILED"
    });
    let reason = failed["failure"].as_str().unwrap_or_default();
    assert!(reason.contains("corrupted"), "{failed:#}");
    assert!(failed["recovered-at"].is_u64(), "{failed:#}");
    let done = cluster.wait_for_job(&b_url, &good, "the good job ends", |j| {
        matches!(
            j["state"].as_str(),
            Some("FINISHED" | "FAILED" | "CANCELED")
        )
    });
    assert_eq!(done["state"], "FINISHED", "{done:#}");
    assert_eq!(read_counts(&output), sequential_word_count(&input).unwrap());
}

#[test]
fn local_process_workers_die_with_their_jobmanager_killed_with_kill_9() {
    let dir = scratch("ha-orphans");
    let mut jm = JobManagerChild::start(
        &[
            "--bind",
            "127.0.0.1:0",
            "--rest",
            "127.0.0.1:0",
            "--pool-size",
            "2",
        ],
        &dir,
        "",
    );
    let children = wait_until("two TaskManager children", || {
        let children = common::process::task_managers_of(jm.child.id());
        (children.len() == 2).then_some(children)
    });
    signal(&jm.child, "-KILL");
    let _ = jm.child.wait();
    for (pid, name) in children {
        wait_until(
            &format!("TaskManager {name} dies with its JobManager"),
            || {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                // Gone, or a zombie waiting for init to reap it.
                (stat.is_empty()
                    || stat
                        .rsplit_once(") ")
                        .is_some_and(|(_, s)| s.starts_with('Z')))
                .then_some(())
            },
        );
    }
}

#[test]
fn an_unreachable_quorum_at_start_names_the_key_and_the_address_and_exits_2() {
    let dir = scratch("ha-unreachable");
    let port = common::zookeeper::free_port();
    let config = dir.join("flint.toml");
    std::fs::write(
        &config,
        format!(
            "[high-availability]\ntype = \"zookeeper\"\nstorageDir = \"{}\"\n\
             [high-availability.zookeeper]\nquorum = \"127.0.0.1:{port}\"\n\
             [high-availability.zookeeper.client]\nconnection-timeout = \"1s\"\n",
            dir.join("ha").display()
        ),
    )
    .unwrap();
    // The JobManager, a TaskManager finding its leader, and a client command alike.
    let commands: [&[&str]; 3] = [
        &[
            "jobmanager",
            "--bind",
            "127.0.0.1:0",
            "--rest",
            "127.0.0.1:0",
        ],
        &["taskmanager", "--bind", "127.0.0.1:0"],
        &["list"],
    ];
    for args in commands {
        let out = Command::new(env!("CARGO_BIN_EXE_flint"))
            .args(args)
            .arg("--config")
            .arg(&config)
            .env_remove("FLINT_SECRET")
            .env_remove("FLINT_JOBMANAGER")
            .output()
            .expect("flint runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        for says in [
            "high-availability.zookeeper.quorum",
            &format!("127.0.0.1:{port}"),
        ] {
            assert!(
                stderr.contains(says),
                "{args:?} does not say `{says}`: {stderr}"
            );
        }
        if args[0] != "list" {
            assert!(stderr.contains("connection-timeout"), "{args:?}: {stderr}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_taskmanager_without_jobmanager_or_high_availability_says_how_to_find_one() {
    let out = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(["taskmanager", "--bind", "127.0.0.1:0", "--ignore-env"])
        .env_remove("FLINT_SECRET")
        .output()
        .expect("flint runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--jobmanager") && stderr.contains("high-availability.type"),
        "{stderr}"
    );
}

#[test]
fn the_clusters_znodes_are_closed_to_a_zookeeper_client_without_its_credential() {
    // Issue 34: with `high-availability.zookeeper.client.auth-file` every znode is CREATOR_ALL.
    // A client of the same ensemble without the credential can neither read nor rewrite the
    // leader, plant a job graph pointer or a pool size, nor delete the latch; the credential's
    // holder reads what the leader published.
    use zookeeper_client::{Acls, Client, CreateMode, Error};
    let Some(cluster) = HaCluster::start("ha-acl") else {
        return;
    };
    let quorum = cluster.zk.quorum();
    let a_address = cluster.a.address();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let cluster_path = "/flint/default";
        let leader = format!("{cluster_path}/leader");
        let stranger = Client::connect(&quorum).await.expect("a session");
        let refused = |result: Result<(), Error>, what: &str| {
            assert!(matches!(result, Err(Error::NoAuth)), "{what}: {result:?}");
        };
        refused(
            stranger.get_data(&leader).await.map(drop),
            "read the leader",
        );
        refused(
            stranger.set_data(&leader, b"rogue", None).await.map(drop),
            "rewrite the leader",
        );
        let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
        refused(
            stranger
                .create(
                    &format!("{cluster_path}/jobgraphs/00000000-0000-4000-8000-000000000001"),
                    b"/etc/passwd",
                    &open,
                )
                .await
                .map(drop),
            "plant a job graph pointer",
        );
        refused(
            stranger
                .create(&format!("{cluster_path}/pool-size"), b"10000", &open)
                .await
                .map(drop),
            "plant a pool size",
        );
        refused(
            stranger
                .list_children(&format!("{cluster_path}/leaderlatch"))
                .await
                .map(drop),
            "list the latch",
        );
        let member = Client::connector()
            .with_auth("digest", common::ha::ZOOKEEPER_CREDENTIAL.as_bytes())
            .connect(&quorum)
            .await
            .expect("an authenticated session");
        let (published, _) = member.get_data(&leader).await.expect("the leader");
        assert!(
            String::from_utf8_lossy(&published).contains(&a_address),
            "{}",
            String::from_utf8_lossy(&published)
        );
        // Nor can the stranger delete the leader's latch node (forcing a failover), though
        // the credential's holder sees its name.
        let latch = format!("{cluster_path}/leaderlatch");
        let nodes = member.list_children(&latch).await.expect("the latch nodes");
        assert!(!nodes.is_empty());
        for node in nodes {
            refused(
                stranger.delete(&format!("{latch}/{node}"), None).await,
                "delete a latch node",
            );
        }
        refused(
            stranger.delete(&leader, None).await,
            "delete the leader znode",
        );
    });
    // The cluster works on, authenticated: both TaskManagers found the leader through it.
    cluster.wait_for_pool(&cluster.a.url());
}

#[test]
fn forged_znodes_written_with_the_clusters_credential_are_refused_by_every_flint_process() {
    // Issue 34: whoever can write the znodes (here with the cluster's own digest credential,
    // as a ZooKeeper administrator could) but lacks the cluster secret can neither send the
    // TaskManagers, the standby or the CLI to a rogue JobManager, nor make a new leader run a
    // job or take a pool size: the data is signed with the cluster secret (src/ha/signed.rs).
    use std::net::TcpListener;
    use zookeeper_client::{Acls, Client, CreateMode};
    let Some(mut cluster) = HaCluster::start("ha-forged") else {
        return;
    };
    let (a_url, b_url) = (cluster.a.url(), cluster.b.url());
    // The rogue JobManager: a transport and a REST port nobody may connect to.
    let rogue_transport = TcpListener::bind("127.0.0.1:0").unwrap();
    let rogue_rest = TcpListener::bind("127.0.0.1:0").unwrap();
    for listener in [&rogue_transport, &rogue_rest] {
        listener.set_nonblocking(true).unwrap();
    }
    let rogue = format!(
        "{{\"address\":\"{}\",\"rest_url\":\"http://{}\",\
          \"leader_session_id\":\"00000000-0000-4000-8000-00000000000f\"}}",
        rogue_transport.local_addr().unwrap(),
        rogue_rest.local_addr().unwrap()
    );
    // A running job whose graph file a forged pointer can name (copied under the forged id);
    // long enough (~10 s paced) to be still running when its leader is killed below.
    let (job, input, output) = submit_wordcount(&a_url, &cluster.dir, 1_000_000);
    cluster.wait_for_job(&a_url, &job, "the job runs", |j| j["state"] == "RUNNING");
    let storage = cluster.dir.join("ha-storage").join("default");
    let forged_job = "00000000-0000-4000-8000-0000000000f0";
    let forged_file = storage.join(format!("job-{forged_job}.json"));
    std::fs::copy(storage.join(format!("job-{job}.json")), &forged_file).unwrap();

    let quorum = cluster.zk.quorum();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let admin = Client::connector()
            .with_auth("digest", common::ha::ZOOKEEPER_CREDENTIAL.as_bytes())
            .connect(&quorum)
            .await
            .expect("an authenticated session");
        let cluster_path = "/flint/default";
        let mine = CreateMode::Persistent.with_acls(Acls::creator_all());
        // Unsigned, and signed with another secret: both refused alike.
        let other_secret = "flint-signed-v1 ".to_owned() + &"ab".repeat(32) + "\n";
        admin
            .set_data(&format!("{cluster_path}/leader"), rogue.as_bytes(), None)
            .await
            .expect("the leader rewritten");
        admin
            .create(
                &format!("{cluster_path}/jobgraphs/{forged_job}"),
                format!("{other_secret}{}", forged_file.display()).as_bytes(),
                &mine,
            )
            .await
            .expect("a pointer planted");
        admin
            .create(&format!("{cluster_path}/pool-size"), b"1", &mine)
            .await
            .expect("a pool size planted");
    });

    // Both TaskManagers and the standby read the rewritten leader and refuse it.
    for log in [
        cluster.dir.join("tm-1.log"),
        cluster.dir.join("tm-2.log"),
        cluster.b.log.clone(),
    ] {
        wait_until(
            &format!("{} refuses the forged leader", log.display()),
            || {
                let said = std::fs::read_to_string(&log).unwrap_or_default();
                (said.contains("refusing the data of the znode /flint/default/leader")
                    && said.contains("not signed"))
                .then_some(())
            },
        );
    }
    // The standby does not send a client there.
    let answer = get(&b_url, "/overview");
    assert_ne!(answer.status, 307, "the standby redirects: {}", answer.body);
    // Nor does the CLI finding its leader through ZooKeeper: it stops, saying why.
    let list = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(["list", "--config"])
        .arg(cluster.dir.join("taskmanager.toml"))
        .env_remove("FLINT_JOBMANAGER")
        .env_remove("FLINT_CONFIG")
        .env_remove("FLINT_SECRET")
        .output()
        .expect("flint list runs");
    let said = String::from_utf8_lossy(&list.stderr);
    assert!(!list.status.success(), "{said}");
    assert!(
        said.contains("/flint/default/leader") && said.contains("not signed"),
        "{said}"
    );
    // Nobody connected to the rogue: no TaskManager registered there, no token was sent.
    for (listener, what) in [(&rogue_transport, "transport"), (&rogue_rest, "REST")] {
        assert!(
            listener.accept().is_err(),
            "something connected to the rogue's {what} port"
        );
    }
    // The TaskManagers stay with the real leader.
    cluster.wait_for_pool(&a_url);

    // A new leader recovers the real job only, and keeps the configured pool size.
    signal(&cluster.a.child, "-KILL");
    let _ = cluster.a.child.wait();
    wait_until("the standby leads", || leads(&b_url).then_some(()));
    cluster.wait_for_pool(&b_url);
    let done = cluster.wait_for_job(&b_url, &job, "the recovered job ends", |j| {
        matches!(
            j["state"].as_str(),
            Some("FINISHED" | "FAILED" | "CANCELED")
        )
    });
    assert_eq!(done["state"], "FINISHED", "{done:#}");
    assert!(done["recovered-at"].is_u64(), "not recovered: {done:#}");
    assert_eq!(read_counts(&output), sequential_word_count(&input).unwrap());
    let forged = get(&b_url, &format!("/jobs/{forged_job}"));
    assert_eq!(
        forged.status, 404,
        "the forged job was run: {}",
        forged.body
    );
    let pool_size = get(&b_url, "/cluster/pool-size");
    assert_eq!(pool_size.json()["size"], 2, "{}", pool_size.body);
    let said = std::fs::read_to_string(&cluster.b.log).unwrap_or_default();
    for refused in [
        format!("/flint/default/jobgraphs/{forged_job}"),
        "/flint/default/pool-size".to_owned(),
    ] {
        assert!(
            said.contains(&format!("refusing the data of the znode {refused}")),
            "the new leader does not say it refused {refused}: {said}"
        );
    }
}

/// The election against a real ZooKeeper, at the moment a new leader publishes itself
/// (`confirm`): (1) its session lost the latch node between winning and publishing (here the
/// node is deleted behind its back, as the server does when the session expires) — it must
/// refuse, publish nothing and open no session of its own; (2) the leader node of another live
/// session is there — it must wait, never delete it, and publish once that session is gone.
#[test]
fn confirm_publishes_only_under_its_own_latch_and_never_deletes_another_sessions_leader() {
    use flint::base::ids::LeaderSessionId;
    use flint::ha::election::LeaderElectionService;
    use flint::ha::zookeeper::{ZooKeeperLeaderElection, ZooKeeperSettings, current_leader};
    use flint::ha::{HaError, LeaderInformation, ZnodePaths};

    let _one_at_a_time = common::ha::one_at_a_time();
    let dir = scratch("ha-confirm");
    let _remove = common::RemoveOnDrop(dir.clone());
    let Some(zk) = common::zookeeper::ZooKeeper::start(&dir.join("zookeeper")) else {
        return;
    };
    let settings = ZooKeeperSettings {
        quorum: zk.quorum(),
        session_timeout: std::time::Duration::from_secs(4),
        connection_timeout: std::time::Duration::from_secs(20),
        paths: ZnodePaths::new("/flint", "confirm-test"),
        auth_file: None,
        secret: flint::transport::handshake::Secret::from_bytes(b"confirm-test-secret".to_vec()),
    };
    let info = |n: u128| LeaderInformation {
        address: format!("jobmanager-{n}:6123"),
        rest_url: format!("http://jobmanager-{n}:8081"),
        leader_session_id: LeaderSessionId::from_u128(n),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let other = settings.connect().await.expect("a second session");
        let latch = settings.paths.latch();
        let leader = settings.paths.leader();

        // (1) The latch node goes between acquire and confirm.
        let mut first = ZooKeeperLeaderElection::new(settings.clone());
        first.acquire().await.expect("the only contender wins");
        for child in other.list_children(&latch).await.unwrap() {
            other.delete(&format!("{latch}/{child}"), None).await.unwrap();
        }
        let refused = first.confirm(&info(1)).await;
        assert!(
            matches!(refused, Err(HaError::SessionLost { .. })),
            "confirm without the latch: {refused:?}"
        );
        assert_eq!(
            other.check_stat(&leader).await.unwrap(),
            None,
            "a contender without the latch published itself"
        );
        first.resign().await;

        // (2) Another live session's leader node: waited for, never deleted.
        let mut second = ZooKeeperLeaderElection::new(settings.clone());
        second.acquire().await.expect("the only contender wins");
        let squatter = settings.connect().await.expect("a third session");
        squatter
            .create(
                &leader,
                b"someone else",
                &zookeeper_client::CreateMode::Ephemeral
                    .with_acls(zookeeper_client::Acls::anyone_all()),
            )
            .await
            .unwrap();
        let second_info = info(2);
        let confirm = second.confirm(&second_info);
        tokio::pin!(confirm);
        // While the other session lives, its node stays and nothing is published over it.
        let watched_until = tokio::time::Instant::now() + std::time::Duration::from_secs(1);
        loop {
            tokio::select! {
                answer = &mut confirm => panic!("confirm returned over a live session's leader node: {answer:?}"),
                () = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
            }
            let (data, _) = other.get_data(&leader).await.expect("the node stays");
            assert_eq!(data, b"someone else");
            if tokio::time::Instant::now() >= watched_until {
                break;
            }
        }
        drop(squatter); // its session closes, its ephemeral node goes
        tokio::time::timeout(std::time::Duration::from_secs(30), &mut confirm)
            .await
            .expect("confirm goes on once the other session is gone")
            .expect("published");
    });
    let published = current_leader(&settings)
        .expect("readable")
        .expect("a leader");
    assert_eq!(published, info(2));
}

/// A job that FINISHED is never run again after its leader is killed with `kill -9`: its result
/// is kept in the job result store (`storageDir/job-result-store/CLUSTER/ID.json`, clean once
/// its graph left the job graph store), and the new leader answers it from there — FINISHED,
/// each vertex summarized, not recovered — while its output stays as the first run wrote it.
#[test]
fn a_finished_job_is_not_run_again_after_a_failover_and_is_answered_from_the_job_result_store() {
    let Some(mut cluster) = HaCluster::start("ha-finished") else {
        return;
    };
    let (a_url, b_url) = (cluster.a.url(), cluster.b.url());
    let (job, input, output) = submit_wordcount(&a_url, &cluster.dir, 20_000);
    let first = cluster.wait_for_job(&a_url, &job, "the job finishes", |j| {
        j["state"] == "FINISHED"
    });
    let storage = cluster.dir.join("ha-storage");
    let result = storage
        .join("job-result-store")
        .join("default")
        .join(format!("{job}.json"));
    wait_until("the result is kept and marked clean", || {
        result.is_file().then_some(())
    });
    assert!(
        !storage
            .join("default")
            .join(format!("job-{job}.json"))
            .exists(),
        "the graph of an ended job stayed in the job graph store"
    );
    let written: Vec<_> = std::fs::read_dir(&output)
        .unwrap()
        .map(|f| {
            let f = f.unwrap();
            (f.file_name(), f.metadata().unwrap().modified().unwrap())
        })
        .collect();
    signal(&cluster.a.child, "-KILL");
    let _ = cluster.a.child.wait();

    wait_until("the standby leads", || leads(&b_url).then_some(()));
    let answered = get(&b_url, &format!("/jobs/{job}")).expect(200).json();
    assert_eq!(answered["state"], "FINISHED", "{answered:#}");
    assert_eq!(answered["from-job-result-store"], true, "{answered:#}");
    assert!(
        answered["recovered-at"].is_null(),
        "run again: {answered:#}"
    );
    assert_eq!(answered["end-time"], first["end-time"], "{answered:#}");
    let vertices = answered["vertices"].as_array().unwrap();
    assert_eq!(vertices.len(), first["vertices"].as_array().unwrap().len());
    for vertex in vertices {
        assert_eq!(
            vertex["tasks"]["FINISHED"], vertex["parallelism"],
            "{answered:#}"
        );
        assert!(vertex["duration"].is_u64(), "{answered:#}");
    }
    let listed = get(&b_url, "/jobs").expect(200);
    assert!(listed.body.contains(&job), "{}", listed.body);
    // The CLI says the same.
    let status = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(["status", &job, "--jobmanager", &b_url])
        .env_remove("FLINT_JOBMANAGER")
        .env_remove("FLINT_CONFIG")
        .output()
        .expect("flint status runs");
    let said = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success() && said.contains("FINISHED"),
        "{said}{}",
        String::from_utf8_lossy(&status.stderr)
    );
    // Nothing ran again: the output is the first run's, untouched, and exact.
    let after: Vec<_> = std::fs::read_dir(&output)
        .unwrap()
        .map(|f| {
            let f = f.unwrap();
            (f.file_name(), f.metadata().unwrap().modified().unwrap())
        })
        .collect();
    assert_eq!(after, written, "the output was written again");
    assert_eq!(read_counts(&output), sequential_word_count(&input).unwrap());
}

/// A new leader with 2,000 jobs in the job graph store publishes itself first, then recovers
/// them one by one and stays leader (it used to have to recover them all within 5 s or resign,
/// and with a large store every contender timed out in turn).
#[test]
#[allow(clippy::disallowed_methods)] // measures real processes in real time
fn a_new_leader_recovers_two_thousand_stored_jobs_and_stays_leader() {
    const JOBS: usize = 2_000;
    let Some(mut cluster) = HaCluster::start("ha-2000-jobs") else {
        return;
    };
    let (a_url, b_url) = (cluster.a.url(), cluster.b.url());
    // Jobs that wait: a sleep of an hour each, two run, the rest queue for slots.
    let mut builder = flint::job::graph::JobGraph::builder("waits");
    builder.vertex("wait", "sleep", 1).config("ms", "3600000");
    let graph = serde_json::to_string(&builder.build(|_| true).expect("a valid graph")).unwrap();
    let agent = no_redirects();
    let token = common::rest::local_bearer();
    let mut ids = Vec::with_capacity(JOBS);
    for _ in 0..JOBS {
        let answer = request(
            &agent,
            "POST",
            &format!("{a_url}/jobs"),
            Some(&graph),
            token.as_deref(),
        );
        assert_eq!(answer.status, 202, "{}", answer.body);
        ids.push(answer.json()["id"].as_str().unwrap().to_owned());
    }
    let stored = std::fs::read_dir(cluster.dir.join("ha-storage").join("default"))
        .unwrap()
        .count();
    assert!(stored >= JOBS, "{stored} graphs stored");
    signal(&cluster.a.child, "-KILL");
    let _ = cluster.a.child.wait();
    let killed_at = std::time::Instant::now();

    wait_until("the standby leads", || leads(&b_url).then_some(()));
    let leading_after = killed_at.elapsed();
    wait_until("every stored job is recovered", || {
        let answer = get(&b_url, "/jobs");
        (answer.status == 200).then_some(())?;
        let listed = answer.json()["jobs"].as_array()?.len();
        (listed == JOBS).then_some(())
    });
    let all_recovered = killed_at.elapsed();
    // Still the leader, and the same leadership: ZooKeeper publishes it, it answers.
    assert!(leads(&b_url), "the new leader resigned");
    let sample = get(&b_url, &format!("/jobs/{}", ids[JOBS / 2]))
        .expect(200)
        .json();
    assert!(sample["recovered-at"].is_u64(), "{sample:#}");
    eprintln!(
        "{JOBS} stored jobs: the new leader served REST {leading_after:?} after the kill, \
         listed every job recovered after {all_recovered:?}"
    );
}

#[test]
#[allow(clippy::disallowed_methods)] // measures real processes in real time
fn a_typed_programs_client_follows_the_new_leader_and_its_count_is_exact() {
    // The cluster is the program's own binary (its operators are in every process), and the
    // program's client finds the leader through ZooKeeper with the cluster's configuration.
    let binary = common::example_binary("wordcount_typed");
    let Some(mut cluster) = HaCluster::start_binary("ha-program", &binary, "") else {
        return;
    };
    let (a_url, b_url) = (cluster.a.url(), cluster.b.url());
    let input = cluster.dir.join("program.txt");
    // Long enough (a debug build) to be running when its leader is killed.
    common::write_text(&input, 400_000);
    let output = cluster.dir.join("program-output");
    let client_log = cluster.dir.join("client.log");
    let client = Command::new(&binary)
        .arg(&input)
        .arg(&output)
        .args(["--parallelism", "2", "--config"])
        .arg(cluster.dir.join("taskmanager.toml"))
        .env_remove("FLINT_JOBMANAGER")
        .env_remove("FLINT_CONFIG")
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&client_log).unwrap())
        .spawn()
        .expect("the program's client starts");
    let job = wait_until("the program's job runs at the first leader", || {
        let jobs = get(&a_url, "/jobs");
        let json = (jobs.status == 200).then(|| jobs.json())?;
        json["jobs"]
            .as_array()?
            .iter()
            .find(|j| j["state"] == "RUNNING")
            .map(|j| j["id"].as_str().unwrap().to_owned())
    });
    signal(&cluster.a.child, "-KILL");
    let _ = cluster.a.child.wait();

    let finished = client.wait_with_output().expect("the client ends");
    let said = std::fs::read_to_string(&client_log).unwrap_or_default();
    assert!(
        finished.status.success(),
        "the program failed across the failover: {said}"
    );
    assert!(
        said.contains("following the new leader at"),
        "the client never switched leaders: {said}"
    );
    let done = cluster.wait_for_job(&b_url, &job, "the recovered job is answered", |j| {
        j["state"] == "FINISHED"
    });
    assert!(
        done["recovered-at"].is_u64(),
        "not run by the new leader: {done:#}"
    );
    let mut counts = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(&output).expect("the output directory") {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text.lines().skip(1) {
            let (word, count) = line.rsplit_once(',').expect("word,count");
            let previous = counts.insert(word.to_owned(), count.parse::<u64>().unwrap());
            assert!(
                previous.is_none(),
                "{word} written twice ({})",
                path.display()
            );
        }
    }
    assert_eq!(
        counts,
        sequential_word_count(&input).unwrap(),
        "the recovered program's output is not the exact count"
    );
}

/// What a finished program's `collect()` sinks gathered outlives its leader: the leader keeps
/// it with the job's result, and the next leader answers `GET /jobs/{id}/results` from there
/// (a client that saw FINISHED just before the leader died still gets its records).
#[test]
fn a_finished_programs_collected_records_are_answered_by_the_next_leader() {
    let binary = common::example_binary("wordcount_typed");
    let Some(mut cluster) = HaCluster::start_binary("ha-collect", &binary, "") else {
        return;
    };
    let (a_url, b_url) = (cluster.a.url(), cluster.b.url());
    let input = cluster.dir.join("collect.txt");
    common::write_text(&input, 5_000);
    let output = cluster.dir.join("collect-output");
    let client = Command::new(&binary)
        .arg(&input)
        .arg(&output)
        .args(["--parallelism", "2", "--jobmanager", &a_url])
        .env_remove("FLINT_JOBMANAGER")
        .env_remove("FLINT_CONFIG")
        .output()
        .expect("the program's client runs");
    let said = String::from_utf8_lossy(&client.stdout).into_owned();
    assert!(
        client.status.success() && said.contains("top 10:"),
        "{said}{}",
        String::from_utf8_lossy(&client.stderr)
    );
    let jobs = get(&a_url, "/jobs").expect(200).json();
    let job = jobs["jobs"][0]["id"].as_str().unwrap().to_owned();
    let first = get(&a_url, &format!("/jobs/{job}/results"))
        .expect(200)
        .json();
    assert_eq!(first["state"], "FINISHED", "{first:#}");
    assert!(
        first["vertices"].as_object().is_some_and(|v| !v.is_empty()),
        "nothing collected: {first:#}"
    );
    let kept = cluster
        .dir
        .join("ha-storage/job-result-store/default")
        .join(format!("{job}.json"));
    wait_until("the result is kept and clean", || {
        kept.is_file().then_some(())
    });

    signal(&cluster.a.child, "-KILL");
    let _ = cluster.a.child.wait();
    wait_until("the standby leads", || leads(&b_url).then_some(()));
    let answered = get(&b_url, &format!("/jobs/{job}/results"))
        .expect(200)
        .json();
    assert_eq!(answered, first, "the next leader answered other records");
}
