//! Where a plan's money goes, per NodeClaim, at the cost bound's shadow prices: a debugging
//! aid for cost-aware packing. For the pool's types at their cheapest offering, the dual of
//! the bound's programme (without zone rows) prices cpu, memory and pods; a NodeClaim's price
//! less its pods' value at those prices is its share of the gap to the bound, split into its
//! type's reduced cost and the idle cpu and memory it buys.
//!
//! With `SHOW` set, it also lists the first 60 NodeClaims' options and pods by shape, and the
//! types within 5 % of what they supply is worth (the optimum's frontier). With `ZONES` set,
//! it lists what the bound buys in each zone and, beside it, the plan's nodes by zone and
//! type with the share of their cpu and memory used.
//!
//! ```text
//! cargo run --release -p simulator --example cost-breakdown -- typical hostname-spread 1000
//! SHOW=1 cargo run --release -p simulator --example cost-breakdown -- typical plain 5000
//! ZONES=1 cargo run --release -p simulator --example cost-breakdown -- any zone-spread 5000
//! ```

#![allow(
    clippy::print_stdout,
    reason = "a debugging aid: its output is the report"
)]

use std::collections::BTreeMap;

use core_domain::scheduler::Packing;
use good_lp::{Expression, ProblemVariables, SolverModel, Variable, constraint, microlp, variable};
use simulator::workloads::{self, Mix, Pool};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let pool: Pool = args
        .first()
        .map_or("typical", String::as_str)
        .parse()
        .map_err(anyhow::Error::msg)?;
    let mix: Mix = args
        .get(1)
        .map_or("plain", String::as_str)
        .parse()
        .map_err(anyhow::Error::msg)?;
    let pods: usize = args.get(2).map_or(Ok(1000), |p| p.parse())?;
    let instance_types = simulator::catalogue::instance_types("us-east-1", true, 42)?;
    let input = workloads::input_for(workloads::pods(mix, pods, 42), &instance_types, pool);
    let results = core_domain::scheduler::solve_with(&input, Packing::CostAware)?;
    let spec = &input.node_pools[0];
    let base = spec.requirements.clone();
    let mut demand = [0.0f64; 3];
    for claim in &results.new_node_claims {
        demand[0] += claim.requests.cpu_millis() as f64;
        demand[1] += claim.requests.memory_bytes() as f64 / (1u64 << 30) as f64;
        demand[2] += claim.pods.len() as f64;
    }
    // The dual: max demand . y subject to supply_o . y <= price_o for every type.
    let mut vars = ProblemVariables::new();
    let y: Vec<Variable> = vars.add_vector(variable().min(0.0), 3);
    let objective: Expression = (0..3).map(|r| demand[r] * y[r]).sum();
    let mut model = vars.maximise(objective).using(microlp);
    for t in spec
        .instance_types
        .iter()
        .filter(|t| t.is_compatible(&base))
    {
        // Burstable types (t2, t3, t4g, ...) are not in the bound: their nominal cpu is not
        // what a sustained workload gets.
        if t.name().starts_with('t') && t.name().as_bytes().get(1).is_some_and(u8::is_ascii_digit) {
            continue;
        }
        let Some(offering) = t.cheapest_offering(&base) else {
            continue;
        };
        let s = supply(t.allocatable());
        let lhs: Expression = (0..3).map(|r| s[r] * y[r]).sum();
        model = model.with(constraint!(lhs <= offering.price));
    }
    let solution = model.solve()?;
    let y: Vec<f64> = y
        .iter()
        .map(|&v| good_lp::Solution::value(&solution, v))
        .collect();
    let bound: f64 = (0..3).map(|r| demand[r] * y[r]).sum();
    let cost = results.estimated_cost();
    println!(
        "{pool} {mix} {pods}: cost {cost:.2} dual bound {bound:.2} ratio {:.3}; y = {:.5}/core {:.5}/GiB {:.5}/pod",
        cost / bound,
        y[0] * 1000.0,
        y[1],
        y[2]
    );
    // Per type: count, price, reduced cost, idle cpu and memory value.
    let mut by_type: BTreeMap<String, [f64; 6]> = BTreeMap::new();
    let mut totals = [0.0; 3];
    for claim in &results.new_node_claims {
        let Some(first) = claim.instance_types.first() else {
            continue;
        };
        let price = claim.cheapest_price().unwrap_or(f64::NAN);
        let s = supply(first.allocatable());
        let d = [
            claim.requests.cpu_millis() as f64,
            claim.requests.memory_bytes() as f64 / (1u64 << 30) as f64,
            claim.pods.len() as f64,
        ];
        let reduced = price - (0..3).map(|r| s[r] * y[r]).sum::<f64>();
        let idle_cpu = (s[0] - d[0]) * y[0];
        let idle_mem = (s[1] - d[1]) * y[1];
        let e = by_type.entry(first.name().to_owned()).or_default();
        e[0] += 1.0;
        e[1] += price;
        e[2] += reduced;
        e[3] += idle_cpu;
        e[4] += idle_mem;
        e[5] += d[0] / s[0];
        totals[0] += reduced;
        totals[1] += idle_cpu;
        totals[2] += idle_mem;
    }
    println!(
        "gap {:.2}: reduced cost {:.2}, idle cpu {:.2}, idle memory {:.2}",
        cost - bound,
        totals[0],
        totals[1],
        totals[2]
    );
    if std::env::var("SHOW").is_ok() {
        let shapes: std::collections::HashMap<_, _> = input
            .pods
            .iter()
            .map(|p| {
                (
                    p.id.clone(),
                    (p.requests.cpu_millis(), p.requests.memory_bytes() >> 20),
                )
            })
            .collect();
        for claim in results.new_node_claims.iter().take(60) {
            let mut mix: BTreeMap<(i64, i64), usize> = BTreeMap::new();
            for shape in claim.pods.iter().filter_map(|p| shapes.get(p)) {
                *mix.entry(*shape).or_default() += 1;
            }
            let names: Vec<&str> = claim
                .instance_types
                .iter()
                .take(4)
                .map(|t| t.name())
                .collect();
            println!(
                "{:?} first {:?} mix {:?}",
                names,
                claim.pods.first().and_then(|p| shapes.get(p)),
                mix
            );
        }
        for t in spec
            .instance_types
            .iter()
            .filter(|t| t.is_compatible(&base))
        {
            let Some(offering) = t.cheapest_offering(&base) else {
                continue;
            };
            let s = supply(t.allocatable());
            let worth: f64 = (0..3).map(|r| s[r] * y[r]).sum();
            if offering.price <= worth * 1.05 {
                println!(
                    "frontier {} {:.4} worth {:.4} cpu {} mem {:.1}",
                    t.name(),
                    offering.price,
                    worth,
                    s[0],
                    s[1]
                );
            }
        }
    }
    if std::env::var("ZONES").is_ok() {
        // Per zone and type: nodes, cost, and the mean share of cpu and memory used.
        let mut by_zone: BTreeMap<(String, String), [f64; 4]> = BTreeMap::new();
        for claim in &results.new_node_claims {
            let Some(first) = claim.instance_types.first() else {
                continue;
            };
            let zone = claim
                .requirements
                .get(core_domain::labels::LABEL_TOPOLOGY_ZONE)
                .map_or_else(
                    || "any".to_owned(),
                    |r| format!("{:?}", r.values().collect::<Vec<_>>()),
                );
            let s = supply(first.allocatable());
            let e = by_zone.entry((zone, first.name().to_owned())).or_default();
            e[0] += 1.0;
            e[1] += claim.cheapest_price().unwrap_or(f64::NAN);
            e[2] += claim.requests.cpu_millis() as f64 / s[0];
            e[3] += claim.requests.memory_bytes() as f64 / (1u64 << 30) as f64 / s[1];
        }
        let bound = core_domain::scheduler::bound::plan_lower_bound(&input, &results)?;
        println!("bound {:.2}:", bound.per_hour);
        for n in &bound.nodes {
            println!(
                "  {} {} {:.2} x {:.4} = {:.2}",
                n.zone,
                n.instance_type,
                n.count,
                n.price,
                n.count * n.price
            );
        }
        for ((zone, name), e) in &by_zone {
            println!(
                "{zone} {name} {} {:.2} cpu {:.2} mem {:.2}",
                e[0],
                e[1],
                e[2] / e[0],
                e[3] / e[0]
            );
        }
    }
    let mut rows: Vec<_> = by_type.into_iter().collect();
    rows.sort_by(|a, b| (b.1[2] + b.1[3] + b.1[4]).total_cmp(&(a.1[2] + a.1[3] + a.1[4])));
    println!("type count cost reduced idle_cpu idle_mem mean_cpu_use");
    for (name, e) in rows.iter().take(15) {
        println!(
            "{name} {} {:.2} {:.2} {:.2} {:.2} {:.2}",
            e[0],
            e[1],
            e[2],
            e[3],
            e[4],
            e[5] / e[0]
        );
    }
    Ok(())
}

fn supply(allocatable: &core_domain::resources::ResourceList) -> [f64; 3] {
    [
        allocatable.cpu_millis() as f64,
        allocatable.memory_bytes() as f64 / (1u64 << 30) as f64,
        allocatable.get(&core_domain::resources::ResourceName::PODS) as f64,
    ]
}
