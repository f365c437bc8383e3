//! Post-accumulate-grad hooks and `queue_callback`, with PyTorch's semantics: what a
//! DistributedDataParallel needs to start a bucket's all-reduce once its gradients are final
//! and to wait for all of them at the end of backward.

use std::sync::{Arc, Mutex};
use stride_core::autograd::{self, BackwardOptions, GradOptions};
use stride_core::{Error, Result, Tensor};

fn leaf(v: &[f64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), [v.len()])
        .unwrap()
        .requires_grad_(true)
        .unwrap()
}

type Log = Arc<Mutex<Vec<String>>>;

fn log() -> Log {
    Arc::new(Mutex::new(vec![]))
}

fn push(l: &Log, s: impl Into<String>) {
    l.lock().unwrap().push(s.into());
}

fn entries(l: &Log) -> Vec<String> {
    l.lock().unwrap().clone()
}

/// The gradients a hook saw, call by call.
type Seen = Arc<Mutex<Vec<Vec<f64>>>>;

/// Records every call of the hook with the leaf's `.grad()` at that moment.
fn record_grads(w: &Tensor) -> Result<(Seen, autograd::HookHandle)> {
    let seen = Arc::new(Mutex::new(vec![]));
    let s = seen.clone();
    let h = w.register_post_accumulate_grad_hook(move |p| {
        let g = p.grad().expect("the hook runs after accumulation");
        s.lock().unwrap().push(g.to_vec::<f64>()?);
        Ok(())
    })?;
    Ok((seen, h))
}

#[test]
fn fires_once_with_the_summed_grad_for_a_tied_leaf() -> Result<()> {
    // a tied weight: used by two ops (an "embedding" and an "unembedding"), and twice in one op
    let w = leaf(&[1.0, 2.0, 3.0]);
    let (seen, _h) = record_grads(&w)?;
    let idx = Tensor::from_vec(vec![2i64, 0, 2], [3])?;
    let emb = w.index_select(0, &idx)?; // w[2], w[0], w[2]
    let l = emb
        .sum()?
        .add(&w.mul(&w)?.sum()?)?
        .add(&w.mul(3.0)?.sum()?)?;
    l.backward()?;
    // d/dw: index_select counts [1, 0, 2], w·w gives 2w, 3w gives 3
    let expect = vec![1.0 + 2.0 + 3.0, 0.0 + 4.0 + 3.0, 2.0 + 6.0 + 3.0];
    assert_eq!(w.grad().unwrap().to_vec::<f64>()?, expect);
    assert_eq!(*seen.lock().unwrap(), vec![expect]);
    Ok(())
}

#[test]
fn fires_for_a_leaf_that_is_the_root() -> Result<()> {
    let w = leaf(&[1.0, 2.0]);
    let (seen, _h) = record_grads(&w)?;
    let g = Tensor::from_vec(vec![5.0f64, 6.0], [2])?;
    w.backward_with(&g, BackwardOptions::default())?;
    assert_eq!(*seen.lock().unwrap(), vec![vec![5.0, 6.0]]);
    Ok(())
}

#[test]
fn sees_the_grad_accumulated_over_backwards() -> Result<()> {
    let w = leaf(&[1.0, 2.0]);
    let (seen, _h) = record_grads(&w)?;
    w.mul(3.0)?.sum()?.backward()?;
    w.mul(&w)?.sum()?.backward()?; // adds 2w to the 3 already there
    assert_eq!(*seen.lock().unwrap(), vec![vec![3.0, 3.0], vec![5.0, 7.0]]);
    Ok(())
}

#[test]
fn not_fired_by_autograd_grad() -> Result<()> {
    let w = leaf(&[1.0, 2.0]);
    let (seen, _h) = record_grads(&w)?;
    let y = w.mul(&w)?.sum()?;
    let g = autograd::grad(&[&y], &[&w], None, GradOptions::default())?;
    assert_eq!(g[0].as_ref().unwrap().to_vec::<f64>()?, vec![2.0, 4.0]);
    assert!(w.grad().is_none());
    assert!(seen.lock().unwrap().is_empty());
    Ok(())
}

#[test]
fn only_leaves_that_got_a_gradient_fire() -> Result<()> {
    // b takes part in the forward but not in the loss's graph: no gradient, no call
    let (a, b) = (leaf(&[1.0]), leaf(&[2.0]));
    let (seen_a, _ha) = record_grads(&a)?;
    let (seen_b, _hb) = record_grads(&b)?;
    let _unused = b.mul(2.0)?;
    a.mul(4.0)?.sum()?.backward()?;
    assert_eq!(*seen_a.lock().unwrap(), vec![vec![4.0]]);
    assert!(seen_b.lock().unwrap().is_empty());
    Ok(())
}

