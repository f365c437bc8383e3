//! Fallible allocation: every buffer stride allocates on the host — tensor storage, host-side
//! staging for a device, kernel scratch — comes from here, so that an impossible size is an
//! [`Error::OutOfMemory`] naming the op, shape, dtype and bytes instead of a "capacity
//! overflow" panic or a "memory allocation failed" abort, and nothing is changed.
//!
//! Byte counts are computed in `u128` (a shape's element count fits `usize`, its bytes may
//! not), so the error can name the exact request even when it exceeds the address space.

use crate::{DType, Device, Error, Result};

/// `numel × itemsize` without overflow.
pub(crate) fn bytes_of(numel: usize, itemsize: usize) -> u128 {
    numel as u128 * itemsize as u128
}

/// The error for a request of `bytes` that can't be allocated.
pub(crate) fn oom(
    op: &'static str,
    device: Device,
    shape: &[usize],
    dtype: Option<DType>,
    bytes: u128,
    detail: impl Into<String>,
) -> Error {
    Error::OutOfMemory {
        op,
        device,
        shape: shape.to_vec(),
        dtype,
        requested: bytes,
        detail: detail.into(),
    }
}

/// Why the host allocator refused (the same words for every host allocation).
fn host_detail(bytes: u128) -> String {
    if bytes > isize::MAX as u128 {
        "more than the address space can hold".into()
    } else {
        "the host allocator refused".into()
    }
}

/// A `Vec` with room for `len` elements (length 0), or `OutOfMemory` for `op` on the host.
pub(crate) fn try_with_capacity<T>(
    len: usize,
    op: &'static str,
    shape: &[usize],
    dtype: Option<DType>,
) -> Result<Vec<T>> {
    let mut v = Vec::new();
    if v.try_reserve_exact(len).is_err() {
        let bytes = bytes_of(len, std::mem::size_of::<T>());
        return Err(oom(
            op,
            Device::Cpu,
            shape,
            dtype,
            bytes,
            host_detail(bytes),
        ));
    }
    Ok(v)
}

/// A `Vec` of `len` copies of `value` (fallible `vec![value; len]`).
pub(crate) fn try_vec<T: Clone>(
    len: usize,
    value: T,
    op: &'static str,
    shape: &[usize],
    dtype: Option<DType>,
) -> Result<Vec<T>> {
    let mut v = try_with_capacity(len, op, shape, dtype)?;
    v.resize(len, value);
    Ok(v)
}

/// Element types whose all-zero bit pattern is their zero (`0`, `0.0`, `false`): a zeroed
/// buffer of them comes straight from `calloc` (fresh pages, no pass over the memory).
///
/// # Safety
/// Only for types for which every byte being 0 is a valid value.
pub(crate) unsafe trait ZeroBits: Copy {}
unsafe impl ZeroBits for f64 {}
unsafe impl ZeroBits for f32 {}
unsafe impl ZeroBits for half::f16 {}
unsafe impl ZeroBits for half::bf16 {}
unsafe impl ZeroBits for i64 {}
unsafe impl ZeroBits for i32 {}
unsafe impl ZeroBits for u32 {}
unsafe impl ZeroBits for u64 {}
unsafe impl ZeroBits for u8 {}
unsafe impl ZeroBits for i8 {}
unsafe impl ZeroBits for bool {}

/// A zero-filled `Vec` of `len` elements (fallible `vec![0; len]`, as cheap: `alloc_zeroed`).
pub(crate) fn try_zeroed<T: ZeroBits>(
    len: usize,
    op: &'static str,
    shape: &[usize],
    dtype: Option<DType>,
) -> Result<Vec<T>> {
    if len == 0 || std::mem::size_of::<T>() == 0 {
        return Ok(Vec::new());
    }
    let bytes = bytes_of(len, std::mem::size_of::<T>());
    let fail = || oom(op, Device::Cpu, shape, dtype, bytes, host_detail(bytes));
    let layout = std::alloc::Layout::array::<T>(len).map_err(|_| fail())?;
    // SAFETY: `layout` has a non-zero size; the pointer, if not null, holds `len` zeroed `T`s
    // (valid values by `ZeroBits`), allocated by the global allocator with `T`'s alignment,
    // which is what `Vec::from_raw_parts` requires.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout) as *mut T;
        if p.is_null() {
            return Err(fail());
        }
        Ok(Vec::from_raw_parts(p, len, len))
    }
}

/// Checks that `count` small heap objects of about `each` bytes (views, their handles) can be
/// made: views are built one by one with infallible allocations, so their total is asked of
/// the allocator once, up front, and given back.
pub(crate) fn check_host_room(
    count: usize,
    each: usize,
    op: &'static str,
    shape: &[usize],
    what: &str,
) -> Result<()> {
    let bytes = bytes_of(count, each);
    let mut probe: Vec<u8> = Vec::new();
    if bytes > isize::MAX as u128 || probe.try_reserve_exact(bytes as usize).is_err() {
        return Err(oom(
            op,
            Device::Cpu,
            shape,
            None,
            bytes,
            format!("{count} {what}; {}", host_detail(bytes)),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn impossible_host_sizes_are_errors() {
        let e = try_zeroed::<f32>(usize::MAX, "t", &[usize::MAX], Some(DType::F32)).unwrap_err();
        assert!(
            matches!(e, Error::OutOfMemory { requested, .. } if requested == usize::MAX as u128 * 4),
            "{e}"
        );
        let v = try_zeroed::<f32>(3, "t", &[3], Some(DType::F32)).unwrap();
        assert_eq!(v, [0.0; 3]);
        assert!(try_vec(usize::MAX / 2, 0u64, "t", &[], None).is_err());
        assert_eq!(try_vec(2, 7u8, "t", &[], None).unwrap(), [7, 7]);
        assert!(check_host_room(usize::MAX, 64, "t", &[], "views").is_err());
        assert!(check_host_room(4, 64, "t", &[], "views").is_ok());
    }
}
