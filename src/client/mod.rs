//! The CLI's client side: `flint run` (against a running cluster), `list`, `status`, `cancel`,
//! `taskmanagers`, `pool-size` and `stop`, through the JobManager's REST API (`docs/rest.md`).
//!
//! ```text
//! endpoint.rs   where the JobManager is (--jobmanager, FLINT_JOBMANAGER, rest.* in the config)
//! rest.rs       a blocking HTTP client of the REST API (ureq): typed answers + the raw body
//! api.rs        the REST answers as types
//! commands.rs   the commands: requests, output, exit codes
//! render.rs     human output (tables) of the answers
//! table.rs      aligned tables
//! progress.rs   `run`'s live progress bars (indicatif, on stderr)
//! interrupt.rs  Ctrl-C while `run` waits
//! ```
//!
//! The client is blocking and needs no actor system: the binary runs these commands without
//! starting one. It never talks to the cluster's transport, only to the REST API, so it needs
//! no cluster secret — only, for requests that change something, the REST token.
//!
//! ```no_run
//! use flint::client::{Client, OutputFormat};
//!
//! let client = Client::from_environment(Some("127.0.0.1:8081"), None, OutputFormat::Table)?;
//! let code = client.list(&mut std::io::stdout())?;
//! # Ok::<(), flint::client::ClientError>(())
//! ```

pub mod api;
pub mod commands;
pub mod endpoint;
pub mod executor;
pub mod interrupt;
pub mod progress;
pub mod render;
pub mod rest;
pub mod table;
#[cfg(test)]
pub(crate) mod test_server;

pub use commands::{Client, ClientError, OutputFormat, SubmitOptions};
pub use endpoint::{Endpoint, EndpointError, JobManagerUrl};
pub use interrupt::Interrupt;
pub use rest::{RestClient, RestError};

/// The CLI's exit codes. `flint run --embedded` uses the first four ([`crate::process::run`]); the client
/// commands add the others. Documented in the README and in `flint --help`.
pub mod exit {
    use crate::process::run;

    /// The command did what it was asked (`run`: the job FINISHED).
    pub const SUCCESS: u8 = run::EXIT_FINISHED;
    /// `run`: the job FAILED or was CANCELED.
    pub const JOB_FAILED: u8 = run::EXIT_JOB_FAILED;
    /// A usage, configuration or job file error, or a request the JobManager refused as invalid
    /// (HTTP 400): nothing changed.
    pub const USAGE: u8 = run::EXIT_USAGE;
    /// The cluster failed: a server error, no answer in time, an answer that is not the REST
    /// API, or a JobManager that would not stop.
    pub const CLUSTER: u8 = run::EXIT_CLUSTER;
    /// The JobManager could not be reached.
    pub const UNREACHABLE: u8 = 4;
    /// The JobManager refused the request's token (HTTP 401).
    pub const UNAUTHORIZED: u8 = 5;
    /// No such job or TaskManager (HTTP 404).
    pub const NOT_FOUND: u8 = 6;
    /// The request conflicts with the cluster's state: the job already ended, the cluster is
    /// stopping (HTTP 409).
    pub const CONFLICT: u8 = 7;
    /// Ctrl-C while `run` waited; the job keeps running (128 + SIGINT, as shells report it).
    pub const INTERRUPTED: u8 = 130;
}
