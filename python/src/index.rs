//! `prox.Index`: the engine's [`Index`] with numpy in and out.
//!
//! Every method converts its arguments, releases the GIL, calls the engine
//! and converts the answer: which search runs, validation and scores are
//! the engine's (the same code the CLI and the HTTP server call).

use crate::convert::{self, Matrix};
use crate::error::{self, invalid, raise};
use numpy::PyArray1;
use prox_engine::accel::{HnswParams, PqSpec};
use prox_engine::index::{
    self, Batch, Response, Scratch, WriteOptions, WriteReport, DEFAULT_SQ8_GROUP,
};
use prox_engine::proximity::{InputRecord, Sidecars};
use prox_engine::{BlockStore, Cid, Index, MemStore, MmapStore};
use prox_kernels::Metric;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

/// Key padding of integer-keyed results: `2**64 - 1` (no hit).
pub(crate) const NO_KEY: u64 = u64::MAX;

thread_local! {
    /// Per-thread search buffers of single-query searches (reused across
    /// indexes, as the HTTP server's pool does).
    static LOCAL: RefCell<(Scratch, Response)> = RefCell::new(Default::default());
}

/// Rayon pools by thread count, kept for the life of the process (a batch
/// search with `threads=n` reuses the pool of `n`).
fn pool(n: usize) -> PyResult<Arc<rayon::ThreadPool>> {
    type Pools = Mutex<Vec<(usize, Arc<rayon::ThreadPool>)>>;
    static POOLS: OnceLock<Pools> = OnceLock::new();
    if n == 0 {
        return Err(invalid("threads", "threads must be at least 1"));
    }
    let mut pools = POOLS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some((_, p)) = pools.iter().find(|(m, _)| *m == n) {
        return Ok(p.clone());
    }
    let p = Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .map_err(|e| invalid("threads", format!("cannot start {n} threads: {e}")))?,
    );
    pools.push((n, p.clone()));
    Ok(p)
}

/// A proximity map opened for search (see `help(prox.Index)`).
#[pyclass(frozen, module = "prox", name = "Index")]
pub(crate) struct PyIndex {
    /// The current snapshot; a write swaps it.
    inner: RwLock<Arc<Index>>,
    /// Serializes writes (one apply + commit at a time).
    writing: Mutex<()>,
    /// The store handle accepts writes (built here, or opened with
    /// `writable=True`).
    writable: bool,
    /// Keys are 8-byte big-endian integers (results as uint64).
    int_keys: bool,
    store: Option<PathBuf>,
    name: Option<String>,
}

/// What the engine answered, in the shapes numpy wants.
struct Hits {
    scores: Vec<f64>,
    int_keys: Vec<u64>,
    byte_keys: Vec<Option<Vec<u8>>>,
    values: Vec<Option<Vec<u8>>>,
}

impl Hits {
    fn new(rows: usize, k: usize, int_keys: bool, with_values: bool) -> Hits {
        let n = rows * k;
        Hits {
            scores: vec![f64::NAN; n],
            int_keys: if int_keys {
                vec![NO_KEY; n]
            } else {
                Vec::new()
            },
            byte_keys: if int_keys { Vec::new() } else { vec![None; n] },
            values: if with_values {
                vec![None; n]
            } else {
                Vec::new()
            },
        }
    }

    /// Writes row `row` of `k` slots from `r`.
    fn put(&mut self, row: usize, k: usize, r: &mut Response) -> prox_engine::Result<()> {
        for (j, h) in r.hits.iter_mut().take(k).enumerate() {
            let at = row * k + j;
            self.scores[at] = h.score;
            if !self.int_keys.is_empty() {
                let key = <[u8; 8]>::try_from(h.key.as_slice()).map_err(|_| {
                    prox_engine::Error::InvalidArgument(format!(
                        "key {:02x?} is not an 8-byte integer key; open the map with keys=\"bytes\"",
                        h.key
                    ))
                })?;
                self.int_keys[at] = u64::from_be_bytes(key);
            } else {
                self.byte_keys[at] = Some(h.key.clone());
            }
            if !self.values.is_empty() {
                self.values[at] = h.value.take();
            }
        }
        Ok(())
    }
}

