//! The parser: header, metadata, tensor infos, data section — every read bounds-checked,
//! every count bounded by the bytes left before anything is allocated.

use crate::error::{type_name, GgufError, Result};
use crate::value::{Array, Value, ValueType};
use crate::GgmlType;
use std::collections::HashMap;
use std::fmt;
use std::path::Path;

/// The magic number at the start of every GGUF file.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The most dims a tensor may have (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;
/// How deep arrays of arrays may nest (deeper is refused rather than risking the stack).
pub const MAX_ARRAY_NESTING: usize = 8;

/// Where a tensor's data is: name, dims, type, offset into the data section.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    /// The tensor's name (`"blk.0.attn_q.weight"`).
    pub name: String,
    /// Dims in ggml order: `dims[0]` is the fastest-varying (row length). See
    /// [`TensorInfo::shape`] for the row-major (PyTorch) order.
    pub dims: Vec<u64>,
    /// The storage type.
    pub ggml_type: GgmlType,
    /// Byte offset of the data, relative to the start of the data section.
    pub offset: u64,
}

impl TensorInfo {
    /// Number of elements (the product of the dims; checked at parse time not to overflow).
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Bytes of data (checked at parse time to be a whole number of blocks).
    pub fn n_bytes(&self) -> u64 {
        self.ggml_type.bytes_for(self.n_elements()).unwrap_or(0)
    }

    /// Elements per row (`dims[0]`; 1 for a tensor without dims).
    pub fn row_len(&self) -> u64 {
        self.dims.first().copied().unwrap_or(1)
    }

    /// Number of rows (the product of the dims after the first).
    pub fn n_rows(&self) -> u64 {
        self.dims.iter().skip(1).product()
    }

    /// Bytes per row (rows are whole blocks, checked at parse time).
    pub fn row_bytes(&self) -> u64 {
        self.ggml_type.bytes_for(self.row_len()).unwrap_or(0)
    }

    /// The shape in row-major order (PyTorch's, slowest dim first): the reverse of
    /// [`TensorInfo::dims`]. A `[n_embd, n_vocab]` ggml tensor is `[n_vocab, n_embd]` here.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }
}

/// The bytes behind a [`Gguf`]: a read-only memory map or an owned buffer.
enum Data {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Data {
    fn bytes(&self) -> &[u8] {
        match self {
            Data::Mmap(m) => m,
            Data::Owned(v) => v,
        }
    }
}

/// A parsed GGUF file: metadata, tensor infos and the (mapped) data.
///
/// Parsing validates everything before it returns: the header, every metadata entry, every
/// tensor info (known type, at most 4 dims, no overflow, whole blocks, aligned offset,
/// inside the data section, no overlap with another tensor, data back to back with no
/// unaccounted gap — as llama.cpp requires — and none after the last tensor). After that, [`Gguf::tensor_data`] is a plain slice of the file.
///
/// ```
/// use stride_gguf::{Gguf, GgufWriter, GgmlType};
///
/// let mut w = GgufWriter::new();
/// w.add_string("general.architecture", "llama");
/// w.add_u32("llama.block_count", 2);
/// w.add_tensor("w", &[4, 2], GgmlType::F32, &[0u8; 32])?;
/// let gguf = Gguf::from_bytes(w.to_bytes()?)?;
///
/// assert_eq!(gguf.version(), 3);
/// assert_eq!(gguf.get_str("general.architecture")?, "llama");
/// assert_eq!(gguf.get_u32("llama.block_count")?, 2);
/// let t = gguf.tensor("w")?;
/// assert_eq!((t.dims.as_slice(), t.shape()), (&[4u64, 2][..], vec![2, 4]));
/// assert_eq!(gguf.tensor_data("w")?.len(), 32);
/// // the wrong type is an error naming the key and what it holds
/// let err = gguf.get_str("llama.block_count").unwrap_err();
/// assert_eq!(err.to_string(), "metadata key \"llama.block_count\" holds u32, not string");
/// # Ok::<(), stride_gguf::GgufError>(())
/// ```
pub struct Gguf {
    data: Data,
    version: u32,
    metadata: Vec<(String, Value)>,
    key_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    alignment: u64,
    data_offset: u64,
}

impl fmt::Debug for Gguf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gguf")
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("alignment", &self.alignment)
            .field("data_offset", &self.data_offset)
            .finish()
    }
}

