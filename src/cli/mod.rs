//! The `flint` command line, as a library: [`main`] is the whole `flint` binary, and a user's
//! own binary that calls it with its [`Programs`] is a Flint binary too — every `flint`
//! subcommand (`jobmanager`, `taskmanager`, `run`, `list`, ...) with the programs' operators
//! registered beside the built-ins, and each program runnable by name:
//!
//! ```text
//!  mybin PROGRAM [ARGS...] [--jobmanager URL]   run a program: on an embedded cluster, or on
//!                                              the cluster at URL (its jobs submitted there)
//!  mybin jobmanager ... / taskmanager ...       a cluster that can run mybin's programs
//! ```
//!
//! The `local_process` and `command` drivers start the same executable, so a cluster started
//! from a program's binary runs its programs on every TaskManager. This module parses
//! arguments, sets up logging and calls into the library; it is the only place besides the
//! binaries that uses `anyhow` (the binary's edge, here so user binaries share it).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::ClusterConfig;
use crate::api::{Env, Executor, Program, Programs};
use crate::base::error_chain::ErrorChain;
use crate::base::ids::ResourceId;
use crate::client::{Client, ClientError, Interrupt, OutputFormat, SubmitOptions};
use crate::config::{ConfigSources, FlagOverride, LoadedConfig};
use crate::operators::OperatorRegistry;
use crate::process::run::{RunError, RunOptions};
use anyhow::Context as _;
use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use indicatif::ProgressDrawTarget;

/// The exit codes, as `crate::process::run` and `crate::client::exit` document them (`--help` of `flint`
/// and of every command).
macro_rules! exit_codes {
    () => {
        "Exit codes:
  0    success (run: the job FINISHED)
  1    run: the job FAILED or was CANCELED
  2    usage, configuration or job file error, or a request the JobManager refused as invalid
       (nothing changed)
  3    cluster error (a server error or no answer in time; run --embedded: the job did not end
       within --timeout)
  4    the JobManager could not be reached
  5    the JobManager refused the token (set FLINT_REST_TOKEN or rest.token-file), or
       redirected to another JobManager (the token is not sent there)
  6    no such job
  7    conflict: the job already ended, or the cluster is stopping
  130  interrupted (Ctrl-C) while run waited; the job keeps running"
    };
}

/// Where the client commands find the JobManager (`--help` of each).
macro_rules! finding_the_jobmanager {
    () => {
        "The JobManager's REST address comes from --jobmanager, else FLINT_JOBMANAGER, else
rest.address and rest.port of --config FILE (or FLINT_CONFIG), else 127.0.0.1:8081. Requests
send the token from FLINT_REST_TOKEN, else rest.token or rest.token-file, else (for a
JobManager on this machine) the one a `flint jobmanager` of this user generated in
~/.local/state/flint/rest-token. The token is never sent to another origin: a standby's
redirect to its leader stops the command, naming the leader."
    };
}

/// `--help` text after a command's options: its example, where the JobManager is, exit codes.
macro_rules! client_help {
    ($example:literal) => {
        concat!(
            "Example:\n",
            $example,
            "\n\n",
            finding_the_jobmanager!(),
            "\n\n",
            exit_codes!()
        )
    };
}

const RUN_HELP: &str = concat!(
    "Examples:
  flint run examples/wordcount.toml --param input=/data/in.txt --param output=/data/counts
  JOB=$(flint run --detach examples/wordcount.toml --param input=in.txt --param output=out)
  flint run --embedded examples/wordcount.toml \\
      --param input=README.md --param output=/tmp/wordcount

Without --embedded the job file is read and checked here, submitted to the JobManager's REST API
and followed with a progress bar per vertex (on stderr, when it is a terminal); Ctrl-C stops
waiting and leaves the job running. --detach prints the job id and returns at once.

",
    finding_the_jobmanager!(),
    "

",
    exit_codes!(),
    "

Log messages go to stderr; RUST_LOG=info (or debug) shows more."
);

