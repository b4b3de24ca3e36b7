//! The persisted records of secondary indexes (secondary-index.md 2.4, 4.2,
//! 6): `PSIF` (fingerprint preimage), `PSID` (descriptor), `PSIP`
//! (checkpoint), `PSIH` (indexed head), `PSIO` (control) and the `PSIV`
//! physical value. Every record is `magic || u32be(1) || one CBOR array`.

use super::cbor::{self, Item};
use super::layout::{catalog_map_id, index_map_id};
use crate::error::{Error, Result};
use sha2::{Digest, Sha256};

/// `SECONDARY_INDEX_FORMAT_VERSION`, the version word of every record.
pub const RECORD_VERSION: u32 = 1;
/// Largest record, header included, on encode and decode.
pub const MAX_RECORD_BYTES: usize = 16 * 1024 * 1024;
/// The only physical layout version.
pub(super) const LAYOUT_VERSION: u64 = 1;
/// The only descriptor format version.
pub(super) const DESCRIPTOR_FORMAT: u64 = 1;

/// What an index stores beside each term (secondary-index.md 3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Projection {
    /// Terms only; the physical value is empty.
    KeysOnly,
    /// Caller-chosen projection bytes per term (`PSIV` tag 1).
    Include,
    /// The whole source value (`PSIV` tag 2).
    All,
}

impl Projection {
    /// The tag written in `PSID` / `PSIF`.
    pub fn tag(self) -> u64 {
        match self {
            Projection::KeysOnly => 0,
            Projection::Include => 1,
            Projection::All => 2,
        }
    }

    fn from_tag(tag: u64, object: &'static str) -> Result<Projection> {
        match tag {
            0 => Ok(Projection::KeysOnly),
            1 => Ok(Projection::Include),
            2 => Ok(Projection::All),
            t => Err(Error::invalid(
                object,
                format!("projection tag {t} is not 0, 1 or 2"),
            )),
        }
    }
}

fn envelope(magic: &[u8; 4], body: &[u8], object: &'static str) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(8 + body.len());
    out.extend_from_slice(magic);
    out.extend_from_slice(&RECORD_VERSION.to_be_bytes());
    out.extend_from_slice(body);
    if out.len() > MAX_RECORD_BYTES {
        return Err(Error::invalid(
            object,
            format!("record of {} bytes exceeds {MAX_RECORD_BYTES}", out.len()),
        ));
    }
    Ok(out)
}

fn open(bytes: &[u8], magic: &[u8; 4], object: &'static str) -> Result<Item> {
    if bytes.len() > MAX_RECORD_BYTES {
        return Err(Error::invalid(
            object,
            format!("record of {} bytes exceeds {MAX_RECORD_BYTES}", bytes.len()),
        ));
    }
    if bytes.len() < 8 || &bytes[..4] != magic {
        return Err(Error::invalid(
            object,
            "invalid secondary-index record magic",
        ));
    }
    if bytes[4..8] != RECORD_VERSION.to_be_bytes() {
        return Err(Error::invalid(
            object,
            "unsupported secondary-index record version",
        ));
    }
    cbor::parse(&bytes[8..], object)
}

fn definition_error(reason: impl Into<String>) -> Error {
    Error::InvalidIndexDefinition(reason.into())
}

/// The definition fingerprint: SHA-256 of the `PSIF` record (6.1).
pub fn fingerprint(
    source_map_id: &[u8],
    name: &[u8],
    generation: u64,
    extractor_id: &str,
    projection: Projection,
) -> [u8; 32] {
    let mut body = Vec::new();
    cbor::head(&mut body, 4, 7);
    cbor::put_bytes(&mut body, source_map_id);
    cbor::put_bytes(&mut body, name);
    cbor::put_uint(&mut body, generation);
    cbor::put_text(&mut body, extractor_id);
    cbor::put_uint(&mut body, 0);
    cbor::put_uint(&mut body, projection.tag());
    cbor::put_uint(&mut body, LAYOUT_VERSION);
    let mut pre = b"PSIF".to_vec();
    pre.extend_from_slice(&RECORD_VERSION.to_be_bytes());
    pre.extend_from_slice(&body);
    Sha256::digest(&pre).into()
}

/// An index definition's persisted identity (`PSID`, 6.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// The source map's id (non-empty).
    pub source_map_id: Vec<u8>,
    /// Index name (non-empty, any bytes).
    pub name: Vec<u8>,
    /// Generation (>= 1).
    pub generation: u64,
    /// The application's name for the extraction semantics (non-empty).
    pub extractor_id: String,
    /// SHA-256 of the `PSIF` preimage of the fields above.
    pub fingerprint: [u8; 32],
    /// What the index stores beside each term.
    pub projection: Projection,
}

