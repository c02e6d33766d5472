//! TLS under the transport: a `flint jobmanager` with `[transport.tls]` and its `local_process`
//! TaskManagers (which inherit the configuration) register and run WordCount over TLS; a client
//! without TLS, or trusting another CA, is refused while the cluster keeps serving.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use flint::job::file::parse_job_file;
use flint::job::states::JobStatus;
use flint::messages::ActorAddress;
use flint::messages::ids::ClusterId;
use flint::messages::job_manager::{
    GetJobManagerStatus, JobManagerGateway, RequestJobStatus, SubmitJob,
};
use flint::operators::OperatorRegistry;
use flint::operators::builtin::sequential_word_count;
use flint::transport::handshake::Secret;
use flint::transport::remote::{EndpointConfig, NodeEndpoint, RemoteResolver};
use flint::transport::tls::{Tls, TlsConfig};

mod common;
use common::{read_counts, scratch, write_pki, write_text};

const DEADLINE: Duration = Duration::from_secs(60);

struct JobManagerProcess(Child);

impl Drop for JobManagerProcess {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

fn tls_config(dir: &Path) -> TlsConfig {
    TlsConfig {
        ca: dir.join("ca.pem"),
        cert: dir.join("node.pem"),
        key: dir.join("node.key"),
    }
}

async fn client(
    address: &str,
    seed: u64,
    tls: Option<Tls>,
) -> (NodeEndpoint, Arc<RemoteResolver>, JobManagerGateway) {
    let mut config = EndpointConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        ClusterId::new("default"),
        format!("client-{seed}"),
        Secret::insecure(),
        seed,
    );
    config.ask_timeout = Duration::from_secs(5);
    config.tls = tls;
    let (endpoint, resolver) = NodeEndpoint::bind(config).await.unwrap();
    let gateway = flint::directory::Resolver::job_manager(
        &*resolver,
        &ActorAddress::new(address, "jobmanager"),
    )
    .expect("a proxy for the remote JobManager");
    (endpoint, resolver, gateway)
}

#[actix::test]
async fn a_cluster_over_tls_runs_wordcount_and_refuses_plain_or_untrusted_peers() {
    let dir = scratch("tls");
    write_pki(&dir.join("pki"));
    write_pki(&dir.join("other-pki"));
    let tls = tls_config(&dir.join("pki"));
    let config = dir.join("flint.toml");
    std::fs::write(
        &config,
        format!(
            "[heartbeat]\ninterval = \"100ms\"\ntimeout = \"2s\"\n\
             [taskmanager]\nworking-dir = \"{}\"\n\
             [transport.tls]\ncert = \"{}\"\nkey = \"{}\"\nca = \"{}\"\n",
            dir.join("work").display(),
            tls.cert.display(),
            tls.key.display(),
            tls.ca.display()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(["jobmanager", "--bind", "127.0.0.1:0", "--pool-size", "2"])
        .args(["--slots", "2"])
        .arg("--config")
        .arg(&config)
        .env_remove("FLINT_SECRET")
        .stdout(Stdio::piped())
        .spawn()
        .expect("flint jobmanager starts");
    let stdout = child.stdout.take().unwrap();
    let _jm = JobManagerProcess(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let address = line.trim().rsplit(' ').next().unwrap().to_owned();

    // Refused: a client without TLS, and one that trusts another CA.
    let (plain, _r1, plain_jm) = client(&address, 1, None).await;
    assert!(plain_jm.get_status.send(GetJobManagerStatus).await.is_err());
    let other = Tls::load(&tls_config(&dir.join("other-pki"))).unwrap();
    let (untrusting, _r2, untrusting_jm) = client(&address, 2, Some(other)).await;
    assert!(
        untrusting_jm
            .get_status
            .send(GetJobManagerStatus)
            .await
            .is_err()
    );

    // Over TLS: both TaskManagers register (they dialled the JobManager over TLS too).
    let (endpoint, _r3, jm) = client(&address, 3, Some(Tls::load(&tls).unwrap())).await;
    let give_up = tokio::time::Instant::now() + DEADLINE;
    loop {
        let status = jm.get_status.send(GetJobManagerStatus).await.unwrap();
        if status.task_managers.len() == 2 {
            break;
        }
        assert!(tokio::time::Instant::now() < give_up, "{status:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // WordCount: the TaskManagers fetch partitions from each other over TLS.
    let input = dir.join("input.txt");
    write_text(&input, 3_000);
    let output = dir.join("out");
    let params = BTreeMap::from([
        ("input".to_owned(), input.display().to_string()),
        ("output".to_owned(), output.display().to_string()),
    ]);
    let registry = OperatorRegistry::with_builtins();
    let graph = parse_job_file(include_str!("../examples/wordcount.toml"), &params, |op| {
        registry.contains(op)
    })
    .unwrap();
    let job = jm
        .submit_job
        .send(SubmitJob { job_graph: graph })
        .await
        .unwrap()
        .unwrap();
    let details = loop {
        let details = jm
            .request_job_status
            .send(RequestJobStatus { job_id: job })
            .await
            .unwrap()
            .unwrap();
        if details.summary.status.is_globally_terminal() {
            break details;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "WordCount never ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(details.summary.status, JobStatus::Finished, "{details:#?}");
    assert_eq!(read_counts(&output), sequential_word_count(&input).unwrap());

    plain.shutdown();
    untrusting.shutdown();
    endpoint.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
