//! TEMPORARY stand-in for `stride_nn::safetensors` (same API) until it lands on main.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use stride_core::{DType, Error, Result, Tensor};

pub struct SafetensorsFile {
    pub tensors: BTreeMap<String, Tensor>,
    pub metadata: BTreeMap<String, String>,
}

fn err(msg: impl Into<String>) -> Error {
    crate::invalid("safetensors", msg)
}

fn code(d: DType) -> Result<&'static str> {
    Ok(match d {
        DType::F64 => "F64",
        DType::F32 => "F32",
        DType::I64 => "I64",
        _ => return Err(err(format!("shim: unsupported dtype {d}"))),
    })
}

pub fn save<'a>(
    tensors: impl IntoIterator<Item = (&'a str, &'a Tensor)>,
    metadata: Option<&BTreeMap<String, String>>,
    path: impl AsRef<Path>,
) -> Result<()> {
    let mut header = serde_json::Map::new();
    if let Some(m) = metadata {
        header.insert("__metadata__".into(), serde_json::to_value(m).unwrap());
    }
    let mut data: Vec<u8> = vec![];
    for (name, t) in tensors {
        let start = data.len();
        match t.dtype() {
            DType::F64 => t
                .to_vec::<f64>()?
                .iter()
                .for_each(|v| data.extend(v.to_le_bytes())),
            DType::F32 => t
                .to_vec::<f32>()?
                .iter()
                .for_each(|v| data.extend(v.to_le_bytes())),
            DType::I64 => t
                .to_vec::<i64>()?
                .iter()
                .for_each(|v| data.extend(v.to_le_bytes())),
            d => return Err(err(format!("shim: unsupported dtype {d}"))),
        }
        header.insert(
            name.to_string(),
            serde_json::json!({"dtype": code(t.dtype())?, "shape": t.shape(), "data_offsets": [start, data.len()]}),
        );
    }
    let h = serde_json::Value::Object(header).to_string();
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h.as_bytes());
    out.extend(data);
    let path = path.as_ref();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, out).map_err(|e| err(e.to_string()))?;
    std::fs::rename(&tmp, path).map_err(|e| err(e.to_string()))
}

pub fn load_file(path: impl AsRef<Path>) -> Result<SafetensorsFile> {
    let b = std::fs::read(path).map_err(|e| err(e.to_string()))?;
    if b.len() < 8 {
        return Err(err("truncated"));
    }
    let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    let h: serde_json::Value =
        serde_json::from_slice(b.get(8..8 + n).ok_or_else(|| err("truncated"))?)
            .map_err(|e| err(e.to_string()))?;
    let data = &b[8 + n..];
    let mut f = SafetensorsFile {
        tensors: BTreeMap::new(),
        metadata: BTreeMap::new(),
    };
    for (k, v) in h.as_object().ok_or_else(|| err("bad header"))? {
        if k == "__metadata__" {
            f.metadata = serde_json::from_value(v.clone()).map_err(|e| err(e.to_string()))?;
            continue;
        }
        let shape: Vec<usize> =
            serde_json::from_value(v["shape"].clone()).map_err(|e| err(e.to_string()))?;
        let off: Vec<usize> =
            serde_json::from_value(v["data_offsets"].clone()).map_err(|e| err(e.to_string()))?;
        let bytes = data.get(off[0]..off[1]).ok_or_else(|| err("truncated"))?;
        let t = match v["dtype"].as_str() {
            Some("F64") => Tensor::from_vec(
                bytes
                    .chunks(8)
                    .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                    .collect::<Vec<_>>(),
                shape,
            )?,
            Some("F32") => Tensor::from_vec(
                bytes
                    .chunks(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                    .collect::<Vec<_>>(),
                shape,
            )?,
            Some("I64") => Tensor::from_vec(
                bytes
                    .chunks(8)
                    .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                    .collect::<Vec<_>>(),
                shape,
            )?,
            d => return Err(err(format!("shim: unsupported dtype {d:?}"))),
        };
        f.tensors.insert(k.clone(), t);
    }
    Ok(f)
}
