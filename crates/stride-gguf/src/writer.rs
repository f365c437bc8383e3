//! `GgufWriter`: writes GGUF v3 (or v2) files — metadata, tensor infos, aligned data.

use crate::error::{GgufError, Result};
use crate::value::{Array, Value};
use crate::{GgmlType, DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_DIMS};
use std::io::Write;
use std::path::Path;

/// A tensor of a writer: name, dims, type, data (`None`: declared, written later).
type Entry = (String, Vec<u64>, GgmlType, Option<Vec<u8>>);

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
    /// name, dims, type, data (`None`: declared by [`GgufWriter::add_tensor_info`], written
    /// later through a [`TensorDataWriter`]).
    tensors: Vec<Entry>,
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
        let n = self.check_tensor(name, dims)?;
        check_len(name, dims, ggml_type, n, data.len())?;
        self.tensors.push((
            name.to_string(),
            dims.to_vec(),
            ggml_type,
            Some(data.to_vec()),
        ));
        Ok(self)
    }

    /// Declares a tensor whose data is written later, in file order, through the
    /// [`TensorDataWriter`] of [`GgufWriter::write_header`]: a converter can then stream a
    /// file tensor by tensor without holding every tensor's bytes. Its byte size follows from
    /// `dims` and `ggml_type` (rows must be whole blocks). [`GgufWriter::to_bytes`] refuses a
    /// writer with declared tensors.
    ///
    /// ```
    /// use stride_gguf::{quantize, Gguf, GgmlType, GgufWriter};
    /// let x: Vec<f32> = (0..64).map(|i| i as f32).collect();
    /// let mut w = GgufWriter::new();
    /// w.add_string("general.architecture", "llama");
    /// w.add_tensor_info("a", &[32, 2], GgmlType::Q8_0)?;
    /// w.add_tensor_info("b", &[64], GgmlType::F32)?;
    /// let mut out = w.write_header(Vec::new())?;
    /// out.write_tensor("a", &quantize(GgmlType::Q8_0, &x)?)?;
    /// out.write_tensor("b", &quantize(GgmlType::F32, &x)?)?;
    /// let bytes = out.finish()?;
    /// let g = Gguf::from_bytes(bytes)?;
    /// assert_eq!(g.dequantize("b")?, x);
    /// # Ok::<(), stride_gguf::GgufError>(())
    /// ```
    pub fn add_tensor_info(
        &mut self,
        name: &str,
        dims: &[u64],
        ggml_type: GgmlType,
    ) -> Result<&mut Self> {
        let n = self.check_tensor(name, dims)?;
        let row_ok = dims.first().copied().unwrap_or(1) % ggml_type.block_size() as u64 == 0;
        if !row_ok || ggml_type.bytes_for(n).is_none() {
            return Err(GgufError::BadLength {
                op: "GgufWriter::add_tensor_info",
                detail: format!(
                    "tensor {name:?}: dims {dims:?} are not whole {ggml_type} blocks (block {}) per row",
                    ggml_type.block_size()
                ),
            });
        }
        self.tensors
            .push((name.to_string(), dims.to_vec(), ggml_type, None));
        Ok(self)
    }

    /// Checks a new tensor's name and dims; returns its element count.
    fn check_tensor(&self, name: &str, dims: &[u64]) -> Result<u64> {
        if dims.len() > MAX_DIMS {
            return Err(GgufError::Malformed(format!(
                "tensor {name:?} has {} dims; at most {MAX_DIMS} are allowed",
                dims.len()
            )));
        }
        if self.tensors.iter().any(|t| t.0 == name) {
            return Err(GgufError::Malformed(format!("tensor {name:?} added twice")));
        }
        dims.iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
            .ok_or_else(|| GgufError::Malformed(format!("tensor {name:?}: dims {dims:?} overflow")))
    }

    /// The bytes of the header: everything before the first tensor's data (padded).
    fn header_bytes(&self) -> Vec<u8> {
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
        for (name, dims, t, _) in &self.tensors {
            put_string(&mut out, name);
            out.extend((dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend(d.to_le_bytes());
            }
            out.extend(t.id().to_le_bytes());
            out.extend(offset.to_le_bytes());
            offset = (offset + tensor_bytes(dims, *t)).div_ceil(self.alignment) * self.alignment;
        }
        pad(&mut out, self.alignment);
        out
    }

    /// The size in bytes of the file this writer describes (header, every tensor's data
    /// and its padding), declared tensors included.
    ///
    /// ```
    /// use stride_gguf::{GgmlType, GgufWriter};
    /// let mut w = GgufWriter::new();
    /// w.add_tensor_info("w", &[32, 4], GgmlType::Q8_0)?;
    /// let len = w.file_len();
    /// let mut out = w.write_header(Vec::new())?;
    /// out.write_tensor("w", &[0u8; 4 * 34])?;
    /// assert_eq!(out.finish()?.len() as u64, len);
    /// # Ok::<(), stride_gguf::GgufError>(())
    /// ```
    pub fn file_len(&self) -> u64 {
        let data: u64 = self
            .tensors
            .iter()
            .map(|(_, d, t, _)| tensor_bytes(d, *t).div_ceil(self.alignment) * self.alignment)
            .sum();
        self.header_bytes().len() as u64 + data
    }

    /// Writes the header (metadata and every tensor's info) to `out` and returns the writer
    /// of the tensors' data, which must then come in the order the tensors were added
    /// (those added with their data by [`GgufWriter::add_tensor`] are written by it).
    /// See [`GgufWriter::add_tensor_info`] for an example.
    pub fn write_header<W: Write>(&self, mut out: W) -> Result<TensorDataWriter<W>> {
        out.write_all(&self.header_bytes()).map_err(write_err)?;
        let mut w = TensorDataWriter {
            out,
            tensors: self.tensors.clone(),
            next: 0,
            alignment: self.alignment,
        };
        w.write_attached()?;
        Ok(w)
    }

    /// The file's bytes. An error if a tensor was declared with
    /// [`GgufWriter::add_tensor_info`] (its data is not here).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        if let Some(t) = self.tensors.iter().find(|t| t.3.is_none()) {
            return Err(GgufError::Malformed(format!(
                "tensor {:?} was declared without data; write it through GgufWriter::write_header",
                t.0
            )));
        }
        let mut out = self.header_bytes();
        for (_, _, _, data) in &self.tensors {
            out.extend(data.as_deref().unwrap_or(&[]));
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

/// Writes the data of a GGUF file tensor by tensor after [`GgufWriter::write_header`]: each
/// [`TensorDataWriter::write_tensor`] checks the name and the byte count against the header
/// and pads to the alignment; [`TensorDataWriter::finish`] checks that every tensor came.
pub struct TensorDataWriter<W: Write> {
    out: W,
    tensors: Vec<Entry>,
    next: usize,
    alignment: u64,
}

impl<W: Write> std::fmt::Debug for TensorDataWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorDataWriter")
            .field("tensors", &self.tensors.len())
            .field("next", &self.next)
            .finish()
    }
}

