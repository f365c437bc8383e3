//! `STRIDE_QUANT_SIMD=off` makes `Isa::detect` pick the portable kernels. Alone in its test
//! binary: the variable is read once per process.

#[test]
fn env_var_forces_the_portable_kernels() {
    std::env::set_var("STRIDE_QUANT_SIMD", "off");
    assert_eq!(stride_quant::Isa::detect(), stride_quant::Isa::Scalar);
}
