//! Wiring: the tonic router (health, reflection, the jobwire services) on the gRPC
//! listener, the HTTP port, the Redis health watch, and the orderly shutdown of section 3 of
//! DESIGN.md.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::service::Routes;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::api::{
    max_message_bytes, pb, ApiLimits, DeadLetterApi, GroupApi, JobApi, MessageSizeLayer, QueueApi,
    RequestBudget, RequestBudgetLayer, WorkerApi, WorkerService,
};
use crate::auth::Auth;
use crate::config::ServeArgs;
use crate::http::{self, HttpState, MetricsToken};
use crate::lease::{Hub, HubConfig};
use crate::metrics::{GrpcMetricsLayer, Scraper};
use crate::store::{Store, StoreError};
use crate::transport::{ConnCaps, ConnLimits, Port};

/// gRPC service names whose health is reported (plus "" for the whole server).
const SERVICES: [&str; 5] = [
    "jobwire.v1.JobService",
    "jobwire.v1.WorkerService",
    "jobwire.v1.DeadLetterService",
    "jobwire.v1.QueueService",
    "jobwire.v1.GroupService",
];
/// The largest request message of the health service: a `HealthCheckRequest` is one service
/// name (tens of bytes). Without it tonic's 4 MiB default lets anyone, unauthenticated, make
/// the server buffer nearly 4 MiB per stream.
const HEALTH_MAX_MESSAGE: usize = 4 << 10;
/// The largest request message of server reflection: a host and one file or symbol name.
const REFLECTION_MAX_MESSAGE: usize = 16 << 10;
/// How often the health watch writes to Redis and reads its `maxmemory-policy`.
const HEALTH_PERIOD: Duration = Duration::from_millis(500);
/// Longest wait for connections to close after the grace period.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

async fn set_health(reporter: &HealthReporter, serving: bool) {
    let status = if serving {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    };
    reporter.set_service_status("", status).await;
    for s in SERVICES {
        reporter.set_service_status(s, status).await;
    }
}

/// What the health watch last saw.
#[derive(Debug, Clone, PartialEq, Eq)]
enum RedisHealth {
    /// A write worked and the policy does not evict.
    Serving,
    /// Writes fail with OOM (`maxmemory` reached): still serving, so reads, acks and fails go
    /// on and workers drain the queues; enqueues get RESOURCE_EXHAUSTED.
    Full,
    /// A write failed otherwise: unreachable, a replica, loading or failing over.
    Down,
    /// `maxmemory-policy` is not `noeviction` (someone changed it at run time) and
    /// `--allow-eviction` is off: Redis may delete jobs and leases.
    Evicting(String),
}

impl RedisHealth {
    fn serving(&self) -> bool {
        matches!(self, RedisHealth::Serving | RedisHealth::Full)
    }
}