/// A Flink-style cluster runtime.
#[derive(Debug, Parser)]
#[command(name = "flint", version, arg_required_else_help = true, after_help = exit_codes!())]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a job file on a running cluster (or in this process: --embedded) and wait for it.
    Run(RunArgs),
    /// List the cluster's jobs, oldest first.
    #[command(after_help = client_help!("  flint list --jobmanager http://10.0.0.5:8081"))]
    List(ClientArgs),
    /// Show one job: its state, timings, vertices and subtasks.
    #[command(after_help = client_help!(
        "  flint status 3f2a0c1e-9b7d-4e21-8c55-0d1e2f3a4b5c --output json"
    ))]
    Status(JobArgs),
    /// Cancel a job (it ends CANCELED; `flint status` shows when).
    #[command(after_help = client_help!("  flint cancel 3f2a0c1e-9b7d-4e21-8c55-0d1e2f3a4b5c"))]
    Cancel(JobArgs),
    /// List the registered TaskManagers with their slots and tasks.
    #[command(after_help = client_help!("  FLINT_JOBMANAGER=10.0.0.5:8081 flint taskmanagers"))]
    Taskmanagers(ClientArgs),
    /// Show the worker pool (designated, started, pending), or set its designated size.
    #[command(after_help = client_help!(
        "  flint pool-size        # show\n  flint pool-size 5      # keep 5 TaskManagers"
    ))]
    PoolSize(PoolSizeArgs),
    /// List the artifacts the JobManager stores (uploaded with `flint run --artifact`).
    #[command(after_help = client_help!("  flint artifacts --output json"))]
    Artifacts(ClientArgs),
    /// Stop the cluster: release every TaskManager and stop the JobManager.
    #[command(after_help = client_help!("  flint stop --config /etc/flint/flint.toml"))]
    Stop(ClientArgs),
    /// Run the JobManager and its resource manager (which starts TaskManager processes).
    ///
    /// Example: FLINT_SECRET=... flint jobmanager --bind 0.0.0.0:6123 --pool-size 3
    Jobmanager(JobManagerArgs),
    /// Run one TaskManager that registers at a JobManager.
    ///
    /// Example: FLINT_SECRET=... flint taskmanager --jobmanager 10.0.0.5:6123 --slots 4
    Taskmanager(TaskManagerArgs),
    /// Print the effective configuration: every key, its value and where the value came from.
    ///
    /// Sources, later wins: defaults < --config FILE (else FLINT_CONFIG) < FLINT_<KEY> variables
    /// (e.g. FLINT_HEARTBEAT_INTERVAL=5s) < flags (--slots, --pool-size, -D KEY=VALUE).
    ///
    /// Example: FLINT_HEARTBEAT_INTERVAL=5s flint config --show --config flint.toml --slots 4
    Config(ConfigCommandArgs),
}

/// Where the configuration comes from (every command that needs one).
#[derive(Debug, Args)]
struct ConfigArgs {
    /// A cluster configuration file (TOML; flint.toml documents every key) [default: the file
    /// the FLINT_CONFIG variable names, else none]. FLINT_<KEY> variables and flags override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,

    /// Set a configuration key, as Flink's -D (repeatable), e.g. -D heartbeat.interval=5s.
    #[arg(short = 'D', value_name = "KEY=VALUE", value_parser = parse_define)]
    define: Vec<(String, String)>,

    /// Ignore the FLINT_<KEY> variables (and FLINT_CONFIG): --config and the flags are the whole
    /// configuration. The JobManager starts its TaskManager children so.
    #[arg(long)]
    ignore_env: bool,
}

/// `-D KEY=VALUE`.
fn parse_define(arg: &str) -> Result<(String, String), String> {
    match arg.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_owned(), value.to_owned()))
        }
        _ => Err(format!(
            "`{arg}` is not KEY=VALUE, e.g. heartbeat.interval=5s"
        )),
    }
}