impl Descriptor {
    /// A validated descriptor with its fingerprint computed.
    pub fn new(
        source_map_id: &[u8],
        name: &[u8],
        generation: u64,
        extractor_id: &str,
        projection: Projection,
    ) -> Result<Descriptor> {
        let d = Descriptor {
            source_map_id: source_map_id.to_vec(),
            name: name.to_vec(),
            generation,
            extractor_id: extractor_id.to_string(),
            fingerprint: fingerprint(source_map_id, name, generation, extractor_id, projection),
            projection,
        };
        d.validate()?;
        Ok(d)
    }

    fn validate(&self) -> Result<()> {
        if self.source_map_id.is_empty() {
            return Err(definition_error("source map id must not be empty"));
        }
        if self.name.is_empty() {
            return Err(definition_error("index name must not be empty"));
        }
        if self.extractor_id.is_empty() {
            return Err(definition_error("extractor id must not be empty"));
        }
        if self.generation == 0 {
            return Err(definition_error("generation must be at least 1"));
        }
        let runtime = fingerprint(
            &self.source_map_id,
            &self.name,
            self.generation,
            &self.extractor_id,
            self.projection,
        );
        if runtime != self.fingerprint {
            return Err(Error::IndexDefinitionMismatch {
                persisted: hex::encode(self.fingerprint),
                runtime: hex::encode(runtime),
            });
        }
        Ok(())
    }

    /// `PSID` bytes.
    pub fn encode(&self) -> Result<Vec<u8>> {
        self.validate()?;
        let mut body = Vec::new();
        cbor::head(&mut body, 4, 8);
        cbor::put_uint(&mut body, DESCRIPTOR_FORMAT);
        cbor::put_bytes(&mut body, &self.source_map_id);
        cbor::put_bytes(&mut body, &self.name);
        cbor::put_uint(&mut body, self.generation);
        cbor::put_text(&mut body, &self.extractor_id);
        cbor::put_bytes(&mut body, &self.fingerprint);
        cbor::put_uint(&mut body, self.projection.tag());
        cbor::put_uint(&mut body, LAYOUT_VERSION);
        envelope(b"PSID", &body, "PSID")
    }

    /// Parses and validates `PSID` bytes (fingerprint included).
    pub fn decode(bytes: &[u8]) -> Result<Descriptor> {
        const O: &str = "PSID";
        let mut f = open(bytes, b"PSID", O)?.array(8, O)?.into_iter();
        let mut next = || f.next().ok_or(Error::Truncated { object: O });
        let format = next()?.uint(O, "format version")?;
        let source_map_id = next()?.bytes(O, "source map id")?;
        let name = next()?.bytes(O, "name")?;
        let generation = next()?.uint(O, "generation")?;
        let extractor_id = next()?.text(O, "extractor id")?;
        let fingerprint = next()?.bytes32(O, "fingerprint")?;
        let projection = Projection::from_tag(next()?.uint(O, "projection")?, O)?;
        let layout = next()?.uint(O, "layout")?;
        if format != DESCRIPTOR_FORMAT {
            return Err(definition_error(format!(
                "descriptor format {format} is not 1"
            )));
        }
        if layout != LAYOUT_VERSION {
            return Err(definition_error(format!(
                "physical layout {layout} is not 1"
            )));
        }
        let d = Descriptor {
            source_map_id,
            name,
            generation,
            extractor_id,
            fingerprint,
            projection,
        };
        d.validate()?;
        Ok(d)
    }

    /// The hidden map id of this definition (5.2).
    pub fn index_map_id(&self) -> Vec<u8> {
        index_map_id(&self.source_map_id, &self.name, &self.fingerprint)
    }
}

/// Ties one source version to one index version (`PSIP`, 6.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The source map's id.
    pub source_map_id: Vec<u8>,
    /// Version id of the indexed source tree.
    pub source_version: [u8; 32],
    /// Index name.
    pub index_name: Vec<u8>,
    /// Definition generation.
    pub generation: u64,
    /// Definition fingerprint.
    pub fingerprint: [u8; 32],
    /// `index_map_id(source, name, fingerprint)`.
    pub index_map_id: Vec<u8>,
    /// Version id of the hidden index tree.
    pub index_version: [u8; 32],
}

