//! Who is calling: the principal of a request, from its bearer token (`authorization: Bearer
//! jw_<id>_<secret>` metadata) or, without one, from the client certificate the TLS listener
//! verified (mTLS). A certificate's identities are tried in this order: its URI SANs (SPIFFE
//! ids, as Istio and Linkerd issue them), then its DNS SANs; the first one the auth file
//! names is the principal. Its subject CN is an identity only when it has no subject
//! alternative name at all (RFC 6125 6.4.4: a CA that issues SANs vouches for them, not
//! for the CN, which many CAs copy from the request unchecked), or with
//! `--tls-client-identity-cn` ([`CnIdentity::Always`]), after the SANs.

use rustls::pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use super::token::{SecretHash, Token};

/// The name of the anonymous principal: every caller when the server runs without
/// `--auth-file`.
pub const ANONYMOUS: &str = "anonymous";

/// An authenticated caller. The interceptor puts it into the request's extensions; read it
/// with [`super::principal`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// The principal's name from the auth file (`anonymous` without one): what logs, audit
    /// lines and per-principal limits use.
    pub name: String,
    pub(crate) credential: Credential,
}

/// How the principal proved who it is; kept so that every authorization decision looks the
/// credential up in the policy in force (a reload that revokes it takes effect at once).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Credential {
    /// No auth file: everyone is allowed everything.
    Anonymous,
    /// A bearer token: its id and the SHA-256 of the secret presented (never the secret).
    Token { id: String, hash: SecretHash },
    /// A client certificate: the identity that matched the auth file.
    Cert { identity: String },
}

impl Principal {
    /// The principal of a server without `--auth-file`.
    pub fn anonymous() -> Principal {
        Principal {
            name: ANONYMOUS.to_owned(),
            credential: Credential::Anonymous,
        }
    }

    /// How it authenticated: `token:<id>`, `cert:<identity>` or `anonymous` (for logs).
    pub fn via(&self) -> String {
        match &self.credential {
            Credential::Anonymous => ANONYMOUS.to_owned(),
            Credential::Token { id, .. } => format!("token:{id}"),
            Credential::Cert { identity } => format!("cert:{identity}"),
        }
    }
}

/// What the `authorization` metadata carries.
#[derive(Debug)]
pub(crate) enum Bearer {
    /// No `authorization` metadata.
    Absent,
    /// A well-formed jobwire token.
    Token(Token),
    /// Something else; the reason, without the secret.
    Malformed(String),
}

/// Reads the bearer token of `metadata` (`authorization: Bearer jw_...`; the scheme is
/// case-insensitive, as RFC 6750 says).
pub(crate) fn bearer(metadata: &tonic::metadata::MetadataMap) -> Bearer {
    let Some(value) = metadata.get("authorization") else {
        return Bearer::Absent;
    };
    let Ok(value) = value.to_str() else {
        return Bearer::Malformed("the authorization metadata is not ASCII".into());
    };
    let token = match value.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
        _ => {
            return Bearer::Malformed(
                "the authorization metadata must be `Bearer jw_<id>_<secret>`".into(),
            )
        }
    };
    match Token::parse(token) {
        Ok(t) => Bearer::Token(t),
        Err(e) => Bearer::Malformed(format!("malformed bearer token: {e}")),
    }
}

/// When a client certificate's subject CN is one of its identities.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CnIdentity {
    /// Only when the certificate has no subject alternative name at all (of any kind: URI,
    /// DNS, IP, email, ...): the default.
    #[default]
    WithoutSans,
    /// Always, after the SANs (`--tls-client-identity-cn`): for a CA that puts the
    /// workload's name in the CN and unchecked or unrelated names in the SANs.
    Always,
}

