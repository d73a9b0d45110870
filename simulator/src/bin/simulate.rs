//! `simulate [SCENARIO.yaml] [--report REPORT.json]`: runs a scenario (by default the embedded
//! `scenarios/new-ami.yaml`) and prints its timeline; `--report` also writes the JSON report.
//!
//! `simulate --chaos SEED [--runs N] [--out DIR]`: chaos runs (random clusters and faults,
//! invariants checked after every step); a failure prints its seed and what broke, and writes
//! a minimal scenario reproducing it to `DIR/chaos-SEED.yaml`.
//!
//! `simulate --from-dump PATH... [--emit-scenario FILE] [--emit-only] [--duration D]`: runs
//! the cluster a `kubectl get ... -o yaml` dump describes (`simulator::dump`); `--emit-scenario`
//! also writes that scenario, `--emit-only` writes it and does not run it.
//!
//! Exit status: 0 when the run completed (every chaos run held every invariant), 2 when the
//! scenario is invalid (the message names the field), 1 when the run failed (or a chaos run
//! broke an invariant).

use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use simulator::chaos;
use simulator::engine::{self, EngineError, Observer, RunError};
use simulator::report::TimelineEvent;
use simulator::scenario;

// The simulator allocates and frees small objects at a high rate; glibc's malloc spent a
// quarter of a fleet roll's time in its free lists. The `system-allocator` feature leaves it
// out, for heap profilers that see only malloc (valgrind's massif, see README.md).
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Runs a scenario: core-svc's controllers and aws-plugin's provider over an in-memory
/// cluster, an in-memory EC2 and a virtual clock.
#[derive(Debug, Parser)]
#[command(name = "simulate", version)]
struct Args {
    /// The scenario file (YAML); without one, the built-in `new-ami` scenario.
    scenario: Option<PathBuf>,
    /// Where to write the JSON report.
    #[arg(long, value_name = "REPORT.json")]
    report: Option<PathBuf>,
    /// Print nothing but errors (the report is still written).
    #[arg(long, short)]
    quiet: bool,
    /// Log filter for the controllers' logs on stderr (`RUST_LOG` syntax).
    #[arg(long, env = "SIMULATE_LOG", default_value = "error")]
    log: String,
    /// Check the chaos runs' invariants as the scenario runs; exit 1 when one breaks.
    #[arg(long)]
    check: bool,
    /// Chaos runs from this seed on, instead of a scenario.
    #[arg(long, value_name = "SEED", conflicts_with_all = ["scenario", "report"])]
    chaos: Option<u64>,
    /// How many chaos runs (seeds SEED, SEED+1, ...).
    #[arg(long, value_name = "N", default_value_t = 1, requires = "chaos")]
    runs: u64,
    /// Where a failed chaos run's minimal scenario is written.
    #[arg(long, value_name = "DIR", default_value = ".", requires = "chaos")]
    out: PathBuf,
    /// The most runs a failure's shrinking may spend (0: write the failing scenario as drawn).
    #[arg(long, value_name = "N", default_value_t = chaos::SHRINK_RUNS, requires = "chaos")]
    shrink_runs: usize,
    #[command(flatten)]
    dump: DumpArgs,
}

/// `--from-dump`: the cluster of a kubectl dump as the scenario.
#[derive(Debug, clap::Args)]
struct DumpArgs {
    /// A dump of the cluster to simulate, instead of a scenario: the output of `kubectl get
    /// nodepools,nodeclaims,ec2nodeclasses,nodes,pods,pdb,deployments,daemonsets -A -o yaml`
    /// (or JSON), a file or a directory of `*.yaml`/`*.yml`/`*.json` (repeatable).
    #[arg(long = "from-dump", short = 'f', value_name = "PATH", conflicts_with_all = ["scenario", "chaos"])]
    from_dump: Vec<PathBuf>,
    /// Write the scenario built from the dump here (YAML, to add events to and run again).
    #[arg(long, value_name = "FILE", requires = "from_dump")]
    emit_scenario: Option<PathBuf>,
    /// Only write the scenario (`--emit-scenario`), do not run it.
    #[arg(long, requires = "emit_scenario")]
    emit_only: bool,
    /// How long the dumped cluster runs (virtual time, `90m`, `3h`).
    #[arg(long, value_name = "DURATION", default_value = simulator::dump::DEFAULT_DURATION, requires = "from_dump")]
    duration: String,
}

