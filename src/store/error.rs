//! Store errors, classified once: Redis being unreachable (retry) apart from everything else.

/// A failed store call.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Redis refused, dropped or timed out the connection, or is loading: the caller should
    /// retry later.
    #[error("redis unavailable: {0}")]
    Unavailable(#[source] redis::RedisError),
    /// Redis answered with an error (a script bug, a wrong type).
    #[error("redis error: {0}")]
    Redis(#[source] redis::RedisError),
    /// A script reply or a stored job did not have the expected shape.
    #[error("undecodable store data: {0}")]
    Decode(String),
}

impl From<redis::RedisError> for StoreError {
    fn from(e: redis::RedisError) -> StoreError {
        let loading = e.code() == Some("LOADING") || e.code() == Some("MASTERDOWN");
        if e.is_io_error()
            || e.is_timeout()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || loading
        {
            StoreError::Unavailable(e)
        } else {
            StoreError::Redis(e)
        }
    }
}
