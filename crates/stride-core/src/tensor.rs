//! `Tensor`: a view (layout + dtype) of a shared storage. Cloning a `Tensor` is cheap and
//! shares data, like assigning a tensor in Python; use [`Tensor::clone_data`]-style ops
//! (`clone_tensor`, `contiguous`) for copies.

use crate::autograd::AutogradMeta;
use crate::backend::{self, View};
use crate::cpu::strided::Plan;
use crate::storage::{BufferElement, Storage, StorageData};
use crate::{with_dtype, DType, Device, Element, Error, Layout, Result, Scalar, Shape};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

pub(crate) struct TensorImpl {
    storage: Storage,
    layout: Layout,
    dtype: DType,
    /// Autograd state (requires_grad, grad, grad_fn, hooks). Locked briefly by op frontends.
    meta: Mutex<AutogradMeta>,
}

/// A strided, typed, device-resident n-dimensional array.
///
/// ```
/// use stride_core::{DType, Device, Tensor};
/// let x = Tensor::arange(0, 12, &Device::Cpu)?.reshape(&[3, 4])?;
/// assert_eq!(x.stride(), &[4, 1]);
/// let t = x.t()?;
/// assert_eq!(t.stride(), &[1, 4]);
/// assert!(!t.is_contiguous());
/// assert!(t.view(&[12]).is_err());
/// assert_eq!(t.reshape(&[12])?.to_vec::<i64>()?, vec![0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]);
/// # Ok::<(), stride_core::Error>(())
/// ```
///
/// # `clone()` is NOT PyTorch's `clone()`
///
/// **`Tensor::clone()` (the Rust `Clone` impl) is a cheap handle: it copies no data and the
/// result shares storage — and autograd identity — with the original, so writing into one
/// changes the other.** PyTorch's `tensor.clone()` copies. For PyTorch's `clone()` call
/// [`Tensor::clone_tensor`], which copies into new storage and keeps the strides of a dense
/// input (a transposed weight stays transposed):
///
/// ```
/// use stride_core::{DType, Device, Tensor};
/// let w = Tensor::zeros([3, 4], DType::F32, &Device::Cpu)?;
/// let copied = w.t()?.clone_tensor()?; // PyTorch's w.t().clone(): own storage, strides [1, 4]
/// assert_eq!(copied.stride(), &[1, 4]);
/// assert!(!copied.shares_storage_with(&w));
/// let handle = w.t()?.clone(); // a second handle to the same view: no copy
/// assert!(handle.shares_storage_with(&w));
/// handle.fill_(1.0)?; // ... so this writes into w
/// assert_eq!(w.sum()?.item::<f32>()?, 12.0);
/// assert_eq!(copied.sum()?.item::<f32>()?, 0.0);
/// # Ok::<(), stride_core::Error>(())
/// ```
pub struct Tensor(Arc<TensorImpl>);

impl Clone for Tensor {
    /// **A cheap handle, not a copy** (unlike PyTorch's `clone()`): the result shares this
    /// tensor's storage, layout and autograd history, so in-place writes through either are
    /// seen by both. For PyTorch's `clone()` — new storage, same strides for a dense input —
    /// use [`Tensor::clone_tensor`]: `w.t()?.clone_tensor()?` has strides `[1, n]` and its
    /// own data, while `w.t()?.clone()` shares `w`'s storage. See [`Tensor`]'s docs.
    #[inline]
    fn clone(&self) -> Self {
        Tensor(Arc::clone(&self.0))
    }
}

