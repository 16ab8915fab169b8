//! Client certificates as principals (mTLS): a certificate carrying a URI SAN, a DNS SAN
//! and a CN is the principal its URI SAN names; without that principal in the auth file, the
//! one its DNS SAN names; then its CN; with none of them, UNAUTHENTICATED naming the
//! certificate's identity. A bearer token on the same connection takes precedence over the
//! certificate.

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
async fn uri_san_then_dns_san_then_cn() {
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

    // Then the CN.
    s.rewrite(&auth_yaml(&[&by_cn, &tokened]));
    eventually(Duration::from_secs(15), || {
        let mut c = Clients::new(&channel, Bearer::none());
        async move { enqueue(&mut c, "q-cn").await.is_ok() }
    })
    .await;

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