/// A numpy object array of `bytes` / `None`, reshaped to `shape`.
fn object_array<'py>(
    py: Python<'py>,
    items: Vec<Option<Vec<u8>>>,
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    let list = PyList::empty(py);
    for it in items {
        match it {
            Some(b) => list.append(PyBytes::new(py, &b))?,
            None => list.append(py.None())?,
        }
    }
    let np = py.import("numpy")?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("dtype", "O")?;
    let flat = np.getattr("array")?.call((list,), Some(&kwargs))?;
    flat.call_method1("reshape", (PyTuple::new(py, shape)?,))
}

fn map_kind(inner: &Index) -> prox_engine::Result<bool> {
    for entry in inner.map().directory()?.iter() {
        if entry?.0.len() != 8 {
            return Ok(false);
        }
    }
    Ok(true)
}

fn parse_key_type(keys: &str, inner: &Index) -> PyResult<Option<bool>> {
    match keys {
        "int" => Ok(Some(true)),
        "bytes" => Ok(Some(false)),
        "auto" => Ok(None),
        other => Err(invalid(
            "keys",
            format!("keys must be \"auto\", \"int\" or \"bytes\", got {other:?}"),
        )),
    }
    .map(|k| k.or_else(|| map_kind(inner).ok()))
}

#[pymethods]
impl PyIndex {
    /// Builds a map from a float32 matrix (one row per record).
    ///
    /// ``keys``: ``None`` (row i gets key i, as ``prox build`` does), a
    /// sequence or integer array of non-negative ints (8-byte big-endian
    /// keys), or a sequence of ``bytes``. ``values``: ``None`` (empty) or a
    /// sequence of ``bytes`` / ``str``. ``metric``: ``"l2"``, ``"cosine"``
    /// or ``"ip"``. ``sq8``: ``True`` (group 32) or a group size.
    /// ``hnsw`` / ``pq``: ``True`` (the defaults of ``prox build
    /// --hnsw/--pq``; PQ's follow the data's shape), a dict or a
    /// ``"k=v,..."`` string (the same keys). ``store``:
    /// ``None`` for an in-memory store, or a directory (created if absent)
    /// where the map is published under ``name``. ``threads``: build
    /// threads (default all cores). ``warm``: build the native search
    /// layouts now (else the first native search or ``warm()`` does).
    /// ``layouts``: also persist the search layouts with the map (scan
    /// arena, adaptive lists, a 4-bit PQ sidecar's fast-scan lists; what
    /// ``prox build`` does by default), so a later ``Index.open`` reads
    /// them instead of building them. ``profile``: measure the recall
    /// profile that ``search(recall=...)`` chooses from on this many of the
    /// records (published with the map in a store; 0: none; maps of fewer
    /// than 12 records get none). The GIL is released while building.
    ///
    /// >>> import numpy as np, prox
    /// >>> x = np.random.default_rng(0).random((1000, 16), dtype=np.float32)
    /// >>> index = prox.Index.build(x, metric="l2", hnsw=True)
    /// >>> scores, keys = index.search(x[:2], k=3)
    /// >>> keys[:, 0].tolist()
    /// [0, 1]
    #[staticmethod]
    #[pyo3(signature = (vectors, keys=None, values=None, *, metric="l2", sq8=None, hnsw=None, pq=None, store=None, name=None, threads=None, warm=false, layouts=false, profile=index::DEFAULT_PROFILE_QUERIES))]
    #[allow(clippy::too_many_arguments)]
    fn build(
        py: Python<'_>,
        vectors: &Bound<'_, PyAny>,
        keys: Option<&Bound<'_, PyAny>>,
        values: Option<&Bound<'_, PyAny>>,
        metric: &str,
        sq8: Option<&Bound<'_, PyAny>>,
        hnsw: Option<&Bound<'_, PyAny>>,
        pq: Option<&Bound<'_, PyAny>>,
        store: Option<PathBuf>,
        name: Option<String>,
        threads: Option<usize>,
        warm: bool,
        layouts: bool,
        profile: usize,
    ) -> PyResult<PyIndex> {
        let m = Matrix::extract(vectors, "vectors")?;
        if m.single {
            return Err(invalid(
                "vectors",
                "vectors must have shape (n, d): one row per record",
            ));
        }
        let metric = Metric::from_name(metric).ok_or_else(|| {
            invalid(
                "metric",
                format!("unknown metric {metric:?} (l2, cosine or ip)"),
            )
        })?;
        let (keys, int_keys) = match keys.filter(|k| !k.is_none()) {
            None => (
                (0..m.rows as u64)
                    .map(|i| i.to_be_bytes().to_vec())
                    .collect(),
                true,
            ),
            Some(k) => convert::keys(k, "keys")?,
        };
        if keys.len() != m.rows {
            return Err(invalid(
                "keys",
                format!("{} keys for {} vectors", keys.len(), m.rows),
            ));
        }
        let values = match values.filter(|v| !v.is_none()) {
            None => vec![Vec::new(); m.rows],
            Some(v) => convert::values(v)?,
        };
        if values.len() != m.rows {
            return Err(invalid(
                "values",
                format!("{} values for {} vectors", values.len(), m.rows),
            ));
        }
        let mut build = index::Build::new(m.dims as u32);
        build.config.metric = metric;
        build.config.sq8_group_size = match sq8.filter(|s| !s.is_none()) {
            None => None,
            Some(s) => match s.extract::<bool>() {
                Ok(b) => b.then_some(DEFAULT_SQ8_GROUP),
                Err(_) => Some(
                    s.extract::<u32>()
                        .map_err(|_| invalid("sq8", "sq8 must be True, False or a group size"))?,
                ),
            },
        };
        if let Some(s) = convert::params(hnsw, "hnsw")? {
            build.hnsw = Some(HnswParams::parse(&s).map_err(error::engine)?);
        }
        if let Some(s) = convert::params(pq, "pq")? {
            let spec = PqSpec::parse(&s).map_err(error::engine)?;
            build.pq = Some(spec.resolve(m.dims, m.rows as u64).map_err(error::engine)?);
        }
        build.threads = threads;
        build.layouts = layouts;
        let store_handle: Arc<dyn BlockStore> = match &store {
            None => Arc::new(MemStore::new()),
            Some(dir) => {
                if name.is_none() {
                    return Err(invalid(
                        "name",
                        "a map built into a store directory needs a name",
                    ));
                }
                Arc::new(MmapStore::open(dir).map_err(error::engine)?)
            }
        };
        let data = m.data();
        let data: &[f32] = &data;
        let dims = m.dims;
        let root = name.as_deref();
        let inner = py
            .detach(|| -> prox_engine::Result<Index> {
                let records: Vec<InputRecord> = keys
                    .into_iter()
                    .zip(values)
                    .enumerate()
                    .map(|(i, (k, v))| (k, data[i * dims..(i + 1) * dims].to_vec(), v))
                    .collect();
                let built = index::build(store_handle.as_ref(), root, &build, records)?;
                let options = index::Options {
                    warm,
                    ..index::Options::default()
                };
                let ix = Index::load_with_layouts(
                    store_handle,
                    built.descriptor,
                    built.sidecars,
                    &built.layouts,
                    &options,
                )?;
                // The recall profile `search(recall=...)` chooses from
                // (none for maps too small to profile).
                if profile > 0 && ix.len() >= index::PROFILE_K as u64 + 2 {
                    let p = ix.measure_profile(profile)?;
                    if let Some(root) = root {
                        ix.publish_profile(root, &p)?;
                    }
                    ix.set_profile(p)?;
                }
                Ok(ix)
            })
            .map_err(error::engine)?;
        Ok(PyIndex {
            inner: RwLock::new(Arc::new(inner)),
            writing: Mutex::new(()),
            writable: true,
            int_keys,
            store,
            name,
        })
    }

