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
    if std::env::var("GG").is_ok() {
        configuration_bounds(&input, &results, &base);
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

/// How many pods of each shape (cpu millis, memory bytes).
type ShapeCounts = BTreeMap<(i64, i64), f64>;

/// Per zone of the plan, the configuration (Gilmore-Gomory) bound for packing that zone's
/// pods onto the zone's offerings: the optimum of the programme whose columns are every way
/// one node of one type can hold whole pods. Far tighter than the aggregate bound; whatever
/// separates the plan from it is packing, not the integrality of whole pods.
fn configuration_bounds(
    input: &core_domain::scheduler::SchedulingInput,
    results: &core_domain::scheduler::SchedulingResults,
    base: &core_domain::requirements::Requirements,
) {
    use core_domain::labels::LABEL_TOPOLOGY_ZONE;
    use core_domain::requirements::Requirement;
    let shapes: std::collections::HashMap<_, _> = input
        .pods
        .iter()
        .map(|p| {
            (
                p.id.clone(),
                (p.requests.cpu_millis(), p.requests.memory_bytes()),
            )
        })
        .collect();
    // By zone: what the plan pays there, and how many pods of each shape it places there.
    let mut zones: BTreeMap<String, (f64, ShapeCounts)> = BTreeMap::new();
    for claim in &results.new_node_claims {
        let zone = claim
            .requirements
            .get(LABEL_TOPOLOGY_ZONE)
            .map(|r| r.values().map(str::to_owned).collect::<Vec<_>>())
            .filter(|v| v.len() == 1)
            .map_or_else(|| "any".to_owned(), |v| v[0].to_string());
        let e = zones.entry(zone).or_default();
        e.0 += claim.cheapest_price().unwrap_or(f64::NAN);
        for shape in claim.pods.iter().filter_map(|p| shapes.get(p)) {
            *e.1.entry(*shape).or_default() += 1.0;
        }
    }
    let spec = &input.node_pools[0];
    let (mut plan_total, mut bound_total) = (0.0, 0.0);
    for (zone, (cost, demand)) in &zones {
        let mut requirements = base.clone();
        if zone != "any" {
            requirements.add(Requirement::in_values(LABEL_TOPOLOGY_ZONE, [zone.as_str()]));
        }
        let items: Vec<(f64, f64, f64)> = demand
            .iter()
            .map(|(&(c, m), &n)| (c as f64, m as f64 / (1u64 << 30) as f64, n))
            .collect();
        // (name, price, cpu, memory GiB, pods)
        let types: Vec<(String, f64, [f64; 3])> = spec
            .instance_types
            .iter()
            .filter(|t| t.is_compatible(&requirements) && !t.is_cpu_burstable())
            .filter_map(|t| {
                let o = t.cheapest_offering(&requirements)?;
                Some((t.name().to_owned(), o.price, supply(t.allocatable())))
            })
            .collect();
        let mut columns: Vec<(usize, Vec<f64>)> = Vec::new();
        let pods_most = types.iter().map(|t| t.2[2] as usize).max().unwrap_or(0);
        let units_most = types
            .iter()
            .map(|t| (t.2[0] / 50.0) as usize)
            .max()
            .unwrap_or(0);
        // Start with each shape alone on each type.
        for (t, (_, _, s)) in types.iter().enumerate() {
            for (i, item) in items.iter().enumerate() {
                let n = (s[0] / item.0)
                    .min(s[1] / item.1)
                    .min(s[2])
                    .floor()
                    .min(item.2);
                if n >= 1.0 {
                    let mut a = vec![0.0; items.len()];
                    a[i] = n;
                    columns.push((t, a));
                }
            }
        }
        let mut value = 0.0;
        let mut converged = false;
        for _ in 0..500 {
            let mut vars = ProblemVariables::new();
            let pi: Vec<Variable> = vars.add_vector(variable().min(0.0), items.len());
            let objective: Expression = items.iter().zip(&pi).map(|(it, &p)| it.2 * p).sum();
            let mut model = vars.maximise(objective).using(microlp);
            for (t, a) in &columns {
                let lhs: Expression = a.iter().zip(&pi).map(|(&n, &p)| n * p).sum();
                model = model.with(constraint!(lhs <= types[*t].1));
            }
            let Ok(solution) = model.solve() else {
                println!("{zone}: master failed");
                break;
            };
            let duals: Vec<f64> = pi
                .iter()
                .map(|&v| good_lp::Solution::value(&solution, v))
                .collect();
            value = items.iter().zip(&duals).map(|(it, p)| it.2 * p).sum();
            let mut added = 0;
            let table = one_to_two_table(&items, &duals, pods_most, units_most);
            for (t, (_, price, s)) in types.iter().enumerate() {
                let Some((best, a)) = knapsack(&items, &duals, *s, &table, units_most + 1) else {
                    println!("{zone}: more than two shapes not of 2 GiB per core; not priced");
                    return;
                };
                if best > price * (1.0 + 1e-7) + 1e-9 {
                    columns.push((t, a));
                    added += 1;
                }
            }
            if added == 0 {
                converged = true;
                break;
            }
        }
        if std::env::var("GG_SHOW").is_ok_and(|z| z == *zone) {
            let mut vars = ProblemVariables::new();
            let lambda: Vec<Variable> = vars.add_vector(variable().min(0.0), columns.len());
            let objective: Expression = columns
                .iter()
                .zip(&lambda)
                .map(|((t, _), &l)| types[*t].1 * l)
                .sum();
            let mut model = vars.minimise(objective).using(microlp);
            for (i, item) in items.iter().enumerate() {
                let lhs: Expression = columns
                    .iter()
                    .zip(&lambda)
                    .map(|((_, a), &l)| a[i] * l)
                    .sum();
                model = model.with(constraint!(lhs >= item.2));
            }
            let solved = model.solve();
            if let Err(e) = &solved {
                println!("  primal failed: {e}");
            }
            if let Ok(solution) = solved {
                println!(
                    "  shapes {:?}",
                    items
                        .iter()
                        .map(|it| (it.0, it.1, it.2))
                        .collect::<Vec<_>>()
                );
                for ((t, a), &l) in columns.iter().zip(&lambda) {
                    let n = good_lp::Solution::value(&solution, l);
                    if n > 1e-6 {
                        println!("  {:.3} x {} ({:.4}) {:?}", n, types[*t].0, types[*t].1, a);
                    }
                }
            }
        }
        if !converged {
            println!("{zone}: column generation did not converge; no bound");
            return;
        }
        plan_total += cost;
        bound_total += value;
        println!(
            "{zone}: plan {cost:.2} configuration bound {value:.2} ratio {:.3} ({} columns)",
            cost / value,
            columns.len()
        );
    }
    println!(
        "all zones: plan {plan_total:.2} configuration bound {bound_total:.2} ratio {:.3}",
        plan_total / bound_total
    );
}

/// Best values of the shapes whose memory is exactly 2 GiB per core, by pods and cpu (in 50m
/// units) allowed at most: an unbounded knapsack table every type reads, its memory being
/// twice its cpu.
fn one_to_two_table(
    items: &[(f64, f64, f64)],
    duals: &[f64],
    pods: usize,
    units: usize,
) -> Vec<f64> {
    let width = units + 1;
    let mut table = vec![0.0f64; (pods + 1) * width];
    let shapes: Vec<(usize, f64)> = items
        .iter()
        .zip(duals)
        .filter(|(it, _)| one_to_two(**it))
        .map(|(it, &d)| ((it.0 / 50.0).round() as usize, d))
        .collect();
    for p in 1..=pods {
        for b in 0..width {
            let mut best =
                table[(p - 1) * width + b].max(if b > 0 { table[p * width + b - 1] } else { 0.0 });
            for &(u, d) in &shapes {
                if u <= b {
                    best = best.max(table[(p - 1) * width + b - u] + d);
                }
            }
            table[p * width + b] = best;
        }
    }
    table
}

/// The most `duals` worth one node of supply `s` holds (cpu millis, memory GiB, pods): the
/// shapes not of 2 GiB per core enumerated, the rest read off `table`.
fn knapsack(
    items: &[(f64, f64, f64)],
    duals: &[f64],
    s: [f64; 3],
    table: &[f64],
    width: usize,
) -> Option<(f64, Vec<f64>)> {
    let others: Vec<usize> = (0..items.len())
        .filter(|&i| !one_to_two(items[i]))
        .collect();
    if others.len() > 2 {
        return None;
    }
    let most = |i: usize, left: [f64; 3]| -> usize {
        (left[0] / items[i].0)
            .min(left[1] / items[i].1)
            .min(left[2])
            .floor()
            .max(0.0) as usize
    };
    let mut best = (0.0, vec![0.0; items.len()]);
    let first = others.first().copied();
    let second = others.get(1).copied();
    let rows = table.len() / width - 1;
    for x in 0..=first.map_or(0, |i| most(i, s)) {
        let after_x = first.map_or(s, |i| {
            let n = x as f64;
            [s[0] - n * items[i].0, s[1] - n * items[i].1, s[2] - n]
        });
        for y in 0..=second.map_or(0, |i| most(i, after_x)) {
            let left = second.map_or(after_x, |i| {
                let n = y as f64;
                [
                    after_x[0] - n * items[i].0,
                    after_x[1] - n * items[i].1,
                    after_x[2] - n,
                ]
            });
            let units = ((left[0] / 50.0).min(left[1] * 1000.0 / 2.0 / 50.0) + 1e-9)
                .floor()
                .max(0.0) as usize;
            let pods = (left[2].max(0.0) as usize).min(rows);
            let rest = table[pods * width + units.min(width - 1)];
            let value = rest
                + first.map_or(0.0, |i| x as f64 * duals[i])
                + second.map_or(0.0, |i| y as f64 * duals[i]);
            if value > best.0 {
                let mut a = vec![0.0; items.len()];
                backtrack(
                    items,
                    duals,
                    table,
                    width,
                    pods,
                    units.min(width - 1),
                    &mut a,
                );
                if let Some(i) = first {
                    a[i] = x as f64;
                }
                if let Some(i) = second {
                    a[i] = y as f64;
                }
                best = (value, a);
            }
        }
    }
    Some(best)
}

/// Whether a shape (cpu millis, memory GiB, count) asks for exactly 2 GiB per core, in whole
/// 50m steps of cpu: those the table prices.
fn one_to_two(item: (f64, f64, f64)) -> bool {
    (item.1 - 2.0 * item.0 / 1000.0).abs() < 1e-9 && item.0 % 50.0 == 0.0
}

/// The counts of the 1:2 shapes behind `table`'s value at (`pods`, `units`), into `a`.
fn backtrack(
    items: &[(f64, f64, f64)],
    duals: &[f64],
    table: &[f64],
    width: usize,
    mut pods: usize,
    mut units: usize,
    a: &mut [f64],
) {
    let at = |p: usize, b: usize| table[p * width + b];
    while pods > 0 && at(pods, units) > 0.0 {
        let here = at(pods, units);
        if at(pods - 1, units) == here {
            pods -= 1;
            continue;
        }
        if units > 0 && at(pods, units - 1) == here {
            units -= 1;
            continue;
        }
        let Some(i) = (0..items.len()).find(|&i| {
            let u = (items[i].0 / 50.0).round() as usize;
            one_to_two(items[i]) && u <= units && at(pods - 1, units - u) + duals[i] == here
        }) else {
            break;
        };
        a[i] += 1.0;
        units -= (items[i].0 / 50.0).round() as usize;
        pods -= 1;
    }
}
