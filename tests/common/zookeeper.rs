//! A real standalone ZooKeeper for the high-availability tests: Debian's `zookeeper` package
//! (3.8, on the machine's Java), installed with `apt-get` when missing as the dashboard test
//! installs chromium; without Java or the package the tests say loudly why they skip.
//!
//! Each [`ZooKeeper`] runs `ZooKeeperServerMain` on a free loopback port with its data in a
//! scratch directory, serves clients (`srvr` names its mode) before [`ZooKeeper::start`]
//! returns, and is killed when dropped. `tickTime` is 500 ms so sessions as short as 1 s can be
//! negotiated (ZooKeeper's minimum session timeout is two ticks).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Where Debian's package puts the server (its manifest names every other jar it needs).
const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";

/// How long a server may take to start serving (a JVM start on two busy cores).
const START_DEADLINE: Duration = Duration::from_secs(60);

/// A running standalone ZooKeeper server; killed when dropped.
pub struct ZooKeeper {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

/// Whether ZooKeeper can run here: Java and the package, installing the package if needed.
/// Prints a loud banner and returns false when it cannot.
pub fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let java = Command::new("java")
            .arg("-version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !java {
            return skip("there is no Java runtime (install Debian's default-jre-headless)");
        }
        Path::new(ZOOKEEPER_JAR).is_file() || install_zookeeper()
    })
}

fn skip(why: &str) -> bool {
    eprintln!(
        "\n==================================================================\n\
         SKIPPING THE HIGH-AVAILABILITY TESTS: ZooKeeper cannot run here:\n\
         {why}. Install Debian's zookeeper package (apt-get install\n\
         zookeeper) and a Java runtime to run them.\n\
         ==================================================================\n"
    );
    false
}

/// `apt-get install -y zookeeper`; false (after saying why) if impossible.
fn install_zookeeper() -> bool {
    if let Err(why) = super::apt_install("zookeeper", false) {
        return skip(why);
    }
    Path::new(ZOOKEEPER_JAR).is_file() || skip("the package installed no zookeeper.jar")
}

/// A port free right now on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl ZooKeeper {
    /// Starts a server with its data under `dir`, or `None` (after the banner) when ZooKeeper
    /// cannot run here.
    pub fn start(dir: &Path) -> Option<Self> {
        if !available() {
            return None;
        }
        let mut zk = Self {
            child: None,
            port: free_port(),
            dir: dir.to_owned(),
        };
        zk.run();
        Some(zk)
    }

    /// `127.0.0.1:PORT`, for `high-availability.zookeeper.quorum`.
    pub fn quorum(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Kills the server (as a crash would: sessions are not closed).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and data: the sessions it had are still there until
    /// they time out.
    pub fn restart(&mut self) {
        self.stop();
        self.run();
    }

    #[allow(clippy::disallowed_methods)] // a test waits for a real process in real time
    fn run(&mut self) {
        let data = self.dir.join("data");
        std::fs::create_dir_all(&data).expect("ZooKeeper's data directory");
        let config = self.dir.join("zoo.cfg");
        std::fs::write(
            &config,
            format!(
                "tickTime=500\ndataDir={}\nclientPort={}\nclientPortAddress=127.0.0.1\n\
                 maxSessionTimeout=60000\nadmin.enableServer=false\n\
                 4lw.commands.whitelist=ruok,srvr\n",
                data.display(),
                self.port
            ),
        )
        .expect("zoo.cfg");
        let log = std::fs::File::create(self.dir.join("zookeeper.log")).expect("its log");
        let child = Command::new("java")
            .args(["-Xmx128m", "-cp", ZOOKEEPER_JAR])
            .arg("-Dzookeeper.admin.enableServer=false")
            .arg("org.apache.zookeeper.server.ZooKeeperServerMain")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("its log"))
            .stderr(log)
            .spawn()
            .expect("java starts ZooKeeper");
        self.child = Some(child);
        let give_up = Instant::now() + START_DEADLINE;
        while !self.is_serving() {
            assert!(
                Instant::now() < give_up,
                "ZooKeeper did not serve on port {} within {START_DEADLINE:?}; see {}",
                self.port,
                self.dir.join("zookeeper.log").display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether the server serves clients: `srvr` names its mode (before that it answers "This
    /// ZooKeeper instance is not currently serving requests", while `ruok` may say `imok`
    /// already and sessions are refused).
    pub fn is_serving(&self) -> bool {
        self.four_letters(b"srvr").contains("Mode:")
    }

    /// The answer to a four-letter command ("" if none).
    fn four_letters(&self, command: &[u8]) -> String {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return String::new();
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        if stream.write_all(command).is_err() {
            return String::new();
        }
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer
    }
}

impl Drop for ZooKeeper {
    fn drop(&mut self) {
        self.stop();
    }
}
