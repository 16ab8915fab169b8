//! A job's payload: opaque bytes, or JSON with content type `application/json`.

use serde::Serialize;

/// What a job carries: bytes and their content type.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Payload {
    /// The bytes (the server stores them as they are).
    pub bytes: Vec<u8>,
    /// Their media type; empty for opaque bytes.
    pub content_type: String,
}

impl Payload {
    /// `value` encoded as JSON, content type `application/json`.
    pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<Payload, serde_json::Error> {
        Ok(Payload {
            bytes: serde_json::to_vec(value)?,
            content_type: "application/json".into(),
        })
    }

    /// Opaque bytes (no content type).
    pub fn bytes(bytes: impl Into<Vec<u8>>) -> Payload {
        Payload {
            bytes: bytes.into(),
            content_type: String::new(),
        }
    }
}

impl From<Vec<u8>> for Payload {
    fn from(b: Vec<u8>) -> Payload {
        Payload::bytes(b)
    }
}

impl From<&[u8]> for Payload {
    fn from(b: &[u8]) -> Payload {
        Payload::bytes(b)
    }
}

impl From<serde_json::Value> for Payload {
    fn from(v: serde_json::Value) -> Payload {
        Payload {
            bytes: v.to_string().into_bytes(),
            content_type: "application/json".into(),
        }
    }
}
