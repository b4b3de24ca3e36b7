//! Distance metrics shared by the whole workspace.

/// A distance metric. Scores are "lower is better" for every metric.
///
/// The numeric ids are the wire ids of `PRXI`, `PQPQ` and `HNSW`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metric {
    /// Squared Euclidean distance (wire id 1).
    L2,
    /// Cosine distance `1 - cos` over unit-normalised vectors (wire id 2).
    Cosine,
    /// Negative inner product (wire id 3).
    InnerProduct,
}

impl Metric {
    /// The one-byte wire id.
    pub fn id(self) -> u8 {
        match self {
            Metric::L2 => 1,
            Metric::Cosine => 2,
            Metric::InnerProduct => 3,
        }
    }

    /// Parses a wire id; `None` for anything but 1, 2, 3.
    pub fn from_id(id: u8) -> Option<Self> {
        match id {
            1 => Some(Metric::L2),
            2 => Some(Metric::Cosine),
            3 => Some(Metric::InnerProduct),
            _ => None,
        }
    }

    /// Short lowercase name: `l2`, `cosine`, `ip`.
    pub fn name(self) -> &'static str {
        match self {
            Metric::L2 => "l2",
            Metric::Cosine => "cosine",
            Metric::InnerProduct => "ip",
        }
    }

    /// Parses `l2`, `cosine`/`cos`, `ip`/`dot`/`inner_product`.
    pub fn from_name(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "l2" | "l2sq" | "euclidean" => Some(Metric::L2),
            "cosine" | "cos" | "angular" => Some(Metric::Cosine),
            "ip" | "dot" | "inner_product" | "innerproduct" => Some(Metric::InnerProduct),
            _ => None,
        }
    }
}

impl std::fmt::Display for Metric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
