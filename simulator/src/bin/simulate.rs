//! `simulate [SCENARIO.yaml] [--report REPORT.json] [--plot FILE.svg] [--html FILE.html]`: runs a
//! scenario (by default the embedded `scenarios/new-ami.yaml`) and prints its timeline;
//! `--report` also writes the JSON report, `--plot` its figures over time as an SVG picture,
//! `--html` a self-contained page with the stats, the picture and the timeline.
//!
//! `simulate A.yaml --vs B.yaml` or `simulate A.yaml --set PATH=VALUE`: two runs, their figures
//! side by side (and, with `--plot`/`--html`, on one picture).
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
use simulator::compare;
use simulator::engine::{self, EngineError, Observer, Progress, RunError};
use simulator::fold::Folder;
use simulator::plot;
use simulator::report::TimelineEvent;
use simulator::scenario;
use simulator::scenario::overrides::{self, Override};

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
    /// Where to write the run's figures over time as an SVG picture.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Where to write a self-contained HTML page: stats, the picture, the timeline.
    #[arg(long, value_name = "FILE.html")]
    html: Option<PathBuf>,
    /// Print nothing but errors (the report is still written).
    #[arg(long, short)]
    quiet: bool,
    /// Log filter for the controllers' logs on stderr (`RUST_LOG` syntax).
    #[arg(long, env = "SIMULATE_LOG", default_value = "error")]
    log: String,
    /// Print every timeline event; by default an event identical to one printed before (only
    /// its time differs) is counted, not printed again.
    #[arg(long)]
    every_event: bool,
    /// Check the chaos runs' invariants as the scenario runs; exit 1 when one breaks.
    #[arg(long, conflicts_with_all = ["vs", "set"])]
    check: bool,
    /// Run this scenario too and print the two runs' figures side by side.
    #[arg(long, value_name = "B.yaml", conflicts_with = "report")]
    vs: Option<PathBuf>,
    /// Change the scenario before it runs (`objects[NodePool/default].spec.disruption.budgets[0].nodes=20%`);
    /// repeatable. Runs the scenario as written and as changed (or, with `--vs`, changes B), and
    /// prints the two runs' figures side by side.
    #[arg(long, value_name = "PATH=VALUE", conflicts_with = "report")]
    set: Vec<String>,
    /// Chaos runs from this seed on, instead of a scenario.
    #[arg(long, value_name = "SEED", conflicts_with_all = ["scenario", "report", "plot", "html", "vs", "set"])]
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

/// Prints the timeline as it happens, repeated events folded, and, on a terminal, a progress
/// line.
struct Printer {
    quiet: bool,
    /// When the run started, in wall time: the progress line waits for [`PROGRESS_AFTER`].
    started: std::time::Instant,
    progress: bool,
    /// The virtual minute the progress line shows, while it is on screen.
    last_progress: Option<u64>,
    /// When the progress line was last drawn: at most [`PROGRESS_EVERY`] apart.
    last_drawn: Option<std::time::Instant>,
    /// Whether stdout is the terminal the progress line is on: a timeline line must then clear
    /// it first, and it is drawn again after.
    shares_terminal: bool,
    folder: Fold,
    /// Whoever read stdout has stopped (`simulate ... | head`): nothing more is printed.
    closed: bool,
    /// Whether the run still has something to produce once stdout is closed (a report file, a
    /// verdict); without, a closed stdout ends the program.
    more_to_do: bool,
}

/// How long a run goes without a progress line.
const PROGRESS_AFTER: Duration = Duration::from_secs(1);
/// The shortest wall time between two drawings of the progress line.
const PROGRESS_EVERY: Duration = Duration::from_millis(200);

/// How the timeline is folded (see `simulator::fold`).
enum Fold {
    Repeats(Folder),
    Off,
}

impl Printer {
    #[allow(
        clippy::print_stderr,
        reason = "the progress line is for the person watching"
    )]
    fn clear_progress(&mut self) {
        if self.progress && self.shares_terminal && self.last_progress.is_some() {
            eprint!("\r\x1b[2K");
            self.last_progress = None;
        }
    }

    /// Writes `lines` to stdout. A closed pipe is the reader saying it has seen enough, not an
    /// error: printing stops, and the program ends unless it has more to do.
    fn print(&mut self, lines: &[String]) {
        if self.closed || lines.is_empty() {
            return;
        }
        if let Err(error) = write_lines(lines) {
            self.closed = true;
            if error.kind() == std::io::ErrorKind::BrokenPipe && !self.more_to_do {
                std::process::exit(0);
            }
        }
    }

    /// The folded events' counts, at the end of the timeline.
    fn finish(&mut self) {
        self.clear_progress();
        if let Fold::Repeats(folder) = &mut self.folder {
            let lines = folder.finish();
            self.print(&lines);
        }
    }
}

/// Writes `lines` to stdout, flushed.
fn write_lines(lines: &[String]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    lines
        .iter()
        .try_for_each(|line| writeln!(out, "{line}"))
        .and_then(|()| out.flush())
}