/// The identities of a client certificate (DER), in the order they are tried: URI SANs,
/// DNS SANs, then the subject CN as `cn` says. Empty for a certificate that does not parse.
pub fn cert_identities(cert: &CertificateDer<'_>, cn: CnIdentity) -> Vec<String> {
    let Ok((_, x509)) = X509Certificate::from_der(cert.as_ref()) else {
        return Vec::new();
    };
    let (mut uris, mut dns, mut sans) = (Vec::new(), Vec::new(), 0usize);
    // A SAN extension that does not parse counts as SANs present: never a reason to fall
    // back to the CN.
    match x509.subject_alternative_name() {
        Ok(Some(san)) => {
            for name in &san.value.general_names {
                sans += 1;
                match name {
                    GeneralName::URI(u) => uris.push((*u).to_owned()),
                    GeneralName::DNSName(d) => dns.push((*d).to_owned()),
                    _ => {}
                }
            }
        }
        Ok(None) => {}
        Err(_) => sans += 1,
    }
    let cns: Vec<String> = if sans == 0 || cn == CnIdentity::Always {
        x509.subject()
            .iter_common_name()
            .filter_map(|cn| cn.as_str().ok().map(str::to_owned))
            .collect()
    } else {
        Vec::new()
    };
    uris.into_iter().chain(dns).chain(cns).collect()
}

/// Identities of the leaf of `certs` (leaf first), as [`cert_identities`].
pub(crate) fn leaf_identities(
    certs: Option<&[CertificateDer<'static>]>,
    cn: CnIdentity,
) -> Vec<String> {
    certs
        .and_then(|c| c.first())
        .map(|c| cert_identities(c, cn))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(sans: Vec<rcgen::SanType>, cn: Option<&str>) -> CertificateDer<'static> {
        let mut params = rcgen::CertificateParams::default();
        params.subject_alt_names = sans;
        params.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = cn {
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, cn);
        }
        let key = rcgen::KeyPair::generate().expect("valid in the test");
        params
            .self_signed(&key)
            .expect("valid in the test")
            .der()
            .clone()
    }

    #[test]
    fn identities_are_uri_sans_then_dns_sans_and_the_cn_only_without_sans_or_opted_in() {
        let c = cert(
            vec![
                rcgen::SanType::DnsName("worker.example".try_into().expect("valid in the test")),
                rcgen::SanType::URI(
                    "spiffe://example.org/w"
                        .try_into()
                        .expect("valid in the test"),
                ),
            ],
            Some("worker-cn"),
        );
        assert_eq!(
            cert_identities(&c, CnIdentity::WithoutSans),
            ["spiffe://example.org/w", "worker.example"]
        );
        assert_eq!(
            cert_identities(&c, CnIdentity::Always),
            ["spiffe://example.org/w", "worker.example", "worker-cn"]
        );
        let only_cn = cert(Vec::new(), Some("just-cn"));
        assert_eq!(
            cert_identities(&only_cn, CnIdentity::WithoutSans),
            ["just-cn"]
        );
        // An IP SAN is a SAN too: the CN stays out.
        let ip = cert(
            vec![rcgen::SanType::IpAddress([10, 0, 0, 1].into())],
            Some("ip-cn"),
        );
        assert!(cert_identities(&ip, CnIdentity::WithoutSans).is_empty());
        assert_eq!(cert_identities(&ip, CnIdentity::Always), ["ip-cn"]);
        assert!(
            cert_identities(&CertificateDer::from(vec![1, 2, 3]), CnIdentity::Always).is_empty()
        );
        assert!(leaf_identities(None, CnIdentity::Always).is_empty());
    }

    #[test]
    fn bearer_metadata_is_read_case_insensitively_and_malformed_is_told_apart() {
        let token = Token::generate("ci").expect("valid in the test").reveal();
        let mut m = tonic::metadata::MetadataMap::new();
        assert!(matches!(bearer(&m), Bearer::Absent));
        m.insert(
            "authorization",
            format!("bearer {token}")
                .parse()
                .expect("valid in the test"),
        );
        assert!(matches!(bearer(&m), Bearer::Token(t) if t.id == "ci"));
        m.insert(
            "authorization",
            "Basic dXNlcjpwYXNz".parse().expect("valid in the test"),
        );
        assert!(matches!(bearer(&m), Bearer::Malformed(_)));
        m.insert(
            "authorization",
            "Bearer jw_nope".parse().expect("valid in the test"),
        );
        assert!(matches!(bearer(&m), Bearer::Malformed(_)));
    }
}