    /// Opens a map from a store directory (read-only): the one published
    /// under ``name`` with its sidecars, or the map version ``descriptor``
    /// (a CID in hex; no sidecars). ``keys``: ``"auto"`` (integer results
    /// when every key is 8 bytes, found by one pass over the keys),
    /// ``"int"`` or ``"bytes"``. ``warm``: build the search layouts now
    /// rather than in the first search. ``writable``: open the store for
    /// writing (``upsert`` / ``delete``; this process then holds the
    /// store's writer lock); by default it is opened read-only.
    #[staticmethod]
    #[pyo3(signature = (store, name=None, *, descriptor=None, keys="auto", warm=true, writable=false))]
    #[allow(clippy::too_many_arguments)]
    fn open(
        py: Python<'_>,
        store: PathBuf,
        name: Option<String>,
        descriptor: Option<&str>,
        keys: &str,
        warm: bool,
        writable: bool,
    ) -> PyResult<PyIndex> {
        if writable && name.is_none() {
            return Err(invalid(
                "writable",
                "a writable index needs a name: writes are published under it",
            ));
        }
        let descriptor = match descriptor {
            None => None,
            Some(d) => Some(d.parse::<Cid>().map_err(|e| {
                invalid("descriptor", format!("descriptor {d:?} is not a CID: {e}"))
            })?),
        };
        if name.is_none() == descriptor.is_none() {
            return Err(invalid("name", "give exactly one of name and descriptor"));
        }
        if !store.is_dir() {
            return Err(raise(
                "StoreError",
                format!("store {} does not exist", store.display()),
                vec![],
            ));
        }
        let options = index::Options {
            warm,
            ..index::Options::default()
        };
        let inner = py
            .detach(|| -> prox_engine::Result<Index> {
                let handle: Arc<dyn BlockStore> = if writable {
                    Arc::new(MmapStore::open(&store)?)
                } else {
                    Arc::new(MmapStore::open_read_only(&store)?)
                };
                match (&name, descriptor) {
                    (Some(n), _) => Index::open(handle, n, &options),
                    (None, Some(d)) => Index::load(handle, d, Sidecars::default(), &options),
                    (None, None) => Err(prox_engine::Error::InvalidArgument("no map named".into())),
                }
            })
            .map_err(error::engine)?;
        let int_keys = py.detach(|| parse_key_type(keys, &inner))?.unwrap_or(false);
        Ok(PyIndex {
            inner: RwLock::new(Arc::new(inner)),
            writing: Mutex::new(()),
            writable,
            int_keys,
            store: Some(store),
            name,
        })
    }

