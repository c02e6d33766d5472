//! Job artifacts on a process cluster: `flint run --artifact` uploads and ships a file, `flint
//! artifacts` and `GET /artifacts` list it, and every bad upload or reference is refused with
//! nothing stored and the cluster going on; under HA a new leader serves what the old one
//! stored, and an upload cut off by the old leader's death stores nothing.

mod common;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::ha::{HaCluster, get, leads, signal, wait_until};
use common::rest::{JobManagerChild, agent, local_bearer, poll, request};
use common::scratch;
use sha2::{Digest, Sha256};

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `POST /artifacts[?sha256=…]` with `bytes` as the body: (status, body).
fn upload(url: &str, bytes: &[u8], sha: Option<&str>) -> (u16, String) {
    let target = match sha {
        Some(sha) => format!("{url}/artifacts?sha256={sha}"),
        None => format!("{url}/artifacts"),
    };
    let mut builder = agent()
        .post(&target)
        .content_type("application/octet-stream");
    if let Some(bearer) = local_bearer() {
        builder = builder.header("Authorization", bearer);
    }
    let mut response = builder.send(bytes).expect("an answer");
    let status = response.status().as_u16();
    (status, response.body_mut().read_to_string().unwrap())
}

/// An upload of `length` bytes to `path` of which only `sent` has been sent, over a raw
/// connection the caller cuts (drops) or watches.
fn start_upload(url: &str, path: &str, length: usize, sent: &[u8]) -> std::net::TcpStream {
    let address = url.strip_prefix("http://").unwrap();
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    let bearer = local_bearer()
        .map(|b| format!("Authorization: {b}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/octet-stream\r\n\
         Content-Length: {length}\r\n{bearer}\r\n"
    )
    .unwrap();
    stream.write_all(sent).unwrap();
    stream
}

fn stored(url: &str) -> Vec<serde_json::Value> {
    let answer = get(url, "/artifacts").expect(200);
    answer.json()["artifacts"].as_array().cloned().unwrap()
}

/// The JobManager's artifact store (its working directory's `blobs`) of the process cluster in
/// `dir`.
fn store_dir(dir: &Path) -> PathBuf {
    let work = dir.join("work");
    let jm = (std::fs::read_dir(&work).unwrap().flatten())
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("flint-jm-")
        })
        .expect("the JobManager's working directory");
    jm.join("blobs")
}

/// Every file in the JobManager's artifact store.
fn store_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = (std::fs::read_dir(store_dir(dir)).unwrap().flatten())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn flint(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(args)
        .env_remove("FLINT_JOBMANAGER")
        .env_remove("FLINT_CONFIG")
        .output()
        .expect("flint runs")
}

