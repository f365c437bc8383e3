//! The CUDA backend's implementation of the contract: every primitive runs on the device.

use crate::backend::contract::{forward_to_kernels, Backend};
use crate::{DType, Device, Error, Result, Storage};

/// The CUDA backend (device memory, one stream per device, NVRTC-compiled kernels).
pub(crate) struct Cuda;

impl Backend for Cuda {
    fn alloc(&self, device: Device, dtype: DType, len: usize, zero: bool) -> Result<Storage> {
        let Device::Cuda(i) = device else {
            return Err(Error::invalid(
                "alloc",
                "internal error: not a CUDA device (please report)",
            ));
        };
        super::alloc_storage(i, dtype, len, zero)
    }
    fn read_bytes(&self, src: &Storage, start: usize, into: &mut [u8]) -> Result<()> {
        super::transfer::read_bytes(src, start, into)
    }
    fn write_bytes(&self, from: &[u8], dst: &Storage, start: usize) -> Result<()> {
        super::transfer::write_bytes(from, dst, start)
    }

    forward_to_kernels! {
        copy_cast => super::elementwise::copy_cast;
        fill => super::elementwise::fill;
        unary => super::elementwise::unary;
        binary => super::elementwise::binary;
        ternary => super::elementwise::ternary;
        random => super::random::random;
        matmul => super::matmul::matmul;
        reduce => super::reduce::reduce;
        arg_reduce => super::reduce::arg_reduce;
        gather => super::index::gather;
        scatter => super::index::scatter;
        sort => super::sort::sort;
        topk => super::sort::topk;
        flip => super::flip::flip;
        cumulative => super::reduce::cumulative;
        kth => super::sort::kth;
        count_nonzero => super::index::count_nonzero;
        nonzero => super::index::nonzero;
        masked_select => super::index::masked_select;
        masked_scatter => super::index::masked_scatter;
        extrema => super::index::extrema;
        count_unique_consecutive => super::sort::count_unique_consecutive;
        unique_consecutive => super::sort::unique_consecutive;
        searchsorted => super::sort::searchsorted;
        bincount => super::sort::bincount;
        histc => super::sort::histc;
        adam => super::optim::adam;
        adam_multi => super::optim::adam_multi;
        norm => super::norm::norm;
        cross_entropy => super::cross_entropy::cross_entropy;
        cross_entropy_backward => super::cross_entropy::cross_entropy_backward;
        norm_backward => super::norm::norm_backward;
        attention => super::attention::attention;
        cached_attention => super::cached_attention::cached_attention;
        pointwise => super::pointwise::pointwise;
        attention_backward => super::attention::attention_backward;
        grouped_matmul => super::grouped_matmul::grouped_matmul;
    }
}
