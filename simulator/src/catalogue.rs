//! The simulated cloud's instance types: the embedded EC2 catalogue, turned into API instance
//! types by aws-plugin's own code and into domain instance types by core-svc's own validation,
//! so the simulator and the benchmarks see exactly what the real pair would exchange.

use std::collections::HashMap;
use std::sync::Arc;

use aws_plugin::catalogue::{self, CatalogueError};
use aws_plugin::instance_types::{NodeSettings, Prices, Zone, instance_type};
use core_domain::hash::Fnv1a;
use core_domain::instance_type::InstanceType;
use core_svc::plugin::instance_types::{InvalidInstanceType, catalogue_from_proto};

/// Why the simulated catalogue could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SimulatedCatalogueError {
    /// No embedded catalogue for the region.
    #[error(transparent)]
    Catalogue(#[from] CatalogueError),
    /// core-svc refused what aws-plugin produced (a bug in one of them).
    #[error(transparent)]
    Invalid(#[from] InvalidInstanceType),
}

/// Every instance type of `region`, offered on demand at the table's price and, when `spot` is
/// set, as spot at a deterministic 30-70% of it (the fraction derives from `seed`, the type and
/// the zone).
pub fn instance_types(
    region: &str,
    spot: bool,
    seed: u64,
) -> Result<Vec<Arc<InstanceType>>, SimulatedCatalogueError> {
    let catalogue = catalogue::embedded(region)?;
    let zones: Vec<Zone> = catalogue
        .zones()
        .into_iter()
        .map(|name| Zone { name, id: None })
        .collect();
    let settings = NodeSettings::default();
    let api_types: Vec<_> = catalogue
        .instance_types
        .iter()
        .map(|entry| {
            let spot_prices: HashMap<String, f64> = match (spot, entry.on_demand_price) {
                (true, Some(on_demand)) => entry
                    .zones
                    .iter()
                    .map(|zone| {
                        (
                            zone.clone(),
                            on_demand * spot_fraction(seed, &entry.info.instance_type, zone),
                        )
                    })
                    .collect(),
                _ => HashMap::new(),
            };
            let prices = Prices {
                on_demand: entry.on_demand_price,
                spot: spot_prices,
            };
            instance_type(
                &entry.info,
                region,
                &zones,
                &entry.zones,
                &prices,
                &[],
                &settings,
                &|_, _, _| false,
            )
        })
        .collect();
    Ok(catalogue_from_proto(&api_types)?)
}

/// A deterministic fraction in [0.3, 0.7) from the seed, type and zone (FNV-1a: stable across
/// platforms and Rust versions, unlike the standard library's hasher).
pub(crate) fn spot_fraction(seed: u64, instance_type: &str, zone: &str) -> f64 {
    let hash = Fnv1a::seeded(seed)
        .write(instance_type.bytes().chain([0]).chain(zone.bytes()))
        .finish();
    0.3 + 0.4 * ((hash >> 11) as f64 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_whole_catalogue_converts_and_is_deterministic() {
        let types = instance_types("us-east-1", true, 7).unwrap();
        assert_eq!(types.len(), 1243);
        let again = instance_types("us-east-1", true, 7).unwrap();
        assert_eq!(types, again);
        let m5 = types.iter().find(|t| t.name() == "m5.large").unwrap();
        let spot = m5
            .offerings()
            .iter()
            .find(|o| &*o.capacity_type == "spot")
            .unwrap();
        assert!(
            (0.3 * 0.096..0.7 * 0.096).contains(&spot.price),
            "{}",
            spot.price
        );
    }
}
