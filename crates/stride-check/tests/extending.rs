//! Reductions and matmul are written on other branches; their registry entries will be a
//! few lines each. This test shows it end to end: the two entries below are what those
//! branches will add to `registry/` (with the mock calls replaced by `x.sum_dims(..)` and
//! `a.matmul(..)`), run through the whole matrix — every layout, the size sweep, every dtype,
//! refused dims and shapes.

use stride_check::reference::{self, RefTensor};
use stride_check::registry::{dtypes, matmul_sampler, reduction_sampler};
use stride_check::{run_ops, ArgSpec, Config, DTypeRule, Domain, Family, OpInfo, Tol};
use stride_core::{DType, Error, Tensor};

/// Host-loop stand-ins for the kernels being written elsewhere.
fn host(x: &Tensor) -> stride_core::Result<RefTensor> {
    Ok(RefTensor {
        dtype: x.dtype(),
        shape: x.shape().to_vec(),
        values: x.to_f64_vec()?,
        strides: x.stride().to_vec(),
        offset: x.storage_offset(),
        storage: vec![],
    })
}
fn back(r: Result<reference::RefOut, String>, dtype: DType) -> stride_core::Result<Tensor> {
    let r = r.map_err(|msg| Error::Invalid { op: "mock", msg })?;
    Tensor::from_vec(r.values, r.shape)?.to_dtype(dtype)
}
fn mock_sum(x: &Tensor, dims: &[i64], keepdim: bool) -> stride_core::Result<Tensor> {
    let dtype = if x.dtype().is_float() {
        x.dtype()
    } else {
        DType::I64
    };
    back(
        reference::reduce(&host(x)?, dims, keepdim, |v| v.iter().sum()),
        dtype,
    )
}
fn mock_matmul(a: &Tensor, b: &Tensor) -> stride_core::Result<Tensor> {
    if !a.dtype().is_float() || a.dtype() != b.dtype() {
        return Err(Error::UnsupportedDType {
            op: "mock",
            dtype: a.dtype(),
            hint: String::new(),
        });
    }
    back(reference::matmul(&host(a)?, &host(b)?), a.dtype())
}

#[test]
fn a_reduction_entry_is_a_few_lines() {
    let sum = OpInfo::new("sum", Family::Reduction)
        .args(vec![ArgSpec::tensor("self", Domain::any())])
        .dtypes(dtypes::ALL)
        .rule(DTypeRule::Map(
            |d| if d.is_float() { d } else { DType::I64 },
        ))
        .tol(|d| Tol::default_for(d).scaled(16.0))
        .sampler(reduction_sampler(Domain::any()))
        .reference(|c, a| {
            reference::reduce(a[0].t(), &c.params.dims, c.params.keepdim, |v| {
                v.iter().sum()
            })
        })
        .functional(|a, p| mock_sum(a[0].t(), &p.dims, p.keepdim));
    let report = run_ops(&Config::default(), [&sum]);
    assert!(report.ok(), "{}", report.table());
    assert!(report
        .rows
        .keys()
        .any(|k| k.layout == "transposed" && k.dtype == "i32"));
}

#[test]
fn a_matmul_entry_is_a_few_lines() {
    let matmul = OpInfo::new("matmul", Family::Matmul)
        .args(vec![
            ArgSpec::tensor("self", Domain::range(-1.0, 1.0)),
            ArgSpec::tensor("other", Domain::range(-1.0, 1.0)),
        ])
        .dtypes(dtypes::FLOATS)
        .tol(|d| Tol::default_for(d).scaled(40.0))
        .sampler(matmul_sampler(Domain::range(-1.0, 1.0)))
        .reference(|_, a| reference::matmul(a[0].t(), a[1].t()))
        .functional(|a, _| mock_matmul(a[0].t(), a[1].t()));
    let report = run_ops(&Config::default(), [&matmul]);
    assert!(report.ok(), "{}", report.table());
    assert!(report.rows.keys().any(|k| k.layout == "permuted"));
    assert!(report
        .rows
        .keys()
        .any(|k| k.layout == "rejects" && k.dtype == "i64"));
}