macro_rules! scalar_getter {
    ($(#[$doc:meta])* $name:ident, $variant:ident, $t:ty) => {
        $(#[$doc])*
        pub fn $name(&self, key: &str) -> Result<$t> {
            match self.get_value(key)? {
                Value::$variant(v) => Ok(*v),
                other => Err(self.wrong_type(key, ValueType::$variant, other)),
            }
        }
    };
}

macro_rules! array_getter {
    ($(#[$doc:meta])* $name:ident, $variant:ident, $t:ty, $desc:expr) => {
        $(#[$doc])*
        pub fn $name(&self, key: &str) -> Result<&[$t]> {
            match self.get_value(key)? {
                Value::Array(Array::$variant(v)) => Ok(v),
                other => Err(GgufError::WrongType {
                    key: key.to_string(),
                    expected: $desc,
                    found: other.type_description(),
                }),
            }
        }
    };
}

impl Gguf {
    /// Opens and parses a file through a read-only memory map (tensor data is not read until
    /// used).
    ///
    /// The map assumes the file is not modified while it is open (as every memory-mapped
    /// reader does); truncating it from another process would fault on access.
    pub fn open(path: impl AsRef<Path>) -> Result<Gguf> {
        let path = path.as_ref();
        let io = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let data = if len == 0 {
            // mapping an empty file fails on some platforms; it is refused by the parser anyway
            Data::Owned(Vec::new())
        } else {
            // SAFETY: a read-only private map; see the doc comment on external modification.
            Data::Mmap(unsafe { memmap2::Mmap::map(&file) }.map_err(io)?)
        };
        Self::parse(data)
    }

    /// Parses a file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Gguf> {
        Self::parse(Data::Owned(bytes))
    }

    fn parse(data: Data) -> Result<Gguf> {
        let header = parse_header(data.bytes())?;
        Ok(Gguf {
            data,
            version: header.version,
            metadata: header.metadata,
            key_index: header.key_index,
            tensors: header.tensors,
            tensor_index: header.tensor_index,
            alignment: header.alignment,
            data_offset: header.data_offset,
        })
    }

    /// The format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The data alignment (`general.alignment`, default 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Byte offset of the data section in the file.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        self.data.bytes()
    }

    /// Metadata entries in file order.
    pub fn metadata(&self) -> impl ExactSizeIterator<Item = (&str, &Value)> {
        self.metadata.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.key_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// The value of `key`, or an error naming the missing key.
    pub fn get_value(&self, key: &str) -> Result<&Value> {
        self.get(key).ok_or_else(|| GgufError::KeyNotFound {
            key: key.to_string(),
        })
    }

    fn wrong_type(&self, key: &str, expected: ValueType, found: &Value) -> GgufError {
        GgufError::WrongType {
            key: key.to_string(),
            expected: type_name(expected),
            found: found.type_description(),
        }
    }

    scalar_getter!(
        /// A `u8` value (exactly that type; see [`Gguf::get_int`] for any integer).
        get_u8, U8, u8);
    scalar_getter!(
        /// An `i8` value.
        get_i8, I8, i8);
    scalar_getter!(
        /// A `u16` value.
        get_u16, U16, u16);
    scalar_getter!(
        /// An `i16` value.
        get_i16, I16, i16);
    scalar_getter!(
        /// A `u32` value (`llama.block_count`, …).
        get_u32, U32, u32);
    scalar_getter!(
        /// An `i32` value.
        get_i32, I32, i32);
    scalar_getter!(
        /// A `u64` value.
        get_u64, U64, u64);
    scalar_getter!(
        /// An `i64` value.
        get_i64, I64, i64);
    scalar_getter!(
        /// An `f32` value (`llama.rope.freq_base`, …).
        get_f32, F32, f32);
    scalar_getter!(
        /// An `f64` value.
        get_f64, F64, f64);
    scalar_getter!(
        /// A `bool` value.
        get_bool, Bool, bool);

    /// A string value.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        match self.get_value(key)? {
            Value::String(s) => Ok(s),
            other => Err(self.wrong_type(key, ValueType::String, other)),
        }
    }

    /// An array value, of any element type.
    pub fn get_array(&self, key: &str) -> Result<&Array> {
        match self.get_value(key)? {
            Value::Array(a) => Ok(a),
            other => Err(self.wrong_type(key, ValueType::Array, other)),
        }
    }

    array_getter!(
        /// An array of strings (`tokenizer.ggml.tokens`, `tokenizer.ggml.merges`).
        get_str_array, String, String, "array of string");
    array_getter!(
        /// An array of `i32` (`tokenizer.ggml.token_type`).
        get_i32_array, I32, i32, "array of i32");
    array_getter!(
        /// An array of `u32`.
        get_u32_array, U32, u32, "array of u32");
    array_getter!(
        /// An array of `f32` (`tokenizer.ggml.scores`).
        get_f32_array, F32, f32, "array of f32");

    /// Any integer value (u8 … i64), converted to `u64`; an error if it is negative or not an
    /// integer. For keys whose integer width varies between writers.
    pub fn get_uint(&self, key: &str) -> Result<u64> {
        let v = self.get_value(key)?;
        v.as_integer()
            .and_then(|i| u64::try_from(i).ok())
            .ok_or_else(|| GgufError::WrongType {
                key: key.to_string(),
                expected: "a non-negative integer",
                found: match v.as_integer() {
                    Some(i) => format!("{} {i}", v.type_description()),
                    None => v.type_description(),
                },
            })
    }

    /// Any integer value (u8 … i64) as `i64`; an error for a `u64` above `i64::MAX` or a
    /// non-integer.
    pub fn get_int(&self, key: &str) -> Result<i64> {
        let v = self.get_value(key)?;
        v.as_integer()
            .and_then(|i| i64::try_from(i).ok())
            .ok_or_else(|| GgufError::WrongType {
                key: key.to_string(),
                expected: "an integer that fits i64",
                found: v.type_description(),
            })
    }

    /// An `f32` or `f64` value as `f64`.
    pub fn get_float(&self, key: &str) -> Result<f64> {
        match self.get_value(key)? {
            Value::F32(v) => Ok(*v as f64),
            Value::F64(v) => Ok(*v),
            other => Err(GgufError::WrongType {
                key: key.to_string(),
                expected: "a float (f32 or f64)",
                found: other.type_description(),
            }),
        }
    }

    /// Tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The info of the tensor `name`.
    pub fn tensor(&self, name: &str) -> Result<&TensorInfo> {
        self.tensor_index
            .get(name)
            .map(|&i| &self.tensors[i])
            .ok_or_else(|| GgufError::TensorNotFound {
                name: name.to_string(),
            })
    }

    /// The raw bytes of the tensor `name` (a slice of the map; nothing is copied).
    pub fn tensor_data(&self, name: &str) -> Result<&[u8]> {
        let info = self.tensor(name)?;
        Ok(self.slice_of(info))
    }

    /// The raw bytes of a tensor info of this file (as returned by [`Gguf::tensors`]).
    /// An info that is not this file's (another file's, or edited) is an error.
    pub fn data_of(&self, info: &TensorInfo) -> Result<&[u8]> {
        if self.tensor(&info.name).ok() != Some(info) {
            return Err(GgufError::TensorNotFound {
                name: format!("{} (this info is not one of this file's)", info.name),
            });
        }
        Ok(self.slice_of(info))
    }

    /// Infos of this file were checked at parse time to lie inside it.
    fn slice_of(&self, info: &TensorInfo) -> &[u8] {
        let start = self.data_offset.saturating_add(info.offset);
        let end = start.saturating_add(info.n_bytes());
        let bytes = self.data.bytes();
        usize::try_from(start)
            .ok()
            .zip(usize::try_from(end).ok())
            .and_then(|(s, e)| bytes.get(s..e))
            .unwrap_or(&[])
    }

    /// Rows `rows` of the tensor `name` (rows of `dims[0]` elements) dequantized to `f32`:
    /// an embedding lookup without dequantizing the whole table.
    ///
    /// ```
    /// use stride_gguf::{quantize, Gguf, GgufWriter, GgmlType};
    /// let x: Vec<f32> = (0..96).map(|i| i as f32).collect();
    /// let mut w = GgufWriter::new();
    /// w.add_tensor("emb", &[32, 3], GgmlType::Q8_0, &quantize(GgmlType::Q8_0, &x)?)?;
    /// let g = Gguf::from_bytes(w.to_bytes()?)?;
    /// let row2 = g.dequantize_rows("emb", 2..3)?;
    /// assert_eq!(row2, g.dequantize("emb")?[64..96]);
    /// assert!(g.dequantize_rows("emb", 2..4).is_err());
    /// # Ok::<(), stride_gguf::GgufError>(())
    /// ```
    pub fn dequantize_rows(&self, name: &str, rows: std::ops::Range<u64>) -> Result<Vec<f32>> {
        let info = self.tensor(name)?;
        if rows.start > rows.end || rows.end > info.n_rows() {
            return Err(GgufError::BadLength {
                op: "dequantize_rows",
                detail: format!(
                    "rows {}..{} of tensor {name:?}, which has {} rows (dims {:?})",
                    rows.start,
                    rows.end,
                    info.n_rows(),
                    info.dims
                ),
            });
        }
        let rb = info.row_bytes() as usize;
        let bytes = self.slice_of(info);
        let slice = bytes
            .get(rows.start as usize * rb..rows.end as usize * rb)
            .unwrap_or(&[]);
        crate::dequant::dequantize_to_vec(info.ggml_type, slice)
            .map_err(|e| e.context(format!("tensor {name:?}")))
    }

    /// The tensor `name` dequantized to `f32`, in ggml element order (row-major over
    /// [`TensorInfo::shape`]). See [`crate::dequantize`] for the supported types.
    pub fn dequantize(&self, name: &str) -> Result<Vec<f32>> {
        let info = self.tensor(name)?;
        crate::dequant::dequantize_to_vec(info.ggml_type, self.slice_of(info))
            .map_err(|e| e.context(format!("tensor {name:?}")))
    }
}

/// A bounds-checked little-endian reader over the file.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what,
                offset: self.pos as u64,
                needed: n,
                file_len: self.bytes.len() as u64,
            });
        }
        let n = n as usize;
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N]> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// Refuses a count of items of at least `min_size` bytes each that cannot fit in the
    /// bytes left, before anything is allocated for them.
    fn check_count(&self, what: &'static str, count: u64, min_size: u64) -> Result<usize> {
        let min_bytes = count as u128 * min_size as u128;
        if min_bytes > self.remaining() as u128 {
            return Err(GgufError::CountTooLarge {
                what,
                count,
                min_bytes,
                remaining: self.remaining(),
                offset: self.pos as u64,
            });
        }
        // fits in the file, so it fits in usize
        Ok(count as usize)
    }

    fn string(&mut self, what: &'static str) -> Result<String> {
        let len = self.u64(what)?;
        self.check_count(what, len, 1)?;
        let start = self.pos;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|e| {
            GgufError::Malformed(format!(
                "{what} at offset {start} is not valid UTF-8 (invalid byte at position {} of {len})",
                e.utf8_error().valid_up_to()
            ))
        })
    }

    fn value_type(&mut self) -> Result<ValueType> {
        let offset = self.pos as u64;
        let id = self.u32("a value type")?;
        ValueType::from_id(id).ok_or(GgufError::UnknownValueType { id, offset })
    }

    fn bool(&mut self) -> Result<bool> {
        let offset = self.pos;
        match self.array::<1>("a bool")?[0] {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(GgufError::Malformed(format!(
                "bool at offset {offset} is {b}, not 0 or 1"
            ))),
        }
    }

    fn value(&mut self, t: ValueType, depth: usize) -> Result<Value> {
        Ok(match t {
            ValueType::U8 => Value::U8(self.array::<1>("a u8")?[0]),
            ValueType::I8 => Value::I8(self.array::<1>("an i8")?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array("a u16")?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array("an i16")?)),
            ValueType::U32 => Value::U32(self.u32("a u32")?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array("an i32")?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array("an f32")?)),
            ValueType::Bool => Value::Bool(self.bool()?),
            ValueType::String => Value::String(self.string("a string value")?),
            ValueType::Array => Value::Array(self.array_value(depth)?),
            ValueType::U64 => Value::U64(self.u64("a u64")?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array("an i64")?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array("an f64")?)),
        })
    }

    fn array_value(&mut self, depth: usize) -> Result<Array> {
        if depth >= MAX_ARRAY_NESTING {
            return Err(GgufError::Malformed(format!(
                "arrays nested more than {MAX_ARRAY_NESTING} deep at offset {}",
                self.pos
            )));
        }
        let t = self.value_type()?;
        let len = self.u64("an array length")?;
        let n = self.check_count("array length", len, t.min_encoded_size())?;
        macro_rules! fixed {
            ($variant:ident, $ty:ty, $what:expr) => {{
                const W: usize = std::mem::size_of::<$ty>();
                let bytes = self.take((n * W) as u64, $what)?;
                Array::$variant(
                    bytes
                        .chunks_exact(W)
                        .map(|c| <$ty>::from_le_bytes(c.try_into().unwrap_or([0; W])))
                        .collect(),
                )
            }};
        }
        Ok(match t {
            ValueType::U8 => fixed!(U8, u8, "u8 array"),
            ValueType::I8 => fixed!(I8, i8, "i8 array"),
            ValueType::U16 => fixed!(U16, u16, "u16 array"),
            ValueType::I16 => fixed!(I16, i16, "i16 array"),
            ValueType::U32 => fixed!(U32, u32, "u32 array"),
            ValueType::I32 => fixed!(I32, i32, "i32 array"),
            ValueType::F32 => fixed!(F32, f32, "f32 array"),
            ValueType::U64 => fixed!(U64, u64, "u64 array"),
            ValueType::I64 => fixed!(I64, i64, "i64 array"),
            ValueType::F64 => fixed!(F64, f64, "f64 array"),
            ValueType::Bool => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.bool()?);
                }
                Array::Bool(v)
            }
            ValueType::String => {
                let mut v = Vec::with_capacity(n);
                for i in 0..n {
                    v.push(
                        self.string("a string in an array")
                            .map_err(|e| e.context(format!("element {i} of {n}")))?,
                    );
                }
                Array::String(v)
            }
            ValueType::Array => {
                let mut v = Vec::with_capacity(n);
                for i in 0..n {
                    v.push(
                        self.array_value(depth + 1)
                            .map_err(|e| e.context(format!("element {i} of {n}")))?,
                    );
                }
                Array::Array(v)
            }
        })
    }
}

