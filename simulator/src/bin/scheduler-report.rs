//! Runs the scheduler once per case on the real us-east-1 catalogue and reports what a person
//! compares between versions: time, pods per second, nodes, estimated cost per hour, the
//! cost's lower bound and the ratio of the two, pods left unschedulable and the process's peak
//! memory. Each case runs in its own process (the binary
//! re-runs itself), so peak memory belongs to that case alone. The cases are every mix at
//! every size, onto a NodePool over the whole catalogue (`any`) and onto a typical one
//! (`typical`: c, m and r, generation above 2, amd64, on-demand).
//!
//! The bound (`core_domain::scheduler::bound::plan_lower_bound`) is the linear-programming
//! optimum of covering the placed pods' total cpu, memory and pod count with the NodePool's
//! offerings, burstable types left out: no plan for those pods costs less, so `ratio` (plan
//! cost over bound) is what packing and constraints cost. Solve time does not include it.
//!
//! ```text
//! cargo run --release -p simulator --bin scheduler-report            # every case, a table
//! cargo run --release -p simulator --bin scheduler-report -- --mix plain --pods 5000
//! cargo run --release -p simulator --bin scheduler-report -- --pool typical --mix plain --pods 5000
//! cargo run --release -p simulator --bin scheduler-report -- --packing first-fit   # upstream's packing
//! ```

use std::process::{Command, ExitCode};
use std::time::Instant;

use core_domain::scheduler::Packing;
use core_domain::scheduler::bound::plan_lower_bound;
use simulator::workloads::{self, Mix, Pool};

const SIZES: [usize; 4] = [1_000, 5_000, 20_000, 50_000];
const SEED: u64 = 42;

#[allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a report tool: its output is the report"
)]
fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let packing = match value("--packing").as_deref() {
        None | Some("cost-aware") => Packing::CostAware,
        Some("first-fit") => Packing::FirstFit,
        Some(other) => {
            eprintln!("scheduler-report: --packing {other:?}: one of cost-aware, first-fit");
            return ExitCode::from(2);
        }
    };
    let pool = match value("--pool").map(|p| p.parse::<Pool>()) {
        None => Pool::Any,
        Some(Ok(pool)) => pool,
        Some(Err(e)) => {
            eprintln!("scheduler-report: --pool: {e}");
            return ExitCode::from(2);
        }
    };
    match (value("--mix"), value("--pods")) {
        (Some(mix), Some(pods)) => match (mix.parse::<Mix>(), pods.parse::<usize>()) {
            (Ok(mix), Ok(pods)) => match run_case(pool, mix, pods, packing) {
                Ok(row) => {
                    println!("{row}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("scheduler-report: {e:#}");
                    ExitCode::FAILURE
                }
            },
            (Err(e), _) => {
                eprintln!("scheduler-report: --mix: {e}");
                ExitCode::from(2)
            }
            (_, Err(e)) => {
                eprintln!("scheduler-report: --pods {pods:?}: {e}");
                ExitCode::from(2)
            }
        },
        (None, None) => run_all(packing),
        _ => {
            eprintln!("scheduler-report: give both --mix and --pods, or neither for every case");
            ExitCode::from(2)
        }
    }
}

#[allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a report tool: its output is the report"
)]
fn run_all(packing: Packing) -> ExitCode {
    let Ok(me) = std::env::current_exe() else {
        eprintln!("scheduler-report: cannot find its own executable");
        return ExitCode::FAILURE;
    };
    println!(
        "| pool | mix | pods | solve ms | pods/s | nodes | cost $/h | bound $/h | ratio | unschedulable | peak RSS MiB |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let packing = match packing {
        Packing::CostAware => "cost-aware",
        Packing::FirstFit => "first-fit",
    };
    let mut failed = false;
    for pool in Pool::ALL {
        for mix in Mix::ALL {
            for pods in SIZES {
                let output = Command::new(&me)
                    .args(["--pool", &pool.to_string(), "--mix", &mix.to_string()])
                    .args(["--pods", &pods.to_string(), "--packing", packing])
                    .output();
                match output {
                    Ok(o) if o.status.success() => {
                        print!("{}", String::from_utf8_lossy(&o.stdout));
                    }
                    Ok(o) => {
                        failed = true;
                        eprintln!(
                            "{pool} {mix} x {pods}: {}",
                            String::from_utf8_lossy(&o.stderr)
                        );
                    }
                    Err(e) => {
                        failed = true;
                        eprintln!("{pool} {mix} x {pods}: {e}");
                    }
                }
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn run_case(pool: Pool, mix: Mix, pods: usize, packing: Packing) -> anyhow::Result<String> {
    let instance_types = simulator::catalogue::instance_types("us-east-1", true, SEED)?;
    let input = workloads::input_for(workloads::pods(mix, pods, SEED), &instance_types, pool);
    let start = Instant::now();
    let results = core_domain::scheduler::solve_with(&input, packing)?;
    let elapsed = start.elapsed();
    let seconds = elapsed.as_secs_f64();
    let cost = results.estimated_cost();
    let bound = plan_lower_bound(&input, &results)?.per_hour;
    // No pod placed means nothing to buy: the bound is zero and so is the cost.
    let ratio = if bound > 0.0 {
        format!("{:.2}x", cost / bound)
    } else {
        "-".to_owned()
    };
    Ok(format!(
        "| {pool} | {mix} | {pods} | {:.1} | {:.0} | {} | {:.2} | {:.2} | {ratio} | {} | {:.0} |",
        seconds * 1000.0,
        pods as f64 / seconds,
        results.node_count(),
        cost,
        bound,
        results.unschedulable.len(),
        peak_rss_mib().unwrap_or(f64::NAN),
    ))
}

/// The process's peak resident memory (`VmHWM`), in MiB.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
