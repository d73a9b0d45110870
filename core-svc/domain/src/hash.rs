//! FNV hashing: the one copy of the 64-bit FNV-1a and FNV-1 functions the workspace uses where a
//! hash must be the same in every run, build and platform (std's hasher is not); and the one
//! seeded generator ([`SplitMix64`]) for what must differ yet repeat from one run to the next.

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// A running 64-bit FNV-1a hash, for input that comes in pieces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fnv1a(u64);

impl Fnv1a {
    /// The hash of nothing (the standard offset basis).
    pub const fn new() -> Self {
        Self(OFFSET)
    }

    /// A hash whose offset basis is XORed with `seed`, so one input hashes differently under
    /// different seeds.
    pub const fn seeded(seed: u64) -> Self {
        Self(OFFSET ^ seed)
    }

    /// Folds `bytes` in.
    pub fn write(&mut self, bytes: impl IntoIterator<Item = u8>) -> &mut Self {
        for byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(PRIME);
        }
        self
    }

    /// The hash so far.
    pub const fn finish(&self) -> u64 {
        self.0
    }
}

impl Default for Fnv1a {
    fn default() -> Self {
        Self::new()
    }
}

/// FNV-1a, 64-bit, of `bytes`.
pub fn fnv1a_64(bytes: &[u8]) -> u64 {
    Fnv1a::new().write(bytes.iter().copied()).finish()
}

/// FNV-1 (not 1a: multiply, then XOR), 64-bit, as Go's `hash/fnv.New64` that upstream's
/// hashes use.
pub fn fnv1_64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(OFFSET, |hash, &byte| {
        hash.wrapping_mul(PRIME) ^ u64::from(byte)
    })
}

/// SplitMix64: a tiny, well-distributed generator whose output never changes across platforms.
/// Names, UIDs and simulated workloads need to differ and to repeat from one run to the next,
/// not to be unpredictable.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// The generator started at `seed`.
    pub const fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        // Go: fnv.New64a() over "" and "a".
        assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a_64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn fnv1_matches_the_reference_vectors() {
        // Go: fnv.New64() over "" and "a".
        assert_eq!(fnv1_64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1_64(b"a"), 0xaf63_bd4c_8601_b7be);
    }

    #[test]
    fn pieces_hash_as_the_whole_and_a_seed_changes_the_hash() {
        let mut pieces = Fnv1a::new();
        pieces.write(*b"foo").write(*b"bar");
        assert_eq!(pieces.finish(), fnv1a_64(b"foobar"));
        assert_eq!(Fnv1a::seeded(0).finish(), Fnv1a::new().finish());
        assert_ne!(
            Fnv1a::seeded(1).write(*b"a").finish(),
            Fnv1a::new().write(*b"a").finish()
        );
    }

    #[test]
    fn splitmix64_gives_the_reference_sequence() {
        // The first outputs for seed 0 of the reference implementation (Vigna, splitmix64.c).
        let mut random = SplitMix64::new(0);
        assert_eq!(random.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(random.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }
}
