//! `serve` flags of authentication and authorization (`--auth-file`, `--insecure`), and the
//! bind rule: without an auth file the gRPC port stays on loopback unless `--insecure`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

/// Who may call what. Without `--auth-file`: no authentication, loopback only (unless
/// `--insecure`).
#[derive(Clone, Debug, Default, Args)]
pub struct AuthArgs {
    /// Auth file (YAML or TOML, by its extension .yaml/.yml/.toml): principals (bearer
    /// tokens by id and SHA-256 of the secret, or client-certificate identities) and their
    /// roles (producer, worker, viewer, admin) per queue pattern (name, prefix*, *). Every
    /// call of the jobwire services must then authenticate; deny by default. Reloaded when
    /// the file changes and on SIGHUP (a bad file is refused and the old one stays). Without
    /// it every caller may call everything.
    #[arg(long, env = "JOBWIRE_AUTH_FILE")]
    pub auth_file: Option<PathBuf>,

    /// Allow --grpc-addr on a non-loopback address without --auth-file: anyone who can
    /// reach the port may enqueue, lease, replay, purge and delete. For trusted networks
    /// only (a loud warning is logged at start).
    #[arg(long, env = "JOBWIRE_INSECURE")]
    pub insecure: bool,

    /// Also know a client certificate (mTLS) by its subject CN when it has subject
    /// alternative names (tried after its URI and DNS SANs). Off: the CN is an identity only
    /// of a certificate with no SAN at all, since a CA vouches for the SANs it issues while
    /// many copy the CN from the request unchecked. For a CA that names workloads in the CN.
    #[arg(long, env = "JOBWIRE_TLS_CLIENT_IDENTITY_CN")]
    pub tls_client_identity_cn: bool,
}

impl AuthArgs {
    /// Checks what clap cannot; the error names the flag.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(path) = &self.auth_file {
            crate::auth::file::check_extension(path)?;
        }
        Ok(())
    }

    /// The bind rule: without `--auth-file`, `grpc_addr` must be a loopback address unless
    /// `--insecure`.
    pub fn check_bind(&self, grpc_addr: SocketAddr) -> Result<(), String> {
        if self.auth_file.is_none() && !self.insecure && !grpc_addr.ip().is_loopback() {
            return Err(format!(
                "--grpc-addr {grpc_addr} is not a loopback address and there is no --auth-file: \
                 anyone who can reach it could enqueue, lease, replay, purge and delete. Give \
                 --auth-file FILE (see `jobwire token new`), bind 127.0.0.1, or pass --insecure \
                 on a trusted network"
            ));
        }
        Ok(())
    }

    /// Serving without authentication on a non-loopback address (`--insecure`)?
    pub fn open_to_network(&self, grpc_addr: SocketAddr) -> bool {
        self.auth_file.is_none() && !grpc_addr.ip().is_loopback()
    }

    /// When a client certificate's CN is one of its identities (`--tls-client-identity-cn`).
    pub fn cert_cn(&self) -> crate::auth::identity::CnIdentity {
        if self.tls_client_identity_cn {
            crate::auth::identity::CnIdentity::Always
        } else {
            crate::auth::identity::CnIdentity::WithoutSans
        }
    }

    /// `JOBWIRE_*=value` lines for `--print-config` (the file's path, never its content).
    pub fn effective(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "JOBWIRE_AUTH_FILE",
                self.auth_file
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
            ),
            ("JOBWIRE_INSECURE", self.insecure.to_string()),
            (
                "JOBWIRE_TLS_CLIENT_IDENTITY_CN",
                self.tls_client_identity_cn.to_string(),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::identity::CnIdentity;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        auth: AuthArgs,
    }

    #[test]
    fn the_cn_of_a_certificate_with_sans_is_an_identity_only_when_opted_in() {
        let off = Cli::try_parse_from(["jobwire"]).expect("parses").auth;
        assert!(!off.tls_client_identity_cn);
        assert_eq!(off.cert_cn(), CnIdentity::WithoutSans);
        assert_eq!(AuthArgs::default().cert_cn(), CnIdentity::WithoutSans);
        let on = Cli::try_parse_from(["jobwire", "--tls-client-identity-cn"])
            .expect("parses")
            .auth;
        assert_eq!(on.cert_cn(), CnIdentity::Always);
        assert!(on
            .effective()
            .contains(&("JOBWIRE_TLS_CLIENT_IDENTITY_CN", "true".into())));
    }
}
