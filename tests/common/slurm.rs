//! A real one-node Slurm for the tests of the Slurm driver: Debian 12's Slurm 22.05
//! (`slurmctld`, `slurmd`, `munge`, `slurm-client`), installed with `apt-get` when missing as
//! zookeeper.rs installs ZooKeeper; when it cannot run here the tests say loudly why they skip.
//!
//! Everything of one [`Slurm`] lives under its directory: a munge key and a `munged` on a
//! socket there (`AuthInfo=socket=…`: no system munged or /etc/munge is involved), the
//! `slurm.conf`, state and spool directories, pid files and logs. Its ClusterName, NodeName and
//! ports are its own, so several run at once (the tests of one binary run in parallel). Its one
//! node has the machine's CPUs and memory (`slurmd -C`), `DefMemPerCPU` its share of the
//! memory per CPU (a job without `--mem` does not take the whole node). Its partition shares
//! cores among up to four jobs (`OverSubscribe=FORCE:4`): three one-CPU workers fit a two-core
//! machine, as TaskManager threads share cores, while a job asking for more CPUs than the node
//! has stays PENDING (`PartitionConfig`) for ever. No cgroups
//! (proctrack/linuxproc, task/none), no accounting (no slurmdbd: `sacct` does not work; `squeue
//! -t all` shows an ended job for `MinJobAge` = 5 s, or a few seconds longer).
//!
//! [`Slurm::start`] returns once the node is idle and a trivial batch job has completed;
//! dropping it cancels the jobs, stops the daemons and kills any stray `slurmstepd` or job
//! process.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How long the daemons may take to bring the node up and run a first job.
const START_DEADLINE: Duration = Duration::from_secs(60);

/// How long jobs and daemons may take to end once cancelled or sent SIGTERM.
const STOP_DEADLINE: Duration = Duration::from_secs(10);

const POLL: Duration = Duration::from_millis(50);

/// Debian's packages, and the programs of each that the harness and its tests run.
const PACKAGES: [(&str, &str); 4] = [
    ("slurmctld", "slurmctld"),
    ("slurmd", "slurmd"),
    ("munge", "munged"),
    ("slurm-client", "sbatch squeue scancel sinfo scontrol"),
];

/// The states of a job that has ended (`squeue -t all` shows them for `MinJobAge`, 5 s, to
/// about 15 s: the controller purges old jobs every 10 s).
pub const ENDED: &str =
    "BOOT_FAIL CANCELLED COMPLETED DEADLINE FAILED NODE_FAIL OUT_OF_MEMORY PREEMPTED TIMEOUT";

/// Whether Slurm can run here: root, and the packages, installing the missing ones. Prints a
/// loud banner and returns false when it cannot.
pub fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return skip("this test is not running as root (slurmd and its job steps need root)");
        }
        let missing = || -> Vec<&str> {
            let installed = |programs: &str| programs.split(' ').all(|p| program(p).is_some());
            let missing = PACKAGES.iter().filter(|(_, programs)| !installed(programs));
            missing.map(|(package, _)| *package).collect()
        };
        for package in missing() {
            if let Err(why) = super::apt_install(package, false) {
                return skip(why);
            }
        }
        match missing().first() {
            None => true,
            Some(package) => skip(&format!("Debian's {package} did not install its programs")),
        }
    })
}

fn skip(why: &str) -> bool {
    eprintln!(
        "\n==================================================================\n\
         SKIPPING THE SLURM TESTS: Slurm cannot run here:\n\
         {why}. Install Debian's slurmctld, slurmd, munge and\n\
         slurm-client packages (apt-get install ...) as root to run them.\n\
         ==================================================================\n"
    );
    false
}

/// Where `name` is: on the PATH, or in /usr/sbin and /sbin (the daemons).
fn program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}

