//! `prox build` from an ann-benchmarks `.hdf5` file (the `hdf5` feature):
//! the `train` dataset, streamed in slices under a small `--memory-limit`,
//! publishes the descriptor of the in-memory build of the same vectors
//! from `.fvecs`; `--dataset` (or `FILE.hdf5:DATASET`) picks another
//! dataset, and a missing one is named with the datasets present;
//! `prox update --input FILE.hdf5:DATASET` appends one.
#![cfg(feature = "hdf5")]

mod common;

use common::{ok, run, s, Shape};
use std::path::Path;

/// `prox datagen` of `n` x 16 into `dir`; returns (base, queries) files.
fn data(dir: &Path, n: usize) -> (std::path::PathBuf, std::path::PathBuf) {
    let out = dir.join("data");
    common::datagen(
        &out,
        Shape {
            n,
            dim: 16,
            queries: 8,
            k: 1,
        },
        &common::seed(5),
        &["--kind", "gmm"],
    );
    (out.join("base.fvecs"), out.join("query.fvecs"))
}

/// Writes `m` as 2-D dataset `name` of `file`.
fn put(file: &hdf5_metno::File, name: &str, m: &prox_tools::io::Matrix) {
    file.new_dataset::<f32>()
        .shape([m.len(), m.dim])
        .create(name)
        .unwrap()
        .write_raw(&m.data)
        .unwrap();
}

fn build(store: &Path, input: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "build",
        "--store",
        s(store),
        "--name",
        "m",
        "--input",
        input,
    ];
    args.extend_from_slice(extra);
    let out = ok(&args);
    out.lines().last().unwrap_or_default().to_string()
}

#[test]
fn an_ann_benchmarks_file_builds_like_its_fvecs() {
    let dir = tempfile::tempdir().unwrap();
    let (base, queries) = data(dir.path(), 3000);
    let h5 = dir.path().join("gmm-16-euclidean.hdf5");
    let f = hdf5_metno::File::create(&h5).unwrap();
    put(&f, "train", &prox_tools::io::read_matrix(&base).unwrap());
    put(&f, "test", &prox_tools::io::read_matrix(&queries).unwrap());
    drop(f);

    let want = build(&dir.path().join("a"), s(&base), &["--in-memory"]);
    let got = build(&dir.path().join("b"), s(&h5), &["--memory-limit", "1M"]);
    assert_eq!(got, want);
    // `prox update` reads a dataset too: the test rows appended to both
    // maps give one descriptor.
    let update = |store: &str, input: &str| {
        let args = [
            "update",
            "--store",
            store,
            "--name",
            "m",
            "--input",
            input,
            "--start-key",
            "1000000",
        ];
        ok(&args).lines().last().unwrap_or_default().to_string()
    };
    let from_fvecs = update(s(&dir.path().join("a")), s(&queries));
    let from_h5 = update(s(&dir.path().join("b")), &format!("{}:test", h5.display()));
    assert_eq!(from_h5, from_fvecs);

    let want = build(&dir.path().join("c"), s(&queries), &["--in-memory"]);
    let got = build(&dir.path().join("d"), s(&h5), &["--dataset", "test"]);
    assert_eq!(got, want);
    let suffixed = format!("{}:test", h5.display());
    assert_eq!(build(&dir.path().join("e"), &suffixed, &[]), want);

    let o = run(&[
        "build",
        "--store",
        s(&dir.path().join("f")),
        "--name",
        "m",
        "--input",
        s(&h5),
        "--dataset",
        "base",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("gmm-16-euclidean.hdf5")
            && e.contains("no dataset \"base\"")
            && e.contains("test, train"),
        "{e}"
    );
}
