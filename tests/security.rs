//! The attacks of issue 15 that need real processes: a flood of idle connections against a
//! JobManager's transport port while a real `flint taskmanager` registers through it, and the
//! working files of a cluster (modes, a planted link, what is left after it stops).
//!
//! (The handshake attacks run against a live JobManager in `bad_input.rs` and against the state
//! machine in `src/transport/handshake.rs`; the browser attacks on the REST API in `rest.rs`.)

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use flint::transport::handshake::Secret;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

mod common;
use common::process::{Client, JobManagerProcess, terminate};
use common::scratch;

const SECRET: &str = "security-test-secret";
const DEADLINE: Duration = Duration::from_secs(30);

/// `flint jobmanager` on 127.0.0.1:0 with `args`, its temporary directory `tmp`, its log in
/// `log`.
fn job_manager(args: &[&str], tmp: &Path, log: &Path) -> JobManagerProcess {
    job_manager_with_secret(args, tmp, log, SECRET.as_bytes())
}

/// As [`job_manager`], with the cluster secret `secret` (any bytes) in `FLINT_SECRET`.
fn job_manager_with_secret(
    args: &[&str],
    tmp: &Path,
    log: &Path,
    secret: &[u8],
) -> JobManagerProcess {
    use std::os::unix::ffi::OsStringExt;
    let mut command = Command::new(env!("CARGO_BIN_EXE_flint"));
    command
        .args([
            "jobmanager",
            "--bind",
            "127.0.0.1:0",
            "--rest",
            "127.0.0.1:0",
        ])
        .args(args)
        .env(
            "FLINT_SECRET",
            std::ffi::OsString::from_vec(secret.to_vec()),
        )
        .env("TMPDIR", tmp)
        .stderr(std::fs::File::create(log).expect("a log file"));
    JobManagerProcess::start(command)
}

/// A JobManager with `args` and a pool of one TaskManager (its temporary directory `tmp`, its
/// log in `dir`), and a client (seeded `seed`) that saw the TaskManager register.
async fn pool_of_one(
    args: &[&str],
    tmp: &Path,
    dir: &Path,
    seed: u64,
) -> (JobManagerProcess, Client) {
    let args: Vec<&str> = ["--pool-size", "1"]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    let jm = job_manager(&args, tmp, &dir.join("jobmanager.log"));
    let client = Client::connect(
        Client::loopback_config(Secret::from_bytes(SECRET), seed),
        &jm.address,
    )
    .await;
    client
        .wait_for("the pool registers", DEADLINE, |s| {
            s.task_managers.len() == 1
        })
        .await;
    (jm, client)
}

/// A `flint jobmanager` with no workers of its own (`standalone`: TaskManagers register
/// themselves) in a scratch directory named `name`, and a client of it: the directory, its
/// `tmp`, the JobManager and the client.
async fn standalone_job_manager(
    name: &str,
) -> (
    std::path::PathBuf,
    std::path::PathBuf,
    JobManagerProcess,
    Client,
) {
    let dir = scratch(name);
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let jm = job_manager(
        &[
            "--pool-size",
            "0",
            "-D",
            "resourcemanager.driver=standalone",
        ],
        &tmp,
        &dir.join("jobmanager.log"),
    );
    let client = Client::connect(
        Client::loopback_config(Secret::from_bytes(SECRET), 1),
        &jm.address,
    )
    .await;
    (dir, tmp, jm, client)
}

/// One flooding socket, forever: connect, say nothing, and as soon as the server drops it,
/// connect again (after `pause`), until `stop`.
async fn flood_one(
    address: String,
    pause: Duration,
    stop: Arc<AtomicBool>,
    opened: Arc<AtomicUsize>,
    dropped: Arc<AtomicUsize>,
) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut stream) = TcpStream::connect(&address).await else {
            tokio::time::sleep(pause).await;
            continue;
        };
        opened.fetch_add(1, Ordering::Relaxed);
        let mut sink = [0u8; 256];
        loop {
            let read = tokio::select! {
                biased;
                read = stream.read(&mut sink) => read,
                () = tokio::time::sleep(Duration::from_millis(200)) => {
                    if stop.load(Ordering::Relaxed) { return; }
                    continue;
                }
            };
            match read {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        dropped.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(pause).await;
    }
}