impl Checkpoint {
    fn validate(&self) -> Result<()> {
        let bad = |r: &str| Err(Error::invalid("PSIP", r.to_string()));
        if self.source_map_id.is_empty() {
            return bad("source map id must not be empty");
        }
        if self.index_name.is_empty() {
            return bad("index name must not be empty");
        }
        if self.generation == 0 {
            return bad("generation must be at least 1");
        }
        if self.index_map_id
            != index_map_id(&self.source_map_id, &self.index_name, &self.fingerprint)
        {
            return bad("index map id is not owned by this source, name and fingerprint");
        }
        Ok(())
    }

    fn body(&self, out: &mut Vec<u8>) {
        cbor::head(out, 4, 7);
        cbor::put_bytes(out, &self.source_map_id);
        cbor::put_bytes(out, &self.source_version);
        cbor::put_bytes(out, &self.index_name);
        cbor::put_uint(out, self.generation);
        cbor::put_bytes(out, &self.fingerprint);
        cbor::put_bytes(out, &self.index_map_id);
        cbor::put_bytes(out, &self.index_version);
    }

    /// `PSIP` bytes.
    pub fn encode(&self) -> Result<Vec<u8>> {
        self.validate()?;
        let mut body = Vec::new();
        self.body(&mut body);
        envelope(b"PSIP", &body, "PSIP")
    }

    /// Parses and validates `PSIP` bytes.
    pub fn decode(bytes: &[u8]) -> Result<Checkpoint> {
        const O: &str = "PSIP";
        let mut f = open(bytes, b"PSIP", O)?.array(7, O)?.into_iter();
        let mut next = || f.next().ok_or(Error::Truncated { object: O });
        let c = Checkpoint {
            source_map_id: next()?.bytes(O, "source map id")?,
            source_version: next()?.bytes32(O, "source version")?,
            index_name: next()?.bytes(O, "index name")?,
            generation: next()?.uint(O, "generation")?,
            fingerprint: next()?.bytes32(O, "fingerprint")?,
            index_map_id: next()?.bytes(O, "index map id")?,
            index_version: next()?.bytes32(O, "index version")?,
        };
        c.validate()?;
        Ok(c)
    }
}

/// The catalog's `current` record (`PSIH`, 6.4): one source version and
/// the checkpoints of every active index, in name order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// Version id of the current source tree.
    pub source_version: [u8; 32],
    /// One checkpoint per active index, names strictly increasing.
    pub checkpoints: Vec<Checkpoint>,
}

impl Head {
    fn validate(&self) -> Result<()> {
        if self
            .checkpoints
            .windows(2)
            .any(|w| w[0].index_name >= w[1].index_name)
        {
            return Err(Error::invalid(
                "PSIH",
                "checkpoint names must be strictly increasing",
            ));
        }
        if self
            .checkpoints
            .iter()
            .any(|c| c.source_version != self.source_version)
        {
            return Err(Error::invalid(
                "PSIH",
                "a checkpoint names another source version",
            ));
        }
        Ok(())
    }

    /// `PSIH` bytes.
    pub fn encode(&self) -> Result<Vec<u8>> {
        self.validate()?;
        let mut body = Vec::new();
        cbor::head(&mut body, 4, 2);
        cbor::put_bytes(&mut body, &self.source_version);
        cbor::head(&mut body, 4, self.checkpoints.len() as u64);
        for c in &self.checkpoints {
            cbor::put_bytes(&mut body, &c.encode()?);
        }
        envelope(b"PSIH", &body, "PSIH")
    }

    /// Parses and validates `PSIH` bytes.
    pub fn decode(bytes: &[u8]) -> Result<Head> {
        const O: &str = "PSIH";
        let mut f = open(bytes, b"PSIH", O)?.array(2, O)?.into_iter();
        let source_version = f.next().ok_or(Error::Truncated { object: O })?;
        let source_version = source_version.bytes32(O, "source version")?;
        let list = f
            .next()
            .ok_or(Error::Truncated { object: O })?
            .any_array(O)?;
        let checkpoints = list
            .into_iter()
            .map(|i| Checkpoint::decode(&i.bytes(O, "checkpoint")?))
            .collect::<Result<Vec<_>>>()?;
        let h = Head {
            source_version,
            checkpoints,
        };
        h.validate()?;
        Ok(h)
    }
}

/// The control record (`PSIO`, 6.5): indexes are active, and which.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Control {
    /// The source map's id (non-empty).
    pub source_map_id: Vec<u8>,
    /// (name, fingerprint) of each active index, names strictly increasing.
    pub active: Vec<(Vec<u8>, [u8; 32])>,
}