impl Tensor {
    pub(crate) fn from_parts(storage: Storage, layout: Layout, dtype: DType) -> Tensor {
        let meta = AutogradMeta {
            inference: crate::autograd::is_inference_mode(),
            ..Default::default()
        };
        Tensor(Arc::new(TensorImpl {
            storage,
            layout,
            dtype,
            meta: Mutex::new(meta),
        }))
    }
    pub(crate) fn from_impl(t: Arc<TensorImpl>) -> Tensor {
        Tensor(t)
    }
    pub(crate) fn downgrade(&self) -> Weak<TensorImpl> {
        Arc::downgrade(&self.0)
    }
    /// Identity of this tensor object (not of its storage).
    pub(crate) fn impl_ptr(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }
    pub(crate) fn meta(&self) -> MutexGuard<'_, AutogradMeta> {
        self.0.meta.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// A new tensor sharing this one's storage through another layout.
    pub(crate) fn with_layout(&self, layout: Layout) -> Tensor {
        Tensor::from_parts(self.0.storage.clone(), layout, self.0.dtype)
    }
    pub(crate) fn view_ref(&self) -> View<'_> {
        View {
            storage: &self.0.storage,
            layout: &self.0.layout,
            dtype: self.0.dtype,
        }
    }
    /// Allocates a zero-filled tensor with the given strides (which must be dense for `shape`).
    pub(crate) fn alloc(
        shape: &[usize],
        strides: Vec<usize>,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        Tensor::alloc_with(shape, strides, dtype, device, true)
    }
    /// [`Tensor::alloc`] for a result that one backend primitive then writes in full before
    /// anyone can read it (and that is dropped if the primitive fails): on CUDA the zero-fill,
    /// a whole extra pass over the memory, is skipped. Unwritten elements would be a kernel
    /// bug, which the conformance check's poisoned outputs catch. The CPU still zero-fills.
    pub(crate) fn alloc_for_overwrite(
        shape: &[usize],
        strides: Vec<usize>,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        Tensor::alloc_with(shape, strides, dtype, device, false)
    }
    fn alloc_with(
        shape: &[usize],
        strides: Vec<usize>,
        dtype: DType,
        device: &Device,
        zero: bool,
    ) -> Result<Tensor> {
        let storage = Storage::alloc(shape, dtype, device, zero)?;
        Ok(Tensor::from_parts(
            storage,
            Layout::new(shape.to_vec(), strides, 0),
            dtype,
        ))
    }
    /// A fresh contiguous tensor (zero-filled on the CPU).
    pub(crate) fn alloc_contiguous(
        shape: &[usize],
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        Tensor::alloc(
            shape,
            crate::layout::contiguous_strides(shape),
            dtype,
            device,
        )
    }

    /// Builds a tensor from host data in row-major order.
    ///
    /// ```
    /// use stride_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2])?;
    /// assert_eq!(x.shape(), &[2, 2]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn from_vec<T: BufferElement>(data: Vec<T>, shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = shape.into();
        let numel = crate::shape::checked_numel("from_vec", shape.dims())?;
        if data.len() != numel {
            return Err(Error::DataLength {
                op: "from_vec",
                len: data.len(),
                shape: shape.0,
                numel,
            });
        }
        Ok(Tensor::from_parts(
            Storage::from_cpu(T::wrap(data)),
            Layout::contiguous(shape.dims()),
            T::DTYPE,
        ))
    }
    /// Builds a tensor from a host slice (copied).
    pub fn from_slice<T: BufferElement>(data: &[T], shape: impl Into<Shape>) -> Result<Tensor> {
        Tensor::from_vec(data.to_vec(), shape)
    }
    /// A 0-d tensor holding `value` as `dtype`.
    pub fn scalar(value: impl Into<Scalar>, dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::full([0usize; 0], value, dtype, device)
    }

    // ----- metadata -----------------------------------------------------------------------

    /// The size of each dim (PyTorch's `shape`/`size()`).
    pub fn shape(&self) -> &[usize] {
        self.0.layout.shape()
    }
    /// Size of one dim (negative dims count from the end).
    pub fn size(&self, dim: i64) -> Result<usize> {
        let d = crate::shape::wrap_dim("size", dim, self.dim())?;
        Ok(if self.dim() == 0 { 1 } else { self.shape()[d] })
    }
    /// Strides in elements.
    pub fn stride(&self) -> &[usize] {
        self.0.layout.strides()
    }
    pub fn storage_offset(&self) -> usize {
        self.0.layout.offset()
    }
    pub fn layout(&self) -> &Layout {
        &self.0.layout
    }
    /// Number of dims.
    pub fn dim(&self) -> usize {
        self.0.layout.ndim()
    }
    pub fn numel(&self) -> usize {
        self.0.layout.numel()
    }
    pub fn dtype(&self) -> DType {
        self.0.dtype
    }
    pub fn device(&self) -> Device {
        self.0.storage.device()
    }
    /// Bytes per element.
    pub fn element_size(&self) -> usize {
        self.0.dtype.size_in_bytes()
    }
    /// `numel × element_size`: the bytes of the logical elements (not of the storage).
    /// Saturates at `usize::MAX` for a huge expanded view, whose bytes a `usize` can't count.
    pub fn nbytes(&self) -> usize {
        self.numel().saturating_mul(self.element_size())
    }
    pub fn is_contiguous(&self) -> bool {
        self.0.layout.is_contiguous()
    }
    pub fn storage(&self) -> &Storage {
        &self.0.storage
    }
    /// Whether two tensors view the same storage.
    pub fn shares_storage_with(&self, other: &Tensor) -> bool {
        self.0.storage.same(&other.0.storage)
    }
    /// Whether `self` and `other` are handles to the same tensor (not just the same storage).
    pub(crate) fn same_tensor(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
    /// The storage's version counter: bumped by every in-place write through any view.
    pub fn version(&self) -> u64 {
        self.0.storage.version()
    }

    // ----- reading back ---------------------------------------------------------------------

    /// The elements in logical (row-major) order. `T` must be the tensor's dtype — nothing is
    /// cast silently; use [`Tensor::to_dtype`] first, or [`Tensor::to_f64_vec`].
    pub fn to_vec<T: BufferElement>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype() {
            return Err(Error::invalid(
                "to_vec",
                format!(
                    "asked for {} elements from a {} tensor; convert with to_dtype(DType::{:?}) first",
                    T::DTYPE,
                    self.dtype(),
                    T::DTYPE
                ),
            ));
        }
        // the host reads the data: a wait on a GPU, reported on every device
        let _sync = crate::debug::host_sync(self.device(), "to_vec")?;
        if !self.device().is_cpu() {
            return self.to_device(&Device::Cpu)?.to_vec();
        }
        let guard = self.0.storage.read();
        let StorageData::Cpu(buf) = &*guard else {
            unreachable!("moved to the CPU above")
        };
        let data = T::slice(buf).expect("storage dtype matches tensor dtype");
        let l = &self.0.layout;
        let l_shape = l.shape();
        let mut out: Vec<T> =
            crate::alloc::try_with_capacity(self.numel(), "to_vec", l_shape, Some(self.dtype()))?;
        // logical order: pair the view with a contiguous target so the plan keeps row-major order
        let contiguous = Layout::contiguous(l.shape());
        let p = Plan::new(
            l.shape(),
            [contiguous.strides(), l.strides()],
            [0, l.offset()],
        );
        let [_, st] = p.inner_strides();
        p.for_each_run(0, p.numel(), |off, len| {
            for i in 0..len as isize {
                out.push(data[(off[1] + i * st) as usize]);
            }
        });
        Ok(out)
    }
    /// The elements cast to f64 on the host (a convenience for tests and printing).
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        with_dtype!(self.dtype(), T => Ok(self.to_vec::<T>()?.into_iter().map(|x| x.to_f64()).collect()))
    }
    /// The single element of a one-element tensor.
    pub fn item<T: BufferElement>(&self) -> Result<T> {
        if self.numel() != 1 {
            return Err(Error::invalid(
                "item",
                format!(
                    "needs a tensor with exactly one element, got shape {:?}",
                    self.shape()
                ),
            ));
        }
        Ok(self.to_vec::<T>()?[0])
    }

    /// The one element of a tensor of any dtype as f64, converted on the host (exact for
    /// every dtype, and it works on devices that hold no f64, where
    /// `to_dtype(DType::F64)?.item::<f64>()` cannot). A read: one host wait on a GPU.
    ///
    /// ```
    /// use stride_core::{DType, Device, Tensor};
    /// let t = Tensor::full([1], 2.5, DType::BF16, &Device::Cpu)?;
    /// assert_eq!(t.item_f64()?, 2.5);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn item_f64(&self) -> Result<f64> {
        if self.numel() != 1 {
            return Err(Error::invalid(
                "item_f64",
                format!(
                    "needs a tensor with exactly one element, got shape {:?}",
                    self.shape()
                ),
            ));
        }
        Ok(self.to_device(&crate::Device::Cpu)?.to_f64_vec()?[0])
    }

    // ----- dtype and device -----------------------------------------------------------------

    /// A copy converted to `dtype` (the only op that casts). Returns `self` (shared) when the
    /// dtype already matches, as PyTorch's `.to()` does.
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        let out = Tensor::alloc_for_overwrite(
            self.shape(),
            self.layout().dense_strides_like(),
            dtype,
            &self.device(),
        )
        .map_err(|e| e.in_op("to_dtype"))?;
        backend::copy_cast(self.view_ref(), out.view_ref())?;
        if self.dtype().is_float() {
            crate::autograd::formulas::views::record_copy("ToCopyBackward", self, &out)?;
        }
        Ok(out)
    }
    /// This tensor on `device`: `self` (shared) if it is already there, else a copy.
    pub fn to_device(&self, device: &Device) -> Result<Tensor> {
        if *device == self.device() {
            return Ok(self.clone());
        }
        let _sync = crate::debug::host_sync(
            if device.is_cpu() {
                self.device()
            } else {
                *device
            },
            "to_device",
        )?;
        let out = {
            let _g = crate::autograd::no_grad();
            crate::transfer::to_device(self, *device)?
        };
        crate::autograd::formulas::views::record_to_device(self, &out)?;
        Ok(out)
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tensor(shape={:?}, strides={:?}, offset={}, dtype={}, device={})",
            self.shape(),
            self.stride(),
            self.storage_offset(),
            self.dtype(),
            self.device()
        )
    }
}
