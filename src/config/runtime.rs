//! `--worker-threads`: how many threads the process's async runtime (tokio) runs on.

use clap::Args;

/// Most worker threads `--worker-threads` accepts.
pub const MAX_WORKER_THREADS: u16 = 1024;

/// The size of the async runtime that serves gRPC and HTTP and talks to Redis. Shared by
/// `serve` and `bench`; the operator commands run on the default.
#[derive(Clone, Debug, Default, Args)]
pub struct RuntimeArgs {
    /// Worker threads of the async runtime (1..=1024). Unset: one per CPU the process may use
    /// (tokio's default). Where Redis shares the machine's few cores, 1 is usually faster for
    /// one-job calls (no wake-ups of a second thread; docs/benchmark-results.md, "One worker
    /// thread"); past one core of jobwire work, more threads carry more load.
    #[arg(
        long,
        env = "JOBWIRE_WORKER_THREADS",
        value_parser = clap::value_parser!(u16).range(1..=MAX_WORKER_THREADS as i64)
    )]
    pub worker_threads: Option<u16>,
}

impl RuntimeArgs {
    /// `JOBWIRE_WORKER_THREADS=value` for `--print-config` (empty when unset: tokio's default).
    pub fn effective(&self) -> Vec<(&'static str, String)> {
        vec![(
            "JOBWIRE_WORKER_THREADS",
            self.worker_threads
                .map(|n| n.to_string())
                .unwrap_or_default(),
        )]
    }

    /// A multi-thread runtime with all drivers (I/O, time) and `--worker-threads` workers.
    ///
    /// # Errors
    /// The OS refused a thread or the I/O driver (the error is the OS's).
    pub fn build(&self) -> std::io::Result<tokio::runtime::Runtime> {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.enable_all();
        if let Some(n) = self.worker_threads {
            b.worker_threads(usize::from(n));
        }
        b.build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        rt: RuntimeArgs,
    }

    #[test]
    fn worker_threads_range_is_enforced_and_named() {
        let ok = Cmd::try_parse_from(["x", "--worker-threads", "1"]).expect("1 is in range");
        assert_eq!(ok.rt.worker_threads, Some(1));
        assert_eq!(ok.rt.effective()[0].1, "1");
        for bad in ["0", "1025", "-1", "two"] {
            let e = match Cmd::try_parse_from(["x".into(), format!("--worker-threads={bad}")]) {
                Ok(_) => panic!("--worker-threads {bad} was accepted"),
                Err(e) => e.to_string(),
            };
            assert!(e.contains("--worker-threads"), "{bad}: {e}");
        }
        let unset = Cmd::try_parse_from(["x"]).expect("the flag is optional");
        assert_eq!(unset.rt.effective()[0].1, "");
    }

    #[test]
    fn the_runtime_has_the_asked_number_of_workers() {
        for n in [1, 3] {
            let rt = RuntimeArgs {
                worker_threads: Some(n),
            }
            .build()
            .expect("a runtime");
            assert_eq!(rt.metrics().num_workers(), usize::from(n));
        }
    }
}