impl ConfigArgs {
    /// The process's environment, unless ignored (the only place it is read for configuration).
    fn env(&self) -> Vec<(String, String)> {
        if self.ignore_env {
            return Vec::new();
        }
        std::env::vars_os()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.to_string_lossy().into_owned(),
                )
            })
            .collect()
    }

    /// The -D flags.
    fn overrides(&self) -> Vec<FlagOverride> {
        self.define
            .iter()
            .map(|(key, value)| FlagOverride::new(key, value, "-D"))
            .collect()
    }

    /// Loads the configuration with `flags` after the -D ones; warns of what the environment
    /// had that is not configuration.
    fn load(&self, flags: Vec<FlagOverride>) -> anyhow::Result<LoadedConfig> {
        let mut all = self.overrides();
        all.extend(flags);
        let sources = ConfigSources {
            file: self.config.clone(),
            env: self.env(),
            flags: all,
        };
        // Printed whatever RUST_LOG says, and before an error it may explain: a mistyped
        // variable must not go unnoticed.
        for warning in sources.warnings() {
            eprintln!("flint: warning: {warning}");
        }
        Ok(sources.load()?)
    }
}

/// The flags that set a key.
fn key_flags(slots: Option<&String>, pool_size: Option<&String>) -> Vec<FlagOverride> {
    let slots = slots.map(|v| FlagOverride::new("taskmanager.slots", v, "--slots"));
    let pool = pool_size.map(|v| FlagOverride::new("resourcemanager.pool-size", v, "--pool-size"));
    slots.into_iter().chain(pool).collect()
}

#[derive(Debug, Args)]
struct ConfigCommandArgs {
    /// Print every key as `key = value  # origin`: itself a valid configuration file (secrets
    /// show as "***").
    #[arg(long, required = true)]
    show: bool,

    /// Slots per TaskManager (taskmanager.slots), as the processes take it.
    #[arg(long, value_name = "S")]
    slots: Option<String>,

    /// TaskManagers to keep running (resourcemanager.pool-size), as `flint jobmanager` takes it.
    #[arg(long, value_name = "N")]
    pool_size: Option<String>,

    #[command(flatten)]
    source: ConfigArgs,
}

/// Options both processes share.
#[derive(Debug, Args)]
struct NodeArgs {
    #[command(flatten)]
    source: ConfigArgs,

    /// Slots per TaskManager (taskmanager.slots) [default: the configuration's, else 1].
    #[arg(long, value_name = "S")]
    slots: Option<String>,

    /// Read the cluster secret from this file [default: the FLINT_SECRET variable, else the
    /// secret a JobManager of this user generated in ~/.local/state/flint/cluster-secret].
    #[arg(long, value_name = "FILE")]
    secret_file: Option<PathBuf>,

    /// Run without any secret: anyone who can connect can join the cluster.
    #[arg(long)]
    insecure: bool,

    /// The host name or address others reach this node at (needed with a wildcard --bind such
    /// as 0.0.0.0).
    #[arg(long, value_name = "HOST")]
    advertise: Option<String>,
}

/// How `--output` prints answers.
#[derive(Debug, Clone, Copy, Default, ValueEnum)]
enum Output {
    /// Aligned tables, for people.
    #[default]
    Table,
    /// The REST API's JSON answer as is, for scripts.
    Json,
}

impl From<Output> for OutputFormat {
    fn from(output: Output) -> Self {
        match output {
            Output::Table => OutputFormat::Table,
            Output::Json => OutputFormat::Json,
        }
    }
}

/// Options every client command shares.
#[derive(Debug, Args)]
struct ClientArgs {
    /// The JobManager's REST address: http://HOST:PORT, or HOST:PORT.
    #[arg(long, value_name = "URL")]
    jobmanager: Option<String>,

    /// A configuration file to take rest.address, rest.port and rest.token from [default: the
    /// FLINT_CONFIG variable].
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,

    /// How to print the answer.
    #[arg(long, value_enum, default_value_t = Output::Table)]
    output: Output,
}

impl ClientArgs {
    fn client(&self) -> Result<Client, ClientError> {
        Client::from_environment(
            self.jobmanager.as_deref(),
            self.config.as_deref(),
            self.output.into(),
        )
    }
}

#[derive(Debug, Args)]
struct JobArgs {
    /// The job's id (as `flint list` shows it).
    job_id: String,

    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, Args)]
struct PoolSizeArgs {
    /// The designated pool size to set [default: show the pool].
    #[arg(value_name = "N", value_parser = parse_pool_size, allow_negative_numbers = true)]
    size: Option<u32>,

    #[command(flatten)]
    client: ClientArgs,
}

