//! The protobuf codec of every jobwire service (generated code names it through
//! `codec_path` in `build.rs`): prost's encoder as is, and a decoder that answers a message
//! that does not parse (bad wire format, malformed UTF-8 in a string field) with
//! INVALID_ARGUMENT naming the innermost message and field, where `tonic-prost` answers
//! INTERNAL. The request is the client's mistake and retrying it cannot help, which is what
//! INVALID_ARGUMENT says; INTERNAL would send operators looking for a server bug.
//!
//! The same codec decodes replies in the crate's own clients (tonic generates one codec for
//! both sides), where a malformed reply also reads as INVALID_ARGUMENT.

use std::marker::PhantomData;

use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::Status;
use tonic_prost::ProstEncoder;

use crate::Error;

/// prost encoding, and decode errors as INVALID_ARGUMENT. `T` is sent, `U` received.
#[derive(Debug, Clone)]
pub struct ProtoCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for ProtoCodec<T, U> {
    fn default() -> Self {
        ProtoCodec(PhantomData)
    }
}

impl<T, U> Codec for ProtoCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProtoDecoder<U>;

    fn encoder(&mut self) -> ProstEncoder<T> {
        ProstEncoder::default()
    }

    fn decoder(&mut self) -> ProtoDecoder<U> {
        ProtoDecoder(PhantomData)
    }
}

/// Decodes a `U`; see the module doc for the error.
#[derive(Debug, Clone)]
pub struct ProtoDecoder<U>(PhantomData<U>);

impl<U: prost::Message + Default> Decoder for ProtoDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        U::decode(buf).map(Some).map_err(|e| malformed(&e).into())
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

/// The error for a message that did not parse: the field is the innermost `Message.field`
/// of prost's description (`failed to decode Protobuf message: JobSpec.queue:
/// EnqueueRequest.job: invalid string value: ...`), else `message`.
pub(crate) fn malformed(e: &prost::DecodeError) -> Error {
    let text = e.to_string();
    let detail = text
        .strip_prefix("failed to decode Protobuf message: ")
        .unwrap_or(&text);
    let field = detail
        .split(": ")
        .next()
        .filter(|f| {
            f.split_once('.').is_some_and(|(m, n)| {
                !m.is_empty()
                    && !n.is_empty()
                    && f.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "._".contains(c))
            })
        })
        .unwrap_or("message");
    Error::invalid(field, format!("malformed protobuf message: {detail}"))
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::api::pb;

    #[test]
    fn names_the_innermost_field_or_the_message() {
        // EnqueueRequest.job = JobSpec { queue: "\xff" }
        let bad = [0x0a, 0x03, 0x0a, 0x01, 0xff];
        let e = pb::EnqueueRequest::decode(&bad[..]).expect_err("bad UTF-8");
        match malformed(&e) {
            Error::InvalidArgument { field, reason } => {
                assert_eq!(field, "JobSpec.queue");
                assert!(reason.contains("UTF-8"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        let e = pb::EnqueueRequest::decode(&[0x0a, 0x7f][..]).expect_err("underflow");
        assert!(
            matches!(malformed(&e), Error::InvalidArgument { field, .. } if field == "EnqueueRequest.job" || field == "message")
        );
    }
}
