//! The backward engine: dependency counting over the reachable graph, then nodes in
//! reverse topological order (latest recorded first among the ready ones), gradients summed at
//! branch points and delivered to leaves (or captured, for `autograd::grad`). A leaf's
//! post-accumulate-grad hooks run after its last delivery of the pass (deliveries are counted
//! with the dependencies), and the callbacks queued during the pass run at its end.

use super::callbacks::QueueScope;
use super::mode::{enable_grad, no_grad};
use super::node::{Edge, Node};
use crate::tensor::TensorImpl;
use crate::{Error, MemoryFormat, Result, Tensor};
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Weak};

/// Options of a backward pass.
#[derive(Debug, Clone, Copy, Default)]
pub struct BackwardOptions {
    /// Keep the graph (and its saved tensors) so backward can run through it again.
    pub retain_graph: bool,
    /// Record the backward computation itself, so gradients are differentiable (implies
    /// `retain_graph`).
    pub create_graph: bool,
}

struct Ready(Arc<Node>);
impl PartialEq for Ready {
    fn eq(&self, o: &Self) -> bool {
        self.0.seq == o.0.seq
    }
}
impl Eq for Ready {}
impl PartialOrd for Ready {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ready {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.seq.cmp(&o.0.seq)
    }
}

fn key(n: &Arc<Node>) -> usize {
    Arc::as_ptr(n) as usize
}

/// Where a captured gradient is taken: a node's output slot, or a leaf.
#[derive(PartialEq)]
enum Target {
    Slot(usize, usize),
    Leaf(usize),
}

/// Post-accumulate-grad bookkeeping of one backward pass: how many deliveries each leaf
/// still awaits (one per edge into it, one per root that is the leaf), and whether any of them
/// carried a gradient. A leaf's hooks run when its last delivery has been accumulated.
#[derive(Default)]
struct PostAccumulate {
    /// Off for `autograd::grad` (captures accumulate nothing, so nothing is final).
    on: bool,
    pending: HashMap<usize, Pending>,
    /// Leaf keys in the order first counted, for the leaves flushed at the end.
    order: Vec<usize>,
}

struct Pending {
    left: usize,
    accumulated: bool,
    leaf: Weak<TensorImpl>,
}

impl PostAccumulate {
    fn expect(&mut self, w: &Weak<TensorImpl>) {
        if !self.on {
            return;
        }
        let k = Weak::as_ptr(w) as usize;
        let p = self.pending.entry(k).or_insert_with(|| {
            self.order.push(k);
            Pending {
                left: 0,
                accumulated: false,
                leaf: w.clone(),
            }
        });
        p.left += 1;
    }

    /// One delivery to the leaf of `w` is done (`accumulated`: it carried a gradient that is
    /// now in `.grad`); runs the leaf's hooks if it was the last.
    fn delivered(&mut self, w: &Weak<TensorImpl>, accumulated: bool) -> Result<()> {
        if !self.on {
            return Ok(());
        }
        let k = Weak::as_ptr(w) as usize;
        let Some(p) = self.pending.get_mut(&k) else {
            return Ok(());
        };
        p.accumulated |= accumulated;
        p.left = p.left.saturating_sub(1);
        if p.left > 0 {
            return Ok(());
        }
        let p = self.pending.remove(&k).expect("present");
        if p.accumulated {
            run_post_accumulate_hooks(&p.leaf)?;
        }
        Ok(())
    }

    /// The pass is over: a leaf still awaiting a delivery that never came (a node upstream of
    /// it got no gradient and was never run) has its final `.grad` now; run its hooks if it got
    /// anything.
    fn finish(&mut self) -> Result<()> {
        for k in std::mem::take(&mut self.order) {
            if let Some(p) = self.pending.remove(&k) {
                if p.accumulated {
                    run_post_accumulate_hooks(&p.leaf)?;
                }
            }
        }
        Ok(())
    }
}

fn run_post_accumulate_hooks(w: &Weak<TensorImpl>) -> Result<()> {
    let Some(t) = w.upgrade() else { return Ok(()) };
    let leaf = Tensor::from_impl(t);
    // clone them out: a hook reads the leaf's meta (`grad()`), and may add or remove hooks
    let hooks: Vec<_> = leaf
        .meta()
        .post_accumulate_hooks
        .iter()
        .map(|(_, h)| h.clone())
        .collect();
    for h in hooks {
        h(&leaf)?;
    }
    Ok(())
}

