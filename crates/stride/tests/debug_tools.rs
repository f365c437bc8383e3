//! The debug tools (`stride::debug`) on every device present: anomaly mode, the sync
//! guard, the profiler, the cross-check and the injected fault it must catch. CUDA parts run
//! where a GPU is present and say they skipped otherwise. (They live in the facade crate:
//! call sites need line tables in the caller's crate, which the workspace's `test` profile
//! keeps for every crate but stride-core.)

use std::sync::Mutex;
use stride::debug::{self, CrossCheckConfig};
use stride::{cuda, DType, Device, Error, Tensor};

/// Tests here read process-wide counters (allocation, launches): one at a time.
static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn devices() -> Vec<Device> {
    let mut v = vec![Device::Cpu];
    // the CUDA half skips, saying so, without a GPU; fails instead under STRIDE_REQUIRE_CUDA=1
    v.extend(cuda::require_or_skip(
        "debug_tools (the CUDA half of this test)",
    ));
    v
}

fn t(v: Vec<f32>, shape: &[usize], dev: &Device) -> Tensor {
    Tensor::from_vec(v, shape.to_vec())
        .unwrap()
        .to_device(dev)
        .unwrap()
}

// ---------------------------------------------------------------------------------------
// anomaly mode

#[test]
fn anomaly_names_the_op_its_operands_and_this_line() {
    let _l = lock();
    for dev in devices() {
        let x = t(vec![1.0, 0.0, 4.0, 9.0, 1.0, 2.0], &[2, 3], &dev)
            .t()
            .unwrap();
        let before = x.log().unwrap(); // outside the guard: not checked
        assert!(before.to_vec::<f32>().unwrap()[2].is_infinite());
        let _g = debug::detect_anomaly();
        let err = x.log().unwrap_err();
        let Error::Anomaly { op, report } = &err else {
            panic!("{dev}: expected an anomaly, got {err}")
        };
        assert_eq!(op, "log");
        assert!(report.contains("1 infinit"), "{report}");
        assert!(report.contains("float32 [3, 2] strides [1, 3]"), "{report}");
        assert!(report.contains("non-contiguous"), "{report}");
        assert!(report.contains(&dev.to_string()), "{report}");
        assert!(
            report.contains("called at ") && report.contains("tests/debug_tools.rs:"),
            "{report}"
        );
        // finite results pass
        x.exp().unwrap();
    }
}

#[test]
fn anomaly_reports_where_nan_is_born_not_where_it_spreads() {
    let _l = lock();
    for dev in devices() {
        let x = t(vec![f32::INFINITY, 1.0], &[2], &dev);
        let _g = debug::detect_anomaly_nan_only();
        // an infinity passes in NaN-only mode
        let y = x.mul(2.0).unwrap();
        // inf - inf = NaN: born here
        let err = y.sub(&y).unwrap_err();
        assert!(
            matches!(&err, Error::Anomaly { op, report } if op == "sub" && report.contains("1 NaN")),
            "{dev}: {err}"
        );
        // NaN already in an input spreads without a report
        let nan = t(vec![f32::NAN, 1.0], &[2], &dev);
        nan.exp().unwrap();
    }
}

