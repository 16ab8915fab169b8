//! Certificates replaced while the server runs: under load with worker streams open (new
//! connections get the new certificate, open streams never break, every job is acked exactly
//! once), a broken replacement refused with the old certificate serving on, and SIGHUP.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobwire::pb;
use jobwire::pb::job_service_client::JobServiceClient;

use crate::certs::{replace, ClientId, TestPki, Validity};
use crate::harness::{eventually, spec, Recv, TestRedis, TestWorker};
use crate::tls_harness::{pem_serial, server_serial, start_server_with, tls_channel, tls_config};

/// Jobs the producer enqueues during the rotation test.
const JOBS: usize = 600;
/// Worker streams open through the rotations.
const WORKERS: usize = 3;

/// Works leases on `w` (acks sent on the stream as leases arrive; each Settled must be OK)
/// until `JOBS` acks are counted in `acked`; returns the first stream error or end, if any
/// (it must not happen).
async fn work(mut w: TestWorker, acked: Arc<Mutex<HashMap<String, u32>>>) -> Option<String> {
    use pb::subscribe_response::Message as Out;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        if acked.lock().expect("lock").values().sum::<u32>() as usize >= JOBS {
            return None;
        }
        if tokio::time::Instant::now() > deadline {
            return Some("deadline".into());
        }
        match w.recv(Duration::from_millis(200)).await {
            Recv::Msg(Out::Lease(l)) => {
                let job = l.job.as_ref().expect("job");
                w.send(pb::subscribe_request::Message::Ack(pb::AckRequest {
                    result: Vec::new(),
                    queue: job.queue.clone(),
                    job_id: job.job_id.clone(),
                    lease_token: l.lease_token.clone(),
                }));
            }
            Recv::Msg(Out::Settled(s)) => {
                assert_eq!(s.code, 0, "ack of {}: {s:?}", s.job_id);
                *acked.lock().expect("lock").entry(s.job_id).or_default() += 1;
            }
            Recv::Msg(Out::Draining(_) | Out::Cancel(_) | Out::ProgressSaved(_))
            | Recv::Timeout => {}
            Recv::End => return Some("stream ended".into()),
            Recv::Error(s) => return Some(format!("stream error: {s:?}")),
        }
    }
}

