//! IsDrifted's request, encoded ahead of the call.
//!
//! Core asks about every NodeClaim of a node class with the same node class object, and the
//! object's `google.protobuf.Struct` is most of the request: converting it from JSON, cloning
//! it for each attempt and encoding it (prost measures a Struct's nested maps again at every
//! level) cost several times what the rest of the call does. So the node class is encoded once
//! per object ([`EncodedNodeClasses`]), the NodeClaim per call, and the request goes on the
//! wire as those bytes one after the other ([`EncodedCodec`]): what prost writes for a
//! `v1::IsDriftedRequest`, whose fields it writes in tag order, byte for byte. Its third field,
//! `node_claim_object`, is for people asking a plugin with grpcurl and core never sets it: it is
//! in neither part, as prost writes nothing for a field that is `None`.

use std::collections::VecDeque;
use std::marker::PhantomData;
use std::sync::{Mutex, PoisonError};

use prost::Message as _;
use prost::bytes::{BufMut as _, Bytes};
use provider_sdk::v1;
use tonic::Status;
use tonic::codec::{Codec, EncodeBuf, Encoder};

use super::convert::json_to_struct;
use crate::cloudprovider::CloudProviderError;

/// How many node class objects [`EncodedNodeClasses`] keeps: a fleet has a handful of node
/// classes, each seen in a few versions at once (the plugin keeps as many, for the same reason).
const RECENT_NODE_CLASSES: usize = 16;

/// The node class objects IsDrifted sent lately, newest first, each with the encoding of an
/// `IsDriftedRequest` that holds only it. An object is found by equality, so a changed node
/// class (its spec, status or `resourceVersion`) is encoded afresh, never sent stale.
#[derive(Debug, Default)]
pub(super) struct EncodedNodeClasses(Mutex<VecDeque<(serde_json::Value, Bytes)>>);

impl EncodedNodeClasses {
    /// `node_class` as the encoded `node_class` field of an `IsDriftedRequest`: the encoding
    /// kept for an equal object, or a new one.
    pub(super) fn field_of(
        &self,
        node_class: &serde_json::Value,
    ) -> Result<Bytes, CloudProviderError> {
        // Every update is a whole-entry insert or move: a panic cannot leave it half-written.
        let mut recent = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(index) = recent.iter().position(|(seen, _)| seen == node_class)
            && let Some(entry) = recent.remove(index)
        {
            let encoded = entry.1.clone();
            recent.push_front(entry);
            return Ok(encoded);
        }
        let encoded = Bytes::from(
            v1::IsDriftedRequest {
                node_claim: None,
                node_class: Some(json_to_struct(node_class, "node_class")?),
                node_claim_object: None,
            }
            .encode_to_vec(),
        );
        recent.truncate(RECENT_NODE_CLASSES - 1);
        recent.push_front((node_class.clone(), encoded.clone()));
        Ok(encoded)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

/// The encoded `IsDriftedRequest` for `node_claim` with `node_class`, the node class's field
/// as [`EncodedNodeClasses::field_of`] gives it: the NodeClaim's field first, as prost orders
/// them.
pub(super) fn is_drifted_request(node_claim: v1::NodeClaim, node_class: &Bytes) -> Bytes {
    let mut buf = v1::IsDriftedRequest {
        node_claim: Some(node_claim),
        node_class: None,
        node_claim_object: None,
    }
    .encode_to_vec();
    buf.extend_from_slice(node_class);
    Bytes::from(buf)
}

/// A codec that sends a request already encoded as it is, and decodes the answer `U` as
/// prost does.
#[derive(Debug)]
pub(super) struct EncodedCodec<U>(PhantomData<U>);

impl<U> Default for EncodedCodec<U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<U: prost::Message + Default + Send + 'static> Codec for EncodedCodec<U> {
    type Encode = Bytes;
    type Decode = U;
    type Encoder = BytesEncoder;
    type Decoder = tonic_prost::ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        BytesEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        tonic_prost::ProstDecoder::default()
    }
}

/// Writes an encoded message as it is.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct BytesEncoder;

impl Encoder for BytesEncoder {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node_class(version: &str) -> serde_json::Value {
        json!({
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": { "name": "default", "resourceVersion": version },
            "spec": { "role": "KarpenterNodeRole", "amiFamily": "AL2023" },
            "status": { "amis": [{ "id": "ami-0a1", "name": "al2023" }], "ready": true },
        })
    }

    fn claim() -> v1::NodeClaim {
        v1::NodeClaim {
            name: "default-abcde".to_owned(),
            labels: [("karpenter.sh/nodepool".to_owned(), "default".to_owned())].into(),
            ..v1::NodeClaim::default()
        }
    }

    #[test]
    fn given_a_node_class_then_the_request_is_what_prost_writes_for_the_whole_message() {
        let encoded = EncodedNodeClasses::default();
        let class = node_class("1");
        let field = encoded.field_of(&class).unwrap();
        let request = is_drifted_request(claim(), &field);
        let whole = v1::IsDriftedRequest {
            node_claim: Some(claim()),
            node_class: provider_sdk::json::json_to_struct(&class),
            node_claim_object: None,
        };
        // One label: the NodeClaim's map has a single order, so the bytes are comparable.
        assert_eq!(request[..], whole.encode_to_vec()[..]);
        let decoded = v1::IsDriftedRequest::decode(request).unwrap();
        assert_eq!(decoded.node_claim_object, None, "core never sets it");
        assert_eq!(decoded, whole);
    }

    #[test]
    fn given_the_same_node_class_then_its_encoding_is_reused_and_a_changed_one_is_encoded_again() {
        let encoded = EncodedNodeClasses::default();
        let first = encoded.field_of(&node_class("1")).unwrap();
        let again = encoded.field_of(&node_class("1")).unwrap();
        assert_eq!(
            first.as_ptr(),
            again.as_ptr(),
            "an equal object is not encoded again"
        );
        assert_eq!(encoded.len(), 1);

        let changed = encoded.field_of(&node_class("2")).unwrap();
        assert_ne!(changed, first, "a new resourceVersion is a new object");
        let decoded = v1::IsDriftedRequest::decode(changed).unwrap();
        assert_eq!(
            decoded.node_class,
            provider_sdk::json::json_to_struct(&node_class("2"))
        );

        for version in 0..2 * RECENT_NODE_CLASSES {
            encoded
                .field_of(&node_class(&format!("v{version}")))
                .unwrap();
        }
        assert_eq!(encoded.len(), RECENT_NODE_CLASSES, "bounded");
        let forgotten = encoded.field_of(&node_class("1")).unwrap();
        assert_ne!(
            forgotten.as_ptr(),
            first.as_ptr(),
            "encoded again once forgotten"
        );
        assert_eq!(forgotten, first, "to the same bytes");
    }

    #[test]
    fn given_a_node_class_that_is_no_object_then_it_is_refused() {
        let encoded = EncodedNodeClasses::default();
        assert!(matches!(
            encoded.field_of(&json!(["not", "an", "object"])),
            Err(CloudProviderError::InvalidRequest(_))
        ));
        assert_eq!(encoded.len(), 0);
    }
}