fn add_grad(acc: &mut Option<Tensor>, g: Tensor) -> Result<()> {
    *acc = Some(match acc.take() {
        None => g,
        Some(a) => a.add(&g)?,
    });
    Ok(())
}

/// Runs backward from `roots` (tensor, gradient). With `capture`, gradients for those tensors
/// are returned and no `.grad` is touched; otherwise leaves accumulate (and their
/// post-accumulate-grad hooks run). The callbacks queued during the pass run at its end.
pub(crate) fn run_backward(
    roots: &[(Tensor, Tensor)],
    opts: BackwardOptions,
    capture: Option<&[Tensor]>,
) -> Result<Vec<Option<Tensor>>> {
    // declared first so it drops last: on an early error the queued callbacks are dropped
    let queue = QueueScope::enter();
    let retain = opts.retain_graph || opts.create_graph;
    // gradients are computed in the dtypes the forward ran in, never autocast
    let _no_autocast = crate::autocast::suspend();
    let _mode = if opts.create_graph {
        enable_grad()
    } else {
        no_grad()
    };

    let targets: Vec<Target> = capture
        .unwrap_or(&[])
        .iter()
        .map(|t| {
            if t.requires_grad() {
                super::view_meta::refresh(t)?;
            }
            let m = t.meta();
            Ok(match &m.grad_fn {
                Some(n) => Target::Slot(key(n), m.output_nr),
                None => Target::Leaf(t.impl_ptr()),
            })
        })
        .collect::<Result<_>>()?;
    let mut captured: Vec<Option<Tensor>> = vec![None; targets.len()];

    // 1. seed
    let mut buffers: HashMap<usize, Vec<Option<Tensor>>> = HashMap::new();
    let mut nodes: HashMap<usize, Arc<Node>> = HashMap::new();
    let mut leaf_grads: Vec<(Weak<TensorImpl>, Tensor)> = vec![];
    let mut post = PostAccumulate {
        on: capture.is_none(),
        ..Default::default()
    };
    for (t, g) in roots {
        if g.shape() != t.shape() {
            return Err(Error::ShapeMismatch {
                op: "backward",
                lhs: t.shape().to_vec(),
                rhs: g.shape().to_vec(),
                why: "differ: the gradient (second) must have the output's shape (first)".into(),
            });
        }
        match super::record::edge_of(t)? {
            Some(Edge::Node(n, i)) => {
                let b = buffers.entry(key(&n)).or_insert_with(|| vec![None; n.outputs.len()]);
                add_grad(&mut b[i], g.clone())?;
                nodes.insert(key(&n), n);
            }
            Some(Edge::Leaf(w)) => {
                post.expect(&w);
                leaf_grads.push((w, g.clone()))
            }
            None => {
                return Err(Error::invalid(
                    "backward",
                    "the tensor does not require grad and has no grad_fn: nothing to differentiate (did you forget requires_grad_(true), or compute it under no_grad?)",
                ))
            }
        }
    }

    // 2. dependencies: how many edges point at each node from reachable nodes, and how many
    // deliveries each leaf will get (a leaf used twice gets two)
    let mut deps: HashMap<usize, usize> = HashMap::new();
    let mut stack: Vec<Arc<Node>> = nodes.values().cloned().collect();
    let mut seen: HashMap<usize, ()> = nodes.keys().map(|&k| (k, ())).collect();
    while let Some(n) = stack.pop() {
        for e in n.edges.iter().flatten() {
            match e {
                Edge::Node(m, _) => {
                    *deps.entry(key(m)).or_insert(0) += 1;
                    if seen.insert(key(m), ()).is_none() {
                        stack.push(m.clone());
                    }
                }
                Edge::Leaf(w) => post.expect(w),
            }
        }
    }

    // 3. execute
    let mut ready: BinaryHeap<Ready> = nodes
        .values()
        .filter(|n| deps.get(&key(n)).copied().unwrap_or(0) == 0)
        .cloned()
        .map(Ready)
        .collect();
    for (w, g) in leaf_grads {
        deliver_leaf(&w, g, opts, &targets, &mut captured, &mut post)?;
    }
    while let Some(Ready(node)) = ready.pop() {
        let k = key(&node);
        let mut grads_opt = buffers
            .remove(&k)
            .unwrap_or_else(|| vec![None; node.outputs.len()]);
        // hooks, retained grads and captures of this node's outputs
        for (i, g) in grads_opt.iter_mut().enumerate() {
            if let Some(gr) = g.as_ref() {
                let hooks: Vec<_> = node
                    .hooks
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .filter(|(o, _)| *o == i)
                    .map(|(_, h)| h.clone())
                    .collect();
                let mut cur = gr.clone();
                for h in hooks {
                    if let Some(new) = h(&cur)? {
                        cur = new;
                    }
                }
                *g = Some(cur);
            }
            if let Some(gr) = g.as_ref() {
                for (o, w) in node
                    .retained
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                {
                    if *o == i {
                        if let Some(t) = w.upgrade() {
                            let t = Tensor::from_impl(t);
                            let mut m = t.meta();
                            let new = match m.grad.take() {
                                None => gr.detach(),
                                Some(old) => old.add(gr)?,
                            };
                            m.grad = Some(new);
                        }
                    }
                }
                for (j, tg) in targets.iter().enumerate() {
                    if *tg == Target::Slot(k, i) {
                        add_grad(&mut captured[j], gr.clone())?;
                    }
                }
            }
        }
        let grads: Vec<Tensor> = grads_opt
            .into_iter()
            .zip(&node.outputs)
            .map(|(g, meta)| match g {
                Some(g) => Ok(g),
                None => Tensor::zeros(meta.shape.clone(), meta.dtype, &meta.device),
            })
            .collect::<Result<_>>()?;
        let input_grads = crate::debug::in_backward(node.name, node.forward_site.as_ref(), || {
            node.apply(&grads, retain)
        })?;
        if input_grads.len() != node.edges.len() {
            return Err(Error::invalid(
                "backward",
                format!(
                    "internal: {} returned {} gradients for {} inputs",
                    node.name,
                    input_grads.len(),
                    node.edges.len()
                ),
            ));
        }
        for ((edge, g), meta) in node.edges.iter().zip(input_grads).zip(&node.inputs) {
            let (Some(edge), Some(mut g)) = (edge, g) else {
                if let Some(Edge::Leaf(w)) = edge {
                    post.delivered(w, false)?; // no gradient for this leaf from this node
                }
                continue;
            };
            if g.shape() != meta.shape.as_slice() {
                return Err(Error::invalid(
                    "backward",
                    format!(
                        "internal: {} produced a gradient of shape {:?} for an input of shape {:?}",
                        node.name,
                        g.shape(),
                        meta.shape
                    ),
                ));
            }
            if g.dtype() != meta.dtype {
                g = g.to_dtype(meta.dtype)?;
            }
            match edge {
                Edge::Node(m, i) => {
                    let mk = key(m);
                    let b = buffers
                        .entry(mk)
                        .or_insert_with(|| vec![None; m.outputs.len()]);
                    add_grad(&mut b[*i], g)?;
                    let d = deps.get_mut(&mk).expect("dependency counted");
                    *d -= 1;
                    if *d == 0 {
                        ready.push(Ready(m.clone()));
                    }
                }
                Edge::Leaf(w) => deliver_leaf(w, g, opts, &targets, &mut captured, &mut post)?,
            }
        }
    }
    post.finish()?;
    queue.run()?;
    Ok(captured)
}