impl Control {
    fn validate(&self) -> Result<()> {
        let bad = |r: &str| Err(Error::invalid("PSIO", r.to_string()));
        if self.source_map_id.is_empty() {
            return bad("source map id must not be empty");
        }
        if self.active.is_empty() {
            return bad("at least one active index is required");
        }
        if self.active.iter().any(|(n, _)| n.is_empty()) {
            return bad("index names must not be empty");
        }
        if self.active.windows(2).any(|w| w[0].0 >= w[1].0) {
            return bad("active names must be strictly increasing");
        }
        Ok(())
    }

    /// `PSIO` bytes.
    pub fn encode(&self) -> Result<Vec<u8>> {
        self.validate()?;
        let mut body = Vec::new();
        cbor::head(&mut body, 4, 3);
        cbor::put_bytes(&mut body, &self.source_map_id);
        cbor::put_bytes(&mut body, &catalog_map_id(&self.source_map_id));
        cbor::head(&mut body, 4, self.active.len() as u64);
        for (name, fp) in &self.active {
            cbor::head(&mut body, 4, 2);
            cbor::put_bytes(&mut body, name);
            cbor::put_bytes(&mut body, fp);
        }
        envelope(b"PSIO", &body, "PSIO")
    }

    /// Parses and validates `PSIO` bytes.
    pub fn decode(bytes: &[u8]) -> Result<Control> {
        const O: &str = "PSIO";
        let mut f = open(bytes, b"PSIO", O)?.array(3, O)?.into_iter();
        let mut next = || f.next().ok_or(Error::Truncated { object: O });
        let source_map_id = next()?.bytes(O, "source map id")?;
        let catalog = next()?.bytes(O, "catalog map id")?;
        if catalog != catalog_map_id(&source_map_id) {
            return Err(Error::invalid(
                O,
                "catalog map id does not belong to the source",
            ));
        }
        let active = next()?
            .any_array(O)?
            .into_iter()
            .map(|pair| {
                let mut p = pair.array(2, O)?.into_iter();
                let name = p.next().ok_or(Error::Truncated { object: O })?;
                let fp = p.next().ok_or(Error::Truncated { object: O })?;
                Ok((name.bytes(O, "name")?, fp.bytes32(O, "fingerprint")?))
            })
            .collect::<Result<Vec<_>>>()?;
        let c = Control {
            source_map_id,
            active,
        };
        c.validate()?;
        Ok(c)
    }
}

/// A physical index value (4.2): empty for keys-only, else a `PSIV` envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexValue {
    /// No value (keys-only index).
    KeysOnly,
    /// Projection bytes of an Include index (tag 1).
    Include(Vec<u8>),
    /// The raw source value of an All index (tag 2).
    All(Vec<u8>),
}

/// Length of the `PSIV` header.
pub const PSIV_HEADER: usize = 13;

impl IndexValue {
    /// The physical value bytes.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let (tag, payload) = match self {
            IndexValue::KeysOnly => return Ok(Vec::new()),
            IndexValue::Include(p) => (1u8, p),
            IndexValue::All(p) => (2u8, p),
        };
        let len = u32::try_from(payload.len())
            .map_err(|_| Error::invalid("PSIV", "payload does not fit u32"))?;
        let mut out = Vec::with_capacity(PSIV_HEADER + payload.len());
        out.extend_from_slice(b"PSIV");
        out.extend_from_slice(&RECORD_VERSION.to_be_bytes());
        out.push(tag);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(payload);
        Ok(out)
    }

    /// Parses a physical value; a payload above `max_payload` is refused
    /// before the total length is checked (the reference's order).
    pub fn decode(bytes: &[u8], max_payload: usize) -> Result<IndexValue> {
        const O: &str = "PSIV";
        if bytes.is_empty() {
            return Ok(IndexValue::KeysOnly);
        }
        if bytes.len() < PSIV_HEADER || &bytes[..4] != b"PSIV" {
            return Err(Error::invalid(O, "invalid secondary-index value magic"));
        }
        if bytes[4..8] != RECORD_VERSION.to_be_bytes() {
            return Err(Error::invalid(
                O,
                "unsupported secondary-index value version",
            ));
        }
        let len = u32::from_be_bytes([bytes[9], bytes[10], bytes[11], bytes[12]]) as usize;
        if len > max_payload {
            return Err(Error::invalid(
                O,
                format!("payload of {len} bytes exceeds the limit {max_payload}"),
            ));
        }
        if bytes.len() != PSIV_HEADER + len {
            return Err(Error::invalid(O, "length mismatch or trailing bytes"));
        }
        let payload = bytes[PSIV_HEADER..].to_vec();
        match bytes[8] {
            1 => Ok(IndexValue::Include(payload)),
            2 => Ok(IndexValue::All(payload)),
            t => Err(Error::invalid(O, format!("value tag {t} is not 1 or 2"))),
        }
    }
}
