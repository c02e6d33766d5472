//! `flint`: the command line. Parses arguments, sets up logging and calls into the library
//! ([`flint::run`]); everything else lives there.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use flint::ClusterConfig;
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
}

/// Options both processes share.
#[derive(Debug, Args)]
struct NodeArgs {
    /// A cluster configuration file (TOML); the flags override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,

    /// Slots per TaskManager [default: from --config, else 1].
    #[arg(long, value_name = "S")]
    slots: Option<u32>,

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

    /// TaskManagers to keep running [default: from --config, else 1].
    #[arg(long, value_name = "N")]
    pool_size: Option<u32>,

    /// Where the REST API and dashboard listen (port 0: any free port) [default: rest.address
    /// and rest.port from --config, else 127.0.0.1:8081].
    #[arg(long, value_name = "ADDR:PORT", value_parser = flint::rest::parse_address)]
    rest: Option<(String, u16)>,

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
    fn config(&self) -> anyhow::Result<ClusterConfig> {
        let mut config = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).with_context(|| {
                    format!("cannot read the configuration file {}", path.display())
                })?;
                ClusterConfig::from_toml_str(&text)
                    .with_context(|| format!("in the configuration file {}", path.display()))?
            }
            None => ClusterConfig::default(),
        };
        if let Some(slots) = self.slots {
            config.taskmanager.slots = slots;
        }
        Ok(config)
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
    let mut config = args.node.config()?;
    if let Some(size) = args.pool_size {
        config.resourcemanager.pool_size = size;
    }
    if let Some((address, port)) = args.rest {
        config.rest.address = address;
        config.rest.port = port;
    }
    config.validate()?;
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

async fn task_manager(args: TaskManagerArgs) -> anyhow::Result<()> {
    let config = args.node.config()?;
    config.validate()?;
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

    /// A cluster configuration file (TOML); the flags above override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,

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
            config: self.config,
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
