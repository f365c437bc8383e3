//! Batched matrix products `dst[i] = a[i] · b[i]` in WGSL: 16 × 16 output tiles, one
//! invocation per output element, operand tiles staged in workgroup memory and converted to
//! f32 on load (f16/bf16 accumulate in f32), every operand addressed through its strides (a
//! transposed weight needs no copy). Each element's sum runs over k in order, so a result is
//! the same bits every run.

use super::launch::{bindings, declare, gpu_of, launch, word};
use super::wgsl;
use crate::backend::View;
use crate::Result;

/// Output tile edge (and k step): 16 × 16 = 256 invocations a workgroup.
const TILE: usize = 16;

/// The most k steps of one product: llvmpipe silently stops an invocation's loops after
/// 65,535 iterations in all, and the shader's k loop runs K / 16 times.
const MAX_K: usize = TILE * 32_768;

/// Whether the shader takes these operands: float dtypes it holds, a grid within every
/// adapter's 65,535 workgroups per dimension, and K within [`MAX_K`].
pub(crate) fn native(a: View, dst: View) -> bool {
    let s = dst.layout.shape();
    let r = s.len();
    let (m, n, k) = (s[r - 2], s[r - 1], a.layout.shape()[r - 1]);
    let batch: usize = s[..r - 2].iter().product();
    a.dtype.is_float()
        && super::elementwise::native(&[a, dst])
        && m.div_ceil(TILE) <= 65_535
        && n.div_ceil(TILE) <= 65_535
        && batch <= 65_535
        && k <= MAX_K
}

pub(crate) fn matmul(a: View, b: View, dst: View) -> Result<()> {
    let op = "matmul";
    let gpu = gpu_of(op, &dst)?;
    let s = dst.layout.shape();
    let r = s.len();
    let (m, n, k) = (s[r - 2], s[r - 1], a.layout.shape()[r - 1]);
    let batch: usize = s[..r - 2].iter().product();
    if m == 0 || n == 0 || batch == 0 {
        return Ok(());
    }
    let k = if wgsl::mutant("matmul_short_k") {
        k.saturating_sub(1)
    } else {
        k
    };
    // geo: [M, N, K, rank of the batch, batch shape…, then for a, b, dst: offset, the two
    // matrix strides, the batch strides…]
    let nb = r - 2;
    let mut g = vec![word(op, m)?, word(op, n)?, word(op, k)?, nb as u32];
    for &d in &s[..nb] {
        g.push(word(op, d)?);
    }
    for v in [a, b, dst] {
        let st = v.layout.strides();
        g.push(word(op, v.layout.offset())?);
        g.push(word(op, st[r - 2])?);
        g.push(word(op, st[r - 1])?);
        for &x in &st[..nb] {
            g.push(word(op, x)?);
        }
    }
    let views = [dst, a, b];
    let bd = bindings(&views, 1);
    let mut src = String::new();
    src += &declare(&bd.kinds);
    src += &wgsl::store_fn(0, bd.slot[0], dst.dtype);
    for k in 1..3 {
        let slot = bd.slot[k];
        src += &wgsl::load_fn(k, slot, bd.kinds[slot].atomic, views[k].dtype);
    }
    src += &format!(
        "
var<workgroup> ta: array<f32, {tt}>;
var<workgroup> tb: array<f32, {tt}>;

@compute @workgroup_size({t}, {t})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {{
    let m = geo[0];
    let n = geo[1];
    let k = geo[2];
    let nb = geo[3];
    let pa = 4u + nb;
    let pb = pa + 3u + nb;
    let pd = pb + 3u + nb;
    var oa = geo[pa];
    var ob = geo[pb];
    var od = geo[pd];
    var rem = wg.z;
    for (var d = nb; d > 0u; d = d - 1u) {{
        let size = geo[3u + d];
        let q = rem / size;
        let i = rem - q * size;
        oa = oa + i * geo[pa + 2u + d];
        ob = ob + i * geo[pb + 2u + d];
        od = od + i * geo[pd + 2u + d];
        rem = q;
    }}
    let row = wg.y * {t}u + lid.y;
    let col = wg.x * {t}u + lid.x;
    var acc = 0.0f;
    for (var k0 = 0u; k0 < k; k0 = k0 + {t}u) {{
        let ka = k0 + lid.x;
        var x = 0.0f;
        if (row < m && ka < k) {{ x = ld1(oa + row * geo[pa + 1u] + ka * geo[pa + 2u]); }}
        ta[lid.y * {t}u + lid.x] = x;
        let kb = k0 + lid.y;
        var y = 0.0f;
        if (kb < k && col < n) {{ y = ld2(ob + kb * geo[pb + 1u] + col * geo[pb + 2u]); }}
        tb[lid.y * {t}u + lid.x] = y;
        workgroupBarrier();
{unrolled}        workgroupBarrier();
    }}
    if (row < m && col < n) {{
        st0(od + row * geo[pd + 1u] + col * geo[pd + 2u], {raw});
    }}
}}
",
        t = TILE,
        tt = TILE * TILE,
        // unrolled: llvmpipe (lavapipe) ends any loop after 65,535 iterations, so the one
        // loop left runs K / 16 times; the tail's zero padding adds exact zeros
        unrolled = (0..TILE)
            .map(|j| format!(
                "        acc = acc + ta[lid.y * {TILE}u + {j}u] * tb[{j}u * {TILE}u + lid.x];\n"
            ))
            .collect::<String>(),
        raw = wgsl::to_raw(dst.dtype, "acc")
    );
    let groups = (
        n.div_ceil(TILE) as u32,
        m.div_ceil(TILE) as u32,
        batch as u32,
    );
    launch(&gpu, op, src, &bd, &g, groups)
}