/// A pool size: a whole number, 0 or more (the JobManager checks the maximum).
fn parse_pool_size(text: &str) -> Result<u32, String> {
    text.parse().map_err(|_| {
        format!("the pool size is a whole number of TaskManagers, 0 or more, not `{text}`")
    })
}

#[derive(Debug, Args)]
struct JobManagerArgs {
    /// Where to listen.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:6123")]
    bind: SocketAddr,

    /// TaskManagers to keep running (resourcemanager.pool-size) [default: the configuration's,
    /// else 1].
    #[arg(long, value_name = "N")]
    pool_size: Option<String>,

    /// Where the REST API and dashboard listen (port 0: any free port) [default: rest.address
    /// and rest.port from --config, else 127.0.0.1:8081].
    #[arg(long, value_name = "ADDR:PORT", value_parser = crate::rest::parse_address)]
    rest: Option<(String, u16)>,

    #[command(flatten)]
    node: NodeArgs,
}

#[derive(Debug, Args)]
struct TaskManagerArgs {
    /// The JobManager's HOST:PORT [default: the leader, found through ZooKeeper when the
    /// configuration sets high-availability.type = "zookeeper"].
    #[arg(long, value_name = "HOST:PORT")]
    jobmanager: Option<String>,

    /// This worker's id [default: tm-<random>].
    #[arg(long, value_name = "ID")]
    resource_id: Option<String>,

    /// Where to listen for other TaskManagers' data requests.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    bind: SocketAddr,

    #[command(flatten)]
    node: NodeArgs,
}

impl NodeArgs {
    /// The validated configuration, with `--slots`, `pool_size` (the JobManager's
    /// `--pool-size`) and `more` flags over every other source.
    fn config(
        &self,
        pool_size: Option<&String>,
        more: Vec<FlagOverride>,
    ) -> anyhow::Result<ClusterConfig> {
        let mut flags = key_flags(self.slots.as_ref(), pool_size);
        flags.extend(more);
        Ok(self.source.load(flags)?.config)
    }
}

/// Resolves when the process is asked to stop (Ctrl-C or SIGTERM).
async fn stop_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        biased;
        _ = tokio::signal::ctrl_c() => {}
        _ = async {
            match term.as_mut() {
                Some(term) => { term.recv().await; }
                None => std::future::pending::<()>().await,
            }
        } => {}
    }
}

async fn job_manager(args: JobManagerArgs, registry: OperatorRegistry) -> anyhow::Result<()> {
    let mut flags = Vec::new();
    if let Some((address, port)) = &args.rest {
        flags.push(FlagOverride::new("rest.address", address, "--rest"));
        flags.push(FlagOverride::new("rest.port", port.to_string(), "--rest"));
    }
    let mut config = args.node.config(args.pool_size.as_ref(), flags)?;
    let (secret, origin) =
        crate::process::job_manager_secret(args.node.secret_file.as_ref(), args.node.insecure)?;
    let token = crate::process::default_rest_token(&mut config)?;
    // Said once per start, on stderr (stdout's first lines are the ready lines), as Jupyter
    // prints where its token is.
    if let crate::process::SecretOrigin::Generated(generated) = &origin {
        eprintln!(
            "flint: cluster secret from {generated}; TaskManagers and flint commands of this user \
             on this machine find it there"
        );
    }
    if let Some(generated) = &token {
        eprintln!("flint: REST token from {generated}");
    }
    let program =
        std::env::current_exe().context("cannot find this program to start TaskManagers")?;
    let options = crate::process::JobManagerOptions {
        config,
        bind: args.bind,
        advertise: args.node.advertise,
        secret,
        program,
        registry,
    };
    crate::process::run_job_manager(
        options,
        |ready| {
            // One write for both lines: a reader that stops after the first still gets both.
            let lines = format!(
                "flint jobmanager listening on {}\nflint REST API and dashboard at {}\n",
                ready.address, ready.rest_url
            );
            let mut stdout = std::io::stdout().lock();
            let _ = std::io::Write::write_all(&mut stdout, lines.as_bytes());
            let _ = std::io::Write::flush(&mut stdout);
        },
        stop_signal(),
    )
    .await?;
    Ok(())
}

