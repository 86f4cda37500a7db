//! What the `metrics` feature exports: per optimistic operation, the operations by
//! outcome, their attempts, retries and conflicts, and a latency histogram.

use autoshard::prelude::*;
use metrics_util::MetricKind;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use std::sync::Arc;

#[derive(Entity, Debug, Clone)]
struct Counter {
    #[id]
    id: u64,
    n: i64,
}

/// A counter's name, labels and value.
type Recorded = (String, Vec<(String, String)>, u64);

/// The value of the counter `name` with these labels, summed over other labels.
fn counter(snapshot: &[Recorded], name: &str, labels: &[(&str, &str)]) -> u64 {
    snapshot
        .iter()
        .filter(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|(_, _, value)| value)
        .sum()
}

#[test]
fn operations_conflicts_and_latency_are_exported() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let db = Mapper::new(Arc::new(MemoryStore::new()) as Arc<dyn DocumentStore>);
            db.insert(&mut Counter { id: 1, n: 0 }).await.unwrap();
            for _ in 0..3 {
                db.update(&1, |c: &mut Counter| c.n += 1).await.unwrap();
            }
            // A conflict: the document changes between this update's read and its commit.
            let other = db.clone();
            let mut raced = false;
            db.update(&1, |c: &mut Counter| {
                if !raced {
                    raced = true;
                    let other = other.clone();
                    std::thread::spawn(move || {
                        let rt = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                            .unwrap();
                        rt.block_on(other.update(&1, |c: &mut Counter| c.n += 10))
                            .unwrap();
                    })
                    .join()
                    .unwrap();
                }
                c.n += 1;
            })
            .await
            .unwrap();
            assert_eq!(db.load::<Counter>(&1).await.unwrap().n, 14);
        });
    });
    let mut counters = Vec::new();
    let mut histogram_samples = 0;
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let labels: Vec<(String, String)> = key
            .key()
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        match (key.kind(), value) {
            (MetricKind::Counter, DebugValue::Counter(n)) => {
                counters.push((key.key().name().to_owned(), labels, n));
            }
            (MetricKind::Histogram, DebugValue::Histogram(samples))
                if key.key().name() == "autoshard_operation_seconds" =>
            {
                histogram_samples += samples.len();
            }
            _ => {}
        }
    }
    let update = [("operation", "update")];
    // The update on the other thread ran outside the local recorder: 4 updates here.
    assert_eq!(
        counter(
            &counters,
            "autoshard_operations_total",
            &[("operation", "update"), ("outcome", "committed")]
        ),
        4,
        "{counters:?}"
    );
    assert_eq!(
        counter(&counters, "autoshard_conflicts_total", &update),
        1,
        "{counters:?}"
    );
    assert_eq!(
        counter(&counters, "autoshard_retries_total", &update),
        1,
        "{counters:?}"
    );
    assert_eq!(
        counter(&counters, "autoshard_attempts_total", &update),
        5,
        "{counters:?}"
    );
    assert_eq!(histogram_samples, 4, "{counters:?}");
}
