//! Splitting an instance type catalogue into `GetInstanceTypesResponse` chunks, each under a
//! size limit, so a catalogue of any size streams within gRPC's message limits.

use prost::Message as _;

use crate::v1::{GetInstanceTypesResponse, InstanceType};

/// The chunk size the API recommends to plugins: 1 MiB, a quarter of gRPC's default limit.
pub const RECOMMENDED_CHUNK_BYTES: usize = 1024 * 1024;

/// Splits `instance_types` into chunks whose encoding stays within `max_bytes`, in order. A
/// single type larger than `max_bytes` still goes out, alone in its chunk (core's limit is far
/// higher than any real type). An empty catalogue gives one empty chunk, so the stream always
/// says something.
pub fn chunk_instance_types(
    instance_types: Vec<InstanceType>,
    max_bytes: usize,
) -> Vec<GetInstanceTypesResponse> {
    let mut chunks = Vec::new();
    let mut current = GetInstanceTypesResponse::default();
    let mut current_bytes = 0;
    for instance_type in instance_types {
        // The encoded size of a repeated message field element: its tag (1 byte for field 1),
        // its length prefix, and its body.
        let body = instance_type.encoded_len();
        let element = 1 + prost::length_delimiter_len(body) + body;
        if !current.instance_types.is_empty() && current_bytes + element > max_bytes {
            chunks.push(std::mem::take(&mut current));
            current_bytes = 0;
        }
        current_bytes += element;
        current.instance_types.push(instance_type);
    }
    if !current.instance_types.is_empty() || chunks.is_empty() {
        chunks.push(current);
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance_type(name: &str, padding: usize) -> InstanceType {
        InstanceType {
            name: format!("{name}{}", "x".repeat(padding)),
            ..Default::default()
        }
    }

    #[test]
    fn chunks_stay_within_the_limit_and_keep_every_type_in_order() {
        let types: Vec<_> = (0..100)
            .map(|i| instance_type(&format!("t{i}."), 90))
            .collect();
        let chunks = chunk_instance_types(types.clone(), 1000);
        assert!(chunks.len() > 1);
        for chunk in &chunks {
            assert!(
                chunk.encoded_len() <= 1000,
                "chunk of {} bytes",
                chunk.encoded_len()
            );
        }
        let rejoined: Vec<_> = chunks.into_iter().flat_map(|c| c.instance_types).collect();
        assert_eq!(rejoined, types);
    }

    #[test]
    fn an_oversized_type_travels_alone_and_an_empty_catalogue_is_one_empty_chunk() {
        let chunks = chunk_instance_types(
            vec![
                instance_type("a", 10),
                instance_type("big", 5000),
                instance_type("b", 10),
            ],
            1000,
        );
        let names: Vec<Vec<usize>> = chunks
            .iter()
            .map(|c| c.instance_types.iter().map(|t| t.name.len()).collect())
            .collect();
        assert_eq!(names, vec![vec![11], vec![5003], vec![11]]);
        assert_eq!(
            chunk_instance_types(Vec::new(), 1000),
            vec![GetInstanceTypesResponse::default()]
        );
    }
}
