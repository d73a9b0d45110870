//! A fixed-size set of small indices: a planned NodeClaim's remaining instance type options,
//! as positions in its NodePool's catalogue.
//!
//! A NodeClaim narrows its options with every pod it takes, and a run can plan thousands of
//! NodeClaims over a catalogue of more than a thousand types; one bit per type keeps each
//! NodeClaim's options to a couple of hundred bytes and makes copying them for a trial cheap.

/// A set of indices below a fixed length.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Bits {
    words: Box<[u64]>,
}

impl Bits {
    /// The empty set over `len` indices.
    pub(super) fn empty(len: usize) -> Self {
        Bits {
            words: vec![0; len.div_ceil(64)].into_boxed_slice(),
        }
    }

    /// Every index below `len`.
    pub(super) fn full(len: usize) -> Self {
        let mut bits = Self::empty(len);
        for i in 0..len {
            bits.insert(i);
        }
        bits
    }

    /// Adds `index`.
    pub(super) fn insert(&mut self, index: usize) {
        if let Some(word) = self.words.get_mut(index / 64) {
            *word |= 1 << (index % 64);
        }
    }

    /// Removes `index`.
    pub(super) fn remove(&mut self, index: usize) {
        if let Some(word) = self.words.get_mut(index / 64) {
            *word &= !(1 << (index % 64));
        }
    }

    /// Whether `index` is in the set.
    pub(super) fn contains(&self, index: usize) -> bool {
        self.words
            .get(index / 64)
            .is_some_and(|word| word & (1 << (index % 64)) != 0)
    }

    /// Whether the set is empty.
    pub(super) fn is_empty(&self) -> bool {
        self.words.iter().all(|word| *word == 0)
    }

    /// The indices in both sets.
    pub(super) fn and(&self, other: &Bits) -> Bits {
        Bits {
            words: self
                .words
                .iter()
                .zip(other.words.iter())
                .map(|(a, b)| a & b)
                .collect(),
        }
    }

    /// Adds every index of `other`.
    pub(super) fn union_with(&mut self, other: &Bits) {
        for (word, theirs) in self.words.iter_mut().zip(other.words.iter()) {
            *word |= theirs;
        }
    }

    /// Whether some index is in both sets.
    pub(super) fn intersects(&self, other: &Bits) -> bool {
        self.words
            .iter()
            .zip(other.words.iter())
            .any(|(a, b)| a & b != 0)
    }

    /// The indices, ascending.
    pub(super) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words
            .iter()
            .enumerate()
            .flat_map(|(w, &word)| ones(word).map(move |bit| w * 64 + bit as usize))
    }
}

/// The indices of the bits set in `word`, lowest first.
pub(super) fn ones(word: u64) -> impl Iterator<Item = u32> {
    let mut rest = word;
    std::iter::from_fn(move || {
        if rest == 0 {
            return None;
        }
        let bit = rest.trailing_zeros();
        rest &= rest - 1;
        Some(bit)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_inserted_indices_when_iterating_then_they_come_in_ascending_order() {
        let mut bits = Bits::empty(200);
        for i in [199, 0, 64, 63, 130] {
            bits.insert(i);
        }
        assert_eq!(bits.iter().collect::<Vec<_>>(), [0, 63, 64, 130, 199]);
        bits.remove(64);
        assert!(!bits.contains(64));
        assert!(bits.contains(63));
        assert_eq!(bits.iter().count(), 4);
    }

    #[test]
    fn given_a_full_set_when_emptied_then_it_is_empty() {
        let mut all = Bits::full(70);
        assert_eq!(all.iter().count(), 70);
        assert!(
            !all.contains(70),
            "indices past the length are never members"
        );
        for i in 0..70 {
            all.remove(i);
        }
        assert!(all.is_empty());
    }

    #[test]
    fn given_an_index_past_the_length_when_inserting_then_nothing_happens() {
        let mut bits = Bits::empty(10);
        bits.insert(64);
        bits.insert(9);
        assert_eq!(bits.iter().collect::<Vec<_>>(), [9]);
    }

    #[test]
    fn given_two_sets_when_one_takes_the_union_then_it_holds_the_indices_of_both() {
        let mut ours = Bits::empty(130);
        let mut theirs = Bits::empty(130);
        ours.insert(3);
        theirs.insert(3);
        theirs.insert(129);
        theirs.insert(64);
        ours.union_with(&theirs);
        assert_eq!(ours.iter().collect::<Vec<_>>(), [3, 64, 129]);
        assert_eq!(theirs.iter().count(), 3);
    }
}
