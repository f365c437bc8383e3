//! Printing like PyTorch: `tensor([[0., 1.], [2., 3.]], dtype=float16)`, summarised with `...`
//! beyond 1000 elements (3 edge items per dim).

use crate::{DType, Tensor};
use std::fmt;

const THRESHOLD: usize = 1000;
const EDGE: usize = 3;

fn fmt_values(vals: &[f64], dtype: DType) -> (Vec<String>, usize) {
    let strs: Vec<String> = if dtype == DType::Bool {
        vals.iter()
            .map(|&v| {
                if v != 0.0 {
                    "True".into()
                } else {
                    "False".into()
                }
            })
            .collect()
    } else if !dtype.is_float() {
        vals.iter().map(|&v| format!("{}", v as i64)).collect()
    } else {
        let finite: Vec<f64> = vals
            .iter()
            .copied()
            .filter(|v| v.is_finite())
            .map(f64::abs)
            .collect();
        let int_mode = finite.iter().all(|v| v.fract() == 0.0);
        let (mx, mn) = (
            finite.iter().cloned().fold(0.0, f64::max),
            finite
                .iter()
                .cloned()
                .filter(|v| *v > 0.0)
                .fold(f64::INFINITY, f64::min),
        );
        let sci = mx > 1e8
            || (mn < 1e-4 && mn.is_finite())
            || (mn.is_finite() && mx / mn > 1000.0 && !int_mode);
        vals.iter()
            .map(|&v| {
                if v.is_nan() {
                    "nan".into()
                } else if v.is_infinite() {
                    if v > 0.0 {
                        "inf".into()
                    } else {
                        "-inf".into()
                    }
                } else if int_mode && !sci {
                    format!("{v:.0}.")
                } else if sci {
                    format!("{v:.4e}")
                } else {
                    format!("{v:.4}")
                }
            })
            .collect()
    };
    let width = strs.iter().map(|s| s.len()).max().unwrap_or(0);
    (strs, width)
}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let vals = match self.to_f64_vec() {
            Ok(v) => v,
            Err(e) => return write!(f, "<unprintable tensor: {e}>"),
        };
        let shape = self.shape().to_vec();
        let summarise = vals.len() > THRESHOLD;
        // indices kept along each dim
        let keep: Vec<Vec<Option<usize>>> = shape
            .iter()
            .map(|&n| {
                if summarise && n > 2 * EDGE {
                    (0..EDGE)
                        .map(Some)
                        .chain([None])
                        .chain((n - EDGE..n).map(Some))
                        .collect()
                } else {
                    (0..n).map(Some).collect()
                }
            })
            .collect();
        let strides = crate::layout::contiguous_strides(&shape);
        let mut shown = vec![];
        collect(&keep, &strides, 0, 0, &vals, &mut shown);
        let (strs, width) = fmt_values(&shown, self.dtype());
        let mut it = strs.into_iter();
        let mut out = String::from("tensor(");
        if shape.is_empty() {
            out.push_str(&it.next().unwrap_or_default());
        } else {
            render(&keep, 0, &mut it, width, &mut out, 8);
        }
        let default = matches!(self.dtype(), DType::F32 | DType::I64 | DType::Bool);
        if !default {
            out.push_str(&format!(", dtype={}", self.dtype()));
        }
        if !self.device().is_cpu() {
            out.push_str(&format!(", device='{}'", self.device()));
        }
        out.push(')');
        f.write_str(&out)
    }
}

fn collect(
    keep: &[Vec<Option<usize>>],
    strides: &[usize],
    d: usize,
    base: usize,
    vals: &[f64],
    out: &mut Vec<f64>,
) {
    if d == keep.len() {
        out.push(vals[base]);
        return;
    }
    for i in keep[d].iter().flatten() {
        collect(keep, strides, d + 1, base + i * strides[d], vals, out);
    }
}

fn render(
    keep: &[Vec<Option<usize>>],
    d: usize,
    it: &mut impl Iterator<Item = String>,
    w: usize,
    out: &mut String,
    indent: usize,
) {
    out.push('[');
    let last = d + 1 == keep.len();
    let n = keep[d].len();
    for (j, k) in keep[d].iter().enumerate() {
        match k {
            None => out.push_str("..."),
            Some(_) if last => out.push_str(&format!("{:>w$}", it.next().unwrap_or_default())),
            Some(_) => render(keep, d + 1, it, w, out, indent + 1),
        }
        if j + 1 < n {
            out.push(',');
            if last {
                out.push(' ');
            } else {
                out.push_str(&"\n".repeat(keep.len() - d - 1));
                out.push_str(&" ".repeat(indent));
            }
        }
    }
    out.push(']');
}
