//! `flint`: the command line. Parses arguments, sets up logging and calls into the library
//! ([`flint::run`]); everything else lives there.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use flint::ClusterConfig;
use flint::config::{ConfigSources, FlagOverride, LoadedConfig};
use flint::messages::ids::ResourceId;
use flint::run::{RunError, RunOptions, UsageError};

/// The exit codes, as `flint::run` documents them (`--help` of both `flint` and `flint run`).
macro_rules! exit_codes {
    () => {
        "Exit codes:
  0  the job FINISHED
  1  the job FAILED or was CANCELED
  2  usage, configuration or job file error (nothing was started)
  3  cluster error (it stopped answering, or the job did not end within --timeout)"
    };
}

const RUN_HELP: &str = concat!(
    "Example:
  flint run --embedded examples/wordcount.toml \\
      --param input=README.md --param output=/tmp/wordcount

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
    /// Run a job file and wait for it to end (for now on an embedded cluster: --embedded).
    Run(RunArgs),
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

    /// Read the cluster secret from this file [default: the FLINT_SECRET variable].
    #[arg(long, value_name = "FILE")]
    secret_file: Option<PathBuf>,

    /// Run without a secret on a non-loopback address: anyone who can connect can join.
    #[arg(long)]
    insecure: bool,

    /// The host name or address others reach this node at (needed with a wildcard --bind such
    /// as 0.0.0.0).
    #[arg(long, value_name = "HOST")]
    advertise: Option<String>,
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

    #[command(flatten)]
    node: NodeArgs,
}

#[derive(Debug, Args)]
struct TaskManagerArgs {
    /// The JobManager's HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    jobmanager: String,

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
    /// The validated configuration, with `--slots` and `pool_size` (the JobManager's
    /// `--pool-size`) over every other source.
    fn config(&self, pool_size: Option<&String>) -> anyhow::Result<ClusterConfig> {
        let flags = key_flags(self.slots.as_ref(), pool_size);
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

async fn job_manager(args: JobManagerArgs) -> anyhow::Result<()> {
    let config = args.node.config(args.pool_size.as_ref())?;
    let secret = flint::process::load_secret(
        args.node.secret_file.as_ref(),
        args.node.insecure,
        args.bind,
    )?;
    let program =
        std::env::current_exe().context("cannot find this program to start TaskManagers")?;
    let options = flint::process::JobManagerOptions {
        config,
        bind: args.bind,
        advertise: args.node.advertise,
        secret,
        program,
    };
    flint::process::run_job_manager(
        options,
        |address| {
            println!("flint jobmanager listening on {address}");
            let _ = std::io::Write::flush(&mut std::io::stdout());
        },
        stop_signal(),
    )
    .await?;
    Ok(())
}

async fn task_manager(args: TaskManagerArgs) -> anyhow::Result<()> {
    let config = args.node.config(None)?;
    let secret = flint::process::load_secret(
        args.node.secret_file.as_ref(),
        args.node.insecure,
        args.bind,
    )?;
    let resource_id = args.resource_id.map(ResourceId::new).unwrap_or_else(|| {
        ResourceId::new(format!(
            "tm-{:08x}",
            flint::env::NodeRng::from_entropy().next_u64() as u32
        ))
    });
    let options = flint::process::TaskManagerOptions {
        config,
        job_manager: args.jobmanager,
        bind: args.bind,
        advertise: args.node.advertise,
        resource_id,
        secret,
    };
    flint::process::run_task_manager(options, stop_signal()).await?;
    Ok(())
}

#[derive(Debug, Args)]
#[command(after_help = RUN_HELP)]
struct RunArgs {
    /// The job file (TOML; see examples/wordcount.toml).
    job_file: PathBuf,

    /// Run on an embedded cluster inside this process (required: the only mode so far).
    #[arg(long)]
    embedded: bool,

    /// Set the job file's parameter `${NAME}` to VALUE (repeatable).
    #[arg(long = "param", value_name = "NAME=VALUE", value_parser = flint::run::parse_param)]
    params: Vec<(String, String)>,

    /// TaskManagers to start [default: from --config, else enough for the job's peak slots].
    #[arg(long, value_name = "N")]
    pool_size: Option<u32>,

    /// Slots per TaskManager [default: from --config, else 2].
    #[arg(long, value_name = "S")]
    slots: Option<u32>,

    #[command(flatten)]
    source: ConfigArgs,

    /// Cancel the job and exit with 3 if it has not ended this long after the cluster started
    /// (e.g. 90s, 10min).
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

impl RunArgs {
    fn into_options(self) -> Result<RunOptions, RunError> {
        if !self.embedded {
            return Err(UsageError::NotEmbedded.into());
        }
        Ok(RunOptions {
            job_file: self.job_file,
            params: flint::run::collect_params(self.params)?,
            pool_size: self.pool_size,
            slots: self.slots,
            config: self.source.config.clone(),
            env: self.source.env(),
            overrides: self.source.overrides(),
            timeout: self.timeout,
        })
    }
}

#[actix::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let result = match cli.command {
        Command::Run(args) => run(args).await,
        Command::Jobmanager(args) => return report(job_manager(args).await),
        Command::Taskmanager(args) => return report(task_manager(args).await),
        Command::Config(args) => return report(show_config(&args)),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            let code = error.exit_code();
            eprintln!("flint: {:#}", anyhow::Error::new(error));
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
            eprintln!("flint: {error:#}");
            ExitCode::from(2)
        }
    }
}

async fn run(args: RunArgs) -> Result<u8, RunError> {
    let options = args.into_options()?;
    let mut out = std::io::stdout().lock();
    let report = flint::run::run_embedded(options, &mut out).await?;
    Ok(report.exit_code())
}
