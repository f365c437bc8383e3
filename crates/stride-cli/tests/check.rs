//! `stride check` end to end: a table and exit 0 when everything passes, JSON, and a clear
//! non-zero exit for a device without a backend or an unknown op.

mod common;
use common::{stride, text};

#[test]
fn check_prints_a_table_and_exits_zero() {
    let o = stride(&["check", "--op", "neg", "--op", "transpose"]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", text(&o.stderr));
    for needle in [
        "neg",
        "transpose",
        "inplace",
        "transp",
        "expand",
        "bf16",
        "checks passed",
    ] {
        assert!(out.contains(needle), "no {needle:?} in\n{out}");
    }
}

#[test]
fn check_json_is_one_document() {
    let o = stride(&["check", "--op", "eq.scalar", "--json"]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let t = out.trim();
    assert!(
        t.starts_with("{\"device\":\"cpu\"") && t.ends_with("]}"),
        "{t}"
    );
    assert!(t.contains("\"failed\":0") && t.contains("\"op\":\"eq.scalar\""));
}

#[test]
fn a_device_without_a_backend_is_a_clear_error() {
    let o = stride(&["check", "--device", "cuda:999"]); // no machine has it
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(
        err.contains("cuda:999") && err.contains("not available"),
        "{err}"
    );
}

#[test]
fn an_unknown_op_is_an_error() {
    let o = stride(&["check", "--op", "no_such_op"]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("no op named"),
        "{}",
        text(&o.stderr)
    );
}