#[test]
fn remove_hook_removes_it() -> Result<()> {
    let w = leaf(&[1.0, 2.0]);
    let (kept, _hk) = record_grads(&w)?;
    let (removed, h) = record_grads(&w)?;
    let pre_calls = Arc::new(Mutex::new(0));
    let p = pre_calls.clone();
    let pre = w.register_hook(move |_| {
        *p.lock().unwrap() += 1;
        Ok(None)
    })?;
    w.sum()?.backward()?;
    w.remove_hook(h);
    w.sum()?.backward()?;
    assert_eq!(removed.lock().unwrap().len(), 1);
    assert_eq!(kept.lock().unwrap().len(), 2);
    // one counter for both kinds: removing the post hook left the gradient hook alone
    assert_eq!(*pre_calls.lock().unwrap(), 2);
    w.remove_hook(pre);
    w.sum()?.backward()?;
    assert_eq!(*pre_calls.lock().unwrap(), 2);
    assert_eq!(kept.lock().unwrap().len(), 3);
    Ok(())
}

#[test]
fn refused_on_non_leaves_and_tensors_without_grad() -> Result<()> {
    let w = leaf(&[1.0, 2.0]);
    let e = w
        .mul(2.0)?
        .register_post_accumulate_grad_hook(|_| Ok(()))
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("non-leaf") && msg.contains("register_hook"),
        "{msg}"
    );

    let e = w
        .select(0, 1)?
        .register_post_accumulate_grad_hook(|_| Ok(()))
        .unwrap_err();
    assert!(e.to_string().contains("non-leaf"), "{e}");

    let c = Tensor::from_vec(vec![1.0f64], [1])?;
    let e = c
        .register_post_accumulate_grad_hook(|_| Ok(()))
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("doesn't require gradient") && msg.contains("requires_grad_(true)"),
        "{msg}"
    );
    Ok(())
}

#[test]
fn a_hook_error_is_returned_by_backward() -> Result<()> {
    let w = leaf(&[1.0]);
    w.register_post_accumulate_grad_hook(|_| {
        Err(Error::Invalid {
            op: "my_hook",
            msg: "boom".into(),
        })
    })?;
    let e = w.mul(2.0)?.sum()?.backward().unwrap_err();
    assert!(e.to_string().contains("boom"), "{e}");
    Ok(())
}

#[test]
fn queue_callback_outside_backward_is_an_error() -> Result<()> {
    let e = autograd::queue_callback(|| Ok(())).unwrap_err();
    assert!(e.to_string().contains("no backward pass is running"), "{e}");
    // and again after a backward has come and gone
    let w = leaf(&[1.0]);
    w.register_post_accumulate_grad_hook(|_| autograd::queue_callback(|| Ok(())))?;
    w.sum()?.backward()?;
    assert!(autograd::queue_callback(|| Ok(())).is_err());
    Ok(())
}

#[test]
fn callbacks_run_once_after_every_hook_in_queue_order() -> Result<()> {
    let l = log();
    let (a, b, c) = (leaf(&[1.0]), leaf(&[2.0]), leaf(&[3.0]));
    for (name, t) in [("a", &a), ("b", &b), ("c", &c)] {
        let l = l.clone();
        t.register_post_accumulate_grad_hook(move |p| {
            push(
                &l,
                format!("hook {name} {}", p.grad().unwrap().item::<f64>()?),
            );
            if name == "a" {
                // queued from the first hook to run: must wait for b's and c's
                let l1 = l.clone();
                autograd::queue_callback(move || {
                    push(&l1, "callback 1");
                    let l2 = l1.clone();
                    // queued by a callback: runs after it, in the same backward
                    autograd::queue_callback(move || {
                        push(&l2, "callback 3");
                        Ok(())
                    })
                })?;
                let l1 = l.clone();
                autograd::queue_callback(move || {
                    push(&l1, "callback 2");
                    Ok(())
                })?;
            }
            Ok(())
        })?;
    }
    // a is used last in the forward, so its gradient is final first
    let loss = c.mul(&c)?.mul(&b)?.sum()?.add(&a.mul(5.0)?.sum()?)?;
    loss.backward()?;
    let got = entries(&l);
    assert_eq!(got.len(), 6, "{got:?}");
    assert_eq!(got[0], "hook a 5");
    let mut hooks = got[1..3].to_vec();
    hooks.sort();
    assert_eq!(hooks, ["hook b 9", "hook c 12"]);
    assert_eq!(got[3..], ["callback 1", "callback 2", "callback 3"]);

    // the next backward starts with an empty queue: the callbacks ran exactly once
    a.sum()?.backward()?;
    let got = entries(&l);
    assert_eq!(got.len(), 10, "{got:?}");
    assert_eq!(
        got[6..],
        ["hook a 6", "callback 1", "callback 2", "callback 3"]
    );
    Ok(())
}