/// Prints the timeline as it happens and, on a terminal, a progress line.
struct Printer {
    quiet: bool,
    progress: bool,
    last_progress: Option<u64>,
}

impl Printer {
    #[allow(
        clippy::print_stderr,
        reason = "the progress line is for the person watching"
    )]
    fn clear_progress(&mut self) {
        if self.progress && self.last_progress.is_some() {
            eprint!("\r\x1b[2K");
            self.last_progress = None;
        }
    }
}

impl Observer for Printer {
    #[allow(clippy::print_stdout, reason = "the timeline is the program's output")]
    fn event(&mut self, event: &TimelineEvent) {
        if self.quiet {
            return;
        }
        self.clear_progress();
        println!("{}", event.line());
    }

    #[allow(
        clippy::print_stderr,
        reason = "the progress line is for the person watching"
    )]
    fn progress(&mut self, elapsed: Duration, total: Duration) {
        if !self.progress || self.quiet {
            return;
        }
        // One update per virtual minute is enough to see it move.
        let minute = elapsed.as_secs() / 60;
        if self.last_progress == Some(minute) && elapsed < total {
            return;
        }
        self.last_progress = Some(minute);
        let clock = |d: Duration| {
            let s = d.as_secs();
            format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
        };
        eprint!("\r\x1b[2Ksimulating {} / {}", clock(elapsed), clock(total));
        let _ = std::io::stderr().flush();
    }
}

