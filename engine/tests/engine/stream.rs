//! `StreamBuild`: the bounded-memory build gives the same descriptor as the
//! in-memory canonical build, whether everything fits or runs spill, for
//! every metric, with SQ8, external vectors and overflow paging; its
//! errors are the in-memory build's. Seeded; `PROX_SEED` replays a failure.

use prox_engine::index::{self, Build};
use prox_engine::proximity::{
    InputRecord, NoProgress, Phase, Progress, ProximityConfig, ProximityMap, StreamBuild,
};
use prox_engine::{Error, MemStore};
use prox_kernels::Metric;
use prox_testkit::SplitMix64 as Rng;
use std::sync::Mutex;

/// Clustered records (a few centres, so groups are uneven) with keys in
/// shuffled order and small values.
fn records(seed: u64, n: usize, dims: usize) -> Vec<InputRecord> {
    let mut rng = Rng::new(seed);
    let centres: Vec<Vec<f32>> = (0..5)
        .map(|_| (0..dims).map(|_| 4.0 * rng.gauss()).collect())
        .collect();
    let mut out: Vec<InputRecord> = (0..n as u64)
        .map(|i| {
            let c = &centres[rng.below(5) as usize];
            let v = c.iter().map(|x| x + rng.gauss()).collect();
            let key = (i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
                .to_be_bytes()
                .to_vec();
            (key, v, format!("v{i}").into_bytes())
        })
        .collect();
    // Not in key order: the stream must sort.
    out.reverse();
    out
}

fn streamed(config: &ProximityConfig, recs: &[InputRecord], limit: u64) -> (String, u64, u64) {
    let store = MemStore::new();
    let dir = tempfile::tempdir().unwrap();
    let mut b = StreamBuild::new(&store, config, limit, dir.path()).unwrap();
    for (k, v, val) in recs {
        b.push(k.clone(), v.clone(), val.clone()).unwrap();
    }
    let (map, stats) = b.finish(&NoProgress).unwrap();
    assert_eq!(stats.records, recs.len() as u64);
    let left = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(left, 0, "spill files are removed");
    (
        map.descriptor_cid().to_hex(),
        stats.runs,
        stats.spilled_bytes,
    )
}

fn in_memory(config: &ProximityConfig, recs: &[InputRecord]) -> String {
    let store = MemStore::new();
    ProximityMap::build(&store, config, recs.to_vec())
        .unwrap()
        .descriptor_cid()
        .to_hex()
}

#[test]
fn spilled_and_in_memory_builds_are_byte_identical() {
    let seed = prox_testkit::seed(0x5EED_0027);
    let recs = records(seed, 8000, 12);
    for metric in [Metric::L2, Metric::Cosine, Metric::InnerProduct] {
        let mut config = ProximityConfig::new(12);
        config.metric = metric;
        // Small chunks: several levels of routes over 8000 records.
        config.log_chunk_size = 4;
        let want = in_memory(&config, &recs);
        // 1 MiB: runs of ~ 512 KiB, so the 8000 records (~ 1.1 MB in
        // memory) spill three runs.
        let (got, runs, spilled) = streamed(&config, &recs, 1 << 20);
        assert!(runs >= 2 && spilled > 0, "runs {runs}, spilled {spilled}");
        assert_eq!(got, want, "{metric:?} spilled, PROX_SEED={seed}");
        let (got, runs, _) = streamed(&config, &recs, 1 << 30);
        assert_eq!(runs, 0);
        assert_eq!(got, want, "{metric:?} in memory, PROX_SEED={seed}");
    }
}

#[test]
fn sq8_external_vectors_and_paging_match() {
    let seed = prox_testkit::seed(0x5EED_0028);
    let recs = records(seed, 2500, 24);
    let mut config = ProximityConfig::new(24);
    config.sq8_group_size = Some(8);
    config.log_chunk_size = 6;
    // Small pages force overflow paging; a low threshold stores PRXV.
    config.min_page_bytes = 512;
    config.target_page_bytes = 2048;
    config.inline_threshold_bytes = 64;
    let want = in_memory(&config, &recs);
    assert_eq!(
        streamed(&config, &recs, 1 << 20).0,
        want,
        "PROX_SEED={seed}"
    );
}

#[test]
fn tiny_and_empty_inputs_match() {
    let seed = prox_testkit::seed(0x5EED_0029);
    for n in [0usize, 1, 2, 17] {
        let recs = records(seed, n, 3);
        let config = ProximityConfig::new(3);
        assert_eq!(
            streamed(&config, &recs, 1 << 20).0,
            in_memory(&config, &recs),
            "n={n} PROX_SEED={seed}"
        );
    }
}

#[test]
fn bad_records_are_the_in_memory_errors() {
    let store = MemStore::new();
    let dir = tempfile::tempdir().unwrap();
    let config = ProximityConfig::new(2);
    let mut b = StreamBuild::new(&store, &config, 1 << 20, dir.path()).unwrap();
    let e = b.push(vec![1], vec![1.0], vec![]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::WrongDimension {
                expected: 2,
                got: 1,
                ..
            }
        ),
        "{e}"
    );

    let mut b = StreamBuild::new(&store, &config, 1 << 20, dir.path()).unwrap();
    b.push(vec![1], vec![1.0, 2.0], vec![]).unwrap();
    b.push(vec![1], vec![3.0, 4.0], vec![]).unwrap();
    let e = b.finish(&NoProgress).err().unwrap();
    assert!(
        matches!(e, Error::DuplicateKey { ref key } if key == &[1]),
        "{e}"
    );

    let mut b = StreamBuild::new(&store, &config, 1 << 20, dir.path()).unwrap();
    b.push(vec![2], vec![1.0, f32::NAN], vec![]).unwrap();
    b.push(vec![1], vec![f32::INFINITY, 0.0], vec![]).unwrap();
    let e = b.finish(&NoProgress).err().unwrap();
    assert!(
        matches!(e, Error::NonFiniteVector { ref key, .. } if key.as_deref() == Some(&[1][..])),
        "smallest key reported: {e}"
    );

    let mut cos = ProximityConfig::new(2);
    cos.metric = Metric::Cosine;
    let mut b = StreamBuild::new(&store, &cos, 1 << 20, dir.path()).unwrap();
    b.push(vec![1], vec![0.0, 0.0], vec![]).unwrap();
    assert!(matches!(
        b.finish(&NoProgress).err().unwrap(),
        Error::ZeroCosineVector { .. }
    ));

    let e = StreamBuild::new(&store, &config, 1000, dir.path())
        .err()
        .unwrap();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
}

