//! The OpenAPI 3.0 document served at `GET /openapi.json`: built once per
//! server from its limits and tokens, so the bounds it states (`k`, batch
//! sizes, body size) and the security it declares are the ones enforced.
//!
//! The router is built from the same path constants; the tests check that
//! the document has exactly the routed operations and that each answers
//! only with statuses it documents.
//!
//! The one rule the document cannot state is a vector's length: it is the
//! dimension of the map named in the path (`GET /v1/maps/{name}`), checked
//! by the server (400 `wrong_dimension`).

use prox_engine::secondary::{FieldType, MAX_CLAUSES, MAX_MATCH_ANY};
use serde_json::{json, Map, Value};

/// `GET /healthz`.
pub(crate) const HEALTHZ: &str = "/healthz";
/// `GET /metrics`.
pub(crate) const METRICS: &str = "/metrics";
/// `GET /openapi.json`.
pub(crate) const OPENAPI: &str = "/openapi.json";
/// `GET /v1/maps`.
pub(crate) const MAPS: &str = "/v1/maps";
/// `GET`, `PUT`, `DELETE /v1/maps/{name}`.
pub(crate) const MAP: &str = "/v1/maps/{name}";
/// `POST /v1/maps/{name}/points:upsert`.
pub(crate) const UPSERT: &str = "/v1/maps/{name}/points:upsert";
/// `POST /v1/maps/{name}/points:delete`.
pub(crate) const DELETE: &str = "/v1/maps/{name}/points:delete";
/// `POST /v1/maps/{name}/search`.
pub(crate) const SEARCH: &str = "/v1/maps/{name}/search";
/// `POST /v1/maps/{name}/search:batch`.
pub(crate) const SEARCH_BATCH: &str = "/v1/maps/{name}/search:batch";
/// `GET /v1/maps/{name}/records/{key}`.
pub(crate) const RECORD: &str = "/v1/maps/{name}/records/{key}";

/// Every routed (path, method): the document's operations, checked
/// against the router by the tests.
#[cfg(test)]
const ROUTES: &[(&str, &str)] = &[
    (HEALTHZ, "get"),
    (METRICS, "get"),
    (OPENAPI, "get"),
    (MAPS, "get"),
    (MAP, "get"),
    (MAP, "put"),
    (MAP, "delete"),
    (UPSERT, "post"),
    (DELETE, "post"),
    (SEARCH, "post"),
    (SEARCH_BATCH, "post"),
    (RECORD, "get"),
];

/// Map names `PUT` accepts: ASCII letters, digits, `.`, `_`, `-`, not
/// starting with `.`, 1 to 255 bytes.
pub(crate) const CREATE_NAME_PATTERN: &str = "^[A-Za-z0-9_-][A-Za-z0-9._-]{0,254}$";

/// Whether `name` is one `PUT` accepts ([`CREATE_NAME_PATTERN`]).
pub(crate) fn creatable_name(name: &str) -> bool {
    let b = name.as_bytes();
    let ok = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-');
    (1..=255).contains(&b.len()) && b[0] != b'.' && b.iter().all(ok)
}

/// 2^128 - 2^103, halfway between `f32::MAX` and 2^128: a component's
/// text is rounded to f32 directly, and a number below this magnitude is
/// finite, one at or above it infinite (rejected). As a JSON Schema bound
/// (a double) it is inclusive: its shortest printing, 3.4028235677973366e38,
/// is just below the exact value and rounds to `f32::MAX`; only its exact
/// 39-digit form is refused though the bound admits it.
const F32_ROUNDS_FINITE: f64 = 340_282_356_779_733_661_637_539_395_458_142_568_448.0;

/// Largest `dims` of a map created by `PUT`.
pub(crate) const MAX_CREATE_DIMS: u32 = 1 << 16;

/// Even-length hex, either case (keys, values, filter bounds).
const HEX: &str = "^([0-9a-fA-F]{2})*$";
/// A descriptor CID as `If-Match` takes it: 64 hex digits, optionally
/// quoted, optionally weak (`W/`).
const IF_MATCH: &str = "^(W/)?\"?[0-9a-fA-F]{64}\"?$";

/// What the document states about one server.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Facts {
    pub(crate) max_k: usize,
    pub(crate) max_batch: usize,
    pub(crate) max_body: usize,
    /// A read token is set: reads need a bearer token.
    pub(crate) read_token: bool,
    /// A write token is set: the write endpoints are on.
    pub(crate) write_token: bool,
    /// What the maps served now share.
    pub(crate) served: Served,
}

