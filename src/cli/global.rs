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
        // An empty JOBWIRE_TOKEN (`JOBWIRE_TOKEN= jobwire ...`) means no token, not a bad one.
        let token = self.token.clone().filter(|t| !t.is_empty());
        if let Some(t) = &token {
            if !t.bytes().all(|b| (0x21..0x7f).contains(&b)) {
                return Err(CliError::usage(
                    "--token (JOBWIRE_TOKEN): must be printable ASCII without spaces",
                ));
            }
        }
        Ok(ClientOptions {
            token,
            tls,
            ..Default::default()
        })
    }

    /// Connects to --server.
    pub async fn connect(&self) -> Result<Client, CliError> {
        check_server(&self.server)?;
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

/// Checks that --server is an address (a usage error, exit 2, when it is not).
fn check_server(server: &str) -> Result<(), CliError> {
    let bad = |why: &str| {
        CliError::usage(format!(
            "--server {server:?}: {why}: give http://host:port, https://host:port or host:port"
        ))
    };
    let full = if server.contains("://") {
        server.to_owned()
    } else {
        format!("http://{server}")
    };
    let uri: tonic::codegen::http::Uri = full.parse().map_err(|_| bad("not an address"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(bad("the scheme must be http or https"));
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(bad("no host"));
    }
    Ok(())
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

/// The long flags of [`GlobalArgs`] that take a value (and `-o`).
const GLOBAL_FLAGS: [&str; 8] = [
    "--server",
    "--token",
    "--tls-ca",
    "--tls-cert",
    "--tls-key",
    "--tls-server-name",
    "--output",
    "-o",
];

/// The command groups that take [`GlobalArgs`].
const GROUPS: [&str; 4] = ["queues", "jobs", "dlq", "workers"];

/// The command line with the global flags given before the command group moved after it,
/// where clap reads them: `jobwire --server X queues list` is `jobwire queues --server X
/// list`. (They cannot be flags of the top-level command: `serve` has its own `--tls-cert`
/// and `bench` its own `--server`.) Anything else is returned unchanged, for clap to judge.
pub fn hoist_global_flags(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut i = 1;
    while let Some(a) = args.get(i).and_then(|a| a.to_str()) {
        if GLOBAL_FLAGS.contains(&a) {
            i += 2; // the flag and its value
        } else if GLOBAL_FLAGS.iter().any(|f| {
            a.starts_with(&format!("{f}=")) || (*f == "-o" && a.len() > 2 && a.starts_with("-o"))
        }) {
            i += 1;
        } else {
            break;
        }
    }
    let group = args.get(i).and_then(|a| a.to_str());
    if i == 1 || i >= args.len() || !group.is_some_and(|g| GROUPS.contains(&g)) {
        return args;
    }
    let mut out = Vec::with_capacity(args.len());
    out.push(args[0].clone());
    out.push(args[i].clone());
    out.extend_from_slice(&args[1..i]);
    out.extend_from_slice(&args[i + 1..]);
    out
}

#[cfg(test)]
mod tests {
    use super::hoist_global_flags;

    fn h(args: &[&str]) -> Vec<String> {
        hoist_global_flags(args.iter().map(|a| a.into()).collect())
            .into_iter()
            .map(|a| a.into_string().expect("utf-8"))
            .collect()
    }

    #[test]
    fn global_flags_before_the_group_move_after_it() {
        assert_eq!(
            h(&[
                "jw",
                "--server",
                "h:1",
                "-ojson",
                "--token=t",
                "queues",
                "list"
            ]),
            [
                "jw",
                "queues",
                "--server",
                "h:1",
                "-ojson",
                "--token=t",
                "list"
            ]
        );
        assert_eq!(h(&["jw", "queues", "list"]), ["jw", "queues", "list"]);
        // Not a group (serve has its own flags), or a dangling flag: left to clap.
        assert_eq!(
            h(&["jw", "--tls-cert", "c", "serve"]),
            ["jw", "--tls-cert", "c", "serve"]
        );
        assert_eq!(h(&["jw", "--server"]), ["jw", "--server"]);
    }
}