async fn task_manager(args: TaskManagerArgs, registry: OperatorRegistry) -> anyhow::Result<()> {
    let config = args.node.config(None, Vec::new())?;
    let (secret, _) =
        crate::process::task_manager_secret(args.node.secret_file.as_ref(), args.node.insecure)?;
    let resource_id = args.resource_id.map(ResourceId::new).unwrap_or_else(|| {
        ResourceId::new(format!(
            "tm-{:08x}",
            crate::base::rng::NodeRng::from_entropy().next_u64() as u32
        ))
    });
    let options = crate::process::TaskManagerOptions {
        config,
        job_manager: args.jobmanager,
        bind: args.bind,
        advertise: args.node.advertise,
        resource_id,
        secret,
        registry,
    };
    crate::process::run_task_manager(options, stop_signal()).await?;
    Ok(())
}

#[derive(Debug, Args)]
#[command(after_help = RUN_HELP)]
struct RunArgs {
    /// The job file (TOML; see examples/wordcount.toml).
    job_file: PathBuf,

    /// Run on an embedded cluster inside this process instead of a running cluster.
    #[arg(long)]
    embedded: bool,

    /// Set the job file's parameter `${NAME}` to VALUE (repeatable).
    #[arg(long = "param", value_name = "NAME=VALUE", value_parser = crate::process::run::parse_param)]
    params: Vec<(String, String)>,

    /// Print the job id and return without waiting for the job.
    #[arg(long, conflicts_with = "embedded")]
    detach: bool,

    /// Upload FILE to the JobManager and ship it with the job under its file name
    /// (repeatable; stored once by its SHA-256, see `flint artifacts`).
    #[arg(long = "artifact", value_name = "FILE", conflicts_with = "embedded")]
    artifacts: Vec<PathBuf>,

    /// The JobManager's REST address: http://HOST:PORT, or HOST:PORT.
    #[arg(long, value_name = "URL", conflicts_with = "embedded")]
    jobmanager: Option<String>,

    /// How to print the job id and the final report (json: the REST API's answers as is).
    #[arg(long, value_enum, default_value_t = Output::Table, conflicts_with = "embedded")]
    output: Output,

    /// --embedded: TaskManagers to start [default: from --config, else enough for the job's
    /// peak slots].
    #[arg(long, value_name = "N", requires = "embedded")]
    pool_size: Option<u32>,

    /// --embedded: slots per TaskManager [default: from --config, else 2].
    #[arg(long, value_name = "S", requires = "embedded")]
    slots: Option<u32>,

    /// The configuration: the embedded cluster's, or where to find the JobManager (rest.*).
    #[command(flatten)]
    source: ConfigArgs,

    /// --embedded: cancel the job and exit with 3 if it has not ended this long after the
    /// cluster started (e.g. 90s, 10min).
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = humantime::parse_duration, requires = "embedded")]
    timeout: Duration,
}

impl RunArgs {
    fn into_options(self) -> Result<RunOptions, RunError> {
        Ok(RunOptions {
            job_file: self.job_file,
            params: crate::process::run::collect_params(self.params)?,
            pool_size: self.pool_size,
            slots: self.slots,
            config: self.source.config.clone(),
            env: self.source.env(),
            overrides: self.source.overrides(),
            timeout: self.timeout,
        })
    }
}

/// The `flint` binary with `programs` registered: every subcommand, plus each program run by
/// its name (`BIN NAME [ARGS...] [--jobmanager URL]`). Call it from a program's `main`.
pub fn main(programs: Programs) -> ExitCode {
    main_with_default(programs, None)
}