/// What every map served when the document is asked for has in common:
/// the document states it, since a request body must fit the map it names.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Served {
    /// Their dimension, if they all have the same.
    pub(crate) dims: Option<usize>,
    /// Every one has an HNSW sidecar (`path` may be `hnsw`).
    pub(crate) hnsw: bool,
    /// Every one has a PQ sidecar (`path` may be `pq`).
    pub(crate) pq: bool,
    /// Every one has a recall profile (`recall` is an option).
    pub(crate) profile: bool,
}

impl Served {
    /// From the served maps' (dims, has HNSW, has PQ); no maps: nothing
    /// is known, every path is listed.
    pub(crate) fn of(maps: impl IntoIterator<Item = (usize, bool, bool)>) -> Served {
        let mut out: Option<(Option<usize>, bool, bool)> = None;
        for (d, h, p) in maps {
            out = Some(match out {
                None => (Some(d), h, p),
                Some((dims, hh, pp)) => (dims.filter(|x| *x == d), hh && h, pp && p),
            });
        }
        match out {
            None => Served {
                dims: None,
                hnsw: true,
                pq: true,
                profile: false,
            },
            Some((dims, hnsw, pq)) => Served {
                dims,
                hnsw,
                pq,
                profile: false,
            },
        }
    }

    fn paths(&self) -> Vec<&'static str> {
        let mut p = vec!["auto", "native"];
        if self.hnsw {
            p.push("hnsw");
        }
        if self.pq {
            p.push("pq");
        }
        p
    }
}

fn hex(max_bytes: Option<usize>) -> Value {
    let mut s = json!({"type": "string", "pattern": HEX});
    if let Some(n) = max_bytes {
        s["maxLength"] = json!(2 * n);
    }
    s
}