/// Records the phases it is told about.
#[derive(Default)]
struct Phases(Mutex<Vec<(Phase, u64)>>);

impl Progress for Phases {
    fn start(&self, phase: Phase, _: Option<u64>) {
        self.0.lock().unwrap().push((phase, 0));
    }
    fn advance(&self, n: u64) {
        if let Some(last) = self.0.lock().unwrap().last_mut() {
            last.1 += n;
        }
    }
    fn finish(&self, _: Phase) {}
}

#[test]
fn build_streamed_reports_phases_and_publishes() {
    let seed = prox_testkit::seed(0x5EED_002A);
    let recs = records(seed, 1200, 6);
    let mut build = Build::new(6);
    build.pq = Some(prox_engine::accel::PqParams {
        subquantizers: 2,
        centroids: 16,
        ..Default::default()
    });
    let want = index::build(&MemStore::new(), None, &build, recs.clone()).unwrap();
    let store = MemStore::new();
    let dir = tempfile::tempdir().unwrap();
    let mut s = StreamBuild::new(&store, &build.config, 1 << 20, dir.path()).unwrap();
    for (k, v, val) in &recs {
        s.push(k.clone(), v.clone(), val.clone()).unwrap();
    }
    let phases = Phases::default();
    let (built, _) = index::build_streamed(&store, Some("m"), &build, s, &phases).unwrap();
    assert_eq!(built.descriptor, want.descriptor, "PROX_SEED={seed}");
    assert_eq!(built.sidecars, want.sidecars, "PROX_SEED={seed}");
    let got = phases.0.lock().unwrap().clone();
    let names: Vec<Phase> = got.iter().map(|p| p.0).collect();
    assert_eq!(
        names,
        [Phase::Sort, Phase::Cluster, Phase::Write, Phase::Sidecars]
    );
    for (p, n) in got {
        assert_eq!(n, 1200, "{p:?} advanced over every record");
    }
    assert!(index::sidecar_memory(&build, 1200).unwrap() > 1200 * 6 * 4);
    assert_eq!(index::sidecar_memory(&Build::new(6), 1200), None);
}

#[test]
fn a_checkpoint_resumes_to_the_same_descriptor() {
    let seed = prox_testkit::seed(0x5EED_002B);
    let recs = records(seed, 4000, 8);
    let mut config = ProximityConfig::new(8);
    config.log_chunk_size = 5;
    let want = in_memory(&config, &recs);
    let store = MemStore::new();
    let dir = tempfile::tempdir().unwrap();
    assert!(
        StreamBuild::resume(&store, &config, 1 << 20, dir.path(), "m.pending")
            .unwrap()
            .is_none()
    );
    let mut b = StreamBuild::new(&store, &config, 1 << 20, dir.path())
        .unwrap()
        .checkpoint_as("m.pending")
        .unwrap();
    for (k, v, val) in &recs {
        b.push(k.clone(), v.clone(), val.clone()).unwrap();
    }
    let (map, _) = b.finish(&NoProgress).unwrap();
    assert_eq!(map.descriptor_cid().to_hex(), want);
    use prox_engine::BlockStore;
    assert!(
        store.root("m.pending.cluster").unwrap().is_some(),
        "cluster progress saved"
    );
    // The checkpoint (written after the sort phase) is still there: a
    // resume from it skips the input and gives the same map.
    let r = StreamBuild::resume(&store, &config, 1 << 20, dir.path(), "m.pending")
        .unwrap()
        .expect("checkpoint present");
    assert!(r.is_resumed());
    let (again, stats) = r.finish(&NoProgress).unwrap();
    assert_eq!(again.descriptor_cid().to_hex(), want, "PROX_SEED={seed}");
    assert_eq!(stats.records, 4000);
    assert!(stats.reused_assignments > 3000, "{stats:?}");
    // Another limit cuts other chunks: the saved ones do not match and the
    // descents run again, to the same map.
    let r = StreamBuild::resume(&store, &config, 3 << 20, dir.path(), "m.pending")
        .unwrap()
        .expect("checkpoint present");
    let (again, stats) = r.finish(&NoProgress).unwrap();
    assert_eq!(again.descriptor_cid().to_hex(), want, "PROX_SEED={seed}");
    assert_eq!(stats.reused_assignments, 0);
    let mut other = config.clone();
    other.metric = Metric::Cosine;
    let e = StreamBuild::resume(&store, &other, 1 << 20, dir.path(), "m.pending")
        .err()
        .unwrap();
    assert!(e.to_string().contains("another map configuration"), "{e}");
    prox_engine::proximity::clear_checkpoint(&store, "m.pending").unwrap();
    assert!(store.root("m.pending.cluster").unwrap().is_none());
    assert!(
        StreamBuild::resume(&store, &config, 1 << 20, dir.path(), "m.pending")
            .unwrap()
            .is_none()
    );
}
