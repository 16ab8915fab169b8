//! Secrets kept out of the printed configuration: `Debug` of [`ServeArgs`] (used by
//! `--print-config` and the start-up log) shows the Redis URL redacted by [`redact_url`].

use std::fmt;

use super::ServeArgs;

impl fmt::Debug for ServeArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Destructure so that a new field fails to compile until it is printed (or redacted) here.
        let Self {
            grpc_addr,
            http_addr,
            redis_url: _,
            data_dir,
            redis_fsync,
            allow_eviction,
            shutdown_grace,
            lease_duration,
            heartbeat_timeout,
            reaper_interval,
            reaper_sweep_rate,
            request_timeout,
            redis_timeout,
            redis_wait_replicas,
            redis_wait_timeout,
            max_payload_bytes,
            max_checkpoint_bytes,
            max_result_bytes,
            default_max_attempts,
            metrics_max_job_names,
            metrics_max_queues,
            max_queues,
            config,
            log_format,
            print_config,
            tls,
            auth,
            abuse,
            conn,
            request_memory,
            replica,
            ui,
            runtime,
        } = self;
        f.debug_struct("ServeArgs")
            .field("grpc_addr", grpc_addr)
            .field("http_addr", http_addr)
            .field("redis_url", &self.redacted_redis_url())
            .field("data_dir", data_dir)
            .field("redis_fsync", redis_fsync)
            .field("allow_eviction", allow_eviction)
            .field("shutdown_grace", shutdown_grace)
            .field("lease_duration", lease_duration)
            .field("heartbeat_timeout", heartbeat_timeout)
            .field("reaper_interval", reaper_interval)
            .field("reaper_sweep_rate", reaper_sweep_rate)
            .field("request_timeout", request_timeout)
            .field("redis_timeout", redis_timeout)
            .field("redis_wait_replicas", redis_wait_replicas)
            .field("redis_wait_timeout", redis_wait_timeout)
            .field("max_payload_bytes", max_payload_bytes)
            .field("max_checkpoint_bytes", max_checkpoint_bytes)
            .field("max_result_bytes", max_result_bytes)
            .field("default_max_attempts", default_max_attempts)
            .field("metrics_max_job_names", metrics_max_job_names)
            .field("metrics_max_queues", metrics_max_queues)
            .field("max_queues", max_queues)
            .field("config", config)
            .field("log_format", log_format)
            .field("print_config", print_config)
            .field("tls", tls)
            .field("auth", auth)
            .field("abuse", abuse)
            .field("conn", conn)
            .field("request_memory", request_memory)
            .field("replica", replica)
            .field("ui", ui)
            .field("runtime", runtime)
            .finish()
    }
}

/// Hides the `user:password@` part and any `pass`/`password` query value of a Redis URL.
pub fn redact_url(url: &str) -> String {
    let (mut out, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), url),
    };
    let (before_query, query) = rest
        .split_once('?')
        .map_or((rest, None), |(b, q)| (b, Some(q)));
    // Split at the *last* '@' before the query: an unencoded '/' or '@' in a password must not
    // leak. Over-redacting an odd socket path is the safe failure.
    match before_query.rsplit_once('@') {
        Some((_, host_and_path)) => {
            out.push_str("***@");
            out.push_str(host_and_path);
        }
        None => out.push_str(before_query),
    }
    if let Some(query) = query {
        out.push('?');
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _))
                    if k.eq_ignore_ascii_case("pass") || k.eq_ignore_ascii_case("password") =>
                {
                    format!("{k}=***")
                }
                _ => pair.to_owned(),
            })
            .collect();
        out.push_str(&pairs.join("&"));
    }
    out
}
