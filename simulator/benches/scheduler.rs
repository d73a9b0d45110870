//! Criterion benchmarks of one scheduling run on the real us-east-1 catalogue (1,243 instance
//! types, 6 zones, spot and on-demand). Targets: 5,000 plain pods under 100 ms;
//! 20,000 pods with hostname spread under 2 s. Run:
//!
//! ```text
//! cargo bench -p simulator --bench scheduler
//! ```
//!
//! `scheduler-report` prints the same cases with nodes, cost and peak memory.
//!
//! Also timed: the cost lower bound (`core_domain::scheduler::bound`), a linear programme
//! over the whole catalogue, for 1,000 and 20,000 plain pods (the pods only add up into its
//! right-hand side; its size is the catalogue's).
#![allow(
    missing_docs,
    reason = "criterion's macros generate undocumented items"
)]

use std::hint::black_box;
use std::time::Duration;

use core_domain::scheduler::bound;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use simulator::workloads::{self, Mix};

fn scheduling(c: &mut Criterion) {
    let Ok(instance_types) = simulator::catalogue::instance_types("us-east-1", true, 42) else {
        panic!("the embedded catalogue must convert");
    };
    let mut group = c.benchmark_group("solve");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10))
        .warm_up_time(Duration::from_secs(1));
    for mix in Mix::ALL {
        for pods in [1_000, 5_000, 20_000] {
            let input = workloads::input(workloads::pods(mix, pods, 42), &instance_types);
            group.throughput(Throughput::Elements(pods as u64));
            group.bench_with_input(
                BenchmarkId::new(mix.to_string(), pods),
                &input,
                |b, input| b.iter(|| core_domain::scheduler::solve(black_box(input))),
            );
        }
    }
    group.finish();
}

fn lower_bound(c: &mut Criterion) {
    let Ok(instance_types) = simulator::catalogue::instance_types("us-east-1", true, 42) else {
        panic!("the embedded catalogue must convert");
    };
    let mut group = c.benchmark_group("lower_bound");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(5))
        .warm_up_time(Duration::from_secs(1));
    for pods in [1_000, 20_000] {
        let input = workloads::input(workloads::pods(Mix::Plain, pods, 42), &instance_types);
        group.throughput(Throughput::Elements(pods as u64));
        group.bench_with_input(BenchmarkId::new("plain", pods), &input, |b, input| {
            b.iter(|| {
                bound::lower_bound(
                    black_box(&input.pods),
                    &input.node_pools,
                    &input.daemon_set_pods,
                    &input.label_policy,
                )
            })
        });
    }
    group.finish();
}

criterion_group!(benches, scheduling, lower_bound);
criterion_main!(benches);
