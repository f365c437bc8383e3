//! Sorting on the wgpu backend, beyond what the registry checks (`stride check --device
//! wgpu`): rows whose lengths cross the workgroup and the padded network's powers of two,
//! many ties (the stable order comes from the positions), NaNs, signed zeros and infinities,
//! every dtype, both directions, transposed inputs and outputs, the round trip for rows past
//! llvmpipe's loop budget, and a TopK SAE's top-k with no host wait. Each test skips, saying
//! so, without an adapter (`STRIDE_REQUIRE_WGPU=1` makes them mandatory).

mod wgpu_common;
use stride_core::{webgpu, DType, Device, Tensor};
use wgpu_common::{bits, gpu};

/// `rows × n` values with many ties, NaNs (two payloads), ±0, ±∞ and negatives, as `dtype`.
/// Asserts `got == want`, naming the first difference (not printing 2^17 elements).
fn same(got: &Tensor, want: &Tensor, what: &str) {
    let (g, w) = (bits(got), bits(want));
    assert_eq!(g.len(), w.len(), "{what}: lengths");
    if let Some(k) = (0..g.len()).find(|&k| g[k] != w[k]) {
        panic!("{what}: element {k} is {:#x}, the CPU's {:#x}", g[k], w[k]);
    }
}

fn tricky(rows: usize, n: usize, dtype: DType) -> Tensor {
    let v: Vec<f32> = (0..rows * n)
        .map(|k| match k % 23 {
            0 => f32::NAN,
            1 => -0.0,
            2 => 0.0,
            3 => f32::INFINITY,
            4 => f32::NEG_INFINITY,
            5 => f32::from_bits(0x7fc0_0001), // another NaN payload
            _ => ((k * 7919) % 37) as f32 - 18.0, // ties: 37 distinct values
        })
        .collect();
    // integers: NaN goes to 0 and ±∞ saturate (the CPU's casts); still many ties
    Tensor::from_vec(v, [rows, n])
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
}

#[test]
fn sorts_are_the_cpus_stable_order() {
    let Some((d, _turn)) = gpu("sorts_are_the_cpus_stable_order") else {
        return;
    };
    let dtypes = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I64,
        DType::I32,
        DType::U32,
        DType::I8,
        DType::U8,
        DType::Bool,
    ];
    // lengths: one, under and over the workgroup (256), a power of two and one past it
    for (rows, n) in [(3, 1), (5, 200), (4, 256), (3, 257), (2, 1000), (2, 4097)] {
        for dt in dtypes {
            let x = tricky(rows, n, dt);
            let xg = x.to_device(&d).unwrap();
            for descending in [false, true] {
                let (vc, ic) = x.sort(1, descending, true).unwrap();
                let (vg, ig) = xg.sort(1, descending, true).unwrap();
                let what = format!("{dt} {rows}×{n} descending {descending}");
                same(&ig, &ic, &format!("indices, {what}"));
                same(&vg, &vc, &format!("values, {what}"));
                // along dim 0 of the transpose: strided rows in, strided rows out
                let (vc, ic) = x.t().unwrap().sort(0, descending, true).unwrap();
                let (vg, ig) = xg.t().unwrap().sort(0, descending, true).unwrap();
                same(&ig, &ic, &format!("indices, transposed, {what}"));
                same(&vg, &vc, &format!("values, transposed, {what}"));
            }
        }
    }
}

#[test]
fn rows_past_the_loop_budget_are_round_trips() {
    let Some((d, _turn)) = gpu("rows_past_the_loop_budget_are_round_trips") else {
        return;
    };
    // 2^17 + 3 elements: a network over 2^18 would pass llvmpipe's budget, so this row
    // sorts on the CPU (a counted wait), and right
    let x = tricky(1, (1 << 17) + 3, DType::F32);
    let (vc, ic) = x.sort(1, true, true).unwrap();
    let before = webgpu::sync_count(0);
    let (vg, ig) = x.to_device(&d).unwrap().sort(1, true, true).unwrap();
    assert!(webgpu::sync_count(0) > before, "no round trip");
    same(&ig, &ic, "indices");
    same(&vg, &vc, "values");
    // 2^17 exactly runs in the shader
    let x = tricky(1, 1 << 17, DType::F32);
    let (vc, ic) = x.sort(1, false, true).unwrap();
    let xg = x.to_device(&d).unwrap();
    let before = webgpu::sync_count(0);
    let (vg, ig) = xg.sort(1, false, true).unwrap();
    assert_eq!(webgpu::sync_count(0), before, "a host wait");
    same(&ig, &ic, "indices");
    same(&vg, &vc, "values");
}

#[test]
fn a_topk_sae_selection_never_waits() {
    let Some((d, _turn)) = gpu("a_topk_sae_selection_never_waits") else {
        return;
    };
    // the SAE's step: the k largest pre-activations of each sample, scattered back
    let x = tricky(64, 512, DType::F32);
    let (vc, ic) = x.topk(16, 1, true, true).unwrap();
    let xg = x.to_device(&d).unwrap();
    let before = webgpu::sync_count(0);
    let (vg, ig) = xg.topk(16, 1, true, true).unwrap();
    let zg = Tensor::zeros([64, 512], DType::F32, &d)
        .unwrap()
        .scatter(1, &ig, &vg)
        .unwrap();
    assert_eq!(webgpu::sync_count(0), before, "a host wait");
    let zc = Tensor::zeros([64, 512], DType::F32, &Device::Cpu)
        .unwrap()
        .scatter(1, &ic, &vc)
        .unwrap();
    same(&ig, &ic, "indices");
    same(&vg, &vc, "values");
    same(&zg, &zc, "scattered back");
}
