//! The server's Prometheus metrics: requests, queues, batches, stage times and devices.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// A request's route and answer.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    pub route: String,
    pub status: u16,
}

/// A model.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ModelLabels {
    pub model: String,
}

/// One replica: a model on a device.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DeviceLabels {
    pub model: String,
    pub device: String,
}

/// A stage of a request: `tokenize`, `queue` or `compute`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct StageLabels {
    pub stage: &'static str,
}

/// Seconds, as a float counter.
type Seconds = Counter<f64, AtomicU64>;

/// Every metric the server keeps, and the registry that writes them out.
pub(crate) struct Metrics {
    registry: Registry,
    /// Requests answered, by route and status.
    pub requests: Family<RequestLabels, Counter>,
    /// Inputs waiting for a device, per model.
    pub queue_depth: Family<ModelLabels, Gauge>,
    /// Inputs per batch.
    pub batch_inputs: Family<ModelLabels, Histogram>,
    /// Tokens per batch.
    pub batch_tokens: Family<ModelLabels, Histogram>,
    /// Seconds per request in each stage.
    pub stage_seconds: Family<StageLabels, Histogram>,
    /// Seconds each replica spent computing.
    pub device_busy: Family<DeviceLabels, Seconds>,
    /// Batches each replica failed.
    pub device_failures: Family<DeviceLabels, Counter>,
}

impl Metrics {
    /// Every metric, registered and at zero.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("switchyard");
        let requests = Family::<RequestLabels, Counter>::default();
        let queue_depth = Family::<ModelLabels, Gauge>::default();
        let batch_inputs = Family::<ModelLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(1.0, 2.0, 12))
        });
        let batch_tokens = Family::<ModelLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(16.0, 2.0, 12))
        });
        let stage_seconds = Family::<StageLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0001, 2.5, 14))
        });
        let device_busy = Family::<DeviceLabels, Seconds>::default();
        let device_failures = Family::<DeviceLabels, Counter>::default();
        registry.register("requests", "Requests answered, by route and status", requests.clone());
        registry.register("queue_depth", "Inputs waiting for a device", queue_depth.clone());
        registry.register("batch_inputs", "Inputs per batch", batch_inputs.clone());
        registry.register("batch_tokens", "Tokens per batch", batch_tokens.clone());
        registry.register(
            "stage_seconds",
            "Seconds per request spent tokenizing, queued and computing",
            stage_seconds.clone(),
        );
        registry.register(
            "device_busy_seconds",
            "Seconds each replica spent computing",
            device_busy.clone(),
        );
        registry.register(
            "device_failures",
            "Batches a replica failed (it leaves the rotation until it recovers)",
            device_failures.clone(),
        );
        Metrics {
            registry,
            requests,
            queue_depth,
            batch_inputs,
            batch_tokens,
            stage_seconds,
            device_busy,
            device_failures,
        }
    }

    /// The metrics in Prometheus' text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
