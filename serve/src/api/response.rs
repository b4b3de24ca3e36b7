//! Response bodies (serde).

use prox_engine::index::Response;
use serde::Serialize;

/// One hit on the wire.
#[derive(Debug, Serialize)]
pub(crate) struct WireHit {
    key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    vector: Option<Vec<f32>>,
    score: f64,
}

/// The setting a `recall` request ran (the profile's choice).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct WireTuned {
    setting: String,
    /// The profile's measured recall (not the target).
    measured_recall: f64,
    stderr: f64,
    micros: f64,
    reached: bool,
}

/// One query's answer on the wire.
#[derive(Debug, Serialize)]
pub(crate) struct WireAnswer {
    completion: &'static str,
    path: &'static str,
    results: Vec<WireHit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tuned: Option<WireTuned>,
}

impl From<Response> for WireAnswer {
    fn from(a: Response) -> Self {
        WireAnswer {
            tuned: a.tuned.map(|t| WireTuned {
                setting: t.setting.to_string(),
                measured_recall: t.recall,
                stderr: t.stderr,
                micros: t.micros,
                reached: t.reached,
            }),
            completion: a.completion.name(),
            path: a.path.name(),
            results: a
                .hits
                .into_iter()
                .map(|h| WireHit {
                    key: hex::encode(&h.key),
                    value: h.value.map(hex::encode),
                    vector: h.vector,
                    score: h.score,
                })
                .collect(),
        }
    }
}

/// `POST .../search` response: the batch answer's fields inline (spelled
/// out rather than `#[serde(flatten)]`, which goes through a map
/// serializer).
#[derive(Debug, Serialize)]
pub(crate) struct SearchResponse {
    descriptor: String,
    generation: u64,
    completion: &'static str,
    path: &'static str,
    results: Vec<WireHit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tuned: Option<WireTuned>,
    took_us: u64,
}

impl SearchResponse {
    /// The response for `answer` from the snapshot `descriptor` /
    /// `generation`.
    pub(crate) fn new(descriptor: String, generation: u64, answer: Response, took_us: u64) -> Self {
        let a = WireAnswer::from(answer);
        SearchResponse {
            descriptor,
            generation,
            completion: a.completion,
            path: a.path,
            results: a.results,
            tuned: a.tuned,
            took_us,
        }
    }
}

/// `POST .../search:batch` response.
#[derive(Debug, Serialize)]
pub(crate) struct BatchResponse {
    pub(crate) descriptor: String,
    pub(crate) generation: u64,
    pub(crate) results: Vec<WireAnswer>,
    pub(crate) took_us: u64,
}

/// Sidecar manifests of a map.
#[derive(Debug, Serialize)]
pub(crate) struct WireSidecars {
    pub(crate) hnsw: Option<String>,
    pub(crate) pq: Option<String>,
}

/// One map in `GET /v1/maps`.
#[derive(Debug, Serialize)]
pub(crate) struct MapInfo {
    pub(crate) name: String,
    pub(crate) descriptor: String,
    pub(crate) generation: u64,
    pub(crate) count: u64,
    pub(crate) dims: usize,
    pub(crate) metric: &'static str,
    pub(crate) sidecars: WireSidecars,
}

/// `GET .../records/{key}` response.
#[derive(Debug, Serialize)]
pub(crate) struct RecordResponse {
    pub(crate) descriptor: String,
    pub(crate) generation: u64,
    pub(crate) key: String,
    pub(crate) value: String,
    pub(crate) vector: Vec<f32>,
}