/// A running one-node Slurm cluster; stopped when dropped.
pub struct Slurm {
    /// Its ClusterName (`SLURM_CLUSTER_NAME` in its jobs), unique to it.
    pub cluster: String,
    /// Its node's NodeName (`SLURMD_NODENAME` in its jobs), unique to it.
    pub node: String,
    dir: PathBuf,
    conf: PathBuf,
    cpus: u32,
    memory_mb: u64,
    /// munged, slurmctld and slurmd, each the leader of its own process group.
    daemons: Vec<(&'static str, Child)>,
}

impl Slurm {
    /// Starts a cluster with everything under `dir` (created if missing), or `None` (after the
    /// banner) when Slurm cannot run here. Returns once the node is idle and a first batch job
    /// has completed; panics, naming the logs, when that takes longer than a minute.
    #[allow(clippy::disallowed_methods)] // a test waits for real daemons in real time
    pub fn start(dir: &Path) -> Option<Self> {
        if !available() {
            return None;
        }
        let began = Instant::now();
        static INSTANCES: AtomicU32 = AtomicU32::new(0);
        let n = INSTANCES.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}x{n}", std::process::id());
        for sub in ["state", "spool", "jobs"] {
            std::fs::create_dir_all(dir.join(sub)).expect("Slurm's directories");
        }
        let (hardware, cpus, memory_mb) = hardware();
        let mut slurm = Self {
            dir: dir.to_owned(),
            conf: dir.join("slurm.conf"),
            cluster: format!("flint{id}"),
            node: format!("node{id}"),
            cpus,
            memory_mb,
            daemons: Vec::new(),
        };
        slurm.start_munged();
        slurm.write_conf(&hardware);
        let conf = slurm.conf.display().to_string();
        let node = slurm.node.clone();
        slurm.spawn("slurmctld", &["-D", "-i", "-f", &conf]);
        slurm.spawn("slurmd", &["-D", "-N", &node, "-f", &conf]);
        slurm.wait_until("an idle node", || {
            let mut sinfo = slurm.command("sinfo");
            let out = sinfo.args(["-h", "-n", &node, "-o", "%T"]).output();
            out.is_ok_and(|out| out.stdout == b"idle\n")
        });
        let probe = slurm.sbatch(&["--output=/dev/null", "--wrap=true"]);
        let state = slurm.wait_for_job(probe, START_DEADLINE);
        assert!(
            matches!(state.as_deref(), Some("COMPLETED") | None),
            "the first job ended {state:?}; see {}",
            slurm.dir.display()
        );
        eprintln!(
            "Slurm {} ({cpus} CPUs, {memory_mb} MB) started in {:.1?} in {}",
            slurm.cluster,
            began.elapsed(),
            slurm.dir.display()
        );
        Some(slurm)
    }

    /// Its `slurm.conf`.
    pub fn conf(&self) -> &Path {
        &self.conf
    }

    pub fn node_cpus(&self) -> u32 {
        self.cpus
    }

    pub fn node_memory_mb(&self) -> u64 {
        self.memory_mb
    }

    /// The environment of a command that talks to this cluster: `SLURM_CONF`, and
    /// `SBATCH_OUTPUT` so a job submitted without `--output` writes `slurm-ID.out` in its
    /// `jobs` directory, not in the submitter's working directory.
    pub fn env(&self) -> Vec<(String, String)> {
        let output = self.dir.join("jobs").join("slurm-%j.out");
        vec![
            ("SLURM_CONF".to_owned(), self.conf.display().to_string()),
            ("SBATCH_OUTPUT".to_owned(), output.display().to_string()),
        ]
    }