struct Header {
    version: u32,
    metadata: Vec<(String, Value)>,
    key_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    alignment: u64,
    data_offset: u64,
}

/// The smallest metadata entry: key length (8) + value type (4) + a one-byte value.
const MIN_KV_BYTES: u64 = 13;
/// The smallest tensor info: name length (8) + n_dims (4) + type (4) + offset (8).
const MIN_TENSOR_INFO_BYTES: u64 = 24;

fn parse_header(bytes: &[u8]) -> Result<Header> {
    let mut c = Cursor { bytes, pos: 0 };
    let magic: [u8; 4] = c.array("the magic number")?;
    if magic != GGUF_MAGIC {
        return Err(GgufError::BadMagic {
            found: String::from_utf8_lossy(&magic).into_owned(),
            bytes: magic,
        });
    }
    let version = c.u32("the version")?;
    match version {
        2 | 3 => {}
        1 => {
            return Err(GgufError::UnsupportedVersion {
                version,
                why: "GGUF v1 (32-bit counts, before August 2023) is not read; convert the file with a current llama.cpp",
            })
        }
        v if v.swap_bytes() <= 3 && v.swap_bytes() > 0 => {
            return Err(GgufError::UnsupportedVersion {
                version: v.swap_bytes(),
                why: "the file is big-endian; only little-endian GGUF files are read",
            })
        }
        _ => {
            return Err(GgufError::UnsupportedVersion {
                version,
                why: "only versions 2 and 3 are read",
            })
        }
    }
    let n_tensors = c.u64("the tensor count")?;
    let n_kv = c.u64("the metadata count")?;
    let n_kv = c.check_count("metadata count", n_kv, MIN_KV_BYTES)?;
    // tensor infos follow the metadata, so each needs its minimum too
    let n_tensors_checked = c.check_count("tensor count", n_tensors, MIN_TENSOR_INFO_BYTES)?;
    if (n_kv as u128) * MIN_KV_BYTES as u128
        + (n_tensors_checked as u128) * MIN_TENSOR_INFO_BYTES as u128
        > c.remaining() as u128
    {
        return Err(GgufError::Malformed(format!(
            "{n_kv} metadata entries and {n_tensors} tensor infos cannot fit in the {} bytes after the header",
            c.remaining()
        )));
    }

    let mut metadata = Vec::with_capacity(n_kv);
    let mut key_index = HashMap::with_capacity(n_kv);
    for i in 0..n_kv {
        let start = c.pos;
        let kv = (|| {
            let key = c.string("a metadata key")?;
            let t = c
                .value_type()
                .map_err(|e| e.context(format!("the type of key {key:?}")))?;
            let v = c
                .value(t, 0)
                .map_err(|e| e.context(format!("the value of key {key:?}")))?;
            Ok((key, v))
        })()
        .map_err(|e: GgufError| {
            e.context(format!("metadata entry {i} of {n_kv} (at offset {start})"))
        })?;
        if key_index.insert(kv.0.clone(), metadata.len()).is_some() {
            return Err(GgufError::Malformed(format!(
                "metadata key {:?} appears twice (entry {i} of {n_kv})",
                kv.0
            )));
        }
        metadata.push(kv);
    }

    let alignment = match key_index.get("general.alignment").map(|&i| &metadata[i].1) {
        None => DEFAULT_ALIGNMENT,
        Some(Value::U32(a)) if *a != 0 && a.is_power_of_two() => *a as u64,
        Some(other) => {
            return Err(GgufError::Malformed(format!(
                "general.alignment must be a u32 power of two, found {} {other}",
                other.type_description()
            )))
        }
    };

    let n_tensors = c.check_count("tensor count", n_tensors, MIN_TENSOR_INFO_BYTES)?;
    let mut tensors = Vec::with_capacity(n_tensors);
    let mut tensor_index = HashMap::with_capacity(n_tensors);
    for i in 0..n_tensors {
        let start = c.pos;
        let info = read_tensor_info(&mut c, alignment).map_err(|e| {
            e.context(format!(
                "tensor info {i} of {n_tensors} (at offset {start})"
            ))
        })?;
        if tensor_index
            .insert(info.name.clone(), tensors.len())
            .is_some()
        {
            return Err(GgufError::Malformed(format!(
                "tensor name {:?} appears twice (tensor info {i} of {n_tensors})",
                info.name
            )));
        }
        tensors.push(info);
    }

    let end_of_infos = c.pos as u64;
    let data_offset = end_of_infos.div_ceil(alignment) * alignment;
    let file_len = bytes.len() as u64;
    let data_len = file_len.saturating_sub(data_offset);
    if !tensors.is_empty() && data_offset > file_len {
        return Err(GgufError::Truncated {
            what: "the data section",
            offset: data_offset,
            needed: 1,
            file_len,
        });
    }

    // every tensor inside the data section, no two overlapping, no unaccounted gaps
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by_key(|&i| tensors[i].offset);
    let mut prev: Option<(usize, u64)> = None;
    for &i in &order {
        let t = &tensors[i];
        let end = t.offset as u128 + t.n_bytes() as u128;
        if end > data_len as u128 {
            return Err(GgufError::TensorOutOfBounds {
                tensor: t.name.clone(),
                start: t.offset,
                end,
                data_len,
            });
        }
        let end = end as u64;
        // Writers lay tensors out back to back, each padded to the alignment (llama.cpp
        // requires exactly that). A gap of a whole alignment or more means the counts or an
        // offset lie (a tensor the header does not announce, or a size that is wrong).
        let expected = prev.map_or(0, |(_, pend)| pend.div_ceil(alignment) * alignment);
        if t.offset > expected {
            let after = match prev {
                Some((p, pend)) => {
                    format!("the end of tensor {:?}'s data ({pend})", tensors[p].name)
                }
                None => "the start of the data section".to_string(),
            };
            return Err(GgufError::Malformed(format!(
                "tensor {:?} starts at data offset {}, {} bytes after {after} that no tensor accounts for \
                 (expected offset {expected}); the tensor count or an offset may be wrong",
                t.name,
                t.offset,
                t.offset - prev.map_or(0, |(_, pend)| pend),
            )));
        }
        if let Some((p, pend)) = prev {
            if t.offset < pend {
                let pt = &tensors[p];
                return Err(GgufError::TensorOverlap {
                    first: pt.name.clone(),
                    first_start: pt.offset,
                    first_end: pend,
                    second: t.name.clone(),
                    second_start: t.offset,
                    second_end: end,
                });
            }
        }
        if prev.is_none_or(|(_, pend)| end > pend) {
            prev = Some((i, end));
        }
    }
    // A well-formed file ends at most one alignment after its last tensor's data. More bytes
    // mean the counts lie (tensor infos or tensors the header does not announce).
    let used = prev.map_or(0, |(_, end)| end);
    if !tensors.is_empty() && data_len - used >= alignment {
        return Err(GgufError::Malformed(format!(
            "{} bytes after the last tensor's data (at data offset {used}) that no tensor accounts for; \
             the tensor count ({}) or a tensor's size may be wrong",
            data_len - used,
            tensors.len()
        )));
    }

    Ok(Header {
        version,
        metadata,
        key_index,
        tensors,
        tensor_index,
        alignment,
        data_offset,
    })
}