fn deliver_leaf(
    w: &Weak<TensorImpl>,
    g: Tensor,
    opts: BackwardOptions,
    targets: &[Target],
    captured: &mut [Option<Tensor>],
    post: &mut PostAccumulate,
) -> Result<()> {
    let Some(t) = w.upgrade() else { return Ok(()) }; // the leaf is gone: nobody can read it
    let leaf = Tensor::from_impl(t);
    let hooks: Vec<_> = leaf.meta().hooks.iter().map(|(_, h)| h.clone()).collect();
    let mut g = g;
    for h in hooks {
        if let Some(new) = h(&g)? {
            g = new;
        }
    }
    if !targets.is_empty() {
        for (j, tg) in targets.iter().enumerate() {
            if *tg == Target::Leaf(leaf.impl_ptr()) {
                add_grad(&mut captured[j], g.clone())?;
            }
        }
        return Ok(());
    }
    let existing = leaf.meta().grad.clone();
    let new = match existing {
        None if opts.create_graph => g,
        None => {
            // a fresh gradient with the parameter's layout (PyTorch's gradient layout contract)
            let fresh = leaf.empty_like(MemoryFormat::Preserve)?;
            crate::ops::output::copy_into("backward", &g, &fresh)?;
            fresh
        }
        Some(old) if opts.create_graph => old.add(&g)?,
        Some(old) => {
            old.add_(&g)?;
            old
        }
    };
    leaf.meta().grad = Some(new);
    drop(leaf);
    post.delivered(w, true)
}

