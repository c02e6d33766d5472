//! A cluster across hosts: network namespaces joined by a bridge stand in for machines. The
//! JobManager runs in one namespace, its `command` driver starts TaskManagers in the others
//! (`ip netns exec {host} flint taskmanager ...`), WordCount runs across them, and then one
//! TaskManager's link is cut in the middle of a second WordCount: the heartbeat timeout fires,
//! the worker is replaced on the next host, and the job still finishes with the exact count.
//!
//! Needs root and `ip` (iproute2, installed by `.ci/run`); without them the test says why and
//! skips. Everything it creates (namespaces, veths, the bridge) is removed on the way out.

use std::process::Command;
use std::time::Duration;

use flint::base::ids::ClusterId;
use flint::job::states::JobStatus;
use flint::messages::ActorAddress;
use flint::operators::builtin::sequential_word_count;
use flint::rpc::endpoint::EndpointConfig;
use flint::transport::handshake::Secret;

mod common;
use common::process::{Client, JobManagerProcess};
use common::{read_counts, scratch, wordcount_graph, write_text};

const DEADLINE: Duration = Duration::from_secs(120);
const SUBNET: &str = "10.250.77";
const SECRET: &str = "multihost-test-secret";
/// Host numbers in the subnet: the JobManager's, then three TaskManager hosts.
const JOB_MANAGER_HOST: u8 = 2;
const TASK_MANAGER_HOSTS: [u8; 3] = [3, 4, 5];

/// Runs `ip` with `args`; an error names the command and what it printed.
fn ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// A bridge in the root namespace and one namespace per host, each joined to it by a veth pair;
/// dropping it removes them all.
struct Network {
    tag: String,
    hosts: Vec<u8>,
}

impl Network {
    fn namespace(&self, host: u8) -> String {
        format!("{}-{SUBNET}.{host}", self.tag)
    }

    fn bridge(&self) -> String {
        format!("{}b", self.tag)
    }

    /// The root-namespace end of `host`'s veth pair: setting it down cuts the host off.
    fn link(&self, host: u8) -> String {
        format!("{}v{host}", self.tag)
    }

    fn create(hosts: &[u8]) -> Result<Self, String> {
        // Interface names are at most 15 bytes: "fl" + pid (≤ 7 digits) + "v" + 1 digit.
        let mut network = Network {
            tag: format!("fl{}", std::process::id()),
            hosts: Vec::new(),
        };
        let bridge = network.bridge();
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        ip(&["addr", "add", &format!("{SUBNET}.254/24"), "dev", &bridge])?;
        ip(&["link", "set", &bridge, "up"])?;
        for &host in hosts {
            let namespace = network.namespace(host);
            let link = network.link(host);
            ip(&["netns", "add", &namespace])?;
            network.hosts.push(host);
            ip(&[
                "link", "add", &link, "type", "veth", "peer", "name", "eth0", "netns", &namespace,
            ])?;
            ip(&["link", "set", &link, "master", &bridge, "up"])?;
            let address = format!("{SUBNET}.{host}/24");
            ip(&["-n", &namespace, "addr", "add", &address, "dev", "eth0"])?;
            ip(&["-n", &namespace, "link", "set", "eth0", "up"])?;
            ip(&["-n", &namespace, "link", "set", "lo", "up"])?;
        }
        Ok(network)
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for &host in &self.hosts {
            let _ = ip(&["link", "del", &self.link(host)]);
            let _ = ip(&["netns", "del", &self.namespace(host)]);
        }
        let _ = ip(&["link", "del", &self.bridge()]);
    }
}

/// Why this machine cannot run the test, if it cannot.
fn cannot_run() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective_uid = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1));
    if effective_uid != Some("0") {
        return Some("not root (network namespaces need it)".into());
    }
    match Command::new("ip").arg("-V").output() {
        Ok(out) if out.status.success() => None,
        _ => Some("`ip` (iproute2) is not installed".into()),
    }
}

/// The host number a TaskManager runs on, from the address it advertises.
fn host_of(address: &ActorAddress) -> u8 {
    let ip = address.node.rsplit_once(':').expect("host:port").0;
    ip.rsplit('.')
        .next()
        .unwrap()
        .parse()
        .expect("an IPv4 address")
}

