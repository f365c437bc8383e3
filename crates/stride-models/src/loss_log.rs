//! [`LossLog`]: a run's per-step training losses, read back to the host only every N steps.

use stride_core::{Result, Tensor};

/// Every step's loss: those read back so far (`read`), then those still on the device
/// (0-d tensors). Reading waits for the device, so a GPU run reads every N steps and a step
/// in between queues its work and returns at once; the unread losses are read together at
/// the next read. How often it reads never changes the values.
pub(crate) struct LossLog {
    read: Vec<f64>,
    unread: Vec<Tensor>,
    every: u64,
}

impl LossLog {
    /// A log that already holds `read` (a resumed run's history), reading every step.
    pub(crate) fn new(read: Vec<f64>) -> LossLog {
        LossLog {
            read,
            unread: vec![],
            every: 1,
        }
    }
    /// Read on steps `0, n, 2n, …` only (`0`: only when asked).
    pub(crate) fn set_every(&mut self, n: u64) {
        self.every = n;
    }
    /// Records step `step`'s loss; on a due step reads everything unread and returns this
    /// loss.
    pub(crate) fn push(&mut self, step: u64, loss: Tensor) -> Result<Option<f64>> {
        self.unread.push(loss);
        if self.every > 0 && step.is_multiple_of(self.every) {
            Ok(self.read_all()?.last().copied())
        } else {
            Ok(None)
        }
    }
    /// The losses read so far.
    pub(crate) fn read(&self) -> &[f64] {
        &self.read
    }
    /// Reads the losses still on the device (one host wait for all of them); every loss.
    pub(crate) fn read_all(&mut self) -> Result<&[f64]> {
        let v = self.unread_values()?;
        self.read.extend(v);
        self.unread.clear();
        Ok(&self.read)
    }
    /// Every loss, read or not, without changing what is read (for a checkpoint).
    pub(crate) fn values(&self) -> Result<Vec<f64>> {
        let mut v = self.read.clone();
        v.extend(self.unread_values()?);
        Ok(v)
    }
    fn unread_values(&self) -> Result<Vec<f64>> {
        if self.unread.is_empty() {
            return Ok(vec![]);
        }
        let refs: Vec<&Tensor> = self.unread.iter().collect();
        Tensor::stack(&refs, 0)?.to_f64_vec()
    }
}