#[cfg(test)]
mod tests {
    use super::super::record::record;
    use crate::{Result, Tensor};
    use std::sync::{Arc, Mutex};

    fn leaf(v: f64) -> Tensor {
        Tensor::from_vec(vec![v], [1])
            .unwrap()
            .requires_grad_(true)
            .unwrap()
    }

    /// Counts the calls of a post-accumulate-grad hook on `t`, with the grad each one saw.
    fn calls(t: &Tensor) -> Arc<Mutex<Vec<f64>>> {
        let seen = Arc::new(Mutex::new(vec![]));
        let s = seen.clone();
        t.register_post_accumulate_grad_hook(move |p| {
            s.lock().unwrap().push(p.grad().unwrap().item::<f64>()?);
            Ok(())
        })
        .unwrap();
        seen
    }

    /// An op of `inputs` whose backward passes the gradient to the inputs marked `true` and
    /// gives `None` to the others.
    fn op(inputs: &[&Tensor], pass: &'static [bool]) -> Result<Tensor> {
        let out = {
            let _g = super::no_grad();
            inputs[0].mul(1.0)?
        };
        record("PassSome", inputs, &[&out], &[], move |g| {
            Ok(pass.iter().map(|&p| p.then(|| g[0].clone())).collect())
        })?;
        Ok(out)
    }

    #[test]
    fn a_leaf_whose_deliveries_are_all_none_does_not_fire() -> Result<()> {
        let (a, b) = (leaf(1.0), leaf(2.0));
        let (seen_a, seen_b) = (calls(&a), calls(&b));
        // b reaches the graph twice, and gets `None` both times
        op(&[&a, &b, &b], &[true, false, false])?
            .sum()?
            .backward()?;
        assert_eq!(*seen_a.lock().unwrap(), [1.0]);
        assert!(seen_b.lock().unwrap().is_empty());
        assert!(b.grad().is_none());
        // a `None` delivery among real ones still counts towards "the last one"
        op(&[&a, &b, &b], &[false, true, false])?
            .sum()?
            .backward()?;
        assert_eq!(*seen_a.lock().unwrap(), [1.0]);
        assert_eq!(*seen_b.lock().unwrap(), [1.0]);
        Ok(())
    }

    #[test]
    fn a_none_delivery_can_be_the_last_one() -> Result<()> {
        // b's last delivery carries no gradient: its hook runs right then, before the branch
        // recorded earlier (and so run later) reaches c
        let (b, c) = (leaf(2.0), leaf(5.0));
        let order = Arc::new(Mutex::new(vec![]));
        for (name, t) in [("b", &b), ("c", &c)] {
            let o = order.clone();
            t.register_post_accumulate_grad_hook(move |_| {
                o.lock().unwrap().push(name);
                Ok(())
            })?;
        }
        let pc = c.mul(2.0)?;
        let y = op(&[&b, &b], &[true, false])?;
        pc.sum()?.add(&y.sum()?)?.backward()?;
        assert_eq!(*order.lock().unwrap(), ["b", "c"]);
        Ok(())
    }

    #[test]
    fn a_leaf_still_awaiting_a_delivery_fires_at_the_end() -> Result<()> {
        // p gets `None` from one of its two consumers, so the engine never runs it and c's
        // delivery through p never comes: c's hook runs once the pass is over
        let c = leaf(3.0);
        let seen = calls(&c);
        let p = c.mul(2.0)?;
        let y1 = op(&[&p], &[false])?;
        let y2 = op(&[&p, &c], &[true, true])?;
        y1.sum()?.add(&y2.sum()?)?.backward()?;
        let g = c.grad().unwrap().item::<f64>()?;
        assert_eq!(*seen.lock().unwrap(), [g]);
        Ok(())
    }
}
