//! The web dashboard in a real browser. Debian's chromium (installed by the test when it is
//! missing and the test runs as root) loads the page of a real `flint jobmanager` process with a
//! pool of 2 TaskManager processes and a running job:
//!
//! - `the_page_shows_the_pool_the_taskmanagers_and_the_running_job`: `chromium --headless
//!   --dump-dom` renders the page, and the DOM must show every TaskManager with its slots (the
//!   tasks in them, the free ones), the pool and the job with its state, vertices and the
//!   artifact it ships; then
//!   `--screenshot` takes the picture the README shows (set `FLINT_DASHBOARD_SCREENSHOT=PATH` to
//!   keep a copy, e.g. `docs/dashboard.png`).
//! - `the_page_scales_the_pool_cancels_a_job_and_survives_a_restart`: the test drives the page
//!   over the DevTools protocol (`Runtime.evaluate`, the way a person clicks): opened without
//!   the token, the page asks for it before it shows anything (a wrong one is refused and asked
//!   for again); setting the pool size then needs no second asking and the third TaskManager
//!   appears; a size over the maximum shows the server's
//!   message; cancelling a job asks for confirmation and the job ends CANCELED; a stopped
//!   JobManager shows the "unreachable" banner, which goes away when a JobManager answers again.
//!
//! - `the_page_marks_a_backpressured_vertex`: a fast source behind a slow consumer; once the
//!   REST API says the source is backpressured `high`, the rendered page marks that vertex (and
//!   only it) as Flink's web UI does. Beside it a job whose input is missing keeps restarting,
//!   and the page says why (its latest root cause).
//!
//! Every cluster requires its REST token (as every JobManager does); the first two tests hand
//! it to the page in the URL's fragment (`/#token=...`), as a user opening the dashboard does.
//!
//! Every wait is a poll with a deadline (the machine may be slow and shared); the two tests take
//! turns with the browser.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use flint::job::graph::{DistributionPattern, ExchangeMode, JobGraph};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};

mod common;

/// How long anything may take: starting processes, the pool filling, the browser rendering.
const DEADLINE: Duration = Duration::from_secs(90);
/// The job's name, as the page must show it.
const JOB_NAME: &str = "dashboard-e2e";
/// The line `flint jobmanager` prints when its REST server listens.
const REST_LINE: &str = "flint REST API and dashboard at ";

/// The REST token of every test's JobManager.
const TOKEN: &str = "dashboard-test-token";

/// One browser test at a time: each starts a cluster of three processes and a browser, which is
/// plenty for a 2-core machine.
static BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

// ---------------------------------------------------------------------------------------------
// The tests

