//! Test PKI made with rcgen (ECDSA P-256, ring): a CA, server certificates for
//! `localhost`/`127.0.0.1` with chosen serials, and client certificates with a URI SAN, a DNS
//! SAN or only a CN, valid or expired, all written as PEM files into a temp dir that lives as
//! long as the [`TestPki`]. A second `TestPki` is "another CA".

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};

/// A certificate and its key, as PEM files.
#[derive(Clone, Debug)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl CertFiles {
    /// The certificate's PEM text.
    pub fn cert_pem(&self) -> String {
        std::fs::read_to_string(&self.cert).expect("cert file")
    }

    /// The key's PEM text.
    pub fn key_pem(&self) -> String {
        std::fs::read_to_string(&self.key).expect("key file")
    }
}

/// The identity a client certificate carries.
#[derive(Clone, Debug)]
pub enum ClientId {
    /// A URI SAN (e.g. `spiffe://jobwire.test/worker`), plus CN `uri-client`.
    Uri(String),
    /// A DNS SAN, plus CN `dns-client`.
    Dns(String),
    /// Only the subject's CN, no SAN.
    Cn(String),
    /// A URI SAN, a DNS SAN and a CN at once (which one names the principal is jobwire's
    /// choice: URI SAN, then DNS SAN, then CN).
    All {
        uri: String,
        dns: String,
        cn: String,
    },
}

/// When a certificate is valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Validity {
    /// 2020-01-01 .. 2099-01-01.
    Current,
    /// 2020-01-01 .. 2021-01-01: expired.
    Expired,
}

/// `notAfter` of [`Validity::Current`] certificates, Unix seconds (2099-01-01T00:00:00Z).
pub const CURRENT_NOT_AFTER: i64 = 4_070_908_800;

/// A CA and the files it issued, in a temp dir.
pub struct TestPki {
    dir: tempfile::TempDir,
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl TestPki {
    /// A new CA named `name`; its certificate is written to `<dir>/ca.crt`.
    pub fn new(name: &str) -> TestPki {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        set_validity(&mut params, Validity::Current);
        let key = KeyPair::generate().expect("ca key");
        let ca = CertifiedIssuer::self_signed(params, key).expect("ca cert");
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("ca.crt"), ca.pem()).expect("write ca");
        TestPki { dir, ca }
    }

    /// The directory of the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CA certificate's file.
    pub fn ca_path(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    /// A server certificate for `localhost` and `127.0.0.1` with serial `serial`, as PEM
    /// (certificate, key), not written anywhere.
    pub fn server_pem(&self, serial: u64) -> (String, String) {
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .expect("params");
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.serial_number = Some(SerialNumber::from(serial));
        set_validity(&mut params, Validity::Current);
        self.issue(params)
    }

    /// [`TestPki::server_pem`] written to `<dir>/<name>.crt` and `<name>.key`.
    pub fn server(&self, name: &str, serial: u64) -> CertFiles {
        let (cert, key) = self.server_pem(serial);
        self.write(name, &cert, &key)
    }

    /// A client certificate carrying `id`, written to `<dir>/<name>.crt` and `.key`.
    pub fn client(&self, name: &str, id: ClientId, validity: Validity) -> CertFiles {
        let (sans, cn) = match &id {
            ClientId::Uri(u) => (
                vec![SanType::URI(u.as_str().try_into().expect("uri"))],
                "uri-client".to_owned(),
            ),
            ClientId::Dns(d) => (
                vec![SanType::DnsName(d.as_str().try_into().expect("dns"))],
                "dns-client".to_owned(),
            ),
            ClientId::Cn(cn) => (Vec::new(), cn.clone()),
            ClientId::All { uri, dns, cn } => (
                vec![
                    SanType::DnsName(dns.as_str().try_into().expect("dns")),
                    SanType::URI(uri.as_str().try_into().expect("uri")),
                ],
                cn.clone(),
            ),
        };
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.subject_alt_names = sans;
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        set_validity(&mut params, validity);
        let (cert, key) = self.issue(params);
        self.write(name, &cert, &key)
    }

    fn issue(&self, params: CertificateParams) -> (String, String) {
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.ca).expect("sign");
        (cert.pem(), key.serialize_pem())
    }

    fn write(&self, name: &str, cert: &str, key: &str) -> CertFiles {
        let files = CertFiles {
            cert: self.dir.path().join(format!("{name}.crt")),
            key: self.dir.path().join(format!("{name}.key")),
        };
        std::fs::write(&files.cert, cert).expect("write cert");
        std::fs::write(&files.key, key).expect("write key");
        files
    }
}

fn set_validity(params: &mut CertificateParams, validity: Validity) {
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = match validity {
        Validity::Current => rcgen::date_time_ymd(2099, 1, 1),
        Validity::Expired => rcgen::date_time_ymd(2021, 1, 1),
    };
}

/// Replaces `path` with `content` atomically (write a sibling, then rename), as a certificate
/// manager or a Kubernetes Secret update does.
pub fn replace(path: &Path, content: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, content).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}