#[test]
fn anomaly_in_backward_names_the_node_and_where_its_forward_ran() {
    let _l = lock();
    for dev in devices() {
        let x = t(vec![0.0, 4.0], &[2], &dev).requires_grad_(true).unwrap();
        let _g = debug::detect_anomaly();
        let y = x.sqrt().unwrap(); // sqrt(0) = 0 is fine; its gradient 1/(2·0) is not
        let loss = y.sum().unwrap();
        let err = loss.backward().unwrap_err();
        let Error::Anomaly { report, .. } = &err else {
            panic!("{dev}: expected an anomaly, got {err}")
        };
        assert!(
            report.contains("in SqrtBackward (its forward op"),
            "{report}"
        );
        assert!(
            report.contains("called at ") && report.contains("tests/debug_tools.rs:"),
            "{report}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// sync guard

#[test]
fn sync_guard_refuses_every_host_wait_and_names_it() {
    let _l = lock();
    for dev in devices() {
        let x = t((0..12).map(|i| i as f32).collect(), &[3, 4], &dev);
        let idx = Tensor::from_vec(vec![2i64, 0], [2])
            .unwrap()
            .to_device(&dev)
            .unwrap();
        let _g = debug::forbid_sync();
        // queued work only
        let y = x
            .mul(2.0)
            .unwrap()
            .exp()
            .unwrap()
            .sum_dims(&[1], false)
            .unwrap();
        let cases: Vec<(&str, Box<dyn Fn() -> stride::Result<()>>)> = vec![
            ("to_vec", Box::new(|| y.to_vec::<f32>().map(drop))),
            ("to_vec", Box::new(|| y.sum()?.item::<f32>().map(drop))),
            ("count_nonzero", Box::new(|| x.gt(3.0)?.nonzero().map(drop))),
            (
                "to_device",
                Box::new(|| x.to_device(&Device::Cpu).map(drop)),
            ),
        ];
        for (why, f) in &cases {
            if *why == "to_device" && dev.is_cpu() {
                continue; // already on the host: no transfer
            }
            let err = f().unwrap_err();
            let Error::HostSync { report, device } = &err else {
                panic!("{dev}: {why}: expected a sync error, got {err}")
            };
            assert_eq!(*device, dev);
            assert!(report.starts_with(why), "{report}");
            assert!(report.contains("debug_tools.rs:"), "{report}");
        }
        // checks that need the data run on the device: no wait
        let picked = x.index_select(0, &idx).unwrap();
        drop(_g);
        assert_eq!(y.to_vec::<f32>().unwrap().len(), 3);
        assert_eq!(picked.shape(), &[2, 4]);
    }
}

/// The same program reports the same host waits on every device, in the same order.
#[test]
fn host_waits_are_the_same_on_every_device() {
    let _l = lock();
    let program = |dev: &Device| -> Vec<String> {
        let x = t(
            (0..24).map(|i| (i as f32 - 7.0) * 0.5).collect(),
            &[4, 6],
            dev,
        );
        let xi = x.to_dtype(DType::I64).unwrap();
        let idx = t(vec![3.0, 1.0], &[2], dev).to_dtype(DType::I32).unwrap();
        let prof = debug::Profiler::start();
        let _ = x.index_select(1, &idx).unwrap();
        let _ = x
            .gather(1, &idx.unsqueeze(0).unwrap().expand(&[4, 2]).unwrap())
            .unwrap();
        let _ = x.gt(0.0).unwrap().nonzero().unwrap();
        let _ = x.masked_select(&x.lt(1.0).unwrap()).unwrap();
        let _ = xi.floor_divide(3i64).unwrap();
        let _ = xi.remainder(&xi.add(100i64).unwrap()).unwrap();
        let _ = x.unique(true, false, false).unwrap();
        let _ = x.histc(10, 0.0, 0.0).unwrap();
        let _ = x.sum().unwrap().item::<f32>().unwrap();
        let _ = x.softmax(1).unwrap().argmax(Some(1), false).unwrap();
        let r = prof.stop().unwrap();
        r.syncs.iter().map(|s| s.why.clone()).collect()
    };
    let cpu = program(&Device::Cpu);
    // reads and data-sized outputs wait; index and integer-division checks do not
    assert!(cpu.len() >= 5, "{cpu:?}");
    assert!(
        !cpu.iter()
            .any(|w| w.contains("range check") || w.contains("division check")),
        "{cpu:?}"
    );
    if let Some(gpu) = cuda::require_or_skip("host_waits_are_the_same_on_every_device") {
        assert_eq!(program(&gpu), cpu);
    }
}

// ---------------------------------------------------------------------------------------
// profiler

#[test]
fn profiler_counts_times_allocations_syncs_and_writes_a_chrome_trace() {
    let _l = lock();
    for dev in devices() {
        let x = t(
            (0..4096).map(|i| (i as f32).sin()).collect(),
            &[64, 64],
            &dev,
        )
        .requires_grad_(true)
        .unwrap();
        let prof = debug::Profiler::start();
        let y = x.exp().unwrap();
        let z = {
            let _r = debug::range("block");
            y.matmul(&y.t().unwrap()).unwrap().relu().unwrap()
        };
        let loss = z.sum().unwrap();
        loss.backward().unwrap();
        let v = loss.item::<f32>().unwrap();
        assert!(v.is_finite());
        let r = prof.stop().unwrap();
        // the first op's bytes are its output, allocated just before it ran
        let exp = r.events.iter().find(|e| e.name == "exp").unwrap();
        assert_eq!(exp.bytes_allocated, 64 * 64 * 4, "{dev}");
        assert!(exp.peak_bytes >= 64 * 64 * 4);
        assert_eq!(exp.device, dev);
        let mm = r.op("matmul").unwrap();
        assert_eq!(mm.calls, 3, "{dev}: forward + 2 in backward\n{r}"); // forward + two grads
        assert!(mm.host_s > 0.0);
        if dev.is_cpu() {
            assert_eq!(mm.launches, 0);
            assert!(exp.device_s.is_none());
        } else {
            assert!(mm.device_s > 0.0, "{r}");
            assert!(r.op("exp").unwrap().launches >= 1, "{r}");
        }
        // the range and the backward nodes are ranges around their ops
        let block = r.events.iter().find(|e| e.name == "block").unwrap();
        assert_eq!(block.kind, "range");
        // `matmul` records MatmulBackward: its node must be a range, and the two
        // matmuls of its backward must run inside it (not merely "some event named …Backward")
        let mm_bw: Vec<_> = r
            .events
            .iter()
            .filter(|e| e.kind == "range" && e.name == "MatmulBackward")
            .collect();
        assert_eq!(mm_bw.len(), 1, "{dev}: one MatmulBackward range\n{r}");
        let bw = mm_bw[0];
        let inside_bw = r
            .events
            .iter()
            .filter(|e| {
                e.kind == "op"
                    && e.name == "matmul"
                    && e.start_s >= bw.start_s
                    && e.start_s + e.host_s <= bw.start_s + bw.host_s
            })
            .count();
        assert_eq!(
            inside_bw, 2,
            "{dev}: the backward's two matmuls inside MatmulBackward\n{r}"
        );
        let inside = r
            .events
            .iter()
            .filter(|e| {
                e.kind == "op"
                    && e.start_s >= block.start_s
                    && e.start_s <= block.start_s + block.host_s
            })
            .count();
        assert!(inside >= 2, "{r}");
        // one host wait: item
        assert_eq!(r.syncs.len(), 1, "{r}");
        assert_eq!(r.syncs[0].why, "to_vec");
        assert!(
            r.syncs[0].site.contains("Tensor::item"),
            "{}",
            r.syncs[0].site
        );
        // table and trace
        let table = r.table();
        assert!(table.lines().next().unwrap().contains("device ms"));
        assert!(table.contains("matmul"));
        let json: serde_json::Value = serde_json::from_str(&r.chrome_trace()).unwrap();
        let evs = json["traceEvents"].as_array().unwrap();
        assert!(evs.iter().any(|e| e["name"] == "matmul" && e["ph"] == "X"));
        assert!(evs.iter().any(|e| e["ph"] == "i" && e["cat"] == "sync"));
        if !dev.is_cpu() {
            assert!(evs.iter().any(|e| e["cat"] == "device"), "no device track");
        }
        let path = std::env::temp_dir().join(format!("stride-trace-{}.json", std::process::id()));
        r.write_chrome_trace(&path).unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() > 100);
        let _ = std::fs::remove_file(path);
    }
}

// ---------------------------------------------------------------------------------------
// cross-check and the injected fault

#[test]
fn cross_check_passes_correct_ops_in_every_layout() {
    let _l = lock();
    for dev in devices() {
        for dt in [DType::F32, DType::F16, DType::BF16] {
            let base = t(
                (0..48).map(|i| (i as f32 * 0.37).sin()).collect(),
                &[6, 8],
                &dev,
            )
            .to_dtype(dt)
            .unwrap();
            let g = debug::cross_check();
            let layouts = [
                base.clone(),
                base.t().unwrap().contiguous().unwrap().t().unwrap(),
                base.slice(1, 0, 8, 2).unwrap(),
                base.narrow(0, 1, 4).unwrap(),
            ];
            for x in &layouts {
                let y = x.exp().unwrap().mul(x).unwrap().add(1.0).unwrap();
                let _ = y.sum_dims(&[1], false).unwrap();
                let _ = y.softmax(0).unwrap();
                let _ = y.matmul(&y.t().unwrap()).unwrap();
                let w = x.clone_with(stride::MemoryFormat::Preserve).unwrap();
                w.addcmul_(x, x, 0.5).unwrap();
                let _ = y.sort(1, false, true).unwrap();
                let _ = y.cumsum(0).unwrap();
            }
            assert!(
                g.disagreements().is_empty(),
                "{dev} {dt}: {}",
                g.disagreements()[0]
            );
            assert!(g.checked() > 20, "{}", g.checked());
            assert!(g.skipped().is_empty(), "{:?}", g.skipped());
        }
    }
}

#[test]
fn cross_check_names_the_op_that_dropped_its_writes() {
    let _l = lock();
    for dev in devices() {
        // the motivating bug: addcmul_ into a transposed (non-contiguous) output
        let w = t((0..12).map(|i| i as f32).collect(), &[4, 3], &dev)
            .t()
            .unwrap();
        let a = t(vec![2.0; 12], &[3, 4], &dev);
        let _fault = debug::inject_fault("addcmul");
        // contiguous outputs are untouched by the fault
        let c = a.clone_with(stride::MemoryFormat::Contiguous).unwrap();
        c.addcmul_(&a, &a, 1.0).unwrap();
        assert_eq!(c.to_vec::<f32>().unwrap(), vec![6.0; 12]);
        // a strided output keeps its old values: no error without the cross-check
        let before = w.to_vec::<f32>().unwrap();
        w.addcmul_(&a, &a, 0.5).unwrap();
        assert_eq!(
            w.to_vec::<f32>().unwrap(),
            before,
            "{dev}: the fault must drop the write"
        );
        // the cross-check catches it and names it
        let g = debug::cross_check();
        w.mul_(1.0).unwrap(); // a correct op first
        w.addcmul_(&a, &a, 0.5).unwrap();
        let d = g.first().expect("the dropped write must be caught");
        assert_eq!(d.op, "addcmul");
        assert_eq!(d.api.as_deref(), Some("Tensor::addcmul_"));
        assert_eq!(d.mismatched, 12);
        assert_eq!(d.max_abs_diff, 2.0);
        assert!(
            d.operands.contains("strides [1, 3]") && d.operands.contains("non-contiguous"),
            "{d}"
        );
        assert!(d.site.contains("debug_tools.rs:"), "{d}");
        assert_eq!(d.reference, "cpu float64");
        drop(g);
        // stop_on_first turns it into an error
        let _g = debug::cross_check_with(CrossCheckConfig {
            stop_on_first: true,
            ..Default::default()
        });
        let err = w.addcmul_(&a, &a, 0.5).unwrap_err();
        assert!(
            matches!(&err, Error::CrossCheck { op, .. } if op == "addcmul"),
            "{err}"
        );
    }
}