#[allow(clippy::print_stderr, reason = "errors go to stderr")]
fn main() -> ExitCode {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();

    if let Some(seed) = args.chaos {
        return run_chaos(seed, &args);
    }
    let (source, text) = match &args.scenario {
        None if !args.dump.from_dump.is_empty() => match scenario_from_dump(&args.dump) {
            Ok(Some(built)) => built,
            Ok(None) => return ExitCode::SUCCESS,
            Err(code) => return code,
        },
        None => (
            "the built-in scenario new-ami.yaml".to_owned(),
            simulator::DEFAULT_SCENARIO.to_owned(),
        ),
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => (path.display().to_string(), text),
            Err(error) => {
                eprintln!("simulate: cannot read {}: {error}", path.display());
                return ExitCode::from(2);
            }
        },
    };
    let scenario = match scenario::parse(&text) {
        Ok(scenario) => scenario,
        Err(error) => {
            eprintln!("simulate: invalid scenario {source}: {error}");
            return ExitCode::from(2);
        }
    };
    let mut printer = Printer {
        quiet: args.quiet,
        progress: std::io::stderr().is_terminal(),
        last_progress: None,
    };
    let result = if args.check {
        engine::run_checked_blocking(scenario, &mut printer)
    } else {
        engine::run_blocking(scenario, &mut printer).map(|report| (report, Vec::new()))
    };
    printer.clear_progress();
    let (report, violations) = match result {
        Ok(done) => done,
        Err(RunError::Engine(error @ EngineError::Apply { .. })) => {
            eprintln!("simulate: invalid scenario {source}: {error}");
            return ExitCode::from(2);
        }
        Err(error) => {
            eprintln!("simulate: {error}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(path) = &args.report
        && let Err(error) = std::fs::write(path, report.to_json())
    {
        eprintln!("simulate: cannot write {}: {error}", path.display());
        return ExitCode::FAILURE;
    }
    if !args.quiet {
        print_summary(&report);
    }
    if args.check {
        for violation in &violations {
            eprintln!("simulate: invariant broken: {violation}");
        }
        if !violations.is_empty() {
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

/// `--from-dump`: the scenario built from the dump (its source and text), written to
/// `--emit-scenario` if asked; `None` when `--emit-only` says not to run it.
#[allow(clippy::print_stderr, reason = "warnings and errors go to stderr")]
fn scenario_from_dump(args: &DumpArgs) -> Result<Option<(String, String)>, ExitCode> {
    let options = simulator::dump::DumpOptions {
        duration: args.duration.clone(),
    };
    let built = simulator::dump::load(&args.from_dump)
        .and_then(|sources| simulator::dump::build(&sources, &options))
        .map_err(|error| {
            eprintln!("simulate: invalid dump: {error}");
            ExitCode::from(2)
        })?;
    for warning in &built.warnings {
        eprintln!("simulate: warning: {warning}");
    }
    let text = simulator::dump::to_yaml(&built);
    if let Some(path) = &args.emit_scenario {
        std::fs::write(path, &text).map_err(|error| {
            eprintln!("simulate: cannot write {}: {error}", path.display());
            ExitCode::FAILURE
        })?;
    }
    if args.emit_only {
        return Ok(None);
    }
    let source = format!("built from the dump ({})", built.sources.join(", "));
    Ok(Some((source, text)))
}

/// `--chaos`: runs seeds `seed..seed + runs`, shrinking and writing out each failure.
#[allow(
    clippy::print_stdout,
    reason = "the runs' verdicts are the program's output"
)]
#[allow(clippy::print_stderr, reason = "errors go to stderr")]
fn run_chaos(first: u64, args: &Args) -> ExitCode {
    let mut failed = 0u64;
    for seed in first..first.saturating_add(args.runs) {
        let document = chaos::generate::scenario(seed);
        let violations = match chaos::check(&document) {
            Ok(violations) => violations,
            Err(error) => {
                eprintln!("simulate: chaos seed {seed}: {error}");
                failed += 1;
                continue;
            }
        };
        let Some(first_violation) = violations.first() else {
            if !args.quiet {
                println!("chaos seed {seed}: every invariant held");
            }
            continue;
        };
        failed += 1;
        println!(
            "chaos seed {seed}: {} violation(s); the first: {first_violation}",
            violations.len()
        );
        for violation in violations.iter().skip(1).take(9) {
            println!("  {violation}");
        }
        let shrunk = chaos::shrink(&document, first_violation.invariant, args.shrink_runs);
        let path = args.out.join(format!("chaos-{seed}.yaml"));
        let header = format!("# Found by `simulate --chaos {seed}`, shrunk: {first_violation}\n");
        match std::fs::write(&path, header + &chaos::to_yaml(&shrunk)) {
            Ok(()) => println!("  reproduce: simulate --check {}", path.display()),
            Err(error) => eprintln!("simulate: cannot write {}: {error}", path.display()),
        }
    }
    if !args.quiet {
        println!(
            "{} chaos run(s), {} held every invariant, {failed} did not",
            args.runs,
            args.runs.saturating_sub(failed)
        );
    }
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[allow(clippy::print_stdout, reason = "the summary is the program's output")]
fn print_summary(report: &simulator::report::Report) {
    let stats = &report.stats;
    let running = report
        .final_state
        .instances
        .iter()
        .filter(|i| i.state == "running" || i.state == "pending")
        .count();
    println!();
    let bound = stats
        .cost_lower_bound_per_hour_at_end
        .map_or_else(|| "none".to_owned(), |bound| format!("${bound:.4}/h"));
    println!(
        "{}: {} events over {}s; {} NodeClaims, {} nodes, {} instances running at ${:.4}/h (lower bound {bound})",
        report.scenario,
        report.timeline.len(),
        report.end,
        report.final_state.node_claims.len(),
        report.final_state.nodes.len(),
        running,
        stats.cost_per_hour_at_end
    );
    println!(
        "created {} NodeClaims, deleted {}; longest pending pod {}s; {} PDB violations; {} orphaned instances",
        stats.node_claims_created,
        stats.node_claims_deleted,
        stats.pods_pending_max_seconds,
        stats.pdb_violations,
        stats.orphaned_instances
    );
}
