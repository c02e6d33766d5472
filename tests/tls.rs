//! TLS under the transport: a `flint jobmanager` with `[transport.tls]` and its `local_process`
//! TaskManagers (which inherit the configuration) register and run WordCount over TLS; a client
//! without TLS, or trusting another CA, is refused while the cluster keeps serving.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use flint::job::states::JobStatus;
use flint::messages::job_manager::GetJobManagerStatus;
use flint::operators::builtin::sequential_word_count;
use flint::transport::tls::{Tls, TlsConfig};

mod common;
use common::process::{Client, JobManagerProcess};
use common::{read_counts, scratch, wordcount_graph, write_pki, write_text};

const DEADLINE: Duration = Duration::from_secs(60);

fn tls_config(dir: &Path) -> TlsConfig {
    TlsConfig {
        ca: dir.join("ca.pem"),
        cert: dir.join("node.pem"),
        key: dir.join("node.key"),
    }
}

async fn client(address: &str, seed: u64, tls: Option<Tls>) -> Client {
    let mut config = Client::loopback_config(Client::local_secret(), seed);
    config.ask_timeout = Duration::from_secs(5);
    config.tls = tls;
    Client::connect(config, address).await
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
    let mut command = Command::new(env!("CARGO_BIN_EXE_flint"));
    command
        .args(["jobmanager", "--bind", "127.0.0.1:0", "--pool-size", "2"])
        .args(["--rest", "127.0.0.1:0"])
        .args(["--slots", "2"])
        .arg("--config")
        .arg(&config)
        .env_remove("FLINT_SECRET");
    let jm = JobManagerProcess::start(command);

    // Refused: a client without TLS, and one that trusts another CA.
    let plain = client(&jm.address, 1, None).await;
    assert!(
        plain
            .job_manager
            .get_status
            .send(GetJobManagerStatus)
            .await
            .is_err()
    );
    let other = Tls::load(&tls_config(&dir.join("other-pki"))).unwrap();
    let untrusting = client(&jm.address, 2, Some(other)).await;
    assert!(
        untrusting
            .job_manager
            .get_status
            .send(GetJobManagerStatus)
            .await
            .is_err()
    );

    // Over TLS: both TaskManagers register (they dialled the JobManager over TLS too).
    let trusting = client(&jm.address, 3, Some(Tls::load(&tls).unwrap())).await;
    trusting
        .wait_for("the pool never reached 2", DEADLINE, |s| {
            s.task_managers.len() == 2
        })
        .await;

    // WordCount: the TaskManagers fetch partitions from each other over TLS.
    let input = dir.join("input.txt");
    write_text(&input, 3_000);
    let output = dir.join("out");
    let job = trusting.submit(wordcount_graph(&input, &output)).await;
    let details = trusting.wait_for_job(job, DEADLINE).await;
    assert_eq!(details.summary.status, JobStatus::Finished, "{details:#?}");
    assert_eq!(read_counts(&output), sequential_word_count(&input).unwrap());

    for client in [plain, untrusting, trusting] {
        client.endpoint.shutdown();
    }
    drop(jm);
    let _ = std::fs::remove_dir_all(&dir);
}