    /// Searches one query (shape ``(d,)``: results of shape ``(k,)``) or a
    /// batch (shape ``(n, d)``: results ``(n, k)``, rows run in parallel on
    /// ``threads`` threads, default all cores). Returns ``(scores, keys)``,
    /// or ``(scores, keys, values)`` with ``with_values=True``.
    ///
    /// ``scores``: float64 canonical scores, lower is nearer (squared L2, or
    /// the cosine / inner-product forms of docs/search.md), ``NaN`` past
    /// the last hit. ``keys``: uint64 for integer-keyed maps (padding
    /// ``prox.NO_KEY`` = 2**64-1), else an object array of ``bytes``
    /// (padding ``None``). ``values``: object array of ``bytes`` / ``None``.
    ///
    /// ``mode``: ``auto``, ``exact``, ``fast``, ``balanced``, ``high``;
    /// ``path``: ``auto``, ``native``, ``hnsw``, ``pq``; ``ef``, ``nprobe``,
    /// ``rerank``, ``budget`` as in ``prox query``; ``recall``: a target
    /// recall@10 in [0, 1] (0: the fastest setting), run on the fastest setting the map's recall
    /// profile measured to reach it (``choose`` tells which; only with
    /// mode and path ``auto``, no ``ef``/``nprobe``/``rerank``/``budget``);
    /// ``filter``: one of
    /// ``{"prefix": key}``, ``{"range": (start, end or None)}``,
    /// ``{"keys": [key, ...]}`` with int or bytes keys; ``timeout``:
    /// seconds before the search is stopped (``DeadlineExceededError``).
    /// The GIL is released while searching.
    #[pyo3(signature = (queries, k=10, *, mode="auto", path="auto", ef=None, nprobe=None, rerank=None, budget=None, recall=None, filter=None, with_values=false, timeout=None, threads=None))]
    #[allow(clippy::too_many_arguments)]
    fn search<'py>(
        &self,
        py: Python<'py>,
        queries: &Bound<'py, PyAny>,
        k: usize,
        mode: &str,
        path: &str,
        ef: Option<usize>,
        nprobe: Option<usize>,
        rerank: Option<usize>,
        budget: Option<u64>,
        recall: Option<f64>,
        filter: Option<&Bound<'py, PyAny>>,
        with_values: bool,
        timeout: Option<f64>,
        threads: Option<usize>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let req = convert::Options {
            k,
            mode,
            path,
            ef,
            nprobe,
            rerank,
            budget,
            recall,
            filter,
            with_values,
            timeout,
        }
        .request()?;
        let m = Matrix::extract(queries, "queries")?;
        let current = self.current();
        let dims = current.dims();
        if m.dims != dims {
            return Err(error::engine(prox_engine::Error::WrongDimension {
                expected: dims,
                got: m.dims,
                key: None,
            }));
        }
        let pool = threads.map(pool).transpose()?;
        let data = m.data();
        let data: &[f32] = &data;
        let inner = &*current;
        let (rows, int_keys, single) = (m.rows, self.int_keys, m.single);
        let hits = py
            .detach(|| -> prox_engine::Result<Hits> {
                let mut hits = Hits::new(rows, k, int_keys, with_values);
                if single {
                    req.validate()?;
                    LOCAL.with(|local| -> prox_engine::Result<()> {
                        let mut guard = local.try_borrow_mut();
                        let mut fresh = Default::default();
                        let (scratch, out): &mut (Scratch, Response) = match guard {
                            Ok(ref mut g) => g,
                            Err(_) => &mut fresh,
                        };
                        inner.search_into(scratch, data, &req, out)?;
                        hits.put(0, k, out)
                    })?;
                } else if rows > 0 {
                    let run = || inner.search_batch(data, &req);
                    let answers = match &pool {
                        Some(p) => p.install(run)?,
                        None => run()?,
                    };
                    for (row, mut r) in answers.into_iter().enumerate() {
                        hits.put(row, k, &mut r)?;
                    }
                } else {
                    req.validate()?;
                }
                Ok(hits)
            })
            .map_err(error::engine)?;
        let shape: Vec<usize> = if single { vec![k] } else { vec![rows, k] };
        // One query: the flat arrays already have the answer's shape.
        let shaped = |a: Bound<'py, PyAny>| -> PyResult<Bound<'py, PyAny>> {
            if single {
                Ok(a)
            } else {
                a.call_method1("reshape", ((rows, k),))
            }
        };
        let scores = shaped(PyArray1::from_vec(py, hits.scores).into_any())?;
        let keys = if int_keys {
            shaped(PyArray1::from_vec(py, hits.int_keys).into_any())?
        } else {
            object_array(py, hits.byte_keys, &shape)?
        };
        let mut out = vec![scores, keys];
        if with_values {
            out.push(object_array(py, hits.values, &shape)?);
        }
        PyTuple::new(py, out)
    }

    /// The record ``key`` (int or bytes) as ``(vector, value)``: the stored
    /// vector (float32; normalised for cosine maps) and value bytes, or
    /// ``None`` when the map has no such key.
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let key = convert::key(key, "key")?;
        let current = self.current();
        let inner = &*current;
        let found = py.detach(|| inner.get(&key)).map_err(error::engine)?;
        match found {
            None => Ok(None),
            Some((v, value)) => Ok(Some(PyTuple::new(
                py,
                [
                    PyArray1::from_vec(py, v).into_any(),
                    PyBytes::new(py, &value).into_any(),
                ],
            )?)),
        }
    }

    /// Audits every object of the map (each block against its CID, the
    /// directory, every node, vector and quantizer; the sidecars were
    /// checked when the index was loaded). Returns counts as a dict;
    /// raises ``CorruptError`` naming the first broken object.
    fn verify<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let current = self.current();
        let inner = &*current;
        let r = py.detach(|| inner.map().verify()).map_err(error::engine)?;
        let d = PyDict::new(py);
        d.set_item("records", r.records)?;
        d.set_item("directory_nodes", r.directory_nodes)?;
        d.set_item("nodes", r.nodes)?;
        d.set_item("external_vectors", r.external_vectors)?;
        d.set_item("quantizers", r.quantizers)?;
        Ok(d)
    }

    /// Inserts or replaces records: ``keys`` as in :meth:`build` (ints or
    /// ``bytes``), ``vectors`` a float32 matrix with one row per key,
    /// ``values`` ``None`` (empty) or one ``bytes`` / ``str`` per key. One
    /// atomic batch: every check (dimension, NaN/inf, key length, a key
    /// twice) runs before anything is written. The HNSW and PQ sidecars
    /// are carried forward; a canonical HNSW sidecar follows
    /// ``canonical_hnsw`` (``"refuse"``, ``"rebuild"`` or ``"drop"``). A
    /// named index publishes the result under its name by compare-and-swap
    /// (``ConflictError`` if another writer moved it). Returns the write
    /// report as a dict. The GIL is released.
    ///
    /// >>> import numpy as np, prox
    /// >>> index = prox.Index.build(np.eye(4, dtype=np.float32))
    /// >>> index.upsert([7], np.ones((1, 4), dtype=np.float32))["inserted"]
    /// 1
    /// >>> len(index)
    /// 5
    #[pyo3(signature = (keys, vectors, values=None, *, canonical_hnsw="refuse"))]
    fn upsert<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
        vectors: &Bound<'py, PyAny>,
        values: Option<&Bound<'py, PyAny>>,
        canonical_hnsw: &str,
    ) -> PyResult<Bound<'py, PyDict>> {
        let m = Matrix::extract(vectors, "vectors")?;
        let (keys, _) = convert::keys(keys, "keys")?;
        let rows = if m.single { 1 } else { m.rows };
        if keys.len() != rows {
            return Err(invalid(
                "keys",
                format!("{} keys for {rows} vectors", keys.len()),
            ));
        }
        let values = match values.filter(|v| !v.is_none()) {
            None => vec![Vec::new(); rows],
            Some(v) => convert::values(v)?,
        };
        if values.len() != rows {
            return Err(invalid(
                "values",
                format!("{} values for {rows} vectors", values.len()),
            ));
        }
        let options = WriteOptions {
            canonical_hnsw: canonical_hnsw
                .parse()
                .map_err(|e: prox_engine::Error| invalid("canonical_hnsw", e.to_string()))?,
            ..WriteOptions::default()
        };
        let data = m.data();
        let dims = m.dims;
        let mut batch = Batch::new();
        for (i, (k, v)) in keys.into_iter().zip(values).enumerate() {
            batch.upsert(k, data[i * dims..(i + 1) * dims].to_vec(), v);
        }
        let report = self.write(py, batch, options)?;
        report_dict(py, &report, &self.current().descriptor().to_hex())
    }

    /// Deletes records by key (ints or ``bytes``); absent keys are counted,
    /// not an error. Atomic and published as :meth:`upsert`; returns the
    /// write report as a dict.
    fn delete<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let (keys, _) = convert::keys(keys, "keys")?;
        let mut batch = Batch::new();
        for k in keys {
            batch.delete(k);
        }
        let report = self.write(py, batch, WriteOptions::default())?;
        report_dict(py, &report, &self.current().descriptor().to_hex())
    }

    /// Builds the native search layouts now (decoded nodes, scan arena,
    /// sub-lists) so no later search pays for them; returns the node count.
    /// Idempotent; the GIL is released.
    fn warm(&self, py: Python<'_>) -> PyResult<usize> {
        let current = self.current();
        let inner = &*current;
        py.detach(|| inner.warm()).map_err(error::engine)
    }

    /// Records in the map.
    fn __len__(&self) -> usize {
        self.current().len() as usize
    }

    /// Vector dimensions.
    #[getter]
    fn dim(&self) -> usize {
        self.current().dims()
    }

    /// ``"l2"``, ``"cosine"`` or ``"ip"``.
    #[getter]
    fn metric(&self) -> &'static str {
        self.current().metric().name()
    }

    /// The map version: its ``PRXI`` descriptor CID (hex).
    #[getter]
    fn descriptor(&self) -> String {
        self.current().descriptor().to_hex()
    }

    /// The sidecars loaded with the map: ``{"hnsw": cid or None, "pq": cid or None}``.
    #[getter]
    fn sidecars<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.current().sidecars();
        let d = PyDict::new(py);
        d.set_item("hnsw", s.hnsw.map(|c| c.to_hex()))?;
        d.set_item("pq", s.pq.map(|c| c.to_hex()))?;
        Ok(d)
    }

    /// The persisted search layouts the map was opened with:
    /// ``{"arena": cid or None, "adaptive": cid or None, "ivf": cid or
    /// None, "frames": cid or None, "rotated": cid or None}`` (the exact-L2
    /// local frames or rotated arena ``prox build --exact-layout
    /// localM|splitM`` persists; exact searches read them).
    #[getter]
    fn layouts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let l = self.current().layouts();
        let d = PyDict::new(py);
        d.set_item("arena", l.arena.map(|c| c.to_hex()))?;
        d.set_item("adaptive", l.adaptive.map(|c| c.to_hex()))?;
        d.set_item("ivf", l.ivf.map(|c| c.to_hex()))?;
        d.set_item("frames", l.frames.map(|c| c.to_hex()))?;
        d.set_item("rotated", l.rotated.map(|c| c.to_hex()))?;
        Ok(d)
    }

    /// The recall profile ``search(recall=...)`` chooses from (measured by
    /// ``build`` and ``prox build``), or ``None``: ``{"k", "queries",
    /// "edits", "entries": [{"path", "setting", "recall", "stderr",
    /// "micros"}, ...]}``.
    #[getter]
    fn profile<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let current = self.current();
        let Some(p) = current.profile() else {
            return Ok(None);
        };
        let entries = PyList::empty(py);
        for e in &p.entries {
            let d = PyDict::new(py);
            d.set_item("path", e.setting.path.name())?;
            d.set_item("setting", e.setting.to_string())?;
            d.set_item("recall", p.recall(e))?;
            d.set_item("stderr", p.stderr(e))?;
            d.set_item("micros", e.micros)?;
            entries.append(d)?;
        }
        let d = PyDict::new(py);
        d.set_item("k", p.k)?;
        d.set_item("queries", p.queries)?;
        d.set_item("edits", p.edits)?;
        d.set_item("entries", entries)?;
        Ok(Some(d))
    }

    /// Measures the recall profile again on ``queries`` of the records and
    /// uses it from now on (after writes made it stale: ``upsert`` and
    /// ``delete`` report ``profile_stale``); a writable index in a store
    /// also publishes it beside the map. Returns ``profile``. Writes wait
    /// meanwhile; searches keep running. The GIL is released.
    #[pyo3(signature = (queries=index::DEFAULT_PROFILE_QUERIES))]
    fn measure_profile<'py>(
        &self,
        py: Python<'py>,
        queries: usize,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let name = self.name.clone().filter(|_| self.writable);
        py.detach(|| -> prox_engine::Result<()> {
            let _serial = self.writing.lock().unwrap_or_else(|p| p.into_inner());
            let current = self.current();
            let p = current.measure_profile(queries)?;
            if let Some(n) = &name {
                current.publish_profile(n, &p)?;
            }
            current.set_profile(p)
        })
        .map_err(error::engine)?;
        self.profile(py)
    }

    /// The setting ``search(recall=target)`` runs: ``{"path", "setting",
    /// "recall", "stderr", "micros", "reached"}`` (``reached`` is false
    /// when no measured setting reaches the target: the most accurate one
    /// runs). ``InvalidRequestError`` without a profile.
    fn choose<'py>(&self, py: Python<'py>, target: f64) -> PyResult<Bound<'py, PyDict>> {
        prox_engine::index::Request::new(10)
            .recall(target)
            .validate()
            .map_err(error::engine)?;
        let c = self.current().choose(target).map_err(error::engine)?;
        let d = PyDict::new(py);
        d.set_item("path", c.setting.path.name())?;
        d.set_item("setting", c.setting.to_string())?;
        d.set_item("recall", c.recall)?;
        d.set_item("stderr", c.stderr)?;
        d.set_item("micros", c.micros)?;
        d.set_item("reached", c.reached)?;
        Ok(d)
    }

    /// ``"int"`` (results as uint64) or ``"bytes"``.
    #[getter]
    fn key_type(&self) -> &'static str {
        if self.int_keys {
            "int"
        } else {
            "bytes"
        }
    }

    /// The store directory, or ``None`` for an in-memory index.
    #[getter]
    fn store(&self) -> Option<PathBuf> {
        self.store.clone()
    }

    /// The root name the map was opened or published under, if any.
    #[getter]
    fn name(&self) -> Option<String> {
        self.name.clone()
    }

    fn __repr__(&self) -> String {
        format!(
            "prox.Index(len={}, dim={}, metric={:?}, keys={:?}, descriptor={:?}{})",
            self.current().len(),
            self.current().dims(),
            self.current().metric().name(),
            self.key_type(),
            self.current().descriptor().to_hex(),
            self.name
                .as_ref()
                .map(|n| format!(", name={n:?}"))
                .unwrap_or_default()
        )
    }
}

