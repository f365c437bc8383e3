//! Callbacks queued during a backward pass to run once it has finished (PyTorch's
//! `Variable._execution_engine.queue_callback`), kept per thread as a stack of queues: one per
//! backward pass running on the thread, the innermost (a backward called from a hook) on top.

use crate::{Error, Result};
use std::cell::RefCell;
use std::collections::VecDeque;

type Callback = Box<dyn FnOnce() -> Result<()> + Send>;

thread_local! {
    static QUEUES: RefCell<Vec<VecDeque<Callback>>> = const { RefCell::new(Vec::new()) };
}

/// Queues `f` to run when the backward pass now running on this thread has finished:
/// after its last node and its last leaf have been processed (every `.grad` accumulated and
/// every post-accumulate-grad hook run), before `backward()` (or [`grad`](super::grad))
/// returns. Callbacks run in the order they were queued, in the grad mode of the backward
/// (no grad unless `create_graph`); a callback may queue further callbacks, which run after
/// it. This is PyTorch's `Variable._execution_engine.queue_callback`, the hook a
/// DistributedDataParallel uses to wait for its gradient all-reduces at the end of backward.
///
/// Call it from inside a hook ([`Tensor::register_hook`](crate::Tensor::register_hook),
/// [`Tensor::register_post_accumulate_grad_hook`](crate::Tensor::register_post_accumulate_grad_hook))
/// or another callback; outside a backward pass it is an error. A backward called from a hook
/// has its own queue, run when that inner backward finishes. The first error a callback
/// returns is what `backward()` returns (the callbacks after it are dropped); if the backward
/// itself fails, its queued callbacks are dropped without running.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use stride_core::{autograd, DType, Device, Tensor};
/// let w = Tensor::from_vec(vec![1.0f64, 2.0], [2])?.requires_grad_(true)?;
/// let log = Arc::new(Mutex::new(Vec::<String>::new()));
/// let l = log.clone();
/// w.register_post_accumulate_grad_hook(move |p| {
///     l.lock().unwrap().push(format!("grad ready: {:?}", p.grad().unwrap().to_vec::<f64>()?));
///     let l = l.clone();
///     autograd::queue_callback(move || {
///         l.lock().unwrap().push("backward finished".into());
///         Ok(())
///     })
/// })?;
/// w.mul(3.0)?.sum()?.backward()?;
/// assert_eq!(*log.lock().unwrap(), ["grad ready: [3.0, 3.0]", "backward finished"]);
/// assert!(autograd::queue_callback(|| Ok(())).is_err()); // no backward is running now
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn queue_callback(f: impl FnOnce() -> Result<()> + Send + 'static) -> Result<()> {
    QUEUES.with(|q| match q.borrow_mut().last_mut() {
        Some(queue) => {
            queue.push_back(Box::new(f));
            Ok(())
        }
        None => Err(Error::invalid(
            "queue_callback",
            "no backward pass is running on this thread: queue_callback can only be called while one runs (from a tensor hook, a post-accumulate-grad hook or another queued callback); to run code after backward, call it after backward() returns",
        )),
    })
}

/// The queue of one backward pass: pushed on the thread's stack when the pass starts, popped
/// (dropping whatever was not run) when this guard drops, on success, error or panic alike.
pub(crate) struct QueueScope {
    depth: usize,
}

impl QueueScope {
    pub fn enter() -> QueueScope {
        QUEUES.with(|q| {
            let mut q = q.borrow_mut();
            q.push(VecDeque::new());
            QueueScope { depth: q.len() - 1 }
        })
    }

    /// Runs this pass's callbacks in order, those they queue included, until the queue is empty
    /// or one fails.
    pub fn run(&self) -> Result<()> {
        loop {
            // take one at a time without holding the borrow: the callback may queue more, or
            // run a backward of its own
            let next = QUEUES.with(|q| q.borrow_mut().get_mut(self.depth)?.pop_front());
            match next {
                Some(f) => f()?,
                None => return Ok(()),
            }
        }
    }
}

impl Drop for QueueScope {
    fn drop(&mut self) {
        let dropped = QUEUES.try_with(|q| {
            let mut q = q.borrow_mut();
            // a scope's queue is always on top when it drops (scopes nest), but truncate rather
            // than pop so an out-of-order drop cannot leave a stale queue behind
            let from = self.depth.min(q.len());
            q.split_off(from)
        });
        // the callbacks that did not run drop here, outside the borrow (a captured value's Drop
        // may itself call queue_callback)
        drop(dropped);
    }
}
