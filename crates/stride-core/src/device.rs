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
    /// Parses `cpu`, `cuda`, `cuda:N`.
    pub fn parse(s: &str) -> Option<Device> {
        match s {
            "cpu" => Some(Device::Cpu),
            "cuda" => Some(Device::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Device::Cuda),
        }
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
        }
    }
}
