//! Checks every backend makes before it touches memory, and the errors they give.

use crate::backend::index::INDEX_DTYPES;
use crate::backend::View;
use crate::{DType, Error, Result};

/// An error for a state the frontend should have made impossible: a bug in stride.
pub(crate) fn internal(op: &'static str, msg: impl std::fmt::Display) -> Error {
    Error::invalid(op, format!("internal error: {msg} (please report)"))
}

/// The error for an index tensor of a dtype that cannot hold indices.
pub(crate) fn bad_index_dtype(op: &'static str, d: DType) -> Error {
    Error::UnsupportedDType {
        op,
        dtype: d,
        hint: format!(
            " for an index tensor; indices are {:?} (convert with to_dtype)",
            INDEX_DTYPES.map(|t| t.name())
        ),
    }
}

/// Checks that every element a view can address, plus `extra` elements past its last one,
/// lies inside its storage: kernels dereference raw pointers, so this is what keeps a
/// frontend bug from becoming undefined behaviour.
pub(crate) fn check_extent(op: &'static str, v: &View, extra: usize) -> Result<()> {
    if v.layout.numel() == 0 {
        return Ok(());
    }
    let end = v.layout.storage_extent() + extra;
    if end > v.storage.len() || v.storage.dtype() != v.dtype {
        return Err(internal(
            op,
            format!(
                "a view {:?} (+{extra}) of a {} storage of {} elements",
                v.layout,
                v.storage.dtype(),
                v.storage.len()
            ),
        ));
    }
    Ok(())
}
