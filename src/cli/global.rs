//! The flags every operator command takes (also after the subcommand: `jobwire dlq list q
//! -o json`): where the server is, how to authenticate, and the output format.
//!
//! The client-certificate variables are `JOBWIRE_CLIENT_TLS_CERT`/`_KEY`, not
//! `JOBWIRE_TLS_CERT`/`_KEY`: those name the *server's* certificate for `jobwire serve`, and
//! a CLI run in the server's container must not present the server's key as its own.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use jobwire_client::{Client, ClientOptions, TlsOptions};

use super::CliError;

/// How the CLI prints results.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Columns for people, at most 100 characters wide (long cells end in "…").
    #[default]
    Table,
    /// JSON for scripts (the shapes of docs/cli.md), pretty-printed.
    Json,
    /// The same shapes as YAML.
    Yaml,
}

/// Connection and output flags of the operator commands.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Global options")]
pub struct GlobalArgs {
    /// The server's gRPC address (`http://host:port`, `https://host:port` or `host:port`).
    #[arg(
        long,
        global = true,
        env = "JOBWIRE_SERVER",
        default_value = "http://127.0.0.1:50051"
    )]
    pub server: String,

    /// Bearer token (`jw_<id>_<secret>`, from `jobwire token new`), sent on every call.
    /// Prefer the environment variable: a flag shows in `ps`.
    #[arg(long, global = true, env = "JOBWIRE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,

    /// TLS: trust the CA certificates of this PEM file for the server's certificate (an
    /// `http://` --server is then taken as `https://`).
    #[arg(long, global = true, env = "JOBWIRE_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,

    /// Mutual TLS: this client's certificate chain (PEM), with --tls-key.
    #[arg(
        long,
        global = true,
        env = "JOBWIRE_CLIENT_TLS_CERT",
        value_name = "FILE"
    )]
    pub tls_cert: Option<PathBuf>,

    /// Mutual TLS: the private key (PEM) of --tls-cert.
    #[arg(
        long,
        global = true,
        env = "JOBWIRE_CLIENT_TLS_KEY",
        value_name = "FILE"
    )]
    pub tls_key: Option<PathBuf>,

    /// TLS: the name the server's certificate must carry (default: the host of --server).
    #[arg(long, global = true, env = "JOBWIRE_TLS_SERVER_NAME")]
    pub tls_server_name: Option<String>,

    /// Output format.
    #[arg(
        short = 'o',
        long = "output",
        global = true,
        value_enum,
        default_value = "table"
    )]
    pub output: Format,
}

impl GlobalArgs {
    /// The SDK's connection options from the flags: the TLS files read, the token checked.
    /// Errors (exit 2) name the flag.
    pub fn client_options(&self) -> Result<ClientOptions, CliError> {
        let read = |flag: &str, p: &Path| {
            std::fs::read(p)
                .map_err(|e| CliError::usage(format!("{flag} {}: cannot read: {e}", p.display())))
        };
        let (cert_pem, key_pem) = match (&self.tls_cert, &self.tls_key) {
            (Some(c), Some(k)) => (Some(read("--tls-cert", c)?), Some(read("--tls-key", k)?)),
            (None, None) => (None, None),
            _ => return Err(CliError::usage("--tls-cert and --tls-key go together")),
        };
        let tls = match &self.tls_ca {
            Some(ca) => Some(TlsOptions {
                ca_pem: Some(read("--tls-ca", ca)?),
                cert_pem,
                key_pem,
                server_name: self.tls_server_name.clone(),
            }),
            // https:// without --tls-ca: the system's roots.
            None if self.server.starts_with("https://") || cert_pem.is_some() => Some(TlsOptions {
                ca_pem: None,
                cert_pem,
                key_pem,
                server_name: self.tls_server_name.clone(),
            }),
            None => None,
        };
        if let Some(t) = &self.token {
            if t.is_empty() || !t.bytes().all(|b| (0x21..0x7f).contains(&b)) {
                return Err(CliError::usage(
                    "--token (JOBWIRE_TOKEN): must be printable ASCII without spaces",
                ));
            }
        }
        Ok(ClientOptions {
            token: self.token.clone(),
            tls,
            ..Default::default()
        })
    }

    /// Connects to --server.
    pub async fn connect(&self) -> Result<Client, CliError> {
        let options = self.client_options()?;
        Client::connect(&self.server, options)
            .await
            .map_err(|e| match e {
                jobwire_client::Error::Connect { target, source } => {
                    CliError::Other(format!("cannot connect to {target}: {}", chain(&source)))
                }
                other => other.into(),
            })
    }
}

/// An error and its sources, joined with ": " (tonic's transport error alone says only
/// "transport error").
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(x) = src {
        let t = x.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = x.source();
    }
    s
}