impl<W: Write> TensorDataWriter<W> {
    /// The name of the tensor whose data comes next, if any is left.
    pub fn next_tensor(&self) -> Option<&str> {
        self.tensors.get(self.next).map(|t| t.0.as_str())
    }

    /// Writes the data of tensor `name`, which must be the next declared one, with exactly
    /// its byte count.
    pub fn write_tensor(&mut self, name: &str, data: &[u8]) -> Result<()> {
        let Some((want, dims, t, _)) = self.tensors.get(self.next) else {
            return Err(GgufError::Malformed(format!(
                "tensor {name:?} written after every declared tensor's data"
            )));
        };
        if want != name {
            return Err(GgufError::Malformed(format!(
                "tensor {name:?} written where the header has {want:?} next; write the data in the order the tensors were declared"
            )));
        }
        let n: u64 = dims.iter().product();
        check_len(name, dims, *t, n, data.len())?;
        self.put(data)?;
        self.next += 1;
        self.write_attached()
    }

    fn put(&mut self, data: &[u8]) -> Result<()> {
        self.out.write_all(data).map_err(write_err)?;
        let padded = (data.len() as u64).div_ceil(self.alignment) * self.alignment;
        let zeros = vec![0u8; (padded - data.len() as u64) as usize];
        self.out.write_all(&zeros).map_err(write_err)
    }

    /// Writes the tensors that came with their data, up to the next declared one.
    fn write_attached(&mut self) -> Result<()> {
        while let Some(data) = self.tensors.get_mut(self.next).and_then(|t| t.3.take()) {
            self.put(&data)?;
            self.next += 1;
        }
        Ok(())
    }

    /// Checks that every tensor's data was written, flushes and returns the output.
    pub fn finish(mut self) -> Result<W> {
        if let Some(t) = self.tensors.get(self.next) {
            return Err(GgufError::Malformed(format!(
                "the data of tensor {:?} ({} of {}) was never written",
                t.0,
                self.next + 1,
                self.tensors.len()
            )));
        }
        self.out.flush().map_err(write_err)?;
        Ok(self.out)
    }
}

fn write_err(source: std::io::Error) -> GgufError {
    GgufError::Io {
        path: "(GGUF output)".into(),
        source,
    }
}

fn tensor_bytes(dims: &[u64], t: GgmlType) -> u64 {
    t.bytes_for(dims.iter().product()).unwrap_or(0)
}

fn check_len(name: &str, dims: &[u64], t: GgmlType, n: u64, len: usize) -> Result<()> {
    let row_ok = dims.first().copied().unwrap_or(1) % t.block_size() as u64 == 0;
    match t.bytes_for(n) {
        Some(b) if row_ok && b == len as u64 => Ok(()),
        _ => Err(GgufError::BadLength {
            op: "GgufWriter::add_tensor",
            detail: format!(
                "tensor {name:?}: dims {dims:?} of {t} (block {}) need whole blocks per row and {:?} bytes, got {len}",
                t.block_size(),
                t.bytes_for(n),
            ),
        }),
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