/// `flint run --jobmanager URL --artifact ARTIFACT JOB` (waiting for the job).
fn run_with(url: &str, artifact: &Path, job: &Path) -> std::process::Output {
    let (artifact, job) = (artifact.to_str().unwrap(), job.to_str().unwrap());
    flint(&["run", "--jobmanager", url, "--artifact", artifact, job])
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// A `flint jobmanager` on free ports with `pool` TaskManager processes of `slots` slots
/// (`extra` appended to its configuration file).
fn process_cluster(dir: &Path, pool: u32, slots: u32, extra: &str) -> JobManagerChild {
    let (pool, slots) = (pool.to_string(), slots.to_string());
    let args = [
        "--bind",
        "127.0.0.1:0",
        "--rest",
        "127.0.0.1:0",
        "--pool-size",
        &pool,
        "--slots",
        &slots,
    ];
    JobManagerChild::start(&args, dir, extra)
}

#[test]
fn artifacts_are_uploaded_listed_checked_and_bad_ones_refused() {
    let dir = scratch("artifacts");
    let jm = process_cluster(&dir, 1, 1, "[blob]\nmax-size = \"20mb\"\n");
    let url = jm.url();

    // `flint run --artifact`: uploaded, named by its file name, the job runs.
    let script = write(&dir, "tokenize.py", b"print('hello')\n");
    let job = write(
        &dir,
        "job.toml",
        b"name = \"with-artifact\"\n[[vertex]]\nname = \"nothing\"\noperator = \"noop\"\nparallelism = 1\n",
    );
    let run = run_with(&url, &script, &job);
    assert!(run.status.success(), "{run:?}\n{}", jm.log());
    let digest = sha256(b"print('hello')\n");
    let listed = stored(&url);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(
        (listed[0]["digest"].as_str(), listed[0]["size"].as_u64()),
        (Some(digest.as_str()), Some(15))
    );
    let shown = flint(&["artifacts", "--jobmanager", &url]);
    assert!(
        String::from_utf8_lossy(&shown.stdout).contains(&digest),
        "{shown:?}"
    );
    assert_eq!(store_files(&dir), std::slice::from_ref(&digest));

    // Larger than the 16 MiB of a JSON body is fine up to blob.max-size; past it, refused.
    let big = vec![7u8; 17 << 20];
    let (status, body) = upload(&url, &big, Some(&sha256(&big)));
    assert_eq!(status, 201, "{body}");
    let (status, body) = upload(&url, &vec![7u8; 21 << 20], None);
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("blob.max-size"), "{body}");

    // A digest that does not match what arrived.
    let (status, body) = upload(&url, b"changed on the way", Some(&sha256(b"original")));
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("SHA-256"), "{body}");
    let (status, body) = upload(&url, b"x", Some("../../etc/passwd"));
    assert_eq!(status, 400, "{body}");

    // An upload cut off half-way: nothing stored, no temporary file left.
    drop(start_upload(&url, "/artifacts", 100_000, &[1u8; 5000]));
    let expected = {
        let mut files = vec![digest.clone(), sha256(&big)];
        files.sort();
        files
    };
    poll("the cut-off upload leaves nothing behind", || {
        (store_files(&dir) == expected).then_some(())
    });
    assert_eq!(stored(&url).len(), 2);

    // A job naming an artifact that was never uploaded, or under a path, is refused.
    let graph = |name: &str, digest: &str| {
        let mut b = flint::job::graph::JobGraph::builder("j");
        b.vertex("v", "noop", 1);
        let mut json = serde_json::to_value(b.build(|_| true).unwrap()).unwrap();
        json["artifacts"] = serde_json::json!([{"name": name, "digest": digest, "size": 15}]);
        json.to_string()
    };
    let bearer = local_bearer();
    let never = sha256(b"never uploaded");
    let answer = request(
        &agent(),
        "POST",
        &format!("{url}/jobs"),
        Some(&graph("a.py", &never)),
        bearer.as_deref(),
    );
    answer.expect_error(400, "does not store");
    let answer = request(
        &agent(),
        "POST",
        &format!("{url}/jobs"),
        Some(&graph("../a.py", &digest)),
        bearer.as_deref(),
    );
    assert_eq!(answer.status, 400, "{}", answer.body);
    let missing = write(&dir, "missing-dir-marker", b"");
    std::fs::remove_file(&missing).unwrap();
    let run = run_with(&url, &missing, &job);
    assert_eq!(run.status.code(), Some(2), "{run:?}");
    assert!(
        String::from_utf8_lossy(&run.stderr).contains("missing-dir-marker"),
        "{run:?}"
    );

    // The cluster goes on: the same job with its artifact still runs, and the file, stored
    // already, is not sent again (`GET /artifacts/{digest}` says so; an unknown digest is 404).
    let inode = || {
        std::os::unix::fs::MetadataExt::ino(
            &std::fs::metadata(store_dir(&dir).join(&digest)).unwrap(),
        )
    };
    let before = inode();
    let run = run_with(&url, &script, &job);
    assert!(run.status.success(), "{run:?}");
    assert_eq!(inode(), before, "an upload replaced the stored copy");
    let one = get(&url, &format!("/artifacts/{digest}")).expect(200);
    assert_eq!(one.json()["size"], 15, "{}", one.body);
    get(&url, &format!("/artifacts/{never}")).expect_error(404, "no artifact");
    drop(jm);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_new_leader_serves_the_artifacts_uploaded_to_the_old_one() {
    let Some(mut cluster) = HaCluster::start("artifacts-ha") else {
        return;
    };
    let (a, b) = (cluster.a.url(), cluster.b.url());
    let bytes = b"shipped before the failover\n";
    let digest = sha256(bytes);
    let (status, body) = upload(&a, bytes, Some(&digest));
    assert_eq!(status, 201, "{body}");

    // An upload in flight when the leader dies: half its body has reached the store when the
    // leader is killed. The client sees it fail; nothing of it is stored, and it can be sent
    // again whole to the new leader.
    let store = cluster.dir.join("ha-storage").join("blobs");
    let cut: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
    let cut_digest = sha256(&cut);
    let mut in_flight = start_upload(
        &a,
        &format!("/artifacts?sha256={cut_digest}"),
        cut.len(),
        &cut[..cut.len() / 2],
    );
    let partial = || {
        (std::fs::read_dir(&store).unwrap().flatten())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".part"))
            .map(|e| e.metadata().map_or(0, |m| m.len()))
            .max()
    };
    wait_until("half the upload reaches the store", || {
        partial().filter(|&len| len > 0).map(drop)
    });

    signal(&cluster.a.child, "-KILL");
    let _ = cluster.a.child.wait();
    let mut answer = String::new();
    let _ = std::io::Read::read_to_string(&mut in_flight, &mut answer);
    assert!(
        !answer.contains(" 201 "),
        "a cut-off upload was stored: {answer}"
    );
    wait_until("the standby leads", || leads(&b).then_some(()));
    let listed = stored(&b);
    assert!(
        listed.iter().any(|a| a["digest"] == digest.as_str()),
        "{listed:?}"
    );
    assert!(
        !listed.iter().any(|a| a["digest"] == cut_digest.as_str()),
        "half an upload is listed: {listed:?}"
    );
    assert!(
        !store.join(&cut_digest).exists(),
        "half an upload is stored"
    );
    let (status, body) = upload(&b, &cut, Some(&cut_digest));
    assert_eq!(status, 201, "{body}");
    let listed = stored(&b);
    let whole = listed.iter().find(|a| a["digest"] == cut_digest.as_str());
    assert_eq!(whole.map(|a| a["size"].clone()), Some(cut.len().into()));

    // A job reading it is accepted by the new leader, and its TaskManager fetches it from
    // there: the sink writes the shipped line back out.
    let output = cluster.dir.join("after-failover-out");
    let mut graph = flint::job::graph::JobGraph::builder("after-failover");
    let source = graph
        .vertex("read", "text-source", 1)
        .config("artifact", "data.txt")
        .index();
    let sink = graph
        .vertex("write", "file-sink", 1)
        .config("path", output.display().to_string())
        .index();
    graph.edge(
        source,
        sink,
        flint::job::graph::DistributionPattern::Forward,
        flint::job::graph::ExchangeMode::Pipelined,
    );
    let mut json = serde_json::to_value(graph.build(|_| true).unwrap()).unwrap();
    json["artifacts"] =
        serde_json::json!([{"name": "data.txt", "digest": digest, "size": bytes.len()}]);
    let answer = request(
        &agent(),
        "POST",
        &format!("{b}/jobs"),
        Some(&json.to_string()),
        local_bearer().as_deref(),
    )
    .expect(202);
    let job = answer.json()["id"].as_str().unwrap().to_owned();
    let done = cluster.wait_for_job(&b, &job, "the job ends", |j| {
        matches!(
            j["state"].as_str(),
            Some("FINISHED" | "FAILED" | "CANCELED")
        )
    });
    assert_eq!(done["state"], "FINISHED", "{done:#}");
    // Its details name what it shipped.
    assert_eq!(done["artifacts"][0]["name"], "data.txt", "{done:#}");
    assert_eq!(done["artifacts"][0]["digest"], digest.as_str());
    let written = std::fs::read_to_string(output.join("part-00000")).unwrap();
    assert!(written.contains("shipped before the failover"), "{written}");
}