/// [`main`], where arguments that name neither a subcommand nor a program run the program
/// `default` with all of them (`cargo run --example tpch -- Q1 --data DIR`).
pub fn main_with_default(programs: Programs, default: Option<&str>) -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let first = args.get(1).map(String::as_str);
    // `--help`/`--version` and subcommands are the CLI's; any other leading option (such as
    // `--jobmanager URL`) belongs to the default program's run.
    let subcommand = first.is_some_and(|first| {
        matches!(first, "-h" | "--help" | "-V" | "--version")
            || Cli::command().find_subcommand(first).is_some()
            || (first.starts_with('-') && default.is_none())
    });
    if !subcommand {
        let program = first
            .and_then(|name| programs.get(name).map(|p| (p.clone(), 2)))
            .or_else(|| default.and_then(|name| programs.get(name).map(|p| (p.clone(), 1))));
        if let Some((program, skip)) = program {
            init_logging();
            crate::env::open_files::raise_to_hard_limit();
            return run_program(&program, &programs, args[skip..].to_vec());
        }
    }
    let cli = Cli::parse();
    init_logging();
    // Spill files, data connections and sockets all count against it.
    crate::env::open_files::raise_to_hard_limit();
    let registry = programs.registry();
    // Unlocked: the JobManager's ready line is printed from its own threads.
    let mut out = std::io::stdout();
    match cli.command {
        Command::Run(args) if args.embedded => finish(actix::System::new().block_on(run(args))),
        Command::Run(args) => finish(run_on_cluster(args, &mut out)),
        Command::List(args) => finish(args.client().and_then(|c| c.list(&mut out))),
        Command::Status(args) => finish(
            args.client
                .client()
                .and_then(|c| c.status(&args.job_id, &mut out)),
        ),
        Command::Cancel(args) => finish(
            args.client
                .client()
                .and_then(|c| c.cancel(&args.job_id, &mut out)),
        ),
        Command::Taskmanagers(args) => {
            finish(args.client().and_then(|c| c.task_managers(&mut out)))
        }
        Command::PoolSize(args) => finish(
            args.client
                .client()
                .and_then(|c| c.pool_size(args.size, &mut out)),
        ),
        Command::Stop(args) => finish(args.client().and_then(|c| c.stop(&mut out))),
        Command::Artifacts(args) => finish(args.client().and_then(|c| c.artifacts(&mut out))),
        Command::Jobmanager(args) => {
            report(actix::System::new().block_on(job_manager(args, registry)))
        }
        Command::Taskmanager(args) => {
            report(actix::System::new().block_on(task_manager(args, registry)))
        }
        Command::Config(args) => report(show_config(&args)),
    }
}

fn init_logging() {
    let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .try_init();
}

/// Takes `--NAME VALUE` (or `--NAME=VALUE`) out of `args`.
fn take_option(args: &mut Vec<String>, name: &str) -> Option<String> {
    let flag = format!("--{name}");
    let prefix = format!("--{name}=");
    let at = args
        .iter()
        .position(|a| *a == flag || a.starts_with(&prefix))?;
    let arg = args.remove(at);
    match arg.strip_prefix(&prefix) {
        Some(value) => Some(value.to_owned()),
        None if at < args.len() => Some(args.remove(at)),
        None => None,
    }
}

/// Runs `program` with `args` (less the options this takes: `--jobmanager URL` to run its
/// jobs on a running cluster, `--config FILE` for the embedded cluster or the client, `--rest-token`
/// as `FLINT_REST_TOKEN`); exit code 0 if it succeeded, 1 otherwise (the error on stderr).
fn run_program(program: &Program, programs: &Programs, mut args: Vec<String>) -> ExitCode {
    let jobmanager = take_option(&mut args, "jobmanager");
    let config = take_option(&mut args, "config").map(PathBuf::from);
    let executor =
        remote_executor(jobmanager.as_deref(), config.as_deref()).and_then(|remote| match remote {
            Some(remote) => Ok(Box::new(remote) as Box<dyn Executor>),
            None => embedded_config(config)
                .and_then(|config| {
                    crate::cluster::embedded::EmbeddedCluster::start(config, programs.registry())
                        .map_err(anyhow::Error::new)
                })
                .map(|cluster| Box::new(cluster) as Box<dyn Executor>),
        });
    let executor = match executor {
        Ok(executor) => executor,
        Err(error) => {
            eprintln!("{}: {}", program.name(), ErrorChain(error.as_ref()));
            return ExitCode::from(2);
        }
    };
    let env = Env::new(program.identity(), args, executor);
    match program.run(&env) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{}: {}", program.name(), ErrorChain(&error));
            ExitCode::from(1)
        }
    }
}