#[test]
fn callbacks_can_be_queued_from_gradient_hooks_and_autograd_grad() -> Result<()> {
    let l = log();
    let w = leaf(&[1.0, 2.0]);
    let l1 = l.clone();
    w.register_hook(move |g| {
        push(&l1, "pre hook");
        let l2 = l1.clone();
        autograd::queue_callback(move || {
            push(&l2, "callback");
            Ok(())
        })?;
        Ok(Some(g.clone()))
    })?;
    let y = w.mul(2.0)?.sum()?;
    autograd::grad(&[&y], &[&w], None, GradOptions::default())?;
    assert_eq!(entries(&l), ["pre hook", "callback"]);
    Ok(())
}

#[test]
fn a_callback_error_is_returned_by_backward() -> Result<()> {
    let ran_after = Arc::new(Mutex::new(false));
    let r = ran_after.clone();
    let w = leaf(&[1.0]);
    w.register_post_accumulate_grad_hook(move |_| {
        autograd::queue_callback(|| {
            Err(Error::Invalid {
                op: "my_callback",
                msg: "all-reduce failed".into(),
            })
        })?;
        let r = r.clone();
        autograd::queue_callback(move || {
            *r.lock().unwrap() = true;
            Ok(())
        })
    })?;
    let e = w.mul(2.0)?.sum()?.backward().unwrap_err();
    assert!(e.to_string().contains("all-reduce failed"), "{e}");
    assert!(
        !*ran_after.lock().unwrap(),
        "callbacks after a failed one are dropped"
    );
    assert!(
        autograd::queue_callback(|| Ok(())).is_err(),
        "the queue was popped"
    );
    Ok(())
}

#[test]
fn a_failed_backward_drops_its_callbacks() -> Result<()> {
    let ran = Arc::new(Mutex::new(false));
    let r = ran.clone();
    let w = leaf(&[1.0]);
    w.register_post_accumulate_grad_hook(move |_| {
        let r = r.clone();
        autograd::queue_callback(move || {
            *r.lock().unwrap() = true;
            Ok(())
        })?;
        Err(Error::Invalid {
            op: "my_hook",
            msg: "boom".into(),
        })
    })?;
    assert!(w.mul(2.0)?.sum()?.backward().is_err());
    assert!(!*ran.lock().unwrap());
    assert!(autograd::queue_callback(|| Ok(())).is_err());
    // nor do they leak into the next backward
    let v = leaf(&[1.0]);
    v.sum()?.backward()?;
    assert!(!*ran.lock().unwrap());
    Ok(())
}

#[test]
fn a_nested_backward_has_its_own_queue() -> Result<()> {
    let l = log();
    let inner = leaf(&[1.0]);
    let li = l.clone();
    inner.register_post_accumulate_grad_hook(move |_| {
        push(&li, "inner hook");
        let li = li.clone();
        autograd::queue_callback(move || {
            push(&li, "inner callback");
            Ok(())
        })
    })?;
    let outer = leaf(&[2.0]);
    let lo = l.clone();
    let inner2 = inner.clone();
    outer.register_post_accumulate_grad_hook(move |_| {
        push(&lo, "outer hook");
        let l1 = lo.clone();
        autograd::queue_callback(move || {
            push(&l1, "outer callback 1");
            Ok(())
        })?;
        // a backward inside a hook, with grad mode on (the outer pass runs under no_grad)
        let _g = autograd::enable_grad();
        inner2.mul(3.0)?.sum()?.backward()?;
        push(&lo, "outer hook after inner backward");
        let l2 = lo.clone();
        autograd::queue_callback(move || {
            push(&l2, "outer callback 2");
            Ok(())
        })
    })?;
    outer.mul(2.0)?.sum()?.backward()?;
    assert_eq!(
        entries(&l),
        [
            "outer hook",
            "inner hook",
            "inner callback",
            "outer hook after inner backward",
            "outer callback 1",
            "outer callback 2"
        ]
    );
    assert_eq!(inner.grad().unwrap().item::<f64>()?, 3.0);
    Ok(())
}

#[test]
fn hooks_and_callbacks_run_in_the_backward_grad_mode() -> Result<()> {
    let modes = Arc::new(Mutex::new(vec![]));
    let w = leaf(&[1.0]);
    let m = modes.clone();
    w.register_post_accumulate_grad_hook(move |_| {
        m.lock().unwrap().push(autograd::is_grad_enabled());
        let m = m.clone();
        autograd::queue_callback(move || {
            m.lock().unwrap().push(autograd::is_grad_enabled());
            Ok(())
        })
    })?;
    w.mul(2.0)?.sum()?.backward()?;
    let opts = BackwardOptions {
        create_graph: true,
        ..Default::default()
    };
    let y = w.mul(&w)?.sum()?;
    y.backward_with(&y.ones_like(stride_core::MemoryFormat::Contiguous)?, opts)?;
    assert_eq!(*modes.lock().unwrap(), [false, false, true, true]);
    Ok(())
}
