//! `flint`: the command line. Parses arguments, sets up logging and calls into the library
//! ([`flint::run`]); everything else lives there.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
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

async fn run(args: RunArgs) -> Result<u8, RunError> {
    let options = args.into_options()?;
    let mut out = std::io::stdout().lock();
    let report = flint::run::run_embedded(options, &mut out).await?;
    Ok(report.exit_code())
}
