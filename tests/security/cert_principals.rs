//! Client certificates as principals (mTLS): a certificate carrying a URI SAN, a DNS SAN
//! and a CN is the principal its URI SAN names; without that principal in the auth file, the
//! one its DNS SAN names; never the one its CN names (unless `--tls-client-identity-cn`),
//! which a certificate without any SAN is known by; with none of them, UNAUTHENTICATED
//! naming the certificate's identity. A bearer token on the same connection takes precedence
//! over the certificate.

use std::time::Duration;

use jobwire::pb;
use tonic::Code;

use crate::certs::{ClientId, Validity};
use crate::harness::eventually;
use crate::secured::*;

const URI: &str = "spiffe://jobwire.test/ns/jobs/sa/mailer";
const DNS: &str = "mailer.jobwire.test";
const CN: &str = "mailer-cn";

async fn enqueue(c: &mut Clients, q: &str) -> Result<(), tonic::Status> {
    c.jobs
        .enqueue(pb::EnqueueRequest {
            job: Some(job(q, "x")),
        })
        .await
        .map(drop)
}

#[tokio::test]
async fn uri_san_then_dns_san_never_the_cn_of_a_certificate_with_sans() {
    let by_uri = Who::new("by-uri", &[(&["q-uri"], &["producer"])]).with_cert(URI);
    let by_dns = Who::new("by-dns", &[(&["q-dns"], &["producer"])]).with_cert(DNS);
    let by_cn = Who::new("by-cn", &[(&["q-cn"], &["producer"])]).with_cert(CN);
    let tokened = Who::new("tokened", &[(&["q-token"], &["producer"])]);
    let harness_id = ClientId::Uri("spiffe://jobwire.test/harness".into());
    let s = Secured::start_tls(
        &[&by_uri, &by_dns, &by_cn, &tokened],
        true,
        Some(harness_id),
    )
    .await;
    let all = s.pki.client(
        "mailer",
        ClientId::All {
            uri: URI.into(),
            dns: DNS.into(),
            cn: CN.into(),
        },
        Validity::Current,
    );
    let channel = s.channel_as(&all).await;
    let mut c = Clients::new(&channel, Bearer::none());

    enqueue(&mut c, "q-uri")
        .await
        .expect("the URI SAN's principal");
    let st = enqueue(&mut c, "q-dns").await.expect_err("not by-dns");
    assert_eq!(st.code(), Code::PermissionDenied);
    assert!(st.message().contains("\"by-uri\""), "{}", st.message());

    // Without by-uri in the file, the DNS SAN names the principal (same connection).
    s.rewrite(&auth_yaml(&[&by_dns, &by_cn, &tokened]));
    eventually(Duration::from_secs(15), || {
        let mut c = Clients::new(&channel, Bearer::none());
        async move { enqueue(&mut c, "q-dns").await.is_ok() }
    })
    .await;
    let st = enqueue(&mut c, "q-uri").await.expect_err("by-uri is gone");
    assert_eq!(st.code(), Code::PermissionDenied);
    assert!(st.message().contains("\"by-dns\""), "{}", st.message());

    // Not the CN: the certificate has SANs, and the CA vouches for those only.
    s.rewrite(&auth_yaml(&[&by_cn, &tokened]));
    eventually(Duration::from_secs(15), || {
        let mut c = Clients::new(&channel, Bearer::none());
        async move {
            enqueue(&mut c, "q-dns")
                .await
                .is_err_and(|st| st.code() == Code::Unauthenticated)
        }
    })
    .await;
    let st = enqueue(&mut c, "q-cn").await.expect_err("not by its CN");
    assert_eq!(st.code(), Code::Unauthenticated, "{}", st.message());
    assert!(
        st.message().contains("--tls-client-identity-cn"),
        "{}",
        st.message()
    );

    // A bearer token on a connection with a certificate: the token's principal.
    let mut t = Clients::new(&channel, tokened.bearer());
    enqueue(&mut t, "q-token")
        .await
        .expect("the token's principal");
    let st = enqueue(&mut t, "q-cn")
        .await
        .expect_err("not the certificate's");
    assert!(st.message().contains("\"tokened\""), "{}", st.message());

    // None of its identities in the file: UNAUTHENTICATED, naming the certificate.
    s.rewrite(&auth_yaml(&[&tokened]));
    eventually(Duration::from_secs(15), || {
        let mut c = Clients::new(&channel, Bearer::none());
        async move {
            enqueue(&mut c, "q-cn")
                .await
                .is_err_and(|st| st.code() == Code::Unauthenticated)
        }
    })
    .await;
    let st = enqueue(&mut c, "q-cn")
        .await
        .expect_err("unknown certificate");
    assert!(st.message().contains(URI), "{}", st.message());
}

/// The reproduction of issue 31: a certificate whose URI SAN names no principal but whose
/// CN names an admin. UNAUTHENTICATED by default; known by its CN with
/// `--tls-client-identity-cn`; a certificate with a CN and no SAN is known by its CN either way.
#[tokio::test]
async fn a_cn_naming_an_admin_does_not_rescue_an_unknown_uri_san() {
    const ADMIN_CN: &str = "ops-admin";
    let admin = Who::new("ops", &[(&["*"], &["producer", "admin"])]).with_cert(ADMIN_CN);
    let harness_id = ClientId::Uri("spiffe://jobwire.test/harness".into());
    for opt_in in [false, true] {
        let s = Secured::start_with(&[&admin], true, Some(harness_id.clone()), |cfg| {
            cfg.auth.tls_client_identity_cn = opt_in;
        })
        .await;
        let forged = s.pki.client(
            "forged",
            ClientId::All {
                uri: "spiffe://elsewhere.test/ns/x/sa/nobody".into(),
                dns: "nobody.elsewhere.test".into(),
                cn: ADMIN_CN.into(),
            },
            Validity::Current,
        );
        let mut c = Clients::new(&s.channel_as(&forged).await, Bearer::none());
        let purge = enqueue(&mut c, "q-admin").await;
        if opt_in {
            purge.expect("--tls-client-identity-cn: the CN names the principal");
        } else {
            let st = purge.expect_err("a certificate with SANs is not known by its CN");
            assert_eq!(st.code(), Code::Unauthenticated, "{}", st.message());
            assert!(st.message().contains("elsewhere.test"), "{}", st.message());
        }

        let cn_only = s
            .pki
            .client("cn-only", ClientId::Cn(ADMIN_CN.into()), Validity::Current);
        let mut c = Clients::new(&s.channel_as(&cn_only).await, Bearer::none());
        enqueue(&mut c, "q-admin")
            .await
            .expect("a certificate without SANs is known by its CN");
    }
}