#[actix::test]
async fn an_honest_task_manager_registers_through_a_flood_of_idle_sockets() {
    const SOCKETS: usize = 500;
    let (dir, tmp, jm, client) = standalone_job_manager("slot-flood").await;
    assert!(client.status().await.task_managers.is_empty());

    // 500 sockets from this one source that never say a word, each re-opened a moment after
    // the JobManager drops it: the attack that kept every TaskManager out before issue 15.
    let stop = Arc::new(AtomicBool::new(false));
    let (opened, dropped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let flood: Vec<_> = (0..SOCKETS)
        .map(|_| {
            actix::spawn(flood_one(
                jm.address.clone(),
                Duration::from_millis(100),
                Arc::clone(&stop),
                Arc::clone(&opened),
                Arc::clone(&dropped),
            ))
        })
        .collect();
    let give_up = tokio::time::Instant::now() + DEADLINE;
    while opened.load(Ordering::Relaxed) < SOCKETS {
        assert!(
            tokio::time::Instant::now() < give_up,
            "the flood never opened {SOCKETS} sockets"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // A real TaskManager, from the same source address, registers all the same.
    let mut task_manager = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args([
            "taskmanager",
            "--jobmanager",
            &jm.address,
            "--resource-id",
            "tm-honest",
        ])
        .env("FLINT_SECRET", SECRET)
        .env("TMPDIR", &tmp)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("taskmanager.log")).unwrap())
        .spawn()
        .expect("flint taskmanager starts");
    let status = client
        .wait_for(
            "the TaskManager registers during the flood",
            DEADLINE,
            |s| s.task_managers.len() == 1,
        )
        .await;
    assert_eq!(status.task_managers[0].resource_id.as_str(), "tm-honest");
    // The flood was real: the JobManager kept dropping its sockets, and they kept coming back.
    // (The TaskManager may register before the first dropped socket is re-opened: wait for it.)
    while !(dropped.load(Ordering::Relaxed) > 0 && opened.load(Ordering::Relaxed) > SOCKETS) {
        assert!(
            tokio::time::Instant::now() < give_up,
            "the flood never came back: opened {}, dropped {}",
            opened.load(Ordering::Relaxed),
            dropped.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    stop.store(true, Ordering::Relaxed);
    for task in flood {
        let _ = task.await;
    }
    terminate(&mut task_manager);
    client.endpoint.shutdown();
    drop(jm);
    let _ = std::fs::remove_dir_all(&dir);
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// The `flint-*` entries of `dir`, sorted.
fn flint_entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("flint-"))
        .collect();
    names.sort();
    names
}

#[actix::test]
async fn working_files_are_private_never_follow_a_planted_link_and_go_when_the_cluster_stops() {
    let dir = scratch("working-dir");
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    // What another local user could plant before issue 15: the predictable directory of seed
    // 7, as a link to a directory of theirs, and a stale directory of a process that died.
    let theirs = dir.join("theirs");
    std::fs::create_dir_all(&theirs).unwrap();
    std::os::unix::fs::symlink(&theirs, tmp.join("flint-0000000000000007")).unwrap();
    let stale = tmp.join("flint-jm-2147483632-0123456789abcdef");
    std::fs::create_dir_all(stale.join("flint-tm-2147483633-0123456789abcdef")).unwrap();

    let (mut jm, client) = pool_of_one(&["-D", "seed=7"], &tmp, &dir, 2).await;

    // The stale directory of the dead process is gone; the planted link is untouched and
    // nothing was written through it.
    assert!(
        !stale.exists(),
        "the stale working directory was not cleaned"
    );
    assert!(std::fs::read_dir(&theirs).unwrap().next().is_none());
    let entries = flint_entries(&tmp);
    let ours: Vec<&String> = entries
        .iter()
        .filter(|n| n.starts_with("flint-jm-"))
        .collect();
    assert_eq!(ours.len(), 1, "{entries:?}");
    let jm_dir = tmp.join(ours[0]);
    assert!(
        !ours[0].contains("0000000000000007"),
        "the working directory's name publishes the seed: {}",
        ours[0]
    );
    assert_eq!(mode(&jm_dir), 0o700);
    assert_eq!(mode(&jm_dir.join("taskmanager.toml")), 0o600);
    // The child's own directory is inside the JobManager's, private too.
    let children = flint_entries(&jm_dir);
    assert_eq!(children.len(), 1, "{children:?}");
    assert!(children[0].starts_with("flint-tm-"), "{children:?}");
    assert_eq!(mode(&jm_dir.join(&children[0])), 0o700);

    client.endpoint.shutdown();
    let status = {
        terminate(&mut jm.child);
        jm.child.wait().expect("the JobManager is reaped")
    };
    assert!(status.success(), "{status}");
    // Nothing of the cluster is left: only the planted link remains.
    assert_eq!(flint_entries(&tmp), ["flint-0000000000000007"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[actix::test]
async fn a_secret_that_is_not_utf8_reaches_the_children_byte_for_byte() {
    // Bytes a lossy conversion would change (and that `std::env::var` refuses outright).
    let secret: &[u8] = b"\xff\xfe-not-utf8-\xc3\x28";
    let dir = scratch("binary-secret");
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let jm = job_manager_with_secret(
        &["--pool-size", "1"],
        &tmp,
        &dir.join("jobmanager.log"),
        secret,
    );
    // The child proved exactly this secret to the JobManager.
    let client = Client::connect(
        Client::loopback_config(Secret::from_bytes(secret), 3),
        &jm.address,
    )
    .await;
    client
        .wait_for("the child registers with the same secret", DEADLINE, |s| {
            s.task_managers.len() == 1
        })
        .await;
    client.endpoint.shutdown();
    // And the JobManager does not run without one: the lossy version of it is refused.
    let (lossy, resolver) = flint::rpc::endpoint::NodeEndpoint::bind(Client::loopback_config(
        Secret::from_bytes(String::from_utf8_lossy(secret).into_owned()),
        4,
    ))
    .await
    .expect("binds");
    let proxy = flint::rpc::directory::Resolver::job_manager(
        &*resolver,
        &flint::messages::ActorAddress::new(jm.address.clone(), "jobmanager"),
    )
    .expect("a proxy");
    assert!(
        proxy
            .get_status
            .send(flint::messages::job_manager::GetJobManagerStatus)
            .await
            .is_err()
    );
    lossy.shutdown();
    drop(jm);
    let _ = std::fs::remove_dir_all(&dir);
}

#[actix::test]
async fn an_embedded_cluster_works_in_a_private_directory_it_removes() {
    let dir = scratch("mini-working-dir");
    let mut config = flint::ClusterConfig::default();
    config.taskmanager.working_dir = Some(dir.clone());
    config.resourcemanager.pool_size = 1;
    let cluster = flint::MiniCluster::start(config).expect("starts");
    let working_dir = cluster.working_dir().to_owned();
    assert!(working_dir.starts_with(&dir), "{}", working_dir.display());
    assert_eq!(mode(&working_dir), 0o700);
    cluster.shutdown().await.expect("stops");
    assert!(!working_dir.exists(), "{} is left", working_dir.display());
    assert!(flint_entries(&dir).is_empty(), "{:?}", flint_entries(&dir));
    let _ = std::fs::remove_dir_all(&dir);
}

#[actix::test]
async fn a_seeded_process_never_repeats_its_job_ids_across_restarts() {
    // Issue 34: with `seed` set, every incarnation of a JobManager used to hand out the same
    // job ids (and leader sessions): a process draws them from the operating system.
    let dir = scratch("seeded-ids");
    let mut ids = Vec::new();
    for incarnation in 0..2 {
        let mut jm = job_manager(
            &["--pool-size", "0", "-D", "seed=7"],
            &dir,
            &dir.join(format!("jobmanager-{incarnation}.log")),
        );
        let client = Client::connect(
            Client::loopback_config(Secret::from_bytes(SECRET), 3),
            &jm.address,
        )
        .await;
        let mut graph = flint::job::graph::JobGraph::builder("seeded");
        graph.vertex("work", "noop", 1);
        ids.push(client.submit(graph.build(|_| true).unwrap()).await);
        client.endpoint.shutdown();
        terminate(&mut jm.child);
        let _ = jm.child.wait();
    }
    assert_ne!(ids[0], ids[1], "the same job id in two incarnations");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A copy job: `text-source` over `input` into `file-sink` at `output`.
fn copy_job(input: &Path, output: &Path) -> flint::job::graph::JobGraph {
    use flint::job::graph::{DistributionPattern, ExchangeMode, JobGraph, RestartStrategyConfig};
    let mut job = JobGraph::builder("copy");
    job.restart_strategy(RestartStrategyConfig::None);
    let read = job
        .vertex("read", "text-source", 1)
        .config("path", input.display().to_string())
        .index();
    let write = job
        .vertex("write", "file-sink", 1)
        .config("path", output.display().to_string())
        .index();
    job.edge(
        read,
        write,
        DistributionPattern::Forward,
        ExchangeMode::Pipelined,
    );
    job.build(|_| true).unwrap()
}

#[actix::test]
async fn file_sources_and_sinks_stay_inside_job_allowed_paths() {
    // Issue 34: a TaskManager confined to one directory runs a copy inside it, and fails (with
    // the path and the key named) a job that reads or writes outside it, directly, through
    // `..`, or through a link inside that leads outside.
    let dir = scratch("allowed-paths");
    let allowed = dir.join("allowed");
    let outside = dir.join("outside");
    std::fs::create_dir_all(&allowed).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(allowed.join("in.txt"), "inside\n").unwrap();
    std::fs::write(outside.join("private.txt"), "outside\n").unwrap();
    std::os::unix::fs::symlink(&outside, allowed.join("door")).unwrap();
    let keys = format!("job.allowed-paths=[\"{}\"]", allowed.display());
    let (mut jm, client) = pool_of_one(&["-D", &keys], &dir, &dir, 4).await;

    let inside = client
        .submit(copy_job(&allowed.join("in.txt"), &allowed.join("out")))
        .await;
    let done = client.wait_for_job(inside, DEADLINE).await;
    assert_eq!(
        done.summary.status,
        flint::job::states::JobStatus::Finished,
        "{done:#?}"
    );
    assert_eq!(
        std::fs::read_to_string(allowed.join("out/part-00000")).unwrap(),
        "\tinside\n"
    );
    for (input, output) in [
        (outside.join("private.txt"), allowed.join("stolen-1")),
        (
            allowed.join("../outside/private.txt"),
            allowed.join("stolen-2"),
        ),
        (allowed.join("door/private.txt"), allowed.join("stolen-3")),
        (allowed.join("in.txt"), outside.join("planted")),
        (allowed.join("in.txt"), allowed.join("door/planted")),
    ] {
        let job = client.submit(copy_job(&input, &output)).await;
        let ended = client.wait_for_job(job, DEADLINE).await;
        assert_eq!(
            ended.summary.status,
            flint::job::states::JobStatus::Failed,
            "{input:?} -> {output:?}: {ended:#?}"
        );
        let failure = ended.failure.unwrap_or_default();
        assert!(failure.contains("job.allowed-paths"), "{failure}");
    }
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        1,
        "nothing was written outside"
    );
    for stolen in ["stolen-1", "stolen-2", "stolen-3"] {
        let part = allowed.join(stolen).join("part-00000");
        assert!(!part.exists(), "{}", part.display());
    }

    client.endpoint.shutdown();
    terminate(&mut jm.child);
    let _ = jm.child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// One slow talker from `source`, forever: connect, send a handshake length prefix and then one
/// byte every `drip`, and as soon as the server drops it, connect again, until `stop`.
async fn drip_one(
    target: std::net::SocketAddr,
    source: std::net::IpAddr,
    stop: Arc<AtomicBool>,
    dropped: Arc<AtomicUsize>,
) {
    use tokio::io::AsyncWriteExt;
    while !stop.load(Ordering::Relaxed) {
        let Ok(socket) = tokio::net::TcpSocket::new_v4() else {
            return;
        };
        if socket.bind((source, 0).into()).is_err() {
            return;
        }
        let Ok(mut stream) = socket.connect(target).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let mut alive = stream.write_all(&200u32.to_be_bytes()).await.is_ok();
        while alive && !stop.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            alive = stream.write_all(b"x").await.is_ok();
            // A dropped connection shows as end of stream (or a reset) to a read.
            let mut probe = [0u8; 64];
            if let Ok(Ok(read)) =
                tokio::time::timeout(Duration::from_millis(1), stream.read(&mut probe)).await
            {
                alive &= read > 0;
            }
        }
        dropped.fetch_add(1, Ordering::Relaxed);
    }
}

/// Issue 34 (item 5 of the "why"): sockets that talk slowly from twenty addresses of 127/8 held
/// every pre-authentication slot, kept real TaskManagers out and failed a running job through
/// its TaskManagers' data ports. Now each source network has its share and a dripping peer is
/// dropped at the byte-rate floor: with slow talkers on the JobManager's port and on both
/// TaskManagers' ports, the TaskManagers register and an all-to-all job finishes.
#[actix::test]
async fn slow_talkers_from_many_loopback_addresses_keep_no_node_and_no_data_port_from_working() {
    const SOURCES: u8 = 20;
    const PER_SOURCE: usize = 4;
    let (dir, tmp, jm, client) = standalone_job_manager("slow-talkers").await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut talkers = Vec::new();
    let mut flood = |target: &str| {
        let target: std::net::SocketAddr = target.parse().expect("a host:port");
        let dropped = Arc::new(AtomicUsize::new(0));
        for source in 0..SOURCES {
            for _ in 0..PER_SOURCE {
                talkers.push(actix::spawn(drip_one(
                    target,
                    std::net::IpAddr::from([127, 0, 0, 2 + source]),
                    Arc::clone(&stop),
                    Arc::clone(&dropped),
                )));
            }
        }
        dropped
    };
    let on_job_manager = flood(&jm.address);

    // Two TaskManagers register through the slow talkers on the JobManager's port.
    let mut task_managers: Vec<_> = ["tm-a", "tm-b"]
        .into_iter()
        .map(|id| {
            Command::new(env!("CARGO_BIN_EXE_flint"))
                .args(["taskmanager", "--jobmanager", &jm.address])
                .args(["--resource-id", id, "--slots", "2"])
                .env("FLINT_SECRET", SECRET)
                .env("TMPDIR", &tmp)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.join(format!("{id}.log"))).unwrap())
                .spawn()
                .expect("flint taskmanager starts")
        })
        .collect();
    let status = client
        .wait_for(
            "both TaskManagers register through the slow talkers",
            DEADLINE,
            |s| s.task_managers.len() == 2,
        )
        .await;
    // Then the TaskManagers' own ports (where their data connections arrive) get theirs.
    let on_task_managers: Vec<_> = status
        .task_managers
        .iter()
        .map(|tm| flood(&tm.location.address.node))
        .collect();
    let give_up = tokio::time::Instant::now() + DEADLINE;
    let all_dropped = || {
        std::iter::once(&on_job_manager)
            .chain(&on_task_managers)
            .all(|dropped| dropped.load(Ordering::Relaxed) >= usize::from(SOURCES))
    };
    while !all_dropped() {
        assert!(
            tokio::time::Instant::now() < give_up,
            "the slow talkers were not dropped at the floor"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // An all-to-all job across both TaskManagers: every data connection is opened now.
    let mut job = flint::job::graph::JobGraph::builder("through-slow-talkers");
    let source = job
        .vertex("source", "noop", 2)
        .config("count", "10000")
        .index();
    let sink = job.vertex("sink", "noop", 2).index();
    job.edge(
        source,
        sink,
        flint::job::graph::DistributionPattern::AllToAll,
        flint::job::graph::ExchangeMode::Pipelined,
    );
    let job = client.submit(job.build(|_| true).unwrap()).await;
    let done = client.wait_for_job(job, DEADLINE).await;
    assert_eq!(
        done.summary.status,
        flint::job::states::JobStatus::Finished,
        "{:?}",
        done.failure
    );

    stop.store(true, Ordering::Relaxed);
    for talker in talkers {
        let _ = talker.await;
    }
    for task_manager in &mut task_managers {
        terminate(task_manager);
    }
    client.endpoint.shutdown();
    drop(jm);
    let _ = std::fs::remove_dir_all(&dir);
}