#[actix::test]
async fn a_cluster_across_network_namespaces_survives_a_cut_link() {
    if let Some(why) = cannot_run() {
        eprintln!("SKIPPED a_cluster_across_network_namespaces_survives_a_cut_link: {why}");
        return;
    }
    let mut hosts = vec![JOB_MANAGER_HOST];
    hosts.extend(TASK_MANAGER_HOSTS);
    let network = Network::create(&hosts).expect("the test network");
    let flint = env!("CARGO_BIN_EXE_flint");

    let dir = scratch("multihost");
    let config = dir.join("flint.toml");
    let host_list: Vec<String> = TASK_MANAGER_HOSTS
        .iter()
        .map(|h| format!("\"{SUBNET}.{h}\""))
        .collect();
    // `{host}` is the TaskManager's address; its namespace is named after it.
    let template = [
        "ip",
        "netns",
        "exec",
        &format!("{}-{{host}}", network.tag),
        flint,
        "taskmanager",
        "--jobmanager",
        "{jobmanager}",
        "--resource-id",
        "{resource_id}",
        "--slots",
        "{slots}",
        "--bind",
        "{host}:0",
        "--config",
        &config.display().to_string(),
    ]
    .map(|arg| format!("\"{arg}\""))
    .join(", ");
    std::fs::write(
        &config,
        format!(
            "[heartbeat]\ninterval = \"100ms\"\ntimeout = \"1s\"\n\
             [taskmanager]\nslots = 2\nworking-dir = \"{}\"\n\
             [resourcemanager]\ndriver = \"command\"\n\
             [resourcemanager.command]\ntemplate = [{template}]\nhosts = [{}]\n",
            dir.join("work").display(),
            host_list.join(", ")
        ),
    )
    .unwrap();

    let jm_bind = format!("{SUBNET}.{JOB_MANAGER_HOST}:0");
    let mut command = Command::new("ip");
    command
        .args(["netns", "exec", &network.namespace(JOB_MANAGER_HOST), flint])
        .args(["jobmanager", "--bind", &jm_bind, "--pool-size", "2"])
        .args(["--rest", "127.0.0.1:0"])
        .arg("--config")
        .arg(&config)
        .env("FLINT_SECRET", SECRET);
    let jm_process = JobManagerProcess::start(command);
    assert!(
        jm_process.address.starts_with(SUBNET),
        "{}",
        jm_process.address
    );

    // This test is a client on the bridge, as a user's machine would be.
    let jm = Client::connect(
        EndpointConfig::new(
            format!("{SUBNET}.254:0").parse().unwrap(),
            ClusterId::new("default"),
            "test-client",
            Secret::from_bytes(SECRET),
            7,
        ),
        &jm_process.address,
    )
    .await;

    // Two TaskManagers, on the first two hosts (the command driver goes round-robin).
    let pool = jm
        .wait_for("the pool never reached 2", DEADLINE, |s| {
            s.task_managers.len() == 2
        })
        .await;
    let mut placed: Vec<u8> = pool
        .task_managers
        .iter()
        .map(|tm| host_of(&tm.location.address))
        .collect();
    placed.sort();
    assert_eq!(placed, TASK_MANAGER_HOSTS[..2]);

    // WordCount across the hosts.
    let input = dir.join("input.txt");
    write_text(&input, 3_000);
    let output = dir.join("out-1");
    let job = jm.submit(wordcount_graph(&input, &output)).await;
    let details = jm.wait_for_job(job, DEADLINE).await;
    assert_eq!(details.summary.status, JobStatus::Finished, "{details:#?}");
    assert_eq!(read_counts(&output), sequential_word_count(&input).unwrap());

    // A second, larger WordCount; once it runs, cut the first host's link.
    let big = dir.join("big.txt");
    write_text(&big, 200_000);
    let output = dir.join("out-2");
    let job = jm.submit(wordcount_graph(&big, &output)).await;
    let give_up = tokio::time::Instant::now() + DEADLINE;
    while jm.job(job).await.summary.status != JobStatus::Running {
        assert!(tokio::time::Instant::now() < give_up, "never RUNNING");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let cut = TASK_MANAGER_HOSTS[0];
    let victim = pool
        .task_managers
        .iter()
        .find(|tm| host_of(&tm.location.address) == cut)
        .unwrap()
        .resource_id
        .clone();
    ip(&["link", "set", &network.link(cut), "down"]).expect("cut the link");

    // The heartbeat timeout fires and the replacement starts on the third host.
    let after = jm
        .wait_for("the cut TaskManager was never replaced", DEADLINE, |s| {
            s.task_managers.len() == 2 && s.task_managers.iter().all(|tm| tm.resource_id != victim)
        })
        .await;
    assert!(after.heartbeat_timeouts >= 1, "{after:#?}");
    let mut placed: Vec<u8> = after
        .task_managers
        .iter()
        .map(|tm| host_of(&tm.location.address))
        .collect();
    placed.sort();
    assert_eq!(placed, TASK_MANAGER_HOSTS[1..]);

    let details = jm.wait_for_job(job, DEADLINE).await;
    assert_eq!(details.summary.status, JobStatus::Finished, "{details:#?}");
    assert_eq!(read_counts(&output), sequential_word_count(&big).unwrap());
    eprintln!(
        "cut link: TaskManager replaced, job finished after {} restart(s)",
        details.restarts
    );

    jm.endpoint.shutdown();
    drop(jm_process);
    drop(network);
    let _ = std::fs::remove_dir_all(&dir);
}
