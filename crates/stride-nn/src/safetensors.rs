//! Reading and writing the [safetensors] format: the file Hugging Face and PyTorch users share
//! weights in (`safetensors.torch.save_file` / `load_file`).
//!
//! A file is an 8-byte little-endian header length, a JSON header (per tensor: dtype, shape,
//! byte offsets; plus an optional `__metadata__` map of strings) and the raw little-endian data.
//! Parsing and validation of the header are done by the `safetensors` crate; this module maps
//! its dtypes to stride's and moves the bytes.
//!
//! - Tensors are written in logical (row-major) order whatever their strides; a transposed or
//!   sliced tensor is saved as its values, as PyTorch's `save_file` does after `.contiguous()`.
//! - [`load_file`] memory-maps the file. Loading validates the whole file before returning
//!   anything: a truncated or malformed file,
//!   an unsupported dtype (`F8_*`, `I16`, `U16`, `U64`, …) or a bool byte other than 0/1 is an
//!   error naming the problem, and nothing is loaded.
//! - [`save`] writes to a temporary file next to the target and renames it, so an interrupted
//!   save never leaves a half-written checkpoint under the real name.
//!
//! ```no_run
//! use stride_core::{DType, Device, Tensor};
//! # fn main() -> stride_core::Result<()> {
//! let w = Tensor::arange(0.0f32, 6.0f32, &Device::Cpu)?.reshape(&[2, 3])?;
//! let wt = w.t()?; // any layout
//! stride_nn::safetensors::save([("linear.weight", &wt)], None, "model.safetensors")?;
//! let back = stride_nn::safetensors::load("model.safetensors")?;
//! assert_eq!(back["linear.weight"].shape(), &[3, 2]);
//! # Ok(()) }
//! ```
//!
//! [safetensors]: https://huggingface.co/docs/safetensors

use safetensors::tensor::{Dtype as StDtype, TensorView};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use stride_core::{bf16, f16, with_dtype, DType, Error, Result, Tensor};

/// The tensors and the `__metadata__` map of a safetensors file.
#[derive(Debug, Clone, Default)]
pub struct SafetensorsFile {
    /// Tensors by name (sorted, as the format's header is).
    pub tensors: BTreeMap<String, Tensor>,
    /// Free-form string metadata (`__metadata__`); empty when the file has none.
    pub metadata: BTreeMap<String, String>,
}

fn invalid(op: &'static str, msg: impl Into<String>) -> Error {
    Error::Invalid {
        op,
        msg: msg.into(),
    }
}

/// The safetensors dtype of a stride dtype (every stride dtype has one).
pub fn to_safetensors_dtype(dtype: DType) -> StDtype {
    match dtype {
        DType::F64 => StDtype::F64,
        DType::F32 => StDtype::F32,
        DType::F16 => StDtype::F16,
        DType::BF16 => StDtype::BF16,
        DType::I64 => StDtype::I64,
        DType::I32 => StDtype::I32,
        DType::U32 => StDtype::U32,
        DType::U8 => StDtype::U8,
        DType::I8 => StDtype::I8,
        DType::Bool => StDtype::BOOL,
    }
}

/// The stride dtype of a safetensors dtype, or `None` for dtypes stride does not have.
pub fn from_safetensors_dtype(dtype: StDtype) -> Option<DType> {
    Some(match dtype {
        StDtype::F64 => DType::F64,
        StDtype::F32 => DType::F32,
        StDtype::F16 => DType::F16,
        StDtype::BF16 => DType::BF16,
        StDtype::I64 => DType::I64,
        StDtype::I32 => DType::I32,
        StDtype::U32 => DType::U32,
        StDtype::U8 => DType::U8,
        StDtype::I8 => DType::I8,
        StDtype::BOOL => DType::Bool,
        _ => return None,
    })
}

/// Little-endian bytes of one element, and back.
trait LeBytes: Sized + Copy {
    const N: usize;
    fn put(self, out: &mut Vec<u8>);
    /// `None` for bytes that are not a value of the type (a bool byte other than 0 or 1).
    fn get(b: &[u8]) -> Option<Self>;
}

macro_rules! le_bytes {
    ($($t:ty),*) => {$(
        impl LeBytes for $t {
            const N: usize = std::mem::size_of::<$t>();
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn get(b: &[u8]) -> Option<Self> {
                Some(<$t>::from_le_bytes(b.try_into().ok()?))
            }
        }
    )*};
}
le_bytes!(f64, f32, i64, i32, u32, u8, i8);

impl LeBytes for f16 {
    const N: usize = 2;
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bits().to_le_bytes());
    }
    fn get(b: &[u8]) -> Option<Self> {
        Some(f16::from_bits(u16::from_le_bytes(b.try_into().ok()?)))
    }
}
impl LeBytes for bf16 {
    const N: usize = 2;
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bits().to_le_bytes());
    }
    fn get(b: &[u8]) -> Option<Self> {
        Some(bf16::from_bits(u16::from_le_bytes(b.try_into().ok()?)))
    }
}
impl LeBytes for bool {
    const N: usize = 1;
    fn put(self, out: &mut Vec<u8>) {
        out.push(self as u8);
    }
    fn get(b: &[u8]) -> Option<Self> {
        match b {
            [0] => Some(false),
            [1] => Some(true),
            _ => None,
        }
    }
}

