//! `GgufWriter`: writes GGUF v3 (or v2) files — metadata, tensor infos, aligned data.

use crate::error::{GgufError, Result};
use crate::value::{Array, Value};
use crate::{GgmlType, DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_DIMS};
use std::path::Path;

/// Builds a GGUF file in memory: metadata in insertion order, then tensors, each tensor's
/// data padded to the alignment (as the reference writers do, so the file ends aligned).
///
/// ```
/// use stride_gguf::{Gguf, GgufWriter, GgmlType, quantize};
/// let x: Vec<f32> = (0..64).map(|i| i as f32 / 8.0).collect();
/// let mut w = GgufWriter::new();
/// w.add_string("general.architecture", "llama");
/// w.add_tensor("w", &[32, 2], GgmlType::Q8_0, &quantize(GgmlType::Q8_0, &x)?)?;
/// let g = Gguf::from_bytes(w.to_bytes()?)?;
/// assert_eq!(g.dequantize("w")?.len(), 64);
/// # Ok::<(), stride_gguf::GgufError>(())
/// ```
#[derive(Clone, Debug)]
pub struct GgufWriter {
    version: u32,
    alignment: u64,
    metadata: Vec<(String, Value)>,
    tensors: Vec<(String, Vec<u64>, GgmlType, Vec<u8>)>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    /// An empty GGUF v3 file with the default alignment (32).
    pub fn new() -> Self {
        GgufWriter {
            version: 3,
            alignment: DEFAULT_ALIGNMENT,
            metadata: Vec::new(),
            tensors: Vec::new(),
        }
    }

    /// Writes version 2 instead of 3 (the layouts are the same; v3 added big-endian files).
    pub fn version(&mut self, version: u32) -> Result<&mut Self> {
        if !(2..=3).contains(&version) {
            return Err(GgufError::Malformed(format!(
                "GgufWriter writes versions 2 and 3, not {version}"
            )));
        }
        self.version = version;
        Ok(self)
    }

    /// Sets `general.alignment` (a power of two) and aligns the data to it.
    pub fn alignment(&mut self, alignment: u32) -> Result<&mut Self> {
        if alignment == 0 || !alignment.is_power_of_two() {
            return Err(GgufError::Malformed(format!(
                "alignment must be a power of two, not {alignment}"
            )));
        }
        self.alignment = alignment as u64;
        self.metadata.retain(|(k, _)| k != "general.alignment");
        self.metadata
            .push(("general.alignment".to_string(), Value::U32(alignment)));
        Ok(self)
    }

    /// Adds (or replaces) a metadata entry.
    pub fn add(&mut self, key: &str, value: Value) -> &mut Self {
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.metadata.push((key.to_string(), value)),
        }
        self
    }

    /// Adds a string entry.
    pub fn add_string(&mut self, key: &str, v: &str) -> &mut Self {
        self.add(key, Value::String(v.to_string()))
    }

    /// Adds a `u32` entry.
    pub fn add_u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.add(key, Value::U32(v))
    }

    /// Adds an `f32` entry.
    pub fn add_f32(&mut self, key: &str, v: f32) -> &mut Self {
        self.add(key, Value::F32(v))
    }

    /// Adds an array entry.
    pub fn add_array(&mut self, key: &str, v: Array) -> &mut Self {
        self.add(key, Value::Array(v))
    }

    /// Adds a tensor: `dims` in ggml order (`dims[0]` is the row length), `data` exactly
    /// the bytes of that many elements of `ggml_type`.
    pub fn add_tensor(
        &mut self,
        name: &str,
        dims: &[u64],
        ggml_type: GgmlType,
        data: &[u8],
    ) -> Result<&mut Self> {
        if dims.len() > MAX_DIMS {
            return Err(GgufError::Malformed(format!(
                "tensor {name:?} has {} dims; at most {MAX_DIMS} are allowed",
                dims.len()
            )));
        }
        if self.tensors.iter().any(|t| t.0 == name) {
            return Err(GgufError::Malformed(format!("tensor {name:?} added twice")));
        }
        let n = dims
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
            .ok_or_else(|| {
                GgufError::Malformed(format!("tensor {name:?}: dims {dims:?} overflow"))
            })?;
        let row_ok = dims.first().copied().unwrap_or(1) % ggml_type.block_size() as u64 == 0;
        match ggml_type.bytes_for(n) {
            Some(b) if row_ok && b == data.len() as u64 => {}
            _ => {
                return Err(GgufError::BadLength {
                    op: "GgufWriter::add_tensor",
                    detail: format!(
                        "tensor {name:?}: dims {dims:?} of {ggml_type} (block {}) need whole blocks per row and {:?} bytes, got {}",
                        ggml_type.block_size(),
                        ggml_type.bytes_for(n),
                        data.len()
                    ),
                })
            }
        }
        self.tensors
            .push((name.to_string(), dims.to_vec(), ggml_type, data.to_vec()));
        Ok(self)
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        out.extend(GGUF_MAGIC);
        out.extend(self.version.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend((self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            put_string(&mut out, k);
            out.extend(v.value_type().id().to_le_bytes());
            put_value(&mut out, v);
        }
        let mut offset = 0u64;
        for (name, dims, t, data) in &self.tensors {
            put_string(&mut out, name);
            out.extend((dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend(d.to_le_bytes());
            }
            out.extend(t.id().to_le_bytes());
            out.extend(offset.to_le_bytes());
            offset = (offset + data.len() as u64).div_ceil(self.alignment) * self.alignment;
        }
        pad(&mut out, self.alignment);
        for (_, _, _, data) in &self.tensors {
            out.extend(data);
            pad(&mut out, self.alignment);
        }
        Ok(out)
    }

    /// Writes the file to `path`.
    pub fn write(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.to_bytes()?).map_err(|source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}

fn pad(out: &mut Vec<u8>, alignment: u64) {
    let len = out.len() as u64;
    let target = len.div_ceil(alignment) * alignment;
    out.resize(target as usize, 0);
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend(x.to_le_bytes()),
        Value::I16(x) => out.extend(x.to_le_bytes()),
        Value::U32(x) => out.extend(x.to_le_bytes()),
        Value::I32(x) => out.extend(x.to_le_bytes()),
        Value::F32(x) => out.extend(x.to_le_bytes()),
        Value::Bool(x) => out.push(*x as u8),
        Value::String(s) => put_string(out, s),
        Value::Array(a) => put_array(out, a),
        Value::U64(x) => out.extend(x.to_le_bytes()),
        Value::I64(x) => out.extend(x.to_le_bytes()),
        Value::F64(x) => out.extend(x.to_le_bytes()),
    }
}

fn put_array(out: &mut Vec<u8>, a: &Array) {
    out.extend(a.element_type().id().to_le_bytes());
    out.extend((a.len() as u64).to_le_bytes());
    macro_rules! each {
        ($v:expr) => {
            $v.iter().for_each(|x| out.extend(x.to_le_bytes()))
        };
    }
    match a {
        Array::U8(v) => out.extend(v),
        Array::I8(v) => each!(v),
        Array::U16(v) => each!(v),
        Array::I16(v) => each!(v),
        Array::U32(v) => each!(v),
        Array::I32(v) => each!(v),
        Array::F32(v) => each!(v),
        Array::Bool(v) => v.iter().for_each(|&b| out.push(b as u8)),
        Array::String(v) => v.iter().for_each(|s| put_string(out, s)),
        Array::Array(v) => v.iter().for_each(|a| put_array(out, a)),
        Array::U64(v) => each!(v),
        Array::I64(v) => each!(v),
        Array::F64(v) => each!(v),
    }
}
