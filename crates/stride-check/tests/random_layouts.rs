//! (c) Random shapes, strides and offsets — every operand and output `as_strided` over a
//! guard-filled buffer — for a sample of unary, binary and ternary ops, against the
//! registry's reference, with every check of the matrix (values, dtype, guards, poison,
//! unchanged inputs; overlapping outputs must be refused).

use proptest::prelude::*;
use stride_check::layouts::LayoutSpec;
use stride_check::runner::Alias;
use stride_check::{registry, run_case, Assignment, Form, LayoutChoice, SampleArg, SampleCtx};
use stride_core::Device;

const OPS: [&str; 22] = [
    "neg",
    "abs",
    "exp",
    "sqrt",
    "sigmoid",
    "floor",
    "isnan",
    "relu",
    "add",
    "sub",
    "mul",
    "div",
    "maximum",
    "eq",
    "remainder",
    "pow",
    "bitwise_and",
    "add.scalar",
    "where",
    "lerp",
    "addcmul",
    "clamp",
];

/// (strides, offset, extra storage after the view) for `nd` dims.
fn layout(nd: usize) -> impl Strategy<Value = Strided> {
    (
        prop::collection::vec(prop_oneof![3 => 0usize..8, 1 => 8usize..40], nd),
        0usize..12,
        0usize..6,
    )
}

/// (strides, offset, extra storage) of one operand.
type Strided = (Vec<usize>, usize, usize);

/// (op, form, dtype, shape, a layout per operand slot, seed)
type Case = (usize, usize, usize, Vec<usize>, Vec<Strided>, u64);

fn case() -> impl Strategy<Value = Case> {
    prop::collection::vec(prop_oneof![4 => 0usize..5, 1 => 5usize..35], 0..=4).prop_flat_map(
        |shape| {
            let nd = shape.len();
            (
                0..OPS.len(),
                0usize..3,
                0usize..10,
                Just(shape),
                prop::collection::vec(layout(nd), 4),
                any::<u64>(),
            )
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]
    #[test]
    fn random_layouts_match_the_reference((op_i, form_i, dtype_i, shape, layouts, seed) in case()) {
        let op = registry::find(OPS[op_i]).unwrap();
        let forms = op.forms();
        let form = forms[form_i % forms.len()];
        let dtype = op.dtypes[dtype_i % op.dtypes.len()];
        let mut ctx = SampleCtx::new(dtype, shape.clone(), seed);
        ctx.variants = false;
        let sample = (op.sampler)(&mut ctx).remove(0);
        let spec = |(strides, offset, extra): &Strided| {
            let mut s = LayoutSpec::explicit(shape.clone(), strides.clone(), *offset, 0);
            s.storage_len += extra;
            LayoutChoice::Explicit(s)
        };
        let asg = Assignment {
            args: sample
                .args
                .iter()
                .enumerate()
                .map(|(i, a)| matches!(a, SampleArg::Tensor { .. }).then(|| spec(&layouts[i])))
                .collect(),
            out: (form == Form::Out).then(|| spec(&layouts[3])),
            alias: Alias::None,
        };
        if let Some(Err(f)) = run_case(op, form, &sample, &asg, &Device::Cpu) {
            prop_assert!(false, "{}", f);
        }
    }
}
