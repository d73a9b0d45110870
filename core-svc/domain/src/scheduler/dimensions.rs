//! The zones and capacity types of a run, interned: the two offering dimensions topology and
//! pod requirements narrow most, so that "is this offering allowed" is two vector lookups.

use std::sync::Arc;

use crate::instance_type::InstanceType;
use crate::labels::{LABEL_CAPACITY_TYPE, LABEL_TOPOLOGY_ZONE};
use crate::requirements::{Operator, Requirement};
use crate::scheduler::ids::ContentMap;

/// The values of one offering dimension (zone or capacity type) seen in a run, interned.
#[derive(Debug, Default)]
pub(super) struct ValueIndex {
    values: Vec<Arc<str>>,
    by_value: ContentMap<Arc<str>, u32>,
}

impl ValueIndex {
    /// The index of `value`, added if new.
    pub(super) fn intern(&mut self, value: &str) -> u32 {
        if let Some(&index) = self.by_value.get(value) {
            return index;
        }
        let index = u32::try_from(self.values.len()).unwrap_or(u32::MAX);
        let value: Arc<str> = value.into();
        self.values.push(value.clone());
        self.by_value.insert(value, index);
        index
    }

    /// How many values are interned.
    pub(super) fn len(&self) -> usize {
        self.values.len()
    }

    /// The index of `value`, if it is known.
    pub(super) fn get(&self, value: &str) -> Option<u32> {
        self.by_value.get(value).copied()
    }

    /// Which interned values `requirement` allows (all of them without one).
    pub(super) fn allowed(&self, requirement: Option<&Requirement>) -> Vec<bool> {
        self.values
            .iter()
            .map(|value| requirement.is_none_or(|r| r.has(value)))
            .collect()
    }

    /// The value at `index`.
    pub(super) fn value(&self, index: u32) -> &Arc<str> {
        &self.values[index as usize]
    }

    /// Every interned value, by index.
    pub(super) fn values(&self) -> &[Arc<str>] {
        &self.values
    }
}

/// The interned zones and capacity types of every NodePool of a run.
#[derive(Debug, Default)]
pub(super) struct Dimensions {
    /// `topology.kubernetes.io/zone` values.
    pub(super) zones: ValueIndex,
    /// `karpenter.sh/capacity-type` values.
    pub(super) capacity_types: ValueIndex,
}

impl Dimensions {
    /// Interns the zones and capacity types of `types`' available offerings and requirements.
    pub(super) fn add_types(&mut self, types: &[Arc<InstanceType>]) {
        for instance_type in types {
            for offering in instance_type.offerings().iter().filter(|o| o.available) {
                self.zones.intern(&offering.zone);
                self.capacity_types.intern(&offering.capacity_type);
            }
            for (key, index) in [
                (LABEL_TOPOLOGY_ZONE, &mut self.zones),
                (LABEL_CAPACITY_TYPE, &mut self.capacity_types),
            ] {
                if let Some(requirement) = instance_type.requirements().get(key)
                    && requirement.operator() == Operator::In
                {
                    requirement.values().for_each(|v| {
                        index.intern(v);
                    });
                }
            }
        }
    }
}
