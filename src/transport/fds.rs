//! The process's file descriptor limit (RLIMIT_NOFILE): raised at start from its soft value to
//! the hard one, since every connection, Redis link and file read takes one descriptor and the
//! usual soft default (1024) is far below what the kernel allows the process. The caps on
//! connections ([`super::caps`]) are then sized to keep `--fd-reserve` descriptors free, so
//! reloads (src/reload.rs) and Redis reconnects never meet "Too many open files".

/// Raises the soft descriptor limit to the hard limit (once is enough; calling again does no
/// harm) and returns the soft limit now in force. Where the limit cannot be read (not Unix),
/// or raising it fails, logs why and returns what is in force (or `u64::MAX`: unknown).
pub fn raise_nofile() -> u64 {
    #[cfg(unix)]
    {
        let before = rlimit::getrlimit(rlimit::Resource::NOFILE).map(|(soft, _)| soft);
        match rlimit::increase_nofile_limit(u64::MAX) {
            Ok(now) => {
                if before.as_ref().is_ok_and(|b| *b < now) {
                    tracing::debug!(soft = now, "raised the descriptor limit to the hard limit");
                }
                now
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot raise the descriptor limit (RLIMIT_NOFILE)");
                before.unwrap_or(u64::MAX)
            }
        }
    }
    #[cfg(not(unix))]
    {
        u64::MAX
    }
}