fn error_ref() -> Value {
    json!({"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}})
}

/// One documented answer: `description` names the codes it carries.
fn err(description: &str) -> Value {
    json!({"description": description, "content": error_ref()})
}

fn ok(description: &str, schema: &str) -> Value {
    json!({"description": description,
           "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}}})
}

/// [`ok`] with the `ETag` (the new descriptor, quoted) a write answers with.
fn written(description: &str) -> Value {
    let mut v = ok(description, "WriteResponse");
    v["headers"] = json!({"ETag": {"required": true, "description": "the new descriptor CID, quoted",
        "schema": {"type": "string", "pattern": "^\"[0-9a-f]{64}\"$"}}});
    v
}

fn name_param(pattern: Option<&str>) -> Value {
    // Not only dots: clients resolve `.` and `..` as path segments.
    let schema = json!({"type": "string", "minLength": 1, "pattern": pattern.unwrap_or("[^.]")});
    json!({"name": "name", "in": "path", "required": true, "schema": schema,
           "description": "the map's name (its root in the store)"})
}

fn if_match_param() -> Value {
    json!({"name": "If-Match", "in": "header", "required": false,
           "schema": {"type": "string", "pattern": IF_MATCH},
           "description": "the descriptor CID the map must be at; 412 otherwise"})
}

/// The answers every routed request can get from the gate, the admission
/// control and the store, plus `extra`.
fn responses(f: &Facts, kind: Kind, extra: &[(&str, Value)]) -> Value {
    let mut r = Map::new();
    for (status, v) in extra {
        r.insert((*status).to_string(), v.clone());
    }
    let mut add = |s: &str, d: &str| {
        r.entry(s.to_string()).or_insert_with(|| err(d));
    };
    add("421", "`host_not_allowed`: the Host header names neither a loopback name nor an --allow-host name");
    add(
        "503",
        "`overloaded`: too many requests in flight or the search queue is full; `busy` (a write): another writer of the map held its write lease for 120 s; `Retry-After: 1`",
    );
    add("500", "`internal`: a store or engine failure");
    match kind {
        Kind::Open => {}
        Kind::Read => {
            if f.read_token {
                add("401", "`unauthorized`: missing or wrong bearer token");
            }
        }
        Kind::Write => {
            add(
                "401",
                "`unauthorized`: missing or wrong bearer token (the write token)",
            );
            add(
                "403",
                "`writes_disabled`: the server was started without a write token",
            );
        }
    }
    Value::Object(r)
}

/// Answers of a request with a body.
fn body_errors(f: &Facts, binary: bool) -> Vec<(&'static str, Value)> {
    let types = if binary {
        "`unsupported_media_type`: the body is neither `application/json` nor `application/octet-stream`"
    } else {
        "`unsupported_media_type`: the body is not `application/json`"
    };
    vec![
        (
            "408",
            err("`body_timeout`: the body did not arrive in time"),
        ),
        (
            "413",
            err(&format!(
                "`body_too_large`: the body is over {} bytes",
                f.max_body
            )),
        ),
        ("415", err(types)),
    ]
}

#[derive(Clone, Copy)]
enum Kind {
    /// No token ever.
    Open,
    /// The read token, when one is set.
    Read,
    /// The write token.
    Write,
}

fn security(f: &Facts, kind: Kind) -> Value {
    match kind {
        Kind::Open => json!([]),
        Kind::Read if f.read_token => json!([{"read": []}, {"write": []}]),
        Kind::Read => json!([]),
        Kind::Write => json!([{"write": []}]),
    }
}

fn json_body(schema: &str) -> Value {
    json!({"required": true, "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}}})
}

fn schemas(f: &Facts) -> Value {
    let positive =
        |max: u64| json!({"type": "integer", "minimum": 1, "maximum": max, "nullable": true});
    let number = json!({"type": "number"});
    let f32_range =
        json!({"type": "number", "minimum": -F32_ROUNDS_FINITE, "maximum": F32_ROUNDS_FINITE});
    let mut vector = json!({"type": "array", "minItems": 1, "items": f32_range,
        "description": "exactly the map's dimensions (dims in GET /v1/maps/{name}; stated here when every \
            served map has the same); each a finite 32-bit float"});
    if let Some(d) = f.served.dims {
        vector["minItems"] = json!(d);
        vector["maxItems"] = json!(d);
    }
    let mut options = json!({
        "k": {"type": "integer", "minimum": 1, "maximum": f.max_k, "default": 10},
        "mode": {"type": "string", "enum": ["auto", "exact", "fast", "balanced", "high"]},
        "path": {"type": "string", "enum": f.served.paths(),
            "description": "hnsw and pq are listed when every served map has that sidecar"},
        "budget": positive(u64::MAX),
        "ef": positive(1 << 16),
        "rerank": positive(1 << 16),
        "nprobe": positive(1 << 20),
        "filter": {"$ref": "#/components/schemas/Filter"},
        "with_values": {"type": "boolean"},
        "with_vectors": {"type": "boolean"},
    });
    if f.served.profile {
        options["recall"] = recall_schema();
    }
    let with = |field: &str, schema: Value| {
        let mut p = options.clone();
        p[field] = schema;
        let mut s = json!({"type": "object", "required": [field], "additionalProperties": false, "properties": p});
        let mut forbidden = Vec::new();
        if f.served.hnsw || f.served.pq {
            // A sidecar path takes neither mode exact nor a budget.
            forbidden.push(json!({"required": ["path"], "properties": {"path": {"enum": ["hnsw", "pq"]}},
                "anyOf": [{"required": ["mode"], "properties": {"mode": {"enum": ["exact"]}}},
                          {"required": ["budget"], "properties": {"budget": {"type": "integer"}}}]}));
        }
        if f.served.profile {
            // `recall` picks path, mode and knobs itself.
            let number = json!({"type": "number"});
            forbidden.push(
                json!({"required": ["recall", "path"], "properties": {"recall": number,
                "path": {"enum": ["native", "hnsw", "pq"]}}}),
            );
            forbidden.push(
                json!({"required": ["recall", "mode"], "properties": {"recall": number,
                "mode": {"enum": ["exact", "fast", "balanced", "high"]}}}),
            );
            for knob in ["ef", "nprobe", "rerank", "budget"] {
                forbidden.push(
                    json!({"required": ["recall", knob], "properties": {"recall": number,
                    knob: {"type": "integer"}}}),
                );
            }
        }
        match forbidden.len() {
            0 => {}
            1 => s["not"] = forbidden.remove(0),
            _ => s["not"] = json!({"anyOf": forbidden}),
        }
        s
    };
    let cid = json!({"type": "string", "pattern": "^[0-9a-f]{64}$"});
    let hit = json!({"type": "object", "required": ["key", "score"], "additionalProperties": false,
        "properties": {"key": hex(None), "value": hex(None),
                       "vector": {"type": "array", "items": number}, "score": number}});
    let answer_props = json!({
        "completion": {"type": "string", "enum": ["exact", "approximate", "budget_exhausted"]},
        "path": {"type": "string", "enum": ["native", "hnsw", "pq"]},
        "results": {"type": "array", "items": {"$ref": "#/components/schemas/Hit"}},
        "tuned": {"type": "object", "additionalProperties": false,
            "required": ["setting", "measured_recall", "stderr", "micros", "reached"],
            "description": "with `recall`: the setting the map's recall profile chose, its measured recall@10 \
                (and standard error) and single-thread time per query, and whether it reaches the target",
            "properties": {"setting": {"type": "string"}, "measured_recall": number, "stderr": number,
                "micros": number, "reached": {"type": "boolean"}}},
    });
    let count = json!({"type": "integer", "minimum": 0});
    let sidecar = json!({"type": "string", "pattern": "^[0-9a-f]{64}$", "nullable": true});
    let mut search = answer_props.clone();
    for (k, v) in [
        ("descriptor", &cid),
        ("generation", &count),
        ("took_us", &count),
    ] {
        search[k] = v.clone();
    }
    // A boolean list: an array of filters, or one filter standing alone.
    let clause = json!({"$ref": "#/components/schemas/FilterClause"});
    let clauses = json!({"anyOf": [
        {"type": "array", "maxItems": MAX_CLAUSES, "items": clause.clone()}, clause]});
    json!({
        "Error": {"type": "object", "required": ["error"], "additionalProperties": false,
            "properties": {"error": {"type": "object", "required": ["code", "message"], "additionalProperties": false,
                "properties": {"code": {"type": "string"}, "field": {"type": "string"}, "message": {"type": "string"}}}}},
        "Filter": {"nullable": true, "anyOf": [{"$ref": "#/components/schemas/KeyFilter"}, {"$ref": "#/components/schemas/BoolFilter"}],
            "description": "a record-key filter, or must/should/must_not over filters; payload field conditions are listed when the served maps index fields (docs/payloads.md)"},
        "FilterClause": {"anyOf": [{"$ref": "#/components/schemas/KeyFilter"}, {"$ref": "#/components/schemas/BoolFilter"}]},
        "BoolFilter": {"type": "object", "minProperties": 1, "additionalProperties": false,
            "description": "every must, at least one should (when non-empty), no must_not",
            "properties": {"must": clauses.clone(), "should": clauses.clone(), "must_not": clauses}},
        "KeyFilter": {"type": "object", "minProperties": 1, "maxProperties": 1, "additionalProperties": false,
            "description": "exactly one of prefix, range (start inclusive, end exclusive or null), keys",
            "properties": {
                "prefix": hex(None),
                "range": {"type": "array", "minItems": 2, "maxItems": 2,
                          "description": "[start, end]: start inclusive (null: from the first key), end exclusive (null: to the last)",
                          "items": {"type": "string", "pattern": HEX, "nullable": true}},
                "keys": {"type": "array", "items": hex(None)}}},
        "SearchRequest": with("vector", vector.clone()),
        "BatchRequest": with("vectors", json!({"type": "array", "minItems": 1, "maxItems": f.max_batch, "items": vector})),
        "Hit": hit,
        "Answer": {"type": "object", "required": ["completion", "path", "results"], "additionalProperties": false,
            "properties": answer_props},
        "SearchResponse": {"type": "object", "additionalProperties": false,
            "required": ["descriptor", "generation", "completion", "path", "results", "took_us"], "properties": search},
        "BatchResponse": {"type": "object", "additionalProperties": false,
            "required": ["descriptor", "generation", "results", "took_us"],
            "properties": {"descriptor": cid, "generation": count, "took_us": count,
                "results": {"type": "array", "items": {"$ref": "#/components/schemas/Answer"}}}},
        "MapInfo": {"type": "object", "additionalProperties": false,
            "required": ["name", "descriptor", "generation", "count", "dims", "metric", "sidecars"],
            "properties": {"name": {"type": "string"}, "descriptor": cid, "generation": count, "count": count,
                "dims": count, "metric": {"type": "string", "enum": ["l2", "ip", "cosine"]},
                "sidecars": {"type": "object", "required": ["hnsw", "pq"], "additionalProperties": false,
                    "properties": {"hnsw": sidecar, "pq": sidecar}}}},
        "MapList": {"type": "object", "required": ["maps"], "additionalProperties": false,
            "properties": {"maps": {"type": "array", "items": {"$ref": "#/components/schemas/MapInfo"}}}},
        "Record": {"type": "object", "additionalProperties": false,
            "required": ["descriptor", "generation", "key", "value", "vector"],
            "properties": {"descriptor": cid, "generation": count, "key": hex(None), "value": hex(None),
                "vector": {"type": "array", "items": number}}},
        "Health": {"type": "object", "required": ["status", "maps"], "additionalProperties": false,
            "properties": {"status": {"type": "string", "enum": ["ok"]}, "maps": count}},
        "UpsertRequest": {"type": "object", "required": ["points"], "additionalProperties": false,
            "properties": {
                "points": {"type": "array", "minItems": 1, "maxItems": f.max_batch, "items": {
                    "type": "object", "required": ["key", "vector"], "additionalProperties": false,
                    "properties": {"key": hex(Some(4096)), "vector": vector,
                        "value": {"type": "string", "pattern": HEX, "nullable": true}}}},
                "canonical_hnsw": {"type": "string", "enum": ["refuse", "rebuild", "drop", null], "nullable": true,
                    "description": "what a write does to a canonical HNSW sidecar (default refuse: 409)"}}},
        "DeleteRequest": {"type": "object", "required": ["keys"], "additionalProperties": false,
            "properties": {"keys": {"type": "array", "minItems": 1, "maxItems": f.max_batch, "items": hex(Some(4096))}}},
        "CreateRequest": {"type": "object", "required": ["dims"], "additionalProperties": false,
            "properties": {"dims": {"type": "integer", "minimum": 1, "maximum": MAX_CREATE_DIMS},
                "metric": {"type": "string", "enum": ["l2", "ip", "cosine", null], "nullable": true},
                "sq8_group_size": {"type": "integer", "minimum": 1, "maximum": u32::MAX, "nullable": true}}},
        "WriteResponse": {"type": "object", "additionalProperties": false,
            "required": ["name", "descriptor", "generation", "inserted", "moved", "value_only", "deleted",
                         "absent_deletes", "blocks_written", "bytes_written", "hnsw", "pq", "profile", "took_us"],
            "properties": {"name": {"type": "string"}, "descriptor": cid, "generation": count,
                "inserted": count, "moved": count, "value_only": count, "deleted": count,
                "absent_deletes": count, "blocks_written": count, "bytes_written": count,
                "hnsw": {"type": "string"}, "pq": {"type": "string"},
                "profile": {"type": "string", "description": "the recall profile: `stale` when a tenth of \
                    the records changed since it was measured (it keeps answering and is measured again \
                    in the background)"},
                "took_us": count}},
        "Dropped": {"type": "object", "required": ["name", "dropped"], "additionalProperties": false,
            "properties": {"name": {"type": "string"}, "dropped": cid}},
    })
}

/// The `recall` option: listed when every served map has a recall profile.
fn recall_schema() -> Value {
    json!({"type": "number", "minimum": 0, "maximum": 1,
        "description": "target recall@10: the fastest path and setting the map's recall profile measured \
            to reach it runs (reported in `tuned`); only with path and mode auto and no ef, nprobe, rerank \
            or budget (docs/search.md, \"Choosing by recall\")"})
}

/// The search options as query parameters, for binary bodies.
fn query_options(f: &Facts) -> Vec<Value> {
    let only = "the option for an application/octet-stream body; with a JSON body it replaces the \
        body's member of the same name";
    let int = |max: u64| json!({"type": "integer", "minimum": 1, "maximum": max});
    [
        ("k", json!({"type": "integer", "minimum": 1, "maximum": f.max_k})),
        ("mode", json!({"type": "string", "enum": ["auto", "exact", "fast", "balanced", "high"]})),
        ("path", json!({"type": "string", "enum": f.served.paths()})),
        ("budget", int(u64::MAX)),
        ("ef", int(1 << 16)),
        ("rerank", int(1 << 16)),
        ("nprobe", int(1 << 20)),
        ("recall", recall_schema()),
        ("with_values", json!({"type": "boolean"})),
        ("with_vectors", json!({"type": "boolean"})),
    ]
    .into_iter()
    .filter(|(name, _)| *name != "recall" || f.served.profile)
    .map(|(name, schema)| json!({"name": name, "in": "query", "required": false, "schema": schema, "description": only}))
    .chain(std::iter::once(json!({"name": "filter", "in": "query", "required": false, "description": only,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Filter"}}}})))
    .collect()
}

/// Adds the binary form of `points:upsert` to its JSON operation: rows of
/// little-endian f32 keyed by `keys` or `start_key` in the query string.
fn binary_upsert(mut op: Value, f: &Facts) -> Value {
    let only = "for an application/octet-stream body only (a JSON body with it is a 400)";
    let params = [
        json!({"name": "keys", "in": "query", "required": false,
            "schema": {"type": "string", "pattern": "^[0-9a-fA-F]*(,[0-9a-fA-F]*)*$"},
            "description": format!("the rows' keys, comma-separated hex, one per row in row order \
                (or start_key); {only}")}),
        json!({"name": "start_key", "in": "query", "required": false,
            "schema": {"type": "integer", "minimum": 0, "maximum": u64::MAX},
            "description": format!("row i gets the 8-byte big-endian key start_key + i (or keys); {only}")}),
        json!({"name": "canonical_hnsw", "in": "query", "required": false,
            "schema": {"type": "string", "enum": ["refuse", "rebuild", "drop"]},
            "description": format!("the body member of that name; {only}")}),
    ];
    if let Some(list) = op["parameters"].as_array_mut() {
        list.extend(params);
    }
    let mut bytes = json!({"type": "string", "format": "binary",
        "description": "the points' vectors as little-endian f32 rows (values empty)"});
    if let Some(d) = f.served.dims {
        bytes["minLength"] = json!(d * 4);
        bytes["maxLength"] = json!(d * 4 * f.max_batch);
    }
    op["requestBody"]["content"]["application/octet-stream"] = json!({"schema": bytes});
    op["requestBody"]["description"] = json!(
        "JSON, or the vectors as little-endian f32 rows (application/octet-stream) \
        keyed by keys or start_key in the query string"
    );
    op["responses"]["415"] = err(
        "`unsupported_media_type`: the body is neither `application/json` nor `application/octet-stream`",
    );
    op
}

fn operation(summary: &str, kind: Kind, f: &Facts, op: Value) -> Value {
    let mut o = op;
    o["summary"] = json!(summary);
    o["security"] = security(f, kind);
    o
}

fn paths(f: &Facts) -> Value {
    let bad = |d: &str| err(d);
    let search_400 = bad(
        "`malformed_json`, `invalid_field` (a bad option or an unknown field), `wrong_dimension` \
        (the vector length differs from the map's), `not_finite`, `bad_body`",
    );
    let unknown = bad("`unknown_map`: no map is served under that name");
    let timeout =
        bad("`deadline_exceeded`: the request's deadline expired; the search was cancelled");
    let write_400 = bad(
        "`bad_body` (not the documented JSON), `invalid_field`, `wrong_dimension`, `not_finite`",
    );
    let precondition = bad("`precondition_failed`: If-Match names another descriptor");
    let conflict = bad(
        "`conflict` (another writer moved the root: at once under If-Match, else after 16 \
        re-applications; retry) or `canonical_hnsw` (a canonical HNSW \
        sidecar under the default policy)",
    );
    let write_ok = written(
        "written: the blocks are durable and the root moved; ETag names the new descriptor",
    );
    let with_body = |binary: bool, extra: Vec<(&'static str, Value)>| {
        let mut v = body_errors(f, binary);
        v.extend(extra);
        v
    };
    let search = |summary: &str, req: &str, resp: &str, rows: &str| {
        let mut params = vec![name_param(None)];
        params.extend(query_options(f));
        let mut body = json_body(req);
        let mut bytes = json!({"type": "string", "format": "binary", "description": rows});
        if let Some(d) = f.served.dims {
            bytes["minLength"] = json!(d * 4);
            bytes["maxLength"] = json!(
                d * 4
                    * if req == "BatchRequest" {
                        f.max_batch
                    } else {
                        1
                    }
            );
        }
        body["content"]["application/octet-stream"] = json!({"schema": bytes});
        body["description"] = json!(
            "JSON, or the vectors as little-endian f32 (application/octet-stream) \
            with the options in the query string"
        );
        operation(
            summary,
            Kind::Read,
            f,
            json!({
                "parameters": params,
                "requestBody": body,
                "responses": responses(f, Kind::Read, &with_body(true, vec![
                    ("200", ok("the nearest records", resp)), ("400", search_400.clone()),
                    ("404", unknown.clone()), ("504", timeout.clone())])),
            }),
        )
    };
    let write = |summary: &str, req: &str| {
        operation(
            summary,
            Kind::Write,
            f,
            json!({
                "parameters": [name_param(None), if_match_param()],
                "requestBody": json_body(req),
                "responses": responses(f, Kind::Write, &with_body(false, vec![
                    ("200", write_ok.clone()), ("400", write_400.clone()), ("404", unknown.clone()),
                    ("409", conflict.clone()), ("412", precondition.clone())])),
            }),
        )
    };
    let mut p = Map::new();
    let mut put = |path: &str, method: &str, op: Value| {
        let e = p.entry(path.to_string()).or_insert_with(|| json!({}));
        e[method] = op;
    };
    put(
        HEALTHZ,
        "get",
        operation(
            "liveness and the number of served maps",
            Kind::Open,
            f,
            json!({
        "responses": responses(f, Kind::Open, &[("200", ok("alive", "Health"))])}),
        ),
    );
    put(
        OPENAPI,
        "get",
        operation(
            "this document",
            Kind::Open,
            f,
            json!({
        "responses": responses(f, Kind::Open, &[("200", json!({"description": "the OpenAPI document",
            "content": {"application/json": {"schema": {"type": "object"}}}}))])}),
        ),
    );
    put(
        METRICS,
        "get",
        operation(
            "Prometheus metrics",
            Kind::Read,
            f,
            json!({
        "responses": responses(f, Kind::Read, &[("200", json!({"description": "Prometheus text format 0.0.4",
            "content": {"text/plain": {"schema": {"type": "string"}}}}))])}),
        ),
    );
    put(
        MAPS,
        "get",
        operation(
            "every served map",
            Kind::Read,
            f,
            json!({
        "responses": responses(f, Kind::Read, &[("200", ok("the served maps", "MapList"))])}),
        ),
    );
    put(
        MAP,
        "get",
        operation(
            "one map",
            Kind::Read,
            f,
            json!({
        "parameters": [name_param(None)],
        "responses": responses(f, Kind::Read, &[("200", ok("the map", "MapInfo")), ("404", unknown.clone())])}),
        ),
    );
    put(
        MAP,
        "put",
        operation(
            "create an empty map from a config",
            Kind::Write,
            f,
            json!({
        "parameters": [name_param(Some(CREATE_NAME_PATTERN))],
        "requestBody": json_body("CreateRequest"),
        "responses": responses(f, Kind::Write, &with_body(false, vec![
            ("201", written("created; ETag names the descriptor")),
            ("400", bad("`bad_body` (not the documented JSON) or `invalid_field` (`name`, `metric`, `config`)")),
            ("409", bad("`map_exists`: the name already names a map"))]))}),
        ),
    );
    put(
        MAP,
        "delete",
        operation(
            "drop the map's root (its blocks stay until prox gc)",
            Kind::Write,
            f,
            json!({
        "parameters": [name_param(None), if_match_param()],
        "responses": responses(f, Kind::Write, &[
            ("200", ok("dropped", "Dropped")),
            ("400", bad("`invalid_field` (`if-match` is not a descriptor CID)")),
            ("404", unknown.clone()), ("409", bad("`conflict`: the root moved meanwhile")),
            ("412", precondition.clone())])}),
        ),
    );
    put(
        UPSERT,
        "post",
        binary_upsert(write("insert or replace points", "UpsertRequest"), f),
    );
    put(
        DELETE,
        "post",
        write("delete points by key", "DeleteRequest"),
    );
    put(
        SEARCH,
        "post",
        search(
            "the k nearest records to one vector",
            "SearchRequest",
            "SearchResponse",
            "one vector: exactly dims x 4 bytes",
        ),
    );
    put(
        SEARCH_BATCH,
        "post",
        search(
            "the k nearest records to each of many vectors",
            "BatchRequest",
            "BatchResponse",
            &format!("1 to {} vectors: a multiple of dims x 4 bytes", f.max_batch),
        ),
    );
    put(
        RECORD,
        "get",
        operation(
            "one record by key",
            Kind::Read,
            f,
            json!({
        "parameters": [name_param(None), {"name": "key", "in": "path", "required": true,
            "schema": {"type": "string", "pattern": HEX, "minLength": 2}, "description": "the key in hex"}],
        "responses": responses(f, Kind::Read, &[("200", ok("the record", "Record")),
            ("400", bad("`invalid_field`: the key is not hex")),
            ("404", bad("`unknown_map`, or `not_found`: no such record"))])}),
        ),
    );
    Value::Object(p)
}

/// The document for a server with these facts.
/// Adds the payload field conditions `fields` (indexed with that type by
/// every served map) to the filter schemas of `doc`: a request using
/// them is then accepted by every map.
pub(crate) fn describe_fields(doc: &mut Value, fields: &[(String, FieldType)]) {
    if fields.is_empty() {
        return;
    }
    let names: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
    let mut conds = vec![
        json!({"type": "object", "required": ["is_null"], "additionalProperties": false,
            "properties": {"is_null": {"type": "object", "required": ["key"], "additionalProperties": false,
                "properties": {"key": {"type": "string", "enum": names}}}}}),
        json!({"type": "object", "required": ["exists"], "additionalProperties": false,
            "properties": {"exists": {"type": "object", "required": ["key"], "additionalProperties": false,
                "properties": {"key": {"type": "string", "enum": names}}}}}),
    ];
    let int = json!({"type": "integer", "format": "int64",
        "minimum": -9_007_199_254_740_991i64, "maximum": 9_007_199_254_740_991i64});
    for (name, ty) in fields {
        let value = match ty {
            FieldType::Keyword => json!({"type": "string"}),
            FieldType::Integer | FieldType::Float => int.clone(),
            FieldType::Bool => json!({"type": "boolean"}),
        };
        let matcher = json!({"type": "object", "minProperties": 1, "maxProperties": 1, "additionalProperties": false,
            "properties": {"value": value, "any": {"type": "array", "maxItems": MAX_MATCH_ANY, "items": value}}});
        conds.push(
            json!({"type": "object", "required": ["key", "match"], "additionalProperties": false,
            "properties": {"key": {"type": "string", "enum": [name]}, "match": matcher}}),
        );
        if matches!(ty, FieldType::Integer | FieldType::Float) {
            let n = json!({"type": "number", "minimum": -1e300, "maximum": 1e300});
            conds.push(json!({"type": "object", "required": ["key", "range"], "additionalProperties": false,
                "properties": {"key": {"type": "string", "enum": [name]},
                    "range": {"type": "object", "minProperties": 1, "additionalProperties": false,
                        "properties": {"gt": n, "gte": n, "lt": n, "lte": n}}}}));
        }
    }
    for schema in ["Filter", "FilterClause"] {
        if let Some(Value::Array(any)) =
            doc.pointer_mut(&format!("/components/schemas/{schema}/anyOf"))
        {
            any.extend(conds.iter().cloned());
        }
    }
}

pub(crate) fn document(f: &Facts) -> Value {
    let read = if f.read_token {
        "the read token (the write token is accepted too); needed by every route but /healthz and /openapi.json"
    } else {
        "this server has no read token: reads need none (it only listens on loopback)"
    };
    let write = if f.write_token {
        "the write token; needed by points:upsert, points:delete, PUT and DELETE of a map, on loopback too"
    } else {
        "this server was started without a write token: every write is refused with 403"
    };
    json!({
        "openapi": "3.0.3",
        "info": {"title": "prox HTTP API", "version": env!("CARGO_PKG_VERSION"),
            "description": "Search, read and write prox proximity maps. Errors are JSON \
                {\"error\": {\"code\", \"field\", \"message\"}}; see docs/api.md."},
        "paths": paths(f),
        "components": {
            "securitySchemes": {
                "read": {"type": "http", "scheme": "bearer", "description": read},
                "write": {"type": "http", "scheme": "bearer", "description": write},
            },
            "schemas": schemas(f),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> Facts {
        Facts {
            max_k: 1000,
            max_batch: 4096,
            max_body: 8 << 20,
            read_token: true,
            write_token: true,
            served: Served::default(),
        }
    }

    #[test]
    fn every_route_is_documented_once_and_every_reference_resolves() {
        let d = document(&facts());
        let paths = d["paths"].as_object().unwrap();
        let mut ops = 0;
        for (path, methods) in paths {
            for m in methods.as_object().unwrap().keys() {
                assert!(ROUTES.contains(&(path.as_str(), m.as_str())), "{m} {path}");
                ops += 1;
            }
        }
        assert_eq!(ops, ROUTES.len());
        let text = d.to_string();
        for r in text.split("#/components/schemas/").skip(1) {
            let name: String = r.chars().take_while(|c| c.is_alphanumeric()).collect();
            assert!(d["components"]["schemas"].get(&name).is_some(), "{name}");
        }
    }

    #[test]
    fn security_follows_the_tokens() {
        let d = document(&facts());
        assert_eq!(
            d["paths"][SEARCH]["post"]["security"],
            json!([{"read": []}, {"write": []}])
        );
        assert_eq!(d["paths"][HEALTHZ]["get"]["security"], json!([]));
        assert_eq!(
            d["paths"][UPSERT]["post"]["security"],
            json!([{"write": []}])
        );
        let open = document(&Facts {
            read_token: false,
            ..facts()
        });
        assert_eq!(open["paths"][SEARCH]["post"]["security"], json!([]));
        assert!(open["paths"][SEARCH]["post"]["responses"]
            .get("401")
            .is_none());
        assert_eq!(
            open["paths"][MAP]["put"]["security"],
            json!([{"write": []}])
        );
    }

    #[test]
    fn served_maps_narrow_vectors_and_paths() {
        let s = Served::of([(8, false, true), (8, true, true)]);
        assert_eq!((s.dims, s.hnsw, s.pq), (Some(8), false, true));
        assert_eq!(s.paths(), ["auto", "native", "pq"]);
        let d = document(&Facts {
            served: s,
            ..facts()
        });
        let v = &d["components"]["schemas"]["SearchRequest"]["properties"]["vector"];
        assert_eq!(
            (v["minItems"].as_u64(), v["maxItems"].as_u64()),
            (Some(8), Some(8))
        );
        assert!(d["components"]["schemas"]["SearchRequest"]
            .get("not")
            .is_some());
        let mixed = Served::of([(8, false, false), (4, false, false)]);
        assert_eq!(mixed.dims, None);
        let d = document(&Facts {
            served: mixed,
            ..facts()
        });
        assert!(d["components"]["schemas"]["SearchRequest"]
            .get("not")
            .is_none());
        assert!(Served::of([]).hnsw);
    }

    #[test]
    fn create_names_follow_the_pattern() {
        for ok in ["m", "docs-2", "a.b_c", "_x"] {
            assert!(creatable_name(ok), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "a b",
            "a/b",
            "é",
            &"x".repeat(256),
        ] {
            assert!(!creatable_name(bad), "{bad}");
        }
    }
}