    /// `program` (sbatch, squeue, scancel, scontrol, sinfo, ...) with [`env`](Self::env).
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command.envs(self.env()).stdin(Stdio::null());
        command
    }

    /// `sbatch --parsable ARGS`: the job's id; panics when sbatch refuses the job.
    pub fn sbatch(&self, args: &[&str]) -> u32 {
        let sbatch = self.command("sbatch").arg("--parsable").args(args).output();
        let out = sbatch.expect("sbatch runs");
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), &out.stderr);
        let id = stdout
            .split([';', '\n'])
            .next()
            .and_then(|id| id.parse().ok());
        let id = id.filter(|_| out.status.success());
        id.unwrap_or_else(|| panic!("sbatch {args:?}: {}", String::from_utf8_lossy(stderr)))
    }

    /// Every job it knows, ended ones included: `ID NAME STATE REASON` lines.
    pub fn squeue(&self) -> String {
        self.try_squeue(&["-a", "-t", "all", "-o", "%i %j %T %r"])
            .expect("squeue answers")
    }

    /// The state of job `id` (`PENDING`, `RUNNING`, `COMPLETED`, ...), `None` once it has
    /// left squeue.
    pub fn job_state(&self, id: u32) -> Option<String> {
        let squeue = self.try_squeue(&["-a", "-t", "all", "-o", "%i %T"]);
        let squeue = squeue.expect("squeue answers");
        let mut jobs = squeue.lines().filter_map(|line| line.split_once(' '));
        let (_, state) = jobs.find(|(job, _)| *job == id.to_string())?;
        Some(state.to_owned())
    }

    /// Waits until job `id` has ended (its state is in [`ENDED`]): that state, or `None` if it
    /// left squeue first. Panics after `timeout`.
    pub fn wait_for_job(&self, id: u32, timeout: Duration) -> Option<String> {
        let mut state = None;
        let ended = poll(timeout, || {
            state = self.job_state(id);
            let ended = |state: &String| ENDED.split(' ').any(|s| s == state);
            state.as_ref().is_none_or(ended)
        });
        assert!(
            ended,
            "job {id} is still {state:?} after {timeout:?}:\n{}",
            self.squeue()
        );
        state
    }

    /// `squeue -h ARGS`'s output, `None` if it fails.
    fn try_squeue(&self, args: &[&str]) -> Option<String> {
        let out = self.command("squeue").arg("-h").args(args).output().ok()?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        out.status.success().then_some(stdout)
    }

    /// Cancels every job, stops the daemons (SIGTERM, SIGKILL after [`STOP_DEADLINE`]) and
    /// kills what is left of its jobs. Dropping it does this too. Never panics.
    pub fn stop(&mut self) {
        if self.daemons.is_empty() {
            return;
        }
        let slurmctld = self.daemons.iter().find(|(name, _)| *name == "slurmctld");
        if slurmctld.is_some_and(|(_, child)| !exited(child)) {
            let active = || self.try_squeue(&["-a", "-o", "%i"]).unwrap_or_default();
            let ids = active();
            if !ids.trim().is_empty() {
                let mut scancel = self.command("scancel");
                let _ = scancel.args(ids.split_whitespace()).output();
                poll(STOP_DEADLINE, || active().trim().is_empty());
            }
        }
        for (_, child) in &mut self.daemons {
            signal_group(child, libc::SIGTERM);
        }
        poll(STOP_DEADLINE, || {
            self.daemons.iter().all(|(_, child)| exited(child))
        });
        for (_, mut child) in self.daemons.drain(..) {
            signal_group(&mut child, libc::SIGKILL);
            let _ = child.wait();
        }
        poll(STOP_DEADLINE, || {
            let strays = self.strays();
            for &pid in &strays {
                // SAFETY: kill has no memory preconditions; a process gone since fails it.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            strays.is_empty()
        });
    }

    /// `slurmstepd`s with a file of this cluster open, and processes of its jobs (with its
    /// `SLURM_CLUSTER_NAME` and a `SLURM_JOB_ID`): what `slurmd` leaves behind when killed.
    fn strays(&self) -> Vec<i32> {
        let cluster = format!("SLURM_CLUSTER_NAME={}", self.cluster);
        let ours = |proc: &Path| {
            let environ = std::fs::read(proc.join("environ")).unwrap_or_default();
            let mut vars = environ.split(|byte| *byte == 0);
            let job = vars.clone().any(|var| var == cluster.as_bytes())
                && vars.any(|var| var.starts_with(b"SLURM_JOB_ID="));
            let comm = std::fs::read_to_string(proc.join("comm")).unwrap_or_default();
            let stepd = comm.starts_with("slurmstepd")
                && std::fs::read_dir(proc.join("fd")).is_ok_and(|fds| {
                    fds.flatten().any(|fd| {
                        std::fs::read_link(fd.path()).is_ok_and(|file| file.starts_with(&self.dir))
                    })
                });
            job || stepd
        };
        let me = std::process::id() as i32;
        let entries = std::fs::read_dir("/proc").into_iter().flatten().flatten();
        entries
            .filter_map(|entry| Some((entry.file_name().to_str()?.parse().ok()?, entry.path())))
            .filter(|(pid, proc)| *pid != me && ours(proc))
            .map(|(pid, _)| pid)
            .collect()
    }

    /// A fresh munge key and `munged` on `DIR/munge.socket`; returns once the socket exists.
    fn start_munged(&mut self) {
        let mut key = Vec::new();
        std::fs::File::open("/dev/urandom")
            .and_then(|random| random.take(1024).read_to_end(&mut key))
            .expect("random bytes for the munge key");
        let key_file = self.dir.join("munge.key");
        let _ = std::fs::remove_file(&key_file);
        std::fs::write(&key_file, key).expect("the munge key");
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o400))
            .expect("the munge key's mode");
        let socket = self.dir.join("munge.socket");
        let path = |name: &str| format!("{}", self.dir.join(name).display());
        let args = [
            "--foreground".to_owned(),
            "--force".to_owned(),
            format!("--socket={}", socket.display()),
            format!("--key-file={}", key_file.display()),
            format!("--pid-file={}", path("munged.pid")),
            format!("--log-file={}", path("munged.log")),
            format!("--seed-file={}", path("munged.seed")),
        ];
        self.spawn("munged", &args);
        self.wait_until("munge socket", || socket.exists());
    }

    fn write_conf(&self, hardware: &str) {
        let dir = self.dir.display();
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
        let hostname = hostname.trim().split('.').next().unwrap_or_default();
        let ctld_port = super::zookeeper::free_port();
        let slurmd_port = std::iter::repeat_with(super::zookeeper::free_port)
            .find(|port| *port != ctld_port)
            .expect("a second free port");
        let conf = format!(
            "ClusterName={cluster}\n\
             SlurmctldHost={hostname}(127.0.0.1)\n\
             SlurmctldPort={ctld_port}\nSlurmdPort={slurmd_port}\n\
             AuthType=auth/munge\nAuthInfo=socket={dir}/munge.socket\nCredType=cred/munge\n\
             SlurmUser=root\nSlurmdUser=root\n\
             StateSaveLocation={dir}/state\nSlurmdSpoolDir={dir}/spool\n\
             SlurmctldPidFile={dir}/slurmctld.pid\nSlurmdPidFile={dir}/slurmd.pid\n\
             SlurmctldLogFile={dir}/slurmctld.log\nSlurmdLogFile={dir}/slurmd.log\n\
             SlurmctldDebug=info\nSlurmdDebug=info\n\
             SelectType=select/cons_tres\nSelectTypeParameters=CR_Core_Memory\n\
             DefMemPerCPU={mem_per_cpu}\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n\
             JobCompType=jobcomp/none\nMpiDefault=none\nMailProg=/bin/true\n\
             ReturnToService=2\nSlurmctldTimeout=10\nSlurmdTimeout=10\n\
             MinJobAge=5\nKillWait=2\nInactiveLimit=0\n\
             SchedulerType=sched/backfill\nSchedulerParameters=batch_sched_delay=0\n\
             NodeName={node} NodeHostname={hostname} NodeAddr=127.0.0.1 {hardware} State=UNKNOWN\n\
             PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE OverSubscribe=FORCE:4 State=UP\n",
            cluster = self.cluster,
            node = self.node,
            mem_per_cpu = self.memory_mb / u64::from(self.cpus.max(1)),
        );
        std::fs::write(&self.conf, conf).expect("slurm.conf");
    }

    /// Spawns daemon `name` in its own process group, its output in `DIR/NAME.out`.
    fn spawn(&mut self, name: &'static str, args: &[impl AsRef<std::ffi::OsStr>]) {
        let out = std::fs::File::create(self.dir.join(format!("{name}.out"))).expect("its log");
        let child = Command::new(program(name).expect("an installed daemon"))
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("its log"))
            .stderr(out)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("{name} does not start: {e}"));
        self.daemons.push((name, child));
    }

    /// Polls `ready` until it holds; panics, naming the logs, if a daemon exits or
    /// [`START_DEADLINE`] passes first.
    fn wait_until(&self, what: &str, mut ready: impl FnMut() -> bool) {
        let mut died = None;
        let ready = poll(START_DEADLINE, || {
            died = self.daemons.iter().find(|(_, child)| exited(child));
            died.is_some() || ready()
        });
        let logs = self.dir.display();
        if let Some((name, _)) = died {
            panic!("Slurm: {name} exited awaiting {what}; see {name}.out and the logs in {logs}");
        }
        assert!(
            ready,
            "Slurm: no {what} in {START_DEADLINE:?}; see the logs in {logs}"
        );
    }
}