#[actix::test]
async fn the_page_shows_the_pool_the_taskmanagers_and_the_running_job() {
    let Some(chromium) = chromium() else { return };
    let _turn = BROWSER.lock().await;
    let dir = common::scratch("dashboard-dom");
    let cluster = Cluster::start(&dir, "jm", 0).await;
    cluster.wait_for_the_pool().await;
    // The job ships an artifact (issue 35: a job's details list its artifacts).
    let model = cluster.upload(&[42u8; 3000]);
    let artifacts = json!([{"name": "model.bin", "digest": model, "size": 3000}]);
    let job = cluster.submit_sleeping_job(artifacts);
    let taskmanagers = cluster.wait_until_the_job_runs(&job).await;
    let url = format!("{}/#token={TOKEN}", cluster.rest);

    let dom = chromium.dump_dom(&dir, &url).await;
    let page = |what: &str, needle: &str| {
        assert!(
            dom.contains(needle),
            "the page does not show {what} ({needle:?}):\n{dom}"
        );
    };

    // Every TaskManager, with its slots: the tasks placed in them and the free ones.
    let mut free = 0;
    for tm in taskmanagers["taskmanagers"].as_array().unwrap() {
        let id = tm["id"].as_str().unwrap();
        page("the TaskManager", &format!("data-key=\"{id}\""));
        page("the TaskManager's id", &format!(">{id}</h3>"));
        free += tm["free-slots"].as_u64().unwrap();
    }
    assert_eq!(
        dom.matches("class=\"slot free\"").count() as u64,
        free,
        "free slots:\n{dom}"
    );
    for subtask in 1..=3 {
        page("a task in its slot", &format!("wait ({subtask}/3)"));
        page("a task in its slot", &format!("sink ({subtask}/3)"));
    }

    // The pool, live.
    page("the designated pool size", "id=\"pool-designated\">2<");
    page("the started workers", "id=\"pool-started\">2<");
    // The job holds 3 slots of 2 per TaskManager: its demand is 2 TaskManagers, the target
    // max(designated 2, demand 2).
    page("the jobs' demand", "id=\"pool-demand\">2<");
    page("the target", "id=\"pool-target\">2<");
    page("that it is live", "id=\"live-text\" role=\"status\">Live<");
    page("when it was updated", "· updated ");
    let banner = element(&dom, "<div id=\"banner\"", ">").unwrap_or_default();
    assert!(banner.contains("hidden"), "the banner shows: {banner}");

    // The job, with its state and its vertices' progress.
    let row = element(&dom, &format!("<tbody data-key=\"{job}\""), "</tbody>")
        .unwrap_or_else(|| panic!("the page does not show job {job}:\n{dom}"));
    for (what, needle) in [
        ("its name", JOB_NAME),
        ("its id", job.as_str()),
        ("its state", "badge st-RUNNING\">RUNNING<"),
        ("a cancel button", "data-action=\"cancel\""),
        ("its first vertex", "<td>wait</td>"),
        ("its second vertex", "<td>sink</td>"),
        ("the vertices' progress", "0 / 3"),
        (
            "its artifact",
            "<span class=\"mono\">model.bin</span> 2.9 KiB",
        ),
        (
            "the artifact's digest",
            &format!("title=\"sha256 {model}\""),
        ),
    ] {
        assert!(row.contains(needle), "job row without {what}:\n{row}");
    }

    // The picture for the README.
    let png = chromium.screenshot(&dir, &url).await;
    let bytes = std::fs::read(&png).expect("the screenshot");
    assert_eq!(png_size(&bytes), Some((1280, 900)), "{}", png.display());
    assert!(
        bytes.len() > 30_000,
        "a blank screenshot? {} bytes",
        bytes.len()
    );
    if let Ok(keep) = std::env::var("FLINT_DASHBOARD_SCREENSHOT") {
        std::fs::copy(&png, &keep).expect("copying the screenshot");
        eprintln!("dashboard screenshot: {keep}");
    }

    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 11 (backpressure is visible): the page marks the vertex its consumers hold back.
#[actix::test]
async fn the_page_marks_a_backpressured_vertex() {
    let Some(chromium) = chromium() else { return };
    let _turn = BROWSER.lock().await;
    let dir = common::scratch("dashboard-backpressure");
    let cluster = Cluster::start(&dir, "jm", 0).await;
    cluster.wait_for_the_pool().await;
    // A source of endless small records into a consumer that takes a millisecond per record.
    let mut job = JobGraph::builder("backpressured");
    let fast = job
        .vertex("fast", "noop", 1)
        .config("count", "1000000000")
        .index();
    let slow = job
        .vertex("slow", "sleep", 1)
        .config("ms", "0")
        .config("per-record-ms", "1")
        .index();
    job.edge(
        fast,
        slow,
        DistributionPattern::Forward,
        ExchangeMode::Pipelined,
    );
    let graph = serde_json::to_value(job.build(|_| true).expect("a valid graph")).unwrap();
    let (status, answer) = cluster.request("POST", "/jobs", Some(&graph));
    assert_eq!(status, 202, "POST /jobs: {answer}");
    let job = answer["id"].as_str().expect("the job id").to_owned();

    // Beside it, a job that keeps restarting (its input is missing; the default strategy
    // never gives up): the page says why, though its subtasks show only their new attempts.
    let missing = dir.join("no-such-input.txt");
    let mut restarting = JobGraph::builder("restarting");
    restarting
        .vertex("source", "text-source", 1)
        .config("path", missing.to_str().unwrap());
    let graph = serde_json::to_value(restarting.build(|_| true).expect("a valid graph")).unwrap();
    let (status, answer) = cluster.request("POST", "/jobs", Some(&graph));
    assert_eq!(status, 202, "POST /jobs: {answer}");
    let restarting = answer["id"].as_str().expect("the job id").to_owned();
    let give_up = tokio::time::Instant::now() + DEADLINE;
    loop {
        let (_, details) = cluster.request("GET", &format!("/jobs/{restarting}"), None);
        if details["restarts"].as_u64() >= Some(1) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "the job never restarted: {details:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The REST API first: the TaskManager samples backpressure every heartbeat.
    let give_up = tokio::time::Instant::now() + DEADLINE;
    loop {
        let (_, details) = cluster.request("GET", &format!("/jobs/{job}"), None);
        if details["vertices"][0]["metrics"]["backpressure-level"] == "high" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "the source never showed high backpressure: {details:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let dom = chromium
        .dump_dom(&dir, &format!("{}/#token={TOKEN}", cluster.rest))
        .await;
    let row = element(&dom, &format!("<tbody data-key=\"{job}\""), "</tbody>")
        .unwrap_or_else(|| panic!("the page does not show job {job}:\n{dom}"));
    assert!(
        row.contains("count backpressure backpressure-high")
            && row.contains("backpressured (high)"),
        "the page does not mark the backpressured vertex:\n{row}"
    );
    assert_eq!(
        row.matches("count backpressure ").count(),
        1,
        "only the source is held back, not its consumer:\n{row}"
    );
    let row = element(
        &dom,
        &format!("<tbody data-key=\"{restarting}\""),
        "</tbody>",
    )
    .unwrap_or_else(|| panic!("the page does not show job {restarting}:\n{dom}"));
    assert!(
        row.contains("Restarted after: source (1/1), attempt ")
            && row.contains(missing.to_str().unwrap()),
        "the page does not say why the job restarts:\n{row}"
    );
    let (status, _) = cluster.request("DELETE", &format!("/jobs/{restarting}"), None);
    assert!(status < 300, "cancelling the restarting job: {status}");

    let (status, _) = cluster.request("DELETE", &format!("/jobs/{job}"), None);
    assert!(status < 300, "cancelling the job: {status}");
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}

#[actix::test]
async fn the_page_scales_the_pool_cancels_a_job_and_survives_a_restart() {
    let Some(chromium) = chromium() else { return };
    let _turn = BROWSER.lock().await;
    let dir = common::scratch("dashboard-actions");
    let cluster = Cluster::start(&dir, "jm", 0).await;
    cluster.wait_for_the_pool().await;
    let job = cluster.submit_sleeping_job(json!([]));
    cluster.wait_until_the_job_runs(&job).await;

    // Opened without the token: the page asks for it before it shows anything; a wrong one
    // is refused and asked for again.
    let mut browser = Browser::open(&chromium, &dir, &format!("{}/", cluster.rest)).await;
    browser.eval(HELPERS);
    browser.eval(&format!(
        "(async () => {{
            const dialog = byId('token-dialog');
            await until('the token dialog', () => dialog.open);
            const closed = new Promise((done) => dialog.addEventListener('close', done, {{ once: true }}));
            byId('token-input').value = 'not-the-token';
            byId('token-submit').click();
            await closed;
            await until('the token dialog after a wrong token', () => dialog.open);
            byId('token-input').value = '{TOKEN}';
            byId('token-submit').click();
            await until('the token kept for this tab', () => !dialog.open
                && sessionStorage.getItem('flint.rest.token') === '{TOKEN}');
            await until('both TaskManagers', () => document.querySelectorAll('article.tm').length === 2);
            await until('the running job', () => document.querySelector(
                'tbody[data-key=\"{job}\"] button[data-action=\"cancel\"]'));
        }})()"
    ));

    // Scaling: the page has the token already, so nothing asks again.
    let message = browser.eval(
        "(async () => {
            setPoolSize('3');
            await until('the answer', () => byId('pool-message').classList.contains('ok'));
            if (byId('token-dialog').open) throw new Error('asked for the token again');
            return byId('pool-message').textContent;
        })()",
    );
    assert_eq!(message, json!("Pool size set to 3."));
    let (status, pool) = cluster.request("GET", "/cluster/pool-size", None);
    assert_eq!((status, &pool["size"]), (200, &json!(3)), "{pool}");
    // The page follows the pool live: the third TaskManager appears in it.
    browser.eval(
        "until('the third TaskManager', () => document.querySelectorAll('article.tm').length === 3
            && byId('pool-started').textContent === '3', 60000)",
    );

    // A size over the maximum: the server's message, and nothing changes.
    let message = browser.eval(
        "(async () => {
            setPoolSize(String(Number(byId('pool-max').textContent) + 1));
            await until('the refusal', () => byId('pool-message').classList.contains('error'));
            return byId('pool-message').textContent;
        })()",
    );
    let message = message.as_str().unwrap();
    assert!(
        message.contains("resourcemanager.max-pool-size") && message.contains("HTTP 400"),
        "{message}"
    );
    let (_, pool) = cluster.request("GET", "/cluster/pool-size", None);
    assert_eq!(pool["size"], json!(3), "{pool}");

    // Cancelling asks first: "Keep running" keeps it running ...
    let cancel_button = format!("tbody[data-key=\"{job}\"] button[data-action=\"cancel\"]");
    browser.eval(&format!(
        "(async () => {{
            document.querySelector('{cancel_button}').click();
            await until('the confirmation', () => byId('confirm-dialog').open);
            byId('confirm-dialog').querySelector('button[value=\"keep\"]').click();
            await until('the confirmation to close', () => !byId('confirm-dialog').open);
        }})()"
    ));
    let (_, details) = cluster.request("GET", &format!("/jobs/{job}"), None);
    assert_eq!(details["state"], json!("RUNNING"), "{details}");
    // ... and "Cancel job" cancels it; the page shows it ending.
    let message = browser.eval(&format!(
        "(async () => {{
            document.querySelector('{cancel_button}').click();
            await until('the confirmation', () => byId('confirm-dialog').open);
            byId('confirm-cancel').click();
            await until('the job to end CANCELED', () => document.querySelector(
                'tbody[data-key=\"{job}\"] .badge.st-CANCELED') && !document.querySelector('{cancel_button}'), 60000);
            return byId('jobs-message').textContent;
        }})()"
    ));
    assert!(
        message.as_str().unwrap().starts_with("Cancelling job"),
        "{message}"
    );
    let (_, details) = cluster.request("GET", &format!("/jobs/{job}"), None);
    assert_eq!(details["state"], json!("CANCELED"), "{details}");

    // The JobManager goes away: the banner says so; another one answers: the banner goes.
    let port = cluster.port();
    drop(cluster);
    browser.eval(
        "until('the unreachable banner', () => !byId('banner').hidden
            && byId('live-text').textContent === 'JobManager unreachable', 30000)",
    );
    let cluster = Cluster::start(&dir, "jm-again", port).await;
    browser.eval(
        "until('the banner to go', () => byId('banner').hidden
            && byId('live-text').textContent.startsWith('Live')
            && !byId('jobs-empty').hidden, 60000)",
    );

    let errors = browser.close().await;
    assert!(errors.is_empty(), "the page logged errors: {errors:#?}");
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Functions the action test's scripts share, defined once in the page.
const HELPERS: &str = "
    window.byId = (id) => document.getElementById(id);
    /* Polls `check` every 50 ms until it holds; fails naming `what` after `ms`. */
    window.until = async (what, check, ms = 30000) => {
        const end = Date.now() + ms;
        for (;;) {
            const value = check();
            if (value) return value;
            if (Date.now() > end) {
                throw new Error('timed out waiting for ' + what + '; the page shows: '
                    + document.body.innerText.slice(0, 3000));
            }
            await new Promise((resolve) => setTimeout(resolve, 50));
        }
    };
    /* Types a pool size and presses the button, as a person would. */
    window.setPoolSize = (value) => {
        const input = byId('pool-size-input');
        input.focus();
        input.value = value;
        input.dispatchEvent(new Event('input', { bubbles: true }));
        byId('pool-size-submit').click();
    };
    true";

