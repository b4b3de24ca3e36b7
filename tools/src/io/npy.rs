//! NumPy `.npy` reader for 2-D, C-order, little-endian float32 arrays.
//!
//! Layout: `\x93NUMPY`, major and minor version bytes, the header length
//! (`u16` LE for version 1, `u32` LE for versions 2 and 3), then a Python
//! dict literal such as `{'descr': '<f4', 'fortran_order': False, 'shape':
//! (1000, 128), }` padded with spaces and a newline, then the data.

use anyhow::{bail, Context, Result};
use std::io::{BufReader, Read};

pub(crate) struct Reader {
    src: BufReader<std::fs::File>,
    rows: u64,
    dim: usize,
    next: u64,
    raw: Vec<u8>,
}

/// Header fields the reader needs.
#[derive(Debug, PartialEq)]
pub(crate) struct Header {
    pub(crate) descr: String,
    pub(crate) fortran_order: bool,
    pub(crate) shape: Vec<u64>,
}

impl Reader {
    pub(crate) fn new(file: std::fs::File) -> Result<Reader> {
        let mut src = BufReader::with_capacity(1 << 20, file);
        let mut magic = [0u8; 8];
        src.read_exact(&mut magic)
            .context("file shorter than the 8-byte magic")?;
        if &magic[..6] != b"\x93NUMPY" {
            bail!("missing the \\x93NUMPY magic");
        }
        let header_len = match magic[6] {
            1 => {
                let mut b = [0u8; 2];
                src.read_exact(&mut b).context("truncated header length")?;
                u16::from_le_bytes(b) as usize
            }
            2 | 3 => {
                let mut b = [0u8; 4];
                src.read_exact(&mut b).context("truncated header length")?;
                u32::from_le_bytes(b) as usize
            }
            v => bail!("unsupported .npy version {v}"),
        };
        if header_len > 1 << 20 {
            bail!("header length {header_len} is implausible");
        }
        let mut text = vec![0u8; header_len];
        src.read_exact(&mut text).context("truncated header")?;
        let text = String::from_utf8(text).context("header is not UTF-8")?;
        let h = parse_header(&text)?;
        // '<f4' is little-endian float32; '=f4' and 'f4' mean the writer's
        // native order, accepted only on little-endian hosts.
        let native_le = cfg!(target_endian = "little");
        let f32_le = h.descr == "<f4" || (native_le && matches!(h.descr.as_str(), "=f4" | "f4"));
        if !f32_le {
            bail!(
                "dtype {:?} is not supported: expected little-endian float32 ('<f4'); \
                 convert with array.astype('<f4')",
                h.descr
            );
        }
        if h.fortran_order {
            bail!("Fortran-order arrays are not supported; save with numpy.ascontiguousarray");
        }
        let [rows, dim] = h.shape[..] else {
            bail!("shape {:?} is not 2-D (rows, dim)", h.shape);
        };
        if dim == 0 || dim as usize > super::MAX_DIM {
            bail!("dimension {dim} is out of range 1..={}", super::MAX_DIM);
        }
        Ok(Reader {
            src,
            rows,
            dim: dim as usize,
            next: 0,
            raw: vec![0u8; dim as usize * 4],
        })
    }

    pub(crate) fn rows(&self) -> u64 {
        self.rows
    }

    pub(crate) fn dim(&self) -> usize {
        self.dim
    }

    pub(crate) fn next_into(&mut self, out: &mut Vec<f32>) -> Result<bool> {
        if self.next == self.rows {
            let mut probe = [0u8; 1];
            if self.src.read(&mut probe)? != 0 {
                bail!(
                    "trailing bytes after the {} rows the header declares",
                    self.rows
                );
            }
            return Ok(false);
        }
        self.src.read_exact(&mut self.raw).with_context(|| {
            format!(
                "truncated: the header declares {} rows but the file ends inside this one",
                self.rows
            )
        })?;
        self.next += 1;
        out.clear();
        out.extend(
            self.raw
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
        Ok(true)
    }
}

/// Parses the header dict literal. Accepts exactly the keys `descr`,
/// `fortran_order` and `shape` (any order, optional trailing comma).
pub(crate) fn parse_header(text: &str) -> Result<Header> {
    let mut p = Parser {
        s: text.trim_end().as_bytes(),
        i: 0,
    };
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    p.expect(b'{')?;
    loop {
        p.ws();
        if p.eat(b'}') {
            break;
        }
        let key = p.string()?;
        p.ws();
        p.expect(b':')?;
        p.ws();
        match key.as_str() {
            "descr" => descr = Some(p.string()?),
            "fortran_order" => fortran = Some(p.boolean()?),
            "shape" => shape = Some(p.tuple()?),
            other => bail!("unexpected header key {other:?}"),
        }
        p.ws();
        if !p.eat(b',') {
            p.ws();
            p.expect(b'}')?;
            break;
        }
    }
    p.ws();
    if p.i != p.s.len() {
        bail!("unexpected text after the header dict");
    }
    Ok(Header {
        descr: descr.context("header lacks 'descr'")?,
        fortran_order: fortran.context("header lacks 'fortran_order'")?,
        shape: shape.context("header lacks 'shape'")?,
    })
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: u8) -> Result<()> {
        if !self.eat(c) {
            bail!("header: expected {:?} at byte {}", c as char, self.i);
        }
        Ok(())
    }

    fn string(&mut self) -> Result<String> {
        let q = match self.s.get(self.i) {
            Some(&q @ (b'\'' | b'"')) => q,
            _ => bail!("header: expected a quoted string at byte {}", self.i),
        };
        self.i += 1;
        let start = self.i;
        while self.i < self.s.len() && self.s[self.i] != q {
            self.i += 1;
        }
        if self.i == self.s.len() {
            bail!("header: unterminated string");
        }
        let out = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
        self.i += 1;
        Ok(out)
    }

    fn boolean(&mut self) -> Result<bool> {
        let rest = &self.s[self.i..];
        if rest.starts_with(b"True") {
            self.i += 4;
            Ok(true)
        } else if rest.starts_with(b"False") {
            self.i += 5;
            Ok(false)
        } else {
            bail!("header: expected True or False at byte {}", self.i)
        }
    }

    fn tuple(&mut self) -> Result<Vec<u64>> {
        self.expect(b'(')?;
        let mut out = Vec::new();
        loop {
            self.ws();
            if self.eat(b')') {
                return Ok(out);
            }
            let start = self.i;
            while self.i < self.s.len() && self.s[self.i].is_ascii_digit() {
                self.i += 1;
            }
            let digits = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
            let n: u64 = digits
                .parse()
                .with_context(|| format!("header: bad shape entry at byte {start}"))?;
            out.push(n);
            self.ws();
            if !self.eat(b',') {
                self.ws();
                self.expect(b')')?;
                return Ok(out);
            }
        }
    }
}
