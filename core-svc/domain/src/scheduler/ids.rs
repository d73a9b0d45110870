//! The scheduler's hash maps.
//!
//! Maps keyed by the run's own small numbers (domain, class and NodeClaim indices) are looked
//! up per planned NodeClaim tried. The scheduler assigns those keys, so nothing can choose
//! them to collide, and a multiply-rotate hash of their few words is several times cheaper
//! than any seeded hash: [`IdMap`].
//!
//! Maps keyed by what comes from the cluster (label values, requirements, requests) are
//! looked up per pod and per NodeClaim opened. Their keys could be chosen to collide, so
//! their hasher is seeded at random per map, as std's is; foldhash's is several times cheaper
//! than std's SipHash on such short keys: [`ContentMap`].

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A map keyed by scheduler-assigned numbers.
pub(super) type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// A map keyed by what comes from the cluster.
pub(super) type ContentMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// The hasher of [`IdMap`]: each word is folded in with a rotate, a xor and a multiply by an
/// odd constant (the golden ratio's bits), as the Firefox and rustc hash does.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct IdHasher(u64);

const SEED: u64 = 0x9e37_79b9_7f4a_7c15;

impl IdHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_keys_when_mapped_then_each_is_found_and_distinct_keys_hash_apart() {
        let mut map: IdMap<(u32, u32), usize> = IdMap::default();
        for a in 0..50 {
            for b in 0..50 {
                map.insert((a, b), (a * 50 + b) as usize);
            }
        }
        assert_eq!(map.len(), 2500);
        assert_eq!(map.get(&(7, 9)), Some(&359));
        let hash = |key: (u32, u32)| {
            let mut hasher = IdHasher::default();
            std::hash::Hash::hash(&key, &mut hasher);
            hasher.finish()
        };
        assert_ne!(hash((1, 2)), hash((2, 1)));
    }
}
