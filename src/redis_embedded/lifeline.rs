//! Ties the embedded redis-server's life to jobwire's, on Linux: when jobwire dies in a way that
//! runs none of its code (SIGKILL, the OOM killer, an abort, `exit` on a second Ctrl-C), the
//! kernel sends the child [`DEATH_SIGNAL`], so no orphan is left holding the data dir.
//!
//! prctl(PR_SET_PDEATHSIG) is set between fork and exec. It survives both execs of the
//! `sh -c 'umask 077 && exec redis-server …'` chain (prctl(2): only a set-user-ID or
//! set-group-ID binary, or one with file capabilities, clears it; neither sh nor redis-server
//! is one). Two traps are handled:
//! - The signal fires when the *thread* that forked exits, not the process. So every child is
//!   forked on one thread that is never asked to stop ([`spawn`]): forked on a tokio
//!   blocking-pool thread (gone after 10 s idle) or on a worker that `block_in_place` retired,
//!   Redis would be stopped under a running jobwire.
//! - jobwire may die between fork and prctl; then no signal will ever come. The child checks
//!   its parent after prctl and gives up if it is no longer jobwire.
//!
//! Elsewhere (macOS, the BSDs) there is no such setting: a SIGKILLed jobwire leaves its
//! redis-server running, and the next start on that data dir refuses until it is stopped.

use std::io;

use tokio::process::{Child, Command};

/// Spawns `cmd` (the redis-server chain) so that, on Linux, the child gets [`DEATH_SIGNAL`]
/// when this process dies. Blocks for the fork and exec only, as `Command::spawn` does.
pub(super) fn spawn(cmd: Command) -> io::Result<Child> {
    imp::spawn(cmd)
}

/// The signal the child gets when jobwire dies. SIGTERM, not SIGKILL: Redis treats it as
/// SHUTDOWN (its `prepareForShutdown`): it writes what is still in its append-only buffer
/// (with `appendfsync everysec` and a busy disk, writes already acknowledged may wait there
/// for up to 2 s), fsyncs the file, removes the socket and exits within about 100 ms (one
/// `serverCron` tick). SIGKILL would lose that buffer. The cost: a Redis too wedged to run
/// its event loop ignores it.
#[cfg(target_os = "linux")]
pub(super) const DEATH_SIGNAL: libc::c_int = libc::SIGTERM;

#[cfg(target_os = "linux")]
mod imp {
    use std::io;
    use std::sync::mpsc;
    use std::sync::OnceLock;

    use tokio::process::{Child, Command};

    use super::DEATH_SIGNAL;

    /// Work for the forking thread.
    type Job = Box<dyn FnOnce() + Send>;

    pub(super) fn spawn(mut cmd: Command) -> io::Result<Child> {
        arm(&mut cmd);
        // The child's reaper registers with the caller's runtime, entered on the forking thread.
        let runtime = tokio::runtime::Handle::current();
        let (reply, spawned) = mpsc::sync_channel(1);
        let job: Job = Box::new(move || {
            let _entered = runtime.enter();
            let _ = reply.send(cmd.spawn());
        });
        let gone = || io::Error::other("the thread that starts redis-server is gone");
        forking_thread()?.send(job).map_err(|_| gone())?;
        spawned.recv().map_err(|_| gone())?
    }

    /// The one thread that forks the children. It is never told to stop (the sender lives in a
    /// static), so it lives as long as the process and the death signal means jobwire died.
    fn forking_thread() -> io::Result<&'static mpsc::Sender<Job>> {
        static FORKER: OnceLock<mpsc::Sender<Job>> = OnceLock::new();
        if let Some(tx) = FORKER.get() {
            return Ok(tx);
        }
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("jobwire-redis-parent".into())
            .spawn(move || rx.into_iter().for_each(|job| job()))?;
        // Two first callers at once: the loser's sender is dropped, and its thread, having
        // forked nothing, ends.
        Ok(FORKER.get_or_init(|| tx))
    }

    /// Sets the parent-death signal in the child, between fork and exec.
    #[allow(unsafe_code)]
    fn arm(cmd: &mut Command) {
        let parent = std::process::id();
        // SAFETY: the hook runs in the forked child before exec, where only async-signal-safe
        // calls are allowed. It makes two system calls (prctl, getppid), allocates nothing and
        // takes no lock; `io::Error::from_raw_os_error`/`last_os_error` do not allocate.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, DEATH_SIGNAL as libc::c_ulong) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // jobwire died before prctl ran: the child is already an orphan and the signal
                // will never come. Do not exec Redis (std's child exits; nobody is waiting).
                if u32::try_from(libc::getppid()).ok() != Some(parent) {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::io;

    use tokio::process::{Child, Command};

    pub(super) fn spawn(mut cmd: Command) -> io::Result<Child> {
        cmd.spawn()
    }
}