/// One tensor's bytes, shape and dtype, ready for the `safetensors` serializer.
struct Bytes {
    dtype: StDtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl safetensors::View for &Bytes {
    fn dtype(&self) -> StDtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

fn tensor_bytes(t: &Tensor) -> Result<Bytes> {
    let data = with_dtype!(t.dtype(), T => {
        let v = t.to_vec::<T>()?;
        let mut out = Vec::with_capacity(v.len() * <T as LeBytes>::N);
        for x in v {
            x.put(&mut out);
        }
        out
    });
    Ok(Bytes {
        dtype: to_safetensors_dtype(t.dtype()),
        shape: t.shape().to_vec(),
        data,
    })
}

/// The bytes of a safetensors file holding `tensors` (name, tensor in any layout) and the
/// optional string `metadata`. A name given twice is an error.
pub fn serialize<'a>(
    tensors: impl IntoIterator<Item = (&'a str, &'a Tensor)>,
    metadata: Option<&BTreeMap<String, String>>,
) -> Result<Vec<u8>> {
    let mut seen = std::collections::BTreeSet::new();
    let bytes = tensors
        .into_iter()
        .map(|(name, t)| {
            if !seen.insert(name) {
                return Err(invalid(
                    "safetensors::serialize",
                    format!("tensor name '{name}' appears twice; names must be unique"),
                ));
            }
            Ok((name.to_string(), tensor_bytes(t)?))
        })
        .collect::<Result<Vec<_>>>()?;
    let meta: Option<HashMap<String, String>> =
        metadata.map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
    safetensors::serialize(bytes.iter().map(|(n, b)| (n.as_str(), b)), meta)
        .map_err(|e| invalid("safetensors::serialize", e.to_string()))
}

/// Writes `tensors` (and optional string `metadata`) to `path` as a safetensors file. The
/// file appears under its name only once completely written.
pub fn save<'a>(
    tensors: impl IntoIterator<Item = (&'a str, &'a Tensor)>,
    metadata: Option<&BTreeMap<String, String>>,
    path: impl AsRef<Path>,
) -> Result<()> {
    let path = path.as_ref();
    let bytes = serialize(tensors, metadata)?;
    let io = |what: &str, e: std::io::Error| {
        invalid(
            "safetensors::save",
            format!("{what} {}: {e}", path.display()),
        )
    };
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    std::fs::write(&tmp, &bytes).map_err(|e| io("cannot write", e))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io("cannot move the finished file to", e)
    })
}

fn tensor_from_view(name: &str, v: &TensorView<'_>) -> Result<Tensor> {
    let op = "safetensors::deserialize";
    let dtype = from_safetensors_dtype(v.dtype()).ok_or_else(|| {
        invalid(
            op,
            format!(
                "tensor '{name}' has dtype {:?}, which stride does not support \
                 (supported: F64 F32 F16 BF16 I64 I32 U32 U8 I8 BOOL); convert it before saving",
                v.dtype()
            ),
        )
    })?;
    let shape = v.shape().to_vec();
    let data = v.data();
    with_dtype!(dtype, T => {
        let n = <T as LeBytes>::N;
        if data.len() % n != 0 {
            return Err(invalid(op, format!("tensor '{name}': {} bytes is not a whole number of {dtype} elements", data.len())));
        }
        let mut out = Vec::with_capacity(data.len() / n);
        for (i, chunk) in data.chunks_exact(n).enumerate() {
            let x = <T as LeBytes>::get(chunk).ok_or_else(|| {
                invalid(op, format!("tensor '{name}': element {i} is byte {:?}, not a bool (0 or 1)", chunk))
            })?;
            out.push(x);
        }
        Tensor::from_vec(out, shape)
    })
}

/// Parses the bytes of a safetensors file. Every tensor is validated before any is returned.
pub fn deserialize(bytes: &[u8]) -> Result<SafetensorsFile> {
    let op = "safetensors::deserialize";
    let st = safetensors::SafeTensors::deserialize(bytes)
        .map_err(|e| invalid(op, format!("not a valid safetensors file: {e}")))?;
    let (_, header) = safetensors::SafeTensors::read_metadata(bytes)
        .map_err(|e| invalid(op, format!("not a valid safetensors file: {e}")))?;
    let mut tensors = BTreeMap::new();
    for (name, view) in st.iter() {
        tensors.insert(name.to_string(), tensor_from_view(name, &view)?);
    }
    let metadata = header
        .metadata()
        .as_ref()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    Ok(SafetensorsFile { tensors, metadata })
}

/// Reads the safetensors file at `path`: tensors and metadata. The file is memory-mapped and
/// each tensor is copied out of the map once (no intermediate buffer of the whole file).
pub fn load_file(path: impl AsRef<Path>) -> Result<SafetensorsFile> {
    let path = path.as_ref();
    let io = |e: std::io::Error| {
        invalid(
            "safetensors::load",
            format!("cannot read {}: {e}", path.display()),
        )
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let parsed = if len == 0 {
        deserialize(&[])
    } else {
        // SAFETY: the map is read-only and dropped at the end of this function, after every
        // tensor has been copied out of it. (As with any mapped file, another process
        // truncating it meanwhile would be a fault; checkpoints are written by rename, so a
        // file being read is never rewritten in place by stride.)
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        deserialize(&map)
    };
    parsed.map_err(|e| match e {
        Error::Invalid { op, msg } => Error::Invalid {
            op,
            msg: format!("{}: {msg}", path.display()),
        },
        e => e,
    })
}

/// Reads the tensors of the safetensors file at `path`, by name.
pub fn load(path: impl AsRef<Path>) -> Result<BTreeMap<String, Tensor>> {
    Ok(load_file(path)?.tensors)
}
