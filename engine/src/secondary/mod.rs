//! Secondary indexes, byte-compatible with the reference's `IndexedMap`
//! (../shared/spec/secondary-index.md).
//!
//! * `record`: the `PSIF`/`PSID`/`PSIP`/`PSIH`/`PSIO` records and the
//!   `PSIV` physical value.
//! * `layout`: version ids, hidden map ids, named roots, catalog keys,
//!   physical keys and term bounds.
//! * `build`: extraction with its limits, canonical full builds, exact
//!   per-record deltas, and the catalog and control trees.
//! * `payload`: JSON-object record values, their canonical encoding, and
//!   typed field indexes (keyword, integer, float, bool) over them.
//! * `fields`: [`FieldIndexes`], a map's field indexes (persisted in its
//!   `CRMF` metadata, maintained on every write) and filter evaluation.
//! * `filter_json`: the JSON form of [`crate::keys::Filter`].
//!
//! A secondary index is a prolly tree keyed `seg(term) || seg(primary key)`.
//! Everything here is written canonically, so index, catalog and control
//! roots depend only on the source records and the definitions.

mod build;
mod cbor;
mod fields;
mod filter_json;
mod layout;
mod payload;
mod record;

pub use fields::{eval, FieldIndexes, FieldState, SOURCE_MAP_ID};
pub use filter_json::{filter_from_json, MAX_CLAUSES, MAX_MATCH_ANY};
pub use payload::{
    canonical_payload, encode_canonical, field_terms, float_key, int_key, parse_payload,
    FieldIndex, FieldType, PayloadExtractor,
};

pub use build::{
    build_index, catalog_entries, record_delta, record_entries, write_catalog, Catalog, Definition,
    Entries, Extract, IndexState, Limits, Term,
};
pub use layout::{
    catalog_checkpoint_key, catalog_current_key, catalog_definition_key, catalog_format_key,
    catalog_map_id, catalog_retired_key, control_key, control_root_name, decode_physical_key,
    exact_bounds, head_root_name, index_map_id, physical_key, prefix_bounds, range_bounds,
    version_id, version_root_name, Bounds, CATALOG_FORMAT,
};
pub use record::{
    fingerprint, Checkpoint, Control, Descriptor, Head, IndexValue, Projection, MAX_RECORD_BYTES,
    PSIV_HEADER, RECORD_VERSION,
};