/// WordCount whose text ships with the job: four source tasks on two TaskManagers, each
/// TaskManager fetching the file once; the counts equal a sequential count of the file.
#[test]
fn a_shipped_input_is_fetched_once_per_task_manager_and_counted_exactly() {
    let dir = scratch("artifacts-wordcount");
    let jm = process_cluster(&dir, 2, 2, "");
    let url = jm.url();
    let mut text = String::new();
    for i in 0..20_000u32 {
        text.push_str(&format!("word{} The quick, brown fox {}\n", i % 97, i % 13));
    }
    let input = write(&dir, "words.txt", text.as_bytes());
    let output = dir.join("counts");
    let job = write(
        &dir,
        "job.toml",
        format!(
            "name = \"shipped-wordcount\"\n\
             [[vertex]]\nname = \"source\"\noperator = \"text-source\"\nparallelism = 4\n\
             [vertex.config]\nartifact = \"words.txt\"\n\
             [[vertex]]\nname = \"tokenize\"\noperator = \"tokenize\"\nparallelism = 4\n\
             [[vertex]]\nname = \"count\"\noperator = \"count-by-key\"\nparallelism = 2\n\
             [[vertex]]\nname = \"sink\"\noperator = \"file-sink\"\nparallelism = 2\n\
             [vertex.config]\npath = \"{}\"\n\
             [[edge]]\nfrom = \"source\"\nto = \"tokenize\"\npattern = \"forward\"\n\
             [[edge]]\nfrom = \"tokenize\"\nto = \"count\"\npattern = \"all-to-all\"\n\
             [[edge]]\nfrom = \"count\"\nto = \"sink\"\npattern = \"forward\"\n",
            output.display()
        )
        .as_bytes(),
    );
    let run = run_with(&url, &input, &job);
    assert!(run.status.success(), "{run:?}\n{}", jm.log());
    let expected = flint::operators::builtin::sequential_word_count(&input).unwrap();
    let counted = common::read_counts(&output);
    assert_eq!(counted, expected);
    // Four source tasks on two TaskManagers: the file crossed the network once per
    // TaskManager that ran one, never once per task.
    let metrics = request(
        &agent(),
        "GET",
        &format!("{url}/metrics"),
        None,
        local_bearer().as_deref(),
    )
    .expect(200)
    .body;
    let served: u64 = (metrics.lines())
        .find_map(|line| line.strip_prefix("flint_blob_served_bytes_total "))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no flint_blob_served_bytes_total in\n{metrics}"))
        as u64;
    let size = text.len() as u64;
    assert!(
        served == size || served == 2 * size,
        "{served} bytes served for a {size}-byte artifact"
    );
    drop(jm);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Python example as a user runs it: `flint run` ships `tokenize.py` (executable) and
/// `flint_stream.py` to a process cluster, a `process` vertex runs the script per subtask, and
/// the counts equal the built-in WordCount's. Then a script that fails: the job fails naming
/// the command, its exit code and its stderr, and the cluster runs the next job.
#[test]
fn the_python_wordcount_example_runs_on_a_process_cluster() {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("SKIPPED: python3 is not installed, so the Python example cannot run here");
        return;
    }
    let dir = scratch("artifacts-python");
    let jm = process_cluster(&dir, 2, 1, "");
    let url = jm.url();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/python");
    let mut text = String::new();
    for i in 0..5_000u32 {
        text.push_str(&format!(
            "Über x{} the Quick, brown fox; THE end {}\n",
            i % 31,
            i % 7
        ));
    }
    let input = write(&dir, "input.txt", text.as_bytes());
    let output = dir.join("counts");
    let (script, helper) = (
        examples.join("tokenize.py"),
        examples.join("flint_stream.py"),
    );
    let job = examples.join("wordcount.toml");
    let run = flint(&[
        "run",
        "--jobmanager",
        &url,
        "--artifact",
        script.to_str().unwrap(),
        "--artifact",
        helper.to_str().unwrap(),
        job.to_str().unwrap(),
        "--param",
        &format!("input={}", input.display()),
        "--param",
        &format!("output={}", output.display()),
    ]);
    assert!(run.status.success(), "{run:?}\n{}", jm.log());
    let expected = flint::operators::builtin::sequential_word_count(&input).unwrap();
    assert_eq!(common::read_counts(&output), expected);

    // A shipped script that fails: the job fails saying how, and the cluster goes on.
    let broken = write(
        &dir,
        "broken.py",
        b"import sys\nsys.stderr.write('no model here\\n')\nsys.exit(4)\n",
    );
    let job_text = std::fs::read_to_string(&job)
        .unwrap()
        .replace(
            "command = \"tokenize.py\"",
            "command = \"python3\"\nallow-path = \"true\"\nargs = '[\"{artifact:broken.py}\"]'",
        )
        .replace("attempts = 2", "attempts = 0");
    let broken_job = write(&dir, "broken.toml", job_text.as_bytes());
    let run = flint(&[
        "run",
        "--jobmanager",
        &url,
        "--artifact",
        broken.to_str().unwrap(),
        broken_job.to_str().unwrap(),
        "--param",
        &format!("input={}", input.display()),
        "--param",
        &format!("output={}", dir.join("never").display()),
    ]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(!run.status.success(), "{said}");
    assert!(
        said.contains("exited with code 4") && said.contains("no model here"),
        "{said}\n{}",
        jm.log()
    );
    let again = run_with(
        &url,
        &script,
        &write(
            &dir,
            "noop.toml",
            b"name = \"after\"\n[[vertex]]\nname = \"v\"\noperator = \"noop\"\nparallelism = 1\n",
        ),
    );
    assert!(again.status.success(), "{again:?}");
    drop(jm);
    let _ = std::fs::remove_dir_all(&dir);
}