#[tokio::test]
async fn certificates_rotate_under_load_without_breaking_streams_or_losing_jobs() {
    let redis = TestRedis::start().await;
    let pki = TestPki::new("jobwire test CA");
    let client = pki.client(
        "worker",
        ClientId::Uri("spiffe://jobwire.test/worker".into()),
        Validity::Current,
    );
    let server = pki.server("server", 1);
    let ca = pki.ca_path();
    let app = start_server_with(
        tls_config(&redis.url, &server, Some(&ca)),
        &ca,
        Some(&client),
    )
    .await;
    let first = pem_serial(&server.cert_pem());
    assert_eq!(
        server_serial(app.grpc, &pki.ca_pem(), Some(&client)).await,
        first
    );

    // Workers on open streams: two share the harness's connection, one has its own.
    let acked = Arc::new(Mutex::new(HashMap::new()));
    let mut workers = Vec::new();
    for i in 0..WORKERS {
        let ch = if i == 0 {
            tls_channel(app.grpc, &ca, Some(&client))
                .await
                .expect("connect")
        } else {
            app.channel.clone()
        };
        let w = TestWorker::open_on(ch, &["rot"], 8, &format!("w{i}")).await;
        workers.push(tokio::spawn(work(w, acked.clone())));
    }

    // A producer enqueueing all the time, on a new connection every 100 jobs.
    let producer = {
        let (grpc, ca, client) = (app.grpc, ca.clone(), client.clone());
        tokio::spawn(async move {
            let mut jobs = None;
            for i in 0..JOBS {
                if i % 100 == 0 {
                    let ch = tls_channel(grpc, &ca, Some(&client))
                        .await
                        .unwrap_or_else(|e| panic!("producer connect at job {i}: {e:?}"));
                    jobs = Some(JobServiceClient::new(ch));
                }
                let r = jobs
                    .as_mut()
                    .expect("client")
                    .enqueue(pb::EnqueueRequest {
                        job: Some(spec("rot", &format!("j{i}"))),
                    })
                    .await;
                assert!(r.is_ok(), "enqueue {i}: {r:?}");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };

    // Two rotations while jobs flow; each new certificate is seen by new connections.
    for serial in [2, 3] {
        tokio::time::sleep(Duration::from_millis(600)).await;
        let (cert, key) = pki.server_pem(serial);
        let want = pem_serial(&cert);
        replace(&server.key, &key);
        replace(&server.cert, &cert);
        eventually(Duration::from_secs(10), || {
            let (pem, client, want) = (pki.ca_pem(), client.clone(), want.clone());
            async move { server_serial(app.grpc, &pem, Some(&client)).await == want }
        })
        .await;
        println!("serving serial {want}");
    }

    producer.await.expect("producer");
    let mut broken = Vec::new();
    for w in workers {
        if let Some(why) = w.await.expect("worker") {
            broken.push(why);
        }
    }
    let acked = acked.lock().expect("lock").clone();
    if !broken.is_empty() {
        // Say where the missing jobs are, to tell a lost job from a stuck stream.
        let mut missing = Vec::new();
        for i in (0..JOBS).filter(|i| !acked.contains_key(&format!("j{i}"))) {
            let job = crate::harness::get_job(&app, "rot", &format!("j{i}")).await;
            missing.push((i, job.state, job.attempts_made));
        }
        panic!(
            "worker streams broke: {broken:?}; jobs not acked (id, state, attempts): {missing:?}"
        );
    }
    assert_eq!(acked.len(), JOBS, "every job acked");
    let twice: Vec<_> = acked.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "acked more than once: {twice:?}");
}

#[tokio::test]
async fn a_broken_replacement_is_refused_and_the_old_certificate_serves_on() {
    let redis = TestRedis::start().await;
    let pki = TestPki::new("jobwire test CA");
    let server = pki.server("server", 1);
    let ca = pki.ca_path();
    let app = start_server_with(tls_config(&redis.url, &server, None), &ca, None).await;
    let first = pem_serial(&server.cert_pem());
    let other_key = pki.server_pem(7).1;
    let (next_cert, next_key) = pki.server_pem(8);
    for (what, cert, key) in [
        (
            "not PEM",
            "this is not a certificate\n".to_owned(),
            server.key_pem(),
        ),
        ("a key of another certificate", server.cert_pem(), other_key),
    ] {
        replace(&server.key, &key);
        replace(&server.cert, &cert);
        // Several polls (100ms) later, new connections still get the first certificate.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            server_serial(app.grpc, &pki.ca_pem(), None).await,
            first,
            "after {what}"
        );
        let ch = tls_channel(app.grpc, &ca, None).await.expect("connect");
        JobServiceClient::new(ch)
            .enqueue(pb::EnqueueRequest {
                job: Some(spec("broken", what)),
            })
            .await
            .unwrap_or_else(|e| panic!("served after {what}: {e:?}"));
    }
    // A good file again is taken: the watch goes on after refusals.
    replace(&server.key, &next_key);
    replace(&server.cert, &next_cert);
    let want = pem_serial(&next_cert);
    eventually(Duration::from_secs(10), || {
        let (pem, want) = (pki.ca_pem(), want.clone());
        async move { server_serial(app.grpc, &pem, None).await == want }
    })
    .await;
}

#[tokio::test]
async fn sighup_reloads_the_certificate() {
    // This test process takes SIGHUP itself (it would end it otherwise); every server of the
    // process reloads, which is harmless.
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .expect("listen for SIGHUP");
    let redis = TestRedis::start().await;
    let pki = TestPki::new("jobwire test CA");
    let server = pki.server("server", 1);
    let ca = pki.ca_path();
    let mut cfg = tls_config(&redis.url, &server, None);
    cfg.tls.tls_reload_interval = Duration::from_secs(3600);
    let app = start_server_with(cfg, &ca, None).await;
    let first = pem_serial(&server.cert_pem());
    let (cert, key) = pki.server_pem(5);
    replace(&server.key, &key);
    replace(&server.cert, &cert);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        server_serial(app.grpc, &pki.ca_pem(), None).await,
        first,
        "no poll for an hour: the change alone is not seen yet"
    );
    let pid = std::process::id().to_string();
    let ok = std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .expect("run kill")
        .success();
    assert!(ok, "kill -HUP {pid}");
    tokio::time::timeout(Duration::from_secs(5), hup.recv())
        .await
        .expect("SIGHUP delivered");
    let want = pem_serial(&cert);
    eventually(Duration::from_secs(10), || {
        let (pem, want) = (pki.ca_pem(), want.clone());
        async move { server_serial(app.grpc, &pem, None).await == want }
    })
    .await;
}
