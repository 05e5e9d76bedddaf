//! How queue items become bytes in Redis and back.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Error, Result};

/// Turns queue items into bytes and back.
///
/// Queues made with [`Client::delayed_queue`](crate::Client::delayed_queue) and
/// [`Client::blocking_queue`](crate::Client::blocking_queue) use [`Json`]. Implement this trait
/// for another format (MessagePack, protobuf, …) and pass it to
/// [`Client::delayed_queue_with_codec`](crate::Client::delayed_queue_with_codec) /
/// [`Client::blocking_queue_with_codec`](crate::Client::blocking_queue_with_codec). Producers and
/// consumers of one queue must agree on the codec.
///
/// Encoding runs before anything is sent, so an encoding error leaves the queue unchanged. An
/// item that cannot be decoded when it is taken is moved to the queue's dead-letter hash (see
/// [`BlockingQueue`](crate::BlockingQueue)) rather than lost or delivered again.
///
/// # Examples
///
/// ```
/// use latchkey_redis::{Codec, Error};
///
/// /// Plain UTF-8 strings, without JSON quotes.
/// #[derive(Clone, Copy, Debug, Default)]
/// struct Utf8;
///
/// impl Codec<String> for Utf8 {
///     fn encode(&self, item: &String) -> latchkey_redis::Result<Vec<u8>> {
///         Ok(item.as_bytes().to_vec())
///     }
///     fn decode(&self, bytes: &[u8]) -> latchkey_redis::Result<String> {
///         String::from_utf8(bytes.to_vec()).map_err(|e| Error::Codec { reason: e.to_string() })
///     }
/// }
///
/// assert_eq!(Utf8.encode(&"hi".to_owned()).unwrap(), b"hi");
/// ```
pub trait Codec<T>: Send + Sync + 'static {
    /// Encodes one item.
    ///
    /// # Errors
    ///
    /// [`Error::Codec`] if the item cannot be represented.
    fn encode(&self, item: &T) -> Result<Vec<u8>>;

    /// Decodes one item.
    ///
    /// # Errors
    ///
    /// [`Error::Codec`] if the bytes are not a valid item.
    fn decode(&self, bytes: &[u8]) -> Result<T>;
}

/// The default codec: JSON through `serde_json`, for any `Serialize + DeserializeOwned` type.
///
/// # Examples
///
/// ```
/// use latchkey_redis::{Codec, Json};
///
/// let bytes = Json.encode(&vec![1, 2, 3]).unwrap();
/// assert_eq!(bytes, b"[1,2,3]");
/// let back: Vec<i32> = Json.decode(&bytes).unwrap();
/// assert_eq!(back, [1, 2, 3]);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Json;

impl<T: Serialize + DeserializeOwned> Codec<T> for Json {
    fn encode(&self, item: &T) -> Result<Vec<u8>> {
        serde_json::to_vec(item).map_err(|e| Error::Codec {
            reason: format!("cannot encode the item as json: {e}"),
        })
    }

    fn decode(&self, bytes: &[u8]) -> Result<T> {
        serde_json::from_slice(bytes).map_err(|e| Error::Codec {
            reason: format!("cannot decode the item from json: {e}"),
        })
    }
}

#[cfg(test)]
#[path = "codec_tests.rs"]
mod tests;