/// Every [`HEALTH_PERIOD`], proves a write works (not a PING: a replica answers PING) and,
/// unless `allow_eviction`, that `maxmemory-policy` is still `noeviction`; mirrors the verdict
/// into gRPC health and `/readyz`, logging each change with its reason, until `stop`.
async fn watch_redis(
    store: Store,
    reporter: HealthReporter,
    ready: Arc<AtomicBool>,
    allow_eviction: bool,
    stop: CancellationToken,
) {
    let mut last: Option<RedisHealth> = None;
    loop {
        let now = match store.probe_write().await {
            Ok(()) => RedisHealth::Serving,
            Err(StoreError::OutOfMemory(e)) => {
                if last != Some(RedisHealth::Full) {
                    tracing::warn!(error = %e, "redis is full (maxmemory reached): enqueues get RESOURCE_EXHAUSTED until memory is freed; still serving so workers can drain");
                }
                RedisHealth::Full
            }
            Err(e) => {
                if last != Some(RedisHealth::Down) {
                    tracing::error!(error = %e, "redis does not take writes (unreachable, a replica, loading or failing over): not serving");
                }
                RedisHealth::Down
            }
        };
        let now = match now {
            RedisHealth::Down => RedisHealth::Down,
            _ if allow_eviction => now,
            _ => match store.maxmemory_policy().await {
                Ok(p) if p != "noeviction" => {
                    if last != Some(RedisHealth::Evicting(p.clone())) {
                        tracing::error!(policy = %p, "redis maxmemory-policy is {p:?}, not \"noeviction\": eviction would silently delete jobs and leases; not serving, and new jobs are refused (UNAVAILABLE), until it is noeviction again (or run with --allow-eviction)");
                    }
                    RedisHealth::Evicting(p)
                }
                Ok(_) => now,
                Err(e) => {
                    // Cannot tell (e.g. a timeout): keep the last verdict on the policy.
                    tracing::debug!(error = %e, "cannot read redis maxmemory-policy");
                    match &last {
                        Some(RedisHealth::Evicting(p)) => RedisHealth::Evicting(p.clone()),
                        _ => now,
                    }
                }
            },
        };
        // New jobs are refused while the policy evicts (`store/eviction.rs`); a Redis that
        // does not answer keeps the last verdict.
        match &now {
            RedisHealth::Evicting(p) => store.set_evicting(Some(p.clone())),
            RedisHealth::Down => {}
            RedisHealth::Serving | RedisHealth::Full => store.set_evicting(None),
        }
        if last.as_ref() != Some(&now) {
            let serving = now.serving();
            if serving && !last.as_ref().is_some_and(RedisHealth::serving) {
                tracing::info!("redis takes writes: serving");
            }
            ready.store(serving, Ordering::Relaxed);
            let up = !matches!(now, RedisHealth::Down);
            metrics::gauge!(crate::metrics::REDIS_UP).set(if up { 1.0 } else { 0.0 });
            set_health(&reporter, serving).await;
            last = Some(now);
        }
        tokio::select! {
            _ = tokio::time::sleep(HEALTH_PERIOD) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// The `/metrics` token (`--metrics-token-file`, read now and reloaded on change) and the
/// listener of `--metrics-addr`. Errors name the flag.
async fn metrics_setup(
    cfg: &ServeArgs,
    stop_reload: CancellationToken,
) -> anyhow::Result<(Option<Arc<MetricsToken>>, Option<TcpListener>)> {
    let token = match &cfg.abuse.metrics_token_file {
        Some(path) => {
            let token = Arc::new(MetricsToken::load(path).map_err(anyhow::Error::msg)?);
            let watched = token.clone();
            crate::reload::watch(
                "metrics-token",
                vec![path.clone()],
                crate::reload::DEFAULT_POLL,
                stop_reload,
                move || watched.reload(),
            );
            Some(token)
        }
        None => None,
    };
    let listener = match cfg.abuse.metrics_addr {
        Some(addr) => {
            let l = TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen for metrics on --metrics-addr {addr}"))?;
            tracing::info!(metrics = %l.local_addr()?, "serving /metrics on its own address");
            Some(l)
        }
        None => None,
    };
    Ok((token, listener))
}

/// Raises the descriptor limit and sizes the gRPC port's connection caps to leave
/// `--fd-reserve` descriptors and the HTTP listeners' caps free (`--max-connections`).
fn connection_limits(cfg: &ServeArgs, metrics_listener: bool) -> anyhow::Result<ConnLimits> {
    let nofile = crate::transport::fds::raise_nofile();
    let http_listeners = 1 + u64::from(metrics_listener);
    let cap = cfg
        .conn
        .grpc_connection_cap(nofile, http_listeners)
        .map_err(anyhow::Error::msg)?;
    let fds_needed = cap + http_listeners * u64::from(cfg.conn.http_max_connections);
    if fds_needed.saturating_add(cfg.conn.fd_reserve) > nofile {
        tracing::warn!(nofile, max_connections = cap, fd_reserve = cfg.conn.fd_reserve,
            "--max-connections and --http-max-connections leave less than --fd-reserve of the descriptor limit: at the caps, reloads and Redis reconnects may fail with \"Too many open files\"");
    }
    tracing::info!(
        nofile,
        grpc_max_connections = cap,
        http_max_connections = cfg.conn.http_max_connections,
        max_connections_per_ip = cfg.conn.max_connections_per_ip,
        fd_reserve = cfg.conn.fd_reserve,
        "connection caps"
    );
    Ok(ConnLimits {
        caps: ConnCaps::new(Port::Grpc, cap, cfg.conn.max_connections_per_ip),
        preface_timeout: cfg.conn.grpc_preface_timeout,
    })
}

/// The five jobwire services, each behind the authentication interceptor of `auth`
/// ([`Auth::guard`]: it also refuses, before the body is read, a principal that may call the
/// RPC on no queue), as tonic
/// [`Routes`]: the gRPC listener serves them (with health and reflection beside them), and
/// the dashboard calls them in process (`crate::ui`), so both get the same authentication,
/// authorization, validation and audit.
pub fn api_routes(cfg: &ServeArgs, hub: &Hub, store: &Store, auth: &Auth) -> Routes {
    let limits = ApiLimits {
        max_payload_bytes: cfg.max_payload_bytes,
        default_max_attempts: cfg.default_max_attempts,
        max_checkpoint_bytes: cfg.max_checkpoint_bytes,
        max_result_bytes: cfg.max_result_bytes,
    };
    let max_message = max_message_bytes(cfg.max_payload_bytes);
    Routes::new(
        auth.guard(
            pb::job_service_server::JobServiceServer::new(JobApi::new(
                hub.clone(),
                limits.clone(),
                auth.clone(),
            ))
            .max_decoding_message_size(max_message),
        ),
    )
    .add_service(
        auth.guard(
            pb::worker_service_server::WorkerServiceServer::new(WorkerService(Arc::new(
                WorkerApi::new(hub.clone(), auth.clone())
                    .with_stream_limits(crate::abuse::StreamLimits::new(&cfg.abuse))
                    .with_limits(limits),
            )))
            .max_decoding_message_size(max_message),
        ),
    )
    .add_service(
        auth.guard(
            pb::dead_letter_service_server::DeadLetterServiceServer::new(DeadLetterApi::new(
                store.clone(),
                auth.clone(),
            ))
            .max_decoding_message_size(max_message),
        ),
    )
    .add_service(
        auth.guard(
            pb::queue_service_server::QueueServiceServer::new(QueueApi::new(
                hub.clone(),
                auth.clone(),
            ))
            .max_decoding_message_size(max_message),
        ),
    )
    .add_service(
        auth.guard(
            pb::group_service_server::GroupServiceServer::new(GroupApi::new(
                hub.clone(),
                auth.clone(),
            ))
            .max_decoding_message_size(max_message),
        ),
    )
}

/// Serves gRPC on `grpc` and HTTP on `http` over `store` until `shutdown` resolves, then
/// drains: health NOT_SERVING, no new leases, `Draining` to every stream, up to
/// `shutdown_grace` for acks, the remaining leases handed back to waiting, connections closed.
/// Every call of the four jobwire services is authenticated and authorized by `auth`
/// (health and reflection stay open); the auth file is reloaded on change while serving.
pub async fn serve(
    cfg: &ServeArgs,
    auth: Auth,
    store: Store,
    grpc: TcpListener,
    http_listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    // Ends the token file's reload watch when serving ends (or this future is dropped).
    let stop_token_watch = CancellationToken::new();
    let _stop_token_watch = stop_token_watch.clone().drop_guard();
    let (metrics_token, metrics_listener) = metrics_setup(cfg, stop_token_watch).await?;
    if metrics_token.is_none() {
        let metrics_at = match &metrics_listener {
            Some(l) => l.local_addr()?,
            None => http_listener.local_addr()?,
        };
        if !metrics_at.ip().is_loopback() {
            tracing::warn!(metrics = %metrics_at, "/metrics (queue names, depths, rates) is open to anyone who can reach {metrics_at}: give --metrics-token-file, or keep that port on a private network");
        }
    }
    let handle = crate::metrics::install();
    // After the recorder: the caps start their metrics at 0.
    let grpc_limits = connection_limits(cfg, metrics_listener.is_some())?;
    crate::metrics::labels::set_max_job_names(cfg.metrics_max_job_names);
    crate::metrics::labels::set_max_queues(cfg.metrics_max_queues);
    let replica_id = cfg.replica.resolve_id();
    tracing::info!(replica_id = %replica_id, "this replica's id (ListWorkers; --replica-id)");
    let hub = Hub::new(
        store.clone(),
        HubConfig {
            lease_duration: cfg.lease_duration,
            heartbeat_timeout: cfg.heartbeat_timeout,
            reaper_interval: cfg.reaper_interval,
            sweep_rate: cfg.reaper_sweep_rate,
            replica_id: replica_id.clone(),
            workers_report_interval: cfg.replica.workers_report_interval,
        },
    );
    hub.start_background();

    let (reporter, health_service) = tonic_health::server::health_reporter();
    set_health(&reporter, false).await;
    let ready = Arc::new(AtomicBool::new(false));
    let stop_watch = CancellationToken::new();
    let watch = tokio::spawn(watch_redis(
        store.clone(),
        reporter.clone(),
        ready.clone(),
        cfg.allow_eviction,
        stop_watch.clone(),
    ));

    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            // google.rpc.ErrorInfo, BadRequest, ...: lets grpcurl decode the error details.
            .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection()
        .build_v1()
        .context("reflection v1")?
        .max_decoding_message_size(REFLECTION_MAX_MESSAGE);
    let reflection_v1alpha = reflection()
        .build_v1alpha()
        .context("reflection v1alpha")?
        .max_decoding_message_size(REFLECTION_MAX_MESSAGE);
    let health_service = health_service.max_decoding_message_size(HEALTH_MAX_MESSAGE);

    // Requests up to a full batch of max payloads; replies (a lease, GetJob, a page of dead
    // letters) are not capped by the server: clients size their own receive limit.
    let max_message = max_message_bytes(cfg.max_payload_bytes);
    let stop_grpc = CancellationToken::new();
    // Ends the auth-file reload watch when serving ends (or this future is dropped).
    let stop_auth_watch = CancellationToken::new();
    let _stop_auth_watch = stop_auth_watch.clone().drop_guard();
    auth.watch(stop_auth_watch);
    let grpc_local = grpc.local_addr()?;
    if cfg.auth.open_to_network(grpc_local) {
        tracing::warn!(grpc = %grpc_local, "INSECURE: no --auth-file and gRPC listens on a non-loopback address (--insecure): anyone who can reach it may enqueue, lease, replay, purge and delete jobs of every queue");
    }
    let api = api_routes(cfg, &hub, &store, &auth);
    let router = tonic::transport::Server::builder()
        .timeout(cfg.request_timeout)
        .layer(GrpcMetricsLayer)
        .layer(MessageSizeLayer { limit: max_message })
        .layer(RequestBudgetLayer {
            budget: RequestBudget::from_args(&cfg.request_memory),
        })
        .http2_keepalive_interval(Some(cfg.conn.grpc_keepalive_interval))
        .http2_keepalive_timeout(Some(cfg.conn.grpc_keepalive_timeout));
    let router = crate::abuse::http2_limits(router, &cfg.abuse).add_routes(
        api.clone()
            .add_service(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha),
    );
    let tls = crate::transport::ServerTls::load(&cfg.tls).map_err(anyhow::Error::msg)?;
    // Ends the TLS reload watch when serving ends (or this future is dropped).
    let stop_reload = CancellationToken::new();
    let _stop_reload = stop_reload.clone().drop_guard();
    if let Some(tls) = &tls {
        tls.watch(stop_reload);
    }
    let incoming = crate::transport::incoming(grpc, tls, grpc_limits);
    let grpc_stop = stop_grpc.clone();
    let grpc_task = tokio::spawn(async move {
        router
            .serve_with_incoming_shutdown(incoming, grpc_stop.cancelled_owned())
            .await
    });
    let stop_http = CancellationToken::new();
    let scraper = Arc::new(Scraper::new(handle, hub.clone()));
    let http_state = HttpState::new(ready.clone())
        .with_metrics(Arc::new(move || {
            let scraper = scraper.clone();
            Box::pin(async move { scraper.render().await })
        }))
        .with_metrics_token(metrics_token);
    // The DNS-rebinding guard (`http::host`): on /ui, and on /metrics unless a token
    // protects it (a rebinding page cannot send the token).
    let hosts = http::AllowedHosts::new(&cfg.ui.http_allowed_hosts);
    let metrics_routes = match &http_state.metrics_token {
        Some(_) => http::metrics_router(http_state.clone()),
        None => http::host_checked(http::metrics_router(http_state.clone()), hosts.clone()),
    };
    // The dashboard, on the main HTTP port only (never on --metrics-addr's listener).
    let ui = if cfg.ui.enabled {
        let http_local = http_listener.local_addr()?;
        if !auth.enabled() && !http_local.ip().is_loopback() {
            tracing::warn!(http = %http_local, "INSECURE: --ui without --auth-file on a non-loopback address (--insecure): anyone who can reach it may pause, purge, replay and delete through the dashboard");
        }
        tracing::info!(read_only = cfg.ui.read_only, "serving the dashboard at /ui");
        let ui = crate::ui::router(crate::ui::UiState::new(
            crate::ui::Api::new(api, max_message),
            auth.clone(),
            &cfg.ui,
        ));
        http::host_checked(ui, hosts)
    } else {
        axum::Router::new()
    };
    let limits = http::HttpLimits::from_args(&cfg.conn);
    let http_task = match metrics_listener {
        Some(l) => {
            let stop = stop_http.clone();
            let routes = metrics_routes;
            let metrics_limits = limits.clone();
            tokio::spawn(async move {
                http::serve_with_limits(l, routes, &metrics_limits, Port::Metrics, stop).await
            });
            let routes = http::health_router(http_state).merge(ui);
            let stop = stop_http.clone();
            tokio::spawn(async move {
                http::serve_with_limits(http_listener, routes, &limits, Port::Http, stop).await
            })
        }
        None => {
            let routes = http::health_router(http_state)
                .merge(metrics_routes)
                .merge(ui);
            let stop = stop_http.clone();
            tokio::spawn(async move {
                http::serve_with_limits(http_listener, routes, &limits, Port::Http, stop).await
            })
        }
    };

    shutdown.await;
    tracing::info!(grace = ?cfg.shutdown_grace, "shutting down: draining streams");
    stop_watch.cancel();
    let _ = watch.await;
    ready.store(false, Ordering::Relaxed);
    set_health(&reporter, false).await;
    hub.shutdown(cfg.shutdown_grace).await;
    stop_grpc.cancel();
    stop_http.cancel();
    match tokio::time::timeout(CLOSE_TIMEOUT, grpc_task).await {
        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "grpc server ended with an error"),
        Err(_) => {
            tracing::warn!("grpc connections still open after the close timeout; leaving them")
        }
        _ => {}
    }
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, http_task).await;
    tracing::info!("stopped");
    Ok(())
}
