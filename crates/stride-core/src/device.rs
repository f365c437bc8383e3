//! Devices. Every tensor lives on exactly one; ops never move data implicitly.

use std::fmt;

/// Where a tensor's storage lives.
///
/// ```
/// use stride_core::Device;
/// assert_eq!(Device::Cpu.to_string(), "cpu");
/// assert_eq!(Device::parse("cuda:1"), Some(Device::Cuda(1)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Device {
    Cpu,
    /// A CUDA GPU by ordinal.
    Cuda(usize),
    /// A GPU through wgpu (Metal, Vulkan, DirectX 12) by adapter ordinal: see
    /// [`webgpu::adapters`](crate::webgpu::adapters).
    Wgpu(usize),
}

impl Device {
    /// The CUDA device `ordinal`, if it can be used here: initialises it (context, stream)
    /// on first use. Without a driver or such a GPU the error says so
    /// ([`Error::DeviceUnavailable`](crate::Error::DeviceUnavailable)).
    ///
    /// ```
    /// use stride_core::{cuda, Device};
    /// match Device::cuda(0) {
    ///     Ok(d) => assert_eq!(d.to_string(), "cuda:0"),
    ///     Err(e) => assert!(!cuda::is_available(), "{e}"),
    /// }
    /// ```
    pub fn cuda(ordinal: usize) -> crate::Result<Device> {
        crate::cuda::device::get(ordinal)?;
        Ok(Device::Cuda(ordinal))
    }
    /// The wgpu adapter `ordinal` (see [`webgpu::adapters`](crate::webgpu::adapters)), if
    /// this machine has it: makes its device on first use. Without one the error says what
    /// is missing ([`Error::DeviceUnavailable`](crate::Error::DeviceUnavailable)).
    ///
    /// ```
    /// use stride_core::{webgpu, Device};
    /// match Device::wgpu(0) {
    ///     Ok(d) => assert_eq!(d.to_string(), "wgpu:0"),
    ///     Err(e) => assert!(!webgpu::is_available(), "{e}"),
    /// }
    /// ```
    pub fn wgpu(ordinal: usize) -> crate::Result<Device> {
        crate::webgpu::device::get(ordinal)?;
        Ok(Device::Wgpu(ordinal))
    }
    /// Parses `cpu`, `cuda`, `cuda:N`, `wgpu`, `wgpu:N`.
    pub fn parse(s: &str) -> Option<Device> {
        match s {
            "cpu" => Some(Device::Cpu),
            "cuda" => Some(Device::Cuda(0)),
            "wgpu" => Some(Device::Wgpu(0)),
            _ => {
                if let Some(n) = s.strip_prefix("cuda:") {
                    n.parse().ok().map(Device::Cuda)
                } else {
                    s.strip_prefix("wgpu:")
                        .and_then(|n| n.parse().ok())
                        .map(Device::Wgpu)
                }
            }
        }
    }
    /// Whether tensors of `dtype` can live on this device: every dtype but f64 on wgpu
    /// (WGSL has no portable 64-bit float), every dtype elsewhere.
    ///
    /// ```
    /// use stride_core::{DType, Device};
    /// assert!(Device::Cpu.holds(DType::F64));
    /// assert!(!Device::Wgpu(0).holds(DType::F64));
    /// ```
    pub fn holds(self, dtype: crate::DType) -> bool {
        !(matches!(self, Device::Wgpu(_)) && dtype == crate::DType::F64)
    }
    pub fn is_cpu(self) -> bool {
        self == Device::Cpu
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
            Device::Wgpu(i) => write!(f, "wgpu:{i}"),
        }
    }
}
