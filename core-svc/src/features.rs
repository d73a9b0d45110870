//! Feature gates, with upstream's names and defaults (kubernetes-sigs/karpenter
//! `pkg/operator/options/options.go`: `--feature-gates` / `FEATURE_GATES`, e.g.
//! `SpotToSpotConsolidation=true,NodeRepair=false`), so an upstream install's setting carries
//! over unchanged. One default differs on purpose: `NodeRepair` is on (see
//! [`crate::controllers::repair`] for why that is safe). A name upstream does not have is an error naming it; a gate whose behaviour
//! core does not have yet is accepted and reported ([`FeatureGates::unsupported`]), so that
//! nobody believes it is on.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// Why a feature gate setting was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeatureGateError {
    /// The name is not one of upstream's gates.
    #[error("unknown feature gate {name:?}; the gates are {}", FeatureGates::NAMES.join(", "))]
    Unknown {
        /// The name given.
        name: String,
    },
    /// An item is not `Name=true` or `Name=false`.
    #[error("feature gate setting {item:?} is not Name=true or Name=false")]
    Malformed {
        /// The item given.
        item: String,
    },
}

/// The feature gates, each as upstream defaults it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureGates {
    /// `SpotToSpotConsolidation` (default false): consolidation may replace a spot node with a
    /// cheaper spot node.
    pub spot_to_spot_consolidation: bool,
    /// `NodeRepair` (default true here, false upstream): replace nodes whose conditions the
    /// plugin's repair policies (and the kubelet's Ready) name, within upstream's 20 % cap.
    pub node_repair: bool,
    /// `ReservedCapacity` (default true): launch into capacity reservations the plugin offers
    /// (capacity type `reserved`), which core always does.
    pub reserved_capacity: bool,
    /// `NodeOverlay` (default false). Not implemented in core yet.
    pub node_overlay: bool,
    /// `StaticCapacity` (default false). Not implemented in core yet.
    pub static_capacity: bool,
    /// `CapacityBuffer` (default false). Not implemented in core yet.
    pub capacity_buffer: bool,
}

impl Default for FeatureGates {
    fn default() -> Self {
        FeatureGates {
            spot_to_spot_consolidation: false,
            node_repair: true,
            reserved_capacity: true,
            node_overlay: false,
            static_capacity: false,
            capacity_buffer: false,
        }
    }
}

impl FeatureGates {
    /// Upstream's gate names.
    pub const NAMES: [&'static str; 6] = [
        "CapacityBuffer",
        "NodeOverlay",
        "NodeRepair",
        "ReservedCapacity",
        "SpotToSpotConsolidation",
        "StaticCapacity",
    ];

    fn gate(&mut self, name: &str) -> Result<&mut bool, FeatureGateError> {
        Ok(match name {
            "CapacityBuffer" => &mut self.capacity_buffer,
            "NodeOverlay" => &mut self.node_overlay,
            "NodeRepair" => &mut self.node_repair,
            "ReservedCapacity" => &mut self.reserved_capacity,
            "SpotToSpotConsolidation" => &mut self.spot_to_spot_consolidation,
            "StaticCapacity" => &mut self.static_capacity,
            _ => {
                return Err(FeatureGateError::Unknown {
                    name: name.to_owned(),
                });
            }
        })
    }

    /// The defaults with `settings` applied (a scenario's `options.featureGates`).
    pub fn with<'a>(
        settings: impl IntoIterator<Item = (&'a str, bool)>,
    ) -> Result<Self, FeatureGateError> {
        let mut gates = FeatureGates::default();
        for (name, value) in settings {
            *gates.gate(name)? = value;
        }
        Ok(gates)
    }

    /// The gates set to a value whose behaviour core does not have, each with what that
    /// means, for a warning at start-up.
    pub fn unsupported(&self) -> Vec<String> {
        let mut unsupported = Vec::new();
        for (on, name) in [
            (self.node_overlay, "NodeOverlay"),
            (self.static_capacity, "StaticCapacity"),
            (self.capacity_buffer, "CapacityBuffer"),
        ] {
            if on {
                unsupported.push(format!(
                    "{name}=true: core does not implement {name} yet; it stays off"
                ));
            }
        }
        if !self.reserved_capacity {
            unsupported.push(
                "ReservedCapacity=false: core uses whatever reserved offerings the plugin \
                 offers; leave the plugin's reservations out to turn it off"
                    .to_owned(),
            );
        }
        unsupported
    }
}

impl FromStr for FeatureGates {
    type Err = FeatureGateError;

    /// `Name=true,Name=false`, spaces allowed around items; empty means the defaults.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut settings = Vec::new();
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let malformed = || FeatureGateError::Malformed {
                item: item.to_owned(),
            };
            let (name, value) = item.split_once('=').ok_or_else(malformed)?;
            let value = match value.trim() {
                "true" => true,
                "false" => false,
                _ => return Err(malformed()),
            };
            settings.push((name.trim(), value));
        }
        Self::with(settings)
    }
}

impl fmt::Display for FeatureGates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let values: BTreeMap<&str, bool> = [
            ("CapacityBuffer", self.capacity_buffer),
            ("NodeOverlay", self.node_overlay),
            ("NodeRepair", self.node_repair),
            ("ReservedCapacity", self.reserved_capacity),
            ("SpotToSpotConsolidation", self.spot_to_spot_consolidation),
            ("StaticCapacity", self.static_capacity),
        ]
        .into_iter()
        .collect();
        let items: Vec<String> = values
            .into_iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        f.write_str(&items.join(","))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests: a panic is a failed assertion")]

    use super::*;

    #[test]
    fn upstream_s_default_string_gives_the_defaults() {
        let upstream = "NodeRepair=false,ReservedCapacity=true,SpotToSpotConsolidation=false,\
                        NodeOverlay=false,StaticCapacity=false,CapacityBuffer=false";
        assert_eq!(
            upstream.parse::<FeatureGates>().unwrap(),
            FeatureGates {
                node_repair: false,
                ..FeatureGates::default()
            }
        );
        assert_eq!("".parse::<FeatureGates>().unwrap(), FeatureGates::default());
        assert!(FeatureGates::default().unsupported().is_empty());
    }

    #[test]
    fn a_setting_changes_its_gate_only() {
        let gates: FeatureGates = " SpotToSpotConsolidation=true , NodeRepair=true"
            .parse()
            .unwrap();
        assert!(gates.spot_to_spot_consolidation && gates.node_repair);
        assert!(gates.reserved_capacity && !gates.node_overlay);
        assert!(gates.unsupported().is_empty());
        assert_eq!(
            gates.to_string(),
            "CapacityBuffer=false,NodeOverlay=false,NodeRepair=true,ReservedCapacity=true,\
             SpotToSpotConsolidation=true,StaticCapacity=false"
        );
    }

    #[test]
    fn unknown_names_and_malformed_items_are_refused_naming_them() {
        let error = "SpotToSpot=true".parse::<FeatureGates>().unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("unknown feature gate \"SpotToSpot\""),
            "{error}"
        );
        assert_eq!(
            "NodeRepair".parse::<FeatureGates>().unwrap_err(),
            FeatureGateError::Malformed {
                item: "NodeRepair".into()
            }
        );
        assert!("NodeRepair=yes".parse::<FeatureGates>().is_err());
    }
}