fn read_tensor_info(c: &mut Cursor<'_>, alignment: u64) -> Result<TensorInfo> {
    let name = c.string("a tensor name")?;
    let ctx = |e: GgufError| e.context(format!("tensor {name:?}"));
    let n_dims = c.u32("n_dims").map_err(ctx)?;
    if n_dims as usize > MAX_DIMS {
        return Err(GgufError::Malformed(format!(
            "tensor {name:?} has {n_dims} dims; at most {MAX_DIMS} are allowed"
        )));
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        dims.push(c.u64("a tensor dim").map_err(ctx)?);
    }
    let mut n: u64 = 1;
    for &d in &dims {
        n = n
            .checked_mul(d)
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| {
                GgufError::Malformed(format!(
                    "tensor {name:?}: the product of dims {dims:?} overflows"
                ))
            })?;
    }
    let type_id = c.u32("a tensor type").map_err(ctx)?;
    let ggml_type = GgmlType::from_id(type_id).ok_or_else(|| GgufError::UnknownGgmlType {
        tensor: name.clone(),
        id: type_id,
    })?;
    let offset = c.u64("a tensor offset").map_err(ctx)?;
    let bs = ggml_type.block_size() as u64;
    let row = dims.first().copied().unwrap_or(1);
    if row % bs != 0 {
        return Err(GgufError::Malformed(format!(
            "tensor {name:?}: row length {row} (dims {dims:?}) is not a multiple of the {ggml_type} block size {bs}"
        )));
    }
    if ggml_type.bytes_for(n).is_none() {
        return Err(GgufError::Malformed(format!(
            "tensor {name:?}: {n} elements of {ggml_type} overflow the byte count"
        )));
    }
    if offset % alignment != 0 {
        return Err(GgufError::Malformed(format!(
            "tensor {name:?}: data offset {offset} is not a multiple of the alignment {alignment}"
        )));
    }
    Ok(TensorInfo {
        name,
        dims,
        ggml_type,
        offset,
    })
}
