//! The four resources every pod and node has (cpu, memory, ephemeral storage, pods) as a flat
//! value, so that "does this pod still fit" is four integer comparisons on the hot path; the
//! full [`ResourceList`] (extended resources included) is consulted only when one is involved.

use crate::resources::{ResourceList, fits};

/// Amounts of cpu (millis), memory, ephemeral storage (bytes) and pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(super) struct Fixed([i64; 4]);

impl Fixed {
    /// Larger than anything: the neutral element of a minimum.
    pub(super) const MAX: Fixed = Fixed([i64::MAX; 4]);
    /// Nothing: the neutral element of a maximum.
    pub(super) const ZERO: Fixed = Fixed([0; 4]);

    /// The fixed part of `list`.
    pub(super) fn of(list: &ResourceList) -> Self {
        Fixed([
            list.cpu_millis(),
            list.memory_bytes(),
            list.ephemeral_storage_bytes(),
            list.pods(),
        ])
    }

    /// Whether every amount is at most `other`'s.
    pub(super) fn fits_in(&self, other: &Fixed) -> bool {
        self.0.iter().zip(other.0.iter()).all(|(a, b)| a <= b)
    }

    /// The smaller amount of each resource.
    pub(super) fn min(&self, other: &Fixed) -> Fixed {
        Fixed(std::array::from_fn(|i| self.0[i].min(other.0[i])))
    }

    /// The larger amount of each resource.
    pub(super) fn max(&self, other: &Fixed) -> Fixed {
        Fixed(std::array::from_fn(|i| self.0[i].max(other.0[i])))
    }

    /// The sum, saturating.
    pub(super) fn plus(&self, other: &Fixed) -> Fixed {
        Fixed(std::array::from_fn(|i| {
            self.0[i].saturating_add(other.0[i])
        }))
    }

    /// The difference, saturating but possibly negative: what is left of a node whose
    /// allocatable is `self` once `other` is placed, below zero where it does not fit.
    pub(super) fn less(&self, other: &Fixed) -> Fixed {
        Fixed(std::array::from_fn(|i| {
            self.0[i].saturating_sub(other.0[i])
        }))
    }

    /// The amounts of cpu (millis), memory, ephemeral storage (bytes) and pods, in that order.
    pub(super) fn from_amounts(amounts: [i64; 4]) -> Self {
        Fixed(amounts)
    }

    /// The four amounts: cpu (millis), memory, ephemeral storage (bytes), pods.
    pub(super) fn amounts(&self) -> [i64; 4] {
        self.0
    }

    /// The cpu amount, in millis.
    pub(super) fn cpu_millis(&self) -> i64 {
        self.0[0]
    }

    /// The memory amount, in bytes.
    pub(super) fn memory_bytes(&self) -> i64 {
        self.0[1]
    }
}

/// What a pod or a NodeClaim asks for: the full list and its fixed part, plus whether an
/// extended resource is involved (then the full list must be compared).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Demand {
    /// Everything requested.
    pub(super) list: ResourceList,
    /// The fixed part of `list`.
    pub(super) fixed: Fixed,
    /// Whether `list` names an extended resource.
    pub(super) extended: bool,
}

impl Demand {
    /// The demand of `list`.
    pub(super) fn new(list: ResourceList) -> Self {
        let fixed = Fixed::of(&list);
        let extended = list.has_extended_resources();
        Demand {
            list,
            fixed,
            extended,
        }
    }

    /// This demand plus `other`.
    pub(super) fn plus(&self, other: &Demand) -> Demand {
        Demand {
            list: self.list.saturating_add(&other.list),
            fixed: self.fixed.plus(&other.fixed),
            extended: self.extended || other.extended,
        }
    }

    /// Whether the demand fits in `available` (whose fixed part is `available_fixed`).
    pub(super) fn fits(&self, available: &ResourceList, available_fixed: &Fixed) -> bool {
        self.fixed.fits_in(available_fixed)
            && (!self.extended || fits(&self.list, available).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::ResourceName;

    fn list(cpu: i64, memory: i64, gpus: i64) -> ResourceList {
        ResourceList::new()
            .with(ResourceName::CPU, cpu)
            .with(ResourceName::MEMORY, memory)
            .with("nvidia.com/gpu", gpus)
    }

    #[test]
    fn given_fixed_amounts_when_comparing_then_every_resource_must_fit() {
        let small = Fixed::of(&list(1000, 10, 0));
        let large = Fixed::of(&list(2000, 20, 0));
        assert!(small.fits_in(&large));
        assert!(!large.fits_in(&small));
        let mixed = Fixed::of(&list(3000, 5, 0));
        assert!(
            !mixed.fits_in(&large),
            "cpu does not fit although memory does"
        );
        assert_eq!(small.min(&mixed), Fixed::of(&list(1000, 5, 0)));
        assert_eq!(small.max(&mixed), Fixed::of(&list(3000, 10, 0)));
        assert_eq!(small.plus(&mixed).cpu_millis(), 4000);
    }

    #[test]
    fn given_an_extended_resource_when_checking_a_demand_then_the_full_list_is_compared() {
        let gpu_pod = Demand::new(list(1000, 10, 1));
        assert!(gpu_pod.extended);
        let no_gpu = list(4000, 100, 0);
        assert!(!gpu_pod.fits(&no_gpu, &Fixed::of(&no_gpu)));
        let with_gpu = list(4000, 100, 2);
        assert!(gpu_pod.fits(&with_gpu, &Fixed::of(&with_gpu)));
        let plain = Demand::new(list(1000, 10, 0));
        assert!(!plain.extended);
        assert_eq!(plain.plus(&gpu_pod).list, list(2000, 20, 1));
    }
}