// ---------------------------------------------------------------------------------------------
// The cluster

/// A `flint jobmanager` process (with its TaskManager children) and an HTTP client of its REST
/// API. Dropping it stops the process with SIGTERM and waits for it.
struct Cluster {
    child: Child,
    /// Kept open: the process may print more, and must not see a closed pipe.
    _stdout: Lines<BufReader<tokio::process::ChildStdout>>,
    /// `http://127.0.0.1:PORT`, from the line the process prints.
    rest: String,
    http: ureq::Agent,
}

impl Cluster {
    /// Starts `flint jobmanager` with a pool of 2 TaskManagers of 2 slots each and its REST
    /// server on loopback (`port` 0 picks one), requiring [`TOKEN`].
    async fn start(dir: &Path, name: &str, port: u16) -> Self {
        let config = dir.join(format!("{name}.toml"));
        let mut toml = format!(
            "[heartbeat]\ninterval = \"500ms\"\n[taskmanager]\nworking-dir = \"{}\"\n\
             [rest]\naddress = \"127.0.0.1\"\nport = {port}\n",
            dir.join(format!("{name}-work")).display()
        );
        toml.push_str(&format!("token = \"{TOKEN}\"\n"));
        std::fs::write(&config, toml).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_flint"))
            .args(["jobmanager", "--bind", "127.0.0.1:0", "--pool-size", "2"])
            .args(["--slots", "2"])
            .arg("--config")
            .arg(&config)
            .env_remove("FLINT_SECRET")
            .stdout(Stdio::piped())
            .spawn()
            .expect("flint jobmanager starts");
        let stdout = tokio::process::ChildStdout::from_std(child.stdout.take().unwrap()).unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let rest = tokio::time::timeout(DEADLINE, async {
            while let Some(line) = lines.next_line().await.expect("its stdout") {
                if let Some(url) = line.trim().strip_prefix(REST_LINE) {
                    return url.to_owned();
                }
            }
            panic!("flint jobmanager ended without printing {REST_LINE:?}");
        })
        .await
        .expect("flint jobmanager prints its REST URL");
        assert!(rest.starts_with("http://127.0.0.1:"), "{rest}");
        let http = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(20)))
            .build()
            .into();
        Self {
            child,
            _stdout: lines,
            rest,
            http,
        }
    }

    fn port(&self) -> u16 {
        self.rest.rsplit(':').next().unwrap().parse().unwrap()
    }

    /// One request with the token: the status and the JSON answer (`null` when empty).
    fn request(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let url = format!("{}{path}", self.rest);
        let bearer = format!("Bearer {TOKEN}");
        let answer = match (method, body) {
            ("GET", None) => self.http.get(&url).header("Authorization", &bearer).call(),
            ("DELETE", None) => self
                .http
                .delete(&url)
                .header("Authorization", &bearer)
                .call(),
            ("POST", Some(body)) => self
                .http
                .post(&url)
                .header("Authorization", &bearer)
                .send_json(body),
            other => panic!("no such request in this test: {other:?}"),
        };
        let mut answer = answer.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        let text = answer.body_mut().read_to_string().expect("an answer body");
        let json = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {path}: {e}: {text}"))
        };
        (answer.status().as_u16(), json)
    }

    /// Waits until both TaskManagers have registered (the job then starts at once, on both).
    async fn wait_for_the_pool(&self) {
        let give_up = tokio::time::Instant::now() + DEADLINE;
        loop {
            let (_, overview) = self.request("GET", "/overview", None);
            if overview["taskmanagers"] == 2 && overview["slots-total"] == 4 {
                return;
            }
            assert!(
                tokio::time::Instant::now() < give_up,
                "the pool never filled: {overview:#}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Uploads `bytes` as an artifact (`POST /artifacts`); returns its digest.
    fn upload(&self, bytes: &[u8]) -> String {
        let mut answer = self
            .http
            .post(format!("{}/artifacts", self.rest))
            .header("Authorization", &format!("Bearer {TOKEN}"))
            .content_type("application/octet-stream")
            .send(bytes)
            .expect("POST /artifacts");
        let text = answer.body_mut().read_to_string().expect("an answer body");
        assert_eq!(answer.status().as_u16(), 201, "POST /artifacts: {text}");
        let info: Value = serde_json::from_str(&text).expect("JSON");
        info["digest"].as_str().expect("the digest").to_owned()
    }

    /// Submits a job that keeps 3 slots busy for ten minutes: `wait` (sleep) → `sink` (noop),
    /// forward, in one slot sharing group, shipping `artifacts` (a JSON list).
    fn submit_sleeping_job(&self, artifacts: Value) -> String {
        let mut job = JobGraph::builder(JOB_NAME);
        let wait = job
            .vertex("wait", "sleep", 3)
            .config("ms", "600000")
            .index();
        let sink = job.vertex("sink", "noop", 3).index();
        job.edge(
            wait,
            sink,
            DistributionPattern::Forward,
            ExchangeMode::Pipelined,
        );
        let mut graph = serde_json::to_value(job.build(|_| true).expect("a valid graph")).unwrap();
        graph["artifacts"] = artifacts;
        let (status, answer) = self.request("POST", "/jobs", Some(&graph));
        assert_eq!(status, 202, "POST /jobs: {answer}");
        answer["id"].as_str().expect("the job id").to_owned()
    }

    /// Waits until all 6 tasks of the job run in TaskManager slots; returns `GET /taskmanagers`.
    async fn wait_until_the_job_runs(&self, job: &str) -> Value {
        let give_up = tokio::time::Instant::now() + DEADLINE;
        loop {
            let (_, taskmanagers) = self.request("GET", "/taskmanagers", None);
            let running = taskmanagers["taskmanagers"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|tm| tm["slots"].as_array().into_iter().flatten())
                .flat_map(|slot| slot["tasks"].as_array().into_iter().flatten())
                .filter(|task| task["job-id"] == job && task["state"] == "RUNNING")
                .count();
            if running == 6 {
                return taskmanagers;
            }
            let (_, details) = self.request("GET", &format!("/jobs/{job}"), None);
            assert!(
                tokio::time::Instant::now() < give_up,
                "the job's 6 tasks never ran: {details:#}\n{taskmanagers:#}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        common::process::terminate(&mut self.child);
    }
}

// ---------------------------------------------------------------------------------------------
// The browser

/// Debian's chromium, run headless.
#[derive(Clone)]
struct Chromium(PathBuf);

/// The browser, installed if missing (once per test binary). `None` after a loud message when it
/// is neither installed nor installable (not root, or no package repository reachable): the
/// browser tests are then skipped.
fn chromium() -> Option<Chromium> {
    static FOUND: OnceLock<Option<Chromium>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            find_chromium()
                .or_else(|| install_chromium().then(find_chromium).flatten())
                .map(Chromium)
        })
        .clone()
}

fn find_chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("chromium"))
        .find(|candidate| candidate.is_file())
}

