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

use std::io::Write as _;
use std::process::{Command, ExitCode};
use std::time::Instant;

use clap::Parser;
use core_domain::scheduler::Packing;
use core_domain::scheduler::bound::plan_lower_bound;
use simulator::workloads::{self, Mix, Pool};

const SIZES: [usize; 4] = [1_000, 5_000, 20_000, 50_000];
const SEED: u64 = 42;

/// Runs the scheduler on the us-east-1 catalogue and reports solve time, nodes, cost, the
/// cost's lower bound and their ratio: every case as a table, or one case as a row.
#[derive(Debug, Parser)]
#[command(name = "scheduler-report")]
struct Args {
    /// The NodePool: `any` (the whole catalogue) or `typical` (c, m and r, generation above 2,
    /// amd64, on-demand). Without --mix and --pods, every case runs for both.
    #[arg(long, default_value = "any")]
    pool: Pool,
    /// One case's pod mix (with --pods): plain, zone-spread, hostname-spread,
    /// hostname-anti-affinity.
    #[arg(long, requires = "pods")]
    mix: Option<Mix>,
    /// One case's pod count (with --mix).
    #[arg(long, requires = "mix")]
    pods: Option<usize>,
    /// `cost-aware` (the scheduler's) or `first-fit` (upstream's packing, for comparison).
    #[arg(long, default_value = "cost-aware", value_parser = ["cost-aware", "first-fit"])]
    packing: String,
}

/// Writes `text` to stdout; false when stdout is gone (a closed pipe: `| head`), which ends the
/// report quietly rather than with a panic.
fn emit(text: &str) -> bool {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .is_ok()
}

#[allow(clippy::print_stderr, reason = "a report tool: errors go to stderr")]
fn main() -> ExitCode {
    let args = Args::parse();
    let packing = match args.packing.as_str() {
        "first-fit" => Packing::FirstFit,
        _ => Packing::CostAware,
    };
    match (args.mix, args.pods) {
        (Some(mix), Some(pods)) => match run_case(args.pool, mix, pods, packing) {
            Ok(row) => {
                emit(&format!("{row}\n"));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("scheduler-report: {e:#}");
                ExitCode::FAILURE
            }
        },
        _ => run_all(&args.packing),
    }
}

#[allow(clippy::print_stderr, reason = "a report tool: errors go to stderr")]
fn run_all(packing: &str) -> ExitCode {
    let Ok(me) = std::env::current_exe() else {
        eprintln!("scheduler-report: cannot find its own executable");
        return ExitCode::FAILURE;
    };
    if !emit(
        "| pool | mix | pods | solve ms | pods/s | nodes | cost $/h | bound $/h | ratio | unschedulable | peak RSS MiB |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    ) {
        return ExitCode::SUCCESS;
    }
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
                        if !emit(&String::from_utf8_lossy(&o.stdout)) {
                            return ExitCode::SUCCESS;
                        }
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