impl PyIndex {
    /// The current snapshot.
    fn current(&self) -> Arc<Index> {
        self.inner.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Applies `batch` to the current snapshot, publishes it under the
    /// index's name (if any) and swaps it in. Writes are serialized;
    /// searches keep the snapshot they started with.
    fn write(&self, py: Python<'_>, batch: Batch, options: WriteOptions) -> PyResult<WriteReport> {
        if !self.writable {
            return Err(raise(
                "UnsupportedError",
                "this index was opened read-only: open it with writable=True to write".into(),
                vec![],
            ));
        }
        let name = self.name.clone();
        py.detach(|| -> prox_engine::Result<WriteReport> {
            let _serial = self.writing.lock().unwrap_or_else(|p| p.into_inner());
            let current = self.current();
            let applied = current.apply(&batch, &options)?;
            if let Some(n) = &name {
                applied.index.commit(n, Some(current.descriptor()))?;
            }
            *self.inner.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(applied.index);
            Ok(applied.report)
        })
        .map_err(error::engine)
    }
}

/// A write report as a dict.
fn report_dict<'py>(
    py: Python<'py>,
    r: &WriteReport,
    descriptor: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("descriptor", descriptor)?;
    d.set_item("inserted", r.inserted)?;
    d.set_item("moved", r.moved)?;
    d.set_item("value_only", r.value_only)?;
    d.set_item("deleted", r.deleted)?;
    d.set_item("absent_deletes", r.absent_deletes)?;
    d.set_item("blocks_written", r.blocks_written)?;
    d.set_item("bytes_written", r.bytes_written)?;
    d.set_item("hnsw", format!("{:?}", r.hnsw))?;
    d.set_item("pq", format!("{:?}", r.pq))?;
    d.set_item("profile", format!("{:?}", r.profile))?;
    d.set_item("profile_stale", r.profile_stale)?;
    d.set_item("seconds", r.elapsed.as_secs_f64())?;
    Ok(d)
}