/// `apt-get install -y chromium` as the issue asks; false (after saying why) if impossible.
fn install_chromium() -> bool {
    let skip = |why: &str| {
        eprintln!(
            "\n==================================================================\n\
             SKIPPING THE DASHBOARD BROWSER TESTS: chromium is not installed\n\
             and {why}. Install Debian's chromium (apt-get install chromium)\n\
             to run them.\n\
             ==================================================================\n"
        );
        false
    };
    common::apt_install("chromium", true).map_or_else(skip, |()| true)
}

/// The flags every run needs: headless, as root in a container, on a small /dev/shm, with a
/// fresh profile of its own.
fn headless(chromium: &Chromium, profile: &Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(&chromium.0);
    command
        .args(["--headless", "--no-sandbox", "--disable-gpu"])
        .args([
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .kill_on_drop(true);
    command
}

impl Chromium {
    /// The page's DOM after it has run for 5 s of virtual time (several polls).
    async fn dump_dom(&self, dir: &Path, url: &str) -> String {
        let mut command = headless(self, &dir.join("profile-dom"));
        command
            .args(["--virtual-time-budget=5000", "--dump-dom", url])
            .stdin(Stdio::null())
            .stderr(Stdio::null());
        let out = tokio::time::timeout(DEADLINE, command.output())
            .await
            .expect("chromium --dump-dom ended in time")
            .expect("chromium runs");
        assert!(
            out.status.success(),
            "chromium --dump-dom: {:?}",
            out.status
        );
        String::from_utf8(out.stdout).expect("a UTF-8 DOM")
    }

    /// A 1280×900 screenshot of the page after 5 s of virtual time.
    async fn screenshot(&self, dir: &Path, url: &str) -> PathBuf {
        let png = dir.join("dashboard.png");
        let mut command = headless(self, &dir.join("profile-screenshot"));
        command
            .arg("--virtual-time-budget=5000")
            .arg("--window-size=1280,900")
            .arg(format!("--screenshot={}", png.display()))
            .arg(url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let status = tokio::time::timeout(DEADLINE, command.status())
            .await
            .expect("chromium --screenshot ended in time")
            .expect("chromium runs");
        assert!(status.success(), "chromium --screenshot: {status:?}");
        png
    }
}

/// A page in a headless chromium, driven over the DevTools protocol (a WebSocket).
struct Browser {
    process: tokio::process::Child,
    socket: tungstenite::WebSocket<std::net::TcpStream>,
    session: String,
    next_id: u64,
    /// Exceptions the page threw and errors it logged (`Runtime` events).
    errors: Vec<String>,
}

impl Browser {
    async fn open(chromium: &Chromium, dir: &Path, url: &str) -> Self {
        let profile = dir.join("profile-cdp");
        let log = std::fs::File::create(dir.join("chromium.log")).unwrap();
        let process = headless(chromium, &profile)
            .args(["--remote-debugging-port=0", "--window-size=1280,900"])
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("chromium starts");
        // Chromium writes the port it picked and the browser's WebSocket path into the profile.
        let active_port = profile.join("DevToolsActivePort");
        let give_up = tokio::time::Instant::now() + DEADLINE;
        let (port, path) = loop {
            if let Ok(text) = std::fs::read_to_string(&active_port)
                && let Some((port, path)) = text.split_once('\n')
                && !path.trim().is_empty()
            {
                break (port.trim().to_owned(), path.trim().to_owned());
            }
            assert!(
                tokio::time::Instant::now() < give_up,
                "chromium never wrote {}",
                active_port.display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let stream = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
        stream.set_read_timeout(Some(DEADLINE)).unwrap();
        let (socket, _) = tungstenite::client(format!("ws://127.0.0.1:{port}{path}"), stream)
            .expect("the DevTools WebSocket");
        let mut browser = Self {
            process,
            socket,
            session: String::new(),
            next_id: 0,
            errors: Vec::new(),
        };
        let target = browser.call("Target.createTarget", json!({ "url": "about:blank" }));
        let target = target["targetId"].as_str().unwrap().to_owned();
        let attached = browser.call(
            "Target.attachToTarget",
            json!({ "targetId": target, "flatten": true }),
        );
        browser.session = attached["sessionId"].as_str().unwrap().to_owned();
        browser.call("Runtime.enable", json!({}));
        browser.call("Page.navigate", json!({ "url": url }));
        // Until the page has loaded, an evaluation may land in the document being replaced.
        let give_up = tokio::time::Instant::now() + DEADLINE;
        loop {
            let ready = browser.try_call(
                "Runtime.evaluate",
                json!({ "expression": "document.readyState", "returnByValue": true }),
            );
            if ready.is_ok_and(|ready| ready["result"]["value"] == "complete") {
                break;
            }
            assert!(tokio::time::Instant::now() < give_up, "{url} never loaded");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        browser
    }

    /// One DevTools command (on the page once attached); its result.
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.try_call(method, params)
            .unwrap_or_else(|error| panic!("{method}: {error}"))
    }

    /// One DevTools command; its result or the protocol's error. Events read meanwhile are kept
    /// when they are errors of the page, dropped otherwise.
    fn try_call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        self.next_id += 1;
        let id = self.next_id;
        let mut command = json!({ "id": id, "method": method, "params": params });
        if !self.session.is_empty() {
            command["sessionId"] = json!(self.session);
        }
        self.socket
            .send(tungstenite::Message::Text(command.to_string().into()))
            .expect("sending to chromium");
        loop {
            let message = self.socket.read().expect("chromium answers");
            let tungstenite::Message::Text(text) = message else {
                continue;
            };
            let message: Value = serde_json::from_str(text.as_str()).unwrap();
            match message["method"].as_str() {
                Some("Runtime.exceptionThrown") => {
                    self.errors
                        .push(message["params"]["exceptionDetails"].to_string());
                }
                Some("Runtime.consoleAPICalled") if message["params"]["type"] == "error" => {
                    self.errors.push(message["params"]["args"].to_string());
                }
                _ => {}
            }
            if message["id"] == id {
                return match message.get("error") {
                    Some(error) => Err(error.clone()),
                    None => Ok(message["result"].clone()),
                };
            }
        }
    }

    /// Evaluates `script` in the page, awaiting a promise; its value. A thrown error fails the
    /// test with the page's message.
    fn eval(&mut self, script: &str) -> Value {
        let result = self.call(
            "Runtime.evaluate",
            json!({ "expression": script, "awaitPromise": true, "returnByValue": true }),
        );
        if let Some(details) = result.get("exceptionDetails") {
            let description = &details["exception"]["description"];
            panic!("the page script failed: {description}\n{details:#}");
        }
        result["result"]["value"].clone()
    }

    /// Closes the browser; the errors the page reported while it was open.
    async fn close(mut self) -> Vec<String> {
        self.session.clear();
        let _ = self.socket.send(tungstenite::Message::Text(
            json!({ "id": 0, "method": "Browser.close" })
                .to_string()
                .into(),
        ));
        let _ = tokio::time::timeout(DEADLINE, self.process.wait()).await;
        self.errors
    }
}

// ---------------------------------------------------------------------------------------------
// Reading the results

/// The text from `start` to the end of the first `end` after it.
fn element<'a>(html: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = html.find(start)?;
    let to = from + html[from..].find(end)? + end.len();
    Some(&html[from..to])
}

/// Width and height from a PNG's header, if it is one.
fn png_size(bytes: &[u8]) -> Option<(u32, u32)> {
    let signature = b"\x89PNG\r\n\x1a\n";
    if bytes.len() < 24 || &bytes[..8] != signature || &bytes[12..16] != b"IHDR" {
        return None;
    }
    let number = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    Some((number(16), number(20)))
}