/// Where a program runs its jobs: on the JobManager `--jobmanager` names, or on the leader the
/// high-availability keys of `--config` find (followed across failovers in both cases when the
/// file has such keys); `None` (an embedded cluster) otherwise.
fn remote_executor(
    jobmanager: Option<&str>,
    config: Option<&std::path::Path>,
) -> anyhow::Result<Option<crate::client::executor::RemoteExecutor>> {
    use crate::client::executor::RemoteExecutor;
    let env = |name: &str| std::env::var(name).ok();
    let leader = match (jobmanager, config) {
        (None, Some(path)) => crate::client::Endpoint::leader(path, env)?,
        _ => None,
    };
    let endpoint = match (jobmanager, leader) {
        (Some(url), _) => crate::client::Endpoint::resolve(Some(url), config, env)?,
        (None, Some(leader)) => leader,
        (None, None) => return Ok(None),
    };
    let client = crate::client::RestClient::new(endpoint);
    let ha = config.filter(|path| {
        crate::client::endpoint::load_client_config(Some(path), env)
            .is_ok_and(|c| c.high_availability.is_enabled())
    });
    Ok(Some(match ha {
        Some(path) => RemoteExecutor::following_leader(client, path.to_owned()),
        None => RemoteExecutor::new(client),
    }))
}

/// The embedded cluster's configuration: `--config FILE` (or `FLINT_CONFIG`) and `FLINT_*`
/// variables over Flint's defaults, with one TaskManager of as many slots as the machine has
/// cores unless they say otherwise.
fn embedded_config(config: Option<PathBuf>) -> anyhow::Result<ClusterConfig> {
    let sources = ConfigSources {
        file: config,
        env: std::env::vars().collect(),
        flags: Vec::new(),
    };
    let loaded = sources.load()?;
    let mut config = loaded.config.clone();
    if !loaded.is_set("taskmanager.slots") {
        config.taskmanager.slots =
            std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    }
    Ok(config)
}

/// An error that knows the exit code it ends the process with.
trait ExitCodeOf: std::error::Error + Send + Sync + 'static {
    fn exit_code(&self) -> u8;
}

impl ExitCodeOf for RunError {
    fn exit_code(&self) -> u8 {
        RunError::exit_code(self)
    }
}

impl ExitCodeOf for ClientError {
    fn exit_code(&self) -> u8 {
        ClientError::exit_code(self)
    }
}

/// The exit code of a command, and its error's whole chain on stderr.
fn finish<E: ExitCodeOf>(result: Result<u8, E>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            let code = error.exit_code();
            eprintln!("flint: {}", ErrorChain(&error));
            ExitCode::from(code)
        }
    }
}

/// `flint config --show`.
fn show_config(args: &ConfigCommandArgs) -> anyhow::Result<()> {
    let flags = key_flags(args.slots.as_ref(), args.pool_size.as_ref());
    let loaded = args.source.load(flags)?;
    if args.show {
        print!("{}", loaded.show());
    }
    Ok(())
}

/// Exit code 2 and the whole error chain for a process that could not run.
fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("flint: {}", ErrorChain(error.as_ref()));
            ExitCode::from(2)
        }
    }
}

async fn run(args: RunArgs) -> Result<u8, RunError> {
    let options = args.into_options()?;
    let mut out = std::io::stdout().lock();
    let report = crate::process::run::run_embedded(options, &mut out).await?;
    Ok(report.exit_code())
}

/// `flint run` against a running cluster: progress on stderr, Ctrl-C leaves the job running.
fn run_on_cluster(args: RunArgs, out: &mut impl std::io::Write) -> Result<u8, ClientError> {
    let params = crate::process::run::collect_params(args.params)?;
    let client = Client::from_environment(
        args.jobmanager.as_deref(),
        args.source.config.as_deref(),
        args.output.into(),
    )?;
    let options = SubmitOptions {
        job_file: args.job_file,
        params,
        detach: args.detach,
        artifacts: args.artifacts,
    };
    let interrupt = match Interrupt::from_signals() {
        Ok(interrupt) => interrupt,
        Err(error) => {
            log::warn!(
                "{}; Ctrl-C will end flint without a word",
                ErrorChain(&error)
            );
            Interrupt::new()
        }
    };
    client.run(&options, ProgressDrawTarget::stderr(), &interrupt, out)
}