impl Observer for Printer {
    fn event(&mut self, event: &TimelineEvent) {
        if self.quiet || self.closed {
            return;
        }
        self.clear_progress();
        let lines = match &mut self.folder {
            Fold::Repeats(folder) => folder.push(event),
            Fold::Off => vec![event.line()],
        };
        self.print(&lines);
    }

    #[allow(
        clippy::print_stderr,
        reason = "the progress line is for the person watching"
    )]
    fn progress(&mut self, progress: &Progress) {
        // Off when stderr is not a terminal or `--quiet`; on once the run has taken a second of
        // wall time (a short run never shows it); then once per virtual minute.
        if !self.progress || self.started.elapsed() < PROGRESS_AFTER {
            return;
        }
        let minute = progress.elapsed.as_secs() / 60;
        let recently = self
            .last_drawn
            .is_some_and(|drawn| drawn.elapsed() < PROGRESS_EVERY);
        if progress.elapsed < progress.total
            && (self.last_progress == Some(minute) || recently && self.last_progress.is_some())
        {
            return;
        }
        self.last_progress = Some(minute);
        self.last_drawn = Some(std::time::Instant::now());
        let clock = |d: Duration| {
            simulator::report::clock(d.as_secs_f64())
                .trim_start()
                .to_owned()
        };
        eprint!(
            "\r\x1b[2Ksimulating {} / {}: {} nodes, {} pods pending",
            clock(progress.elapsed),
            clock(progress.total),
            progress.nodes,
            progress.pending_pods
        );
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
    if args.vs.is_some() || !args.set.is_empty() {
        return run_compare(&args, &source, &text);
    }
    let scenario = match scenario::parse(&text) {
        Ok(scenario) => scenario,
        Err(error) => {
            eprintln!("simulate: invalid scenario {source}: {error}");
            return ExitCode::from(2);
        }
    };
    let mut printer = Printer {
        quiet: args.quiet,
        started: std::time::Instant::now(),
        progress: std::io::stderr().is_terminal() && !args.quiet,
        last_progress: None,
        last_drawn: None,
        shares_terminal: std::io::stdout().is_terminal(),
        folder: if args.every_event {
            Fold::Off
        } else {
            Fold::Repeats(Folder::new())
        },
        closed: false,
        more_to_do: args.check
            || args.report.is_some()
            || args.plot.is_some()
            || args.html.is_some(),
    };
    let result = if args.check {
        engine::run_checked_blocking(scenario, &mut printer)
    } else {
        engine::run_blocking(scenario, &mut printer).map(|report| (report, Vec::new()))
    };
    printer.finish();
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
    if let Err(message) = write_pictures(&args, &[(report.scenario.as_str(), &report)]) {
        eprintln!("simulate: {message}");
        return ExitCode::FAILURE;
    }
    if !args.quiet {
        printer.print(&summary(&report));
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

/// `--vs` and `--set`: runs A and B (the `--vs` scenario, else A, changed by the `--set`s) and
/// prints their figures side by side.
#[allow(clippy::print_stderr, reason = "errors go to stderr")]
fn run_compare(args: &Args, source: &str, text: &str) -> ExitCode {
    let overrides: Vec<Override> = match args.set.iter().map(|text| Override::parse(text)).collect()
    {
        Ok(overrides) => overrides,
        Err(error) => {
            eprintln!("simulate: {error}");
            return ExitCode::from(2);
        }
    };
    let (b_source, b_text) = match &args.vs {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => (path.display().to_string(), text),
            Err(error) => {
                eprintln!("simulate: cannot read {}: {error}", path.display());
                return ExitCode::from(2);
            }
        },
        None => (source.to_owned(), text.to_owned()),
    };
    let b_text = match overrides::apply_all(&b_text, &overrides) {
        Ok(changed) => changed,
        Err(error) => {
            eprintln!("simulate: {b_source}: {error}");
            return ExitCode::from(2);
        }
    };
    let stem = |path: Option<&PathBuf>, default: &str| {
        path.and_then(|path| path.file_stem()).map_or_else(
            || default.to_owned(),
            |stem| stem.to_string_lossy().into_owned(),
        )
    };
    let default_label = if args.dump.from_dump.is_empty() {
        "new-ami"
    } else {
        "the dump"
    };
    let a_label = stem(args.scenario.as_ref(), default_label);
    let mut b_label = stem(args.vs.as_ref(), &a_label);
    if !overrides.is_empty() {
        b_label.push_str(" with --set");
    }
    if b_label == a_label {
        b_label.push_str(" (B)");
    }
    let mut reports = Vec::with_capacity(2);
    for (source, text) in [(source, text), (b_source.as_str(), b_text.as_str())] {
        let scenario = match scenario::parse(text) {
            Ok(scenario) => scenario,
            Err(error) => {
                eprintln!("simulate: invalid scenario {source}: {error}");
                return ExitCode::from(2);
            }
        };
        let mut printer = Printer {
            quiet: true,
            started: std::time::Instant::now(),
            progress: std::io::stderr().is_terminal() && !args.quiet,
            last_progress: None,
            last_drawn: None,
            shares_terminal: std::io::stdout().is_terminal(),
            folder: Fold::Off,
            closed: false,
            more_to_do: false,
        };
        let result = engine::run_blocking(scenario, &mut printer);
        printer.finish();
        match result {
            Ok(report) => reports.push(report),
            Err(RunError::Engine(error @ EngineError::Apply { .. })) => {
                eprintln!("simulate: invalid scenario {source}: {error}");
                return ExitCode::from(2);
            }
            Err(error) => {
                eprintln!("simulate: {source}: {error}");
                return ExitCode::FAILURE;
            }
        }
    }
    if !args.quiet {
        let runs: Vec<(&str, &simulator::report::Report)> = [a_label.as_str(), b_label.as_str()]
            .into_iter()
            .zip(&reports)
            .collect();
        let mut lines = Vec::new();
        for set in &args.set {
            lines.push(format!("--set {set}"));
        }
        lines.extend(compare::table(&runs));
        let _ = write_lines(&lines);
    }
    let runs: Vec<(&str, &simulator::report::Report)> = [a_label.as_str(), b_label.as_str()]
        .into_iter()
        .zip(&reports)
        .collect();
    if let Err(message) = write_pictures(args, &runs) {
        eprintln!("simulate: {message}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// `--plot` and `--html` of `runs` (one, or the two compared): what went wrong, if anything.
fn write_pictures(args: &Args, runs: &[(&str, &simulator::report::Report)]) -> Result<(), String> {
    type Draw = fn(&[(&str, &simulator::report::Report)]) -> Result<String, plot::PlotError>;
    let wanted: [(&Option<PathBuf>, Draw); 2] = [(&args.plot, plot::svg), (&args.html, plot::html)];
    for (path, draw) in wanted {
        let Some(path) = path else { continue };
        let text =
            draw(runs).map_err(|error| format!("cannot draw {}: {error}", path.display()))?;
        std::fs::write(path, text)
            .map_err(|error| format!("cannot write {}: {error}", path.display()))?;
    }
    Ok(())
}

/// `--chaos`: runs seeds `seed..seed + runs`, shrinking and writing out each failure. A closed
/// stdout ends the search, with the verdict so far.
#[allow(clippy::print_stderr, reason = "errors go to stderr")]
fn run_chaos(first: u64, args: &Args) -> ExitCode {
    let verdict = |failed: u64| {
        if failed == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    };
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
        let mut lines = Vec::new();
        if let Some(first_violation) = violations.first() {
            failed += 1;
            lines.push(format!(
                "chaos seed {seed}: {} violation(s); the first: {first_violation}",
                violations.len()
            ));
            for violation in violations.iter().skip(1).take(9) {
                lines.push(format!("  {violation}"));
            }
            let shrunk = chaos::shrink(&document, first_violation.invariant, args.shrink_runs);
            let path = args.out.join(format!("chaos-{seed}.yaml"));
            let header =
                format!("# Found by `simulate --chaos {seed}`, shrunk: {first_violation}\n");
            match std::fs::write(&path, header + &chaos::to_yaml(&shrunk)) {
                Ok(()) => lines.push(format!("  reproduce: simulate --check {}", path.display())),
                Err(error) => eprintln!("simulate: cannot write {}: {error}", path.display()),
            }
        } else if !args.quiet {
            lines.push(format!("chaos seed {seed}: every invariant held"));
        }
        if write_lines(&lines).is_err() {
            return verdict(failed);
        }
    }
    if !args.quiet {
        let _ = write_lines(&[format!(
            "{} chaos run(s), {} held every invariant, {failed} did not",
            args.runs,
            args.runs.saturating_sub(failed)
        )]);
    }
    verdict(failed)
}

/// The lines after the timeline: what the run ended with.
fn summary(report: &simulator::report::Report) -> Vec<String> {
    let stats = &report.stats;
    let running = report
        .final_state
        .instances
        .iter()
        .filter(|i| i.state == "running" || i.state == "pending")
        .count();
    let bound = stats
        .cost_lower_bound_per_hour_at_end
        .map_or_else(|| "none".to_owned(), |bound| format!("${bound:.4}/h"));
    let totals = format!(
        "{}: {} events over {}s; {} NodeClaims, {} nodes, {} instances running at ${:.4}/h (lower bound {bound})",
        report.scenario,
        report.timeline.len(),
        report.end,
        report.final_state.node_claims.len(),
        report.final_state.nodes.len(),
        running,
        stats.cost_per_hour_at_end
    );
    let activity = format!(
        "created {} NodeClaims, deleted {}; longest pending pod {}s; {} PDB violations; {} orphaned instances",
        stats.node_claims_created,
        stats.node_claims_deleted,
        stats.pods_pending_max_seconds,
        stats.pdb_violations,
        stats.orphaned_instances
    );
    vec![String::new(), totals, activity]
}
