//! `stride bench cpu --quick --json` runs and prints one valid JSON object (the NumPy peer is
//! skipped: this is a smoke test of the command, not a measurement; nothing asserts on time).

mod common;

use std::process::Command;

#[test]
fn bench_cpu_quick_json_is_valid() {
    let out = Command::new(common::stride_bin())
        .args(["bench", "cpu", "--quick", "--json", "--no-peer"])
        .output()
        .expect("the stride binary runs");
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
    assert_eq!(v["quick"], true);
    assert_eq!(v["peer"]["available"], false);
    assert!(v["machine"]["bandwidth_bytes_per_s"].as_f64().unwrap() > 0.0);
    assert!(v["machine"]["peak_flops_per_s"].as_f64().unwrap() > 0.0);
    let rows = v["rows"].as_array().expect("rows");
    for id in [
        "matmul_f32_64",
        "matmul_f32_64_tt",
        "add_f32",
        "contiguous_t",
        "add_step",
        "mul_t",
    ] {
        assert!(rows.iter().any(|r| r["id"] == id), "row {id} missing");
    }
    for r in rows {
        assert!(r["seconds"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["floor_seconds"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["numpy_seconds"].is_null(), "{r}");
    }
}

#[test]
fn bench_cpu_table_says_when_the_peer_is_missing() {
    let out = Command::new(common::stride_bin())
        .args([
            "bench",
            "cpu",
            "--quick",
            "--python",
            "/nonexistent/python3",
        ])
        .output()
        .expect("the stride binary runs");
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("NumPy unavailable") && text.contains("pip install numpy"),
        "{text}"
    );
    assert!(text.contains("matmul f32 64x64x64"), "{text}");
}