/// Polls `ready` every [`POLL`] until it holds (true) or `timeout` passes (false).
#[allow(clippy::disallowed_methods)] // a test waits for real processes in real time
fn poll(timeout: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let give_up = Instant::now() + timeout;
    loop {
        if ready() {
            return true;
        }
        if Instant::now() >= give_up {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

/// Whether `child` has exited (a zombie, or reaped), without reaping it.
fn exited(child: &Child) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id()));
    // The state follows the command name, which is in parentheses.
    stat.map_or(true, |stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with(['Z', 'X']))
    })
}

/// Sends `signal` to the process group of `child` if it has not been reaped (its pid is then
/// still its own).
fn signal_group(child: &mut Child, signal: i32) {
    if matches!(child.try_wait(), Ok(None)) {
        // SAFETY: kill has no memory preconditions; the group exists while its leader does.
        unsafe { libc::kill(-(child.id() as i32), signal) };
    }
}

/// The node's hardware from `slurmd -C` (`CPUs=2 Boards=1 ... RealMemory=24105`), its CPUs
/// and its memory in MB.
fn hardware() -> (String, u32, u64) {
    let slurmd = Command::new(program("slurmd").expect("slurmd"))
        .arg("-C")
        .output();
    let out = String::from_utf8_lossy(&slurmd.expect("slurmd -C runs").stdout).into_owned();
    let line = out.lines().next().unwrap_or_default();
    let fields: Vec<&str> = line
        .split(' ')
        .filter(|f| !f.starts_with("NodeName="))
        .collect();
    let value = |key: &str| {
        fields
            .iter()
            .find_map(|f| f.strip_prefix(key)?.parse().ok())
    };
    match (value("CPUs="), value("RealMemory=")) {
        (Some(cpus), Some(memory)) => (fields.join(" "), cpus as u32, memory),
        _ => panic!("slurmd -C printed no CPUs and RealMemory: {line:?}"),
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        self.stop();
    }
}
