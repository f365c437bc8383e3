//! (a) The whole sampled matrix passes on the CPU with zero failures, and covers what it
//! claims to cover.

use stride_check::{registry, run, Config, LayoutKind};

#[test]
fn sampled_matrix_passes_on_cpu() {
    let report = run(&Config {
        progress: std::env::var("STRIDE_CHECK_PROGRESS").is_ok(),
        ..Config::default()
    });
    if std::env::var("STRIDE_CHECK_PRINT").is_ok() {
        println!("{}", report.table());
    }
    assert!(report.ok(), "{}", report.table());

    // every registered op ran, in every form it has
    for op in registry::all() {
        for form in op.forms() {
            assert!(
                report
                    .rows
                    .keys()
                    .any(|k| k.op == op.name && k.form == form),
                "{} ({form}) never ran",
                op.name
            );
        }
    }
    // every layout kind was exercised, and the error paths too
    for kind in LayoutKind::ALL {
        assert!(
            report.rows.keys().any(|k| k.layout == kind.name()),
            "layout {} never ran",
            kind.name()
        );
    }
    // index operands ran in every index dtype and every layout (expanded: stride 0), also
    // for in-place destinations
    for idx in ["i64", "i32", "u32"] {
        for kind in LayoutKind::ALL {
            assert!(
                report.rows.keys().any(|k| k.op == "scatter_add"
                    && k.form == stride_check::Form::InPlace
                    && k.layout == kind.name()
                    && k.dtype.ends_with(&format!("/{idx}"))),
                "scatter_add_ never ran with a {idx} index in layout {}",
                kind.name()
            );
        }
    }
    for extra in ["aliased", "mixed", "rejects"] {
        assert!(
            report.rows.keys().any(|k| k.layout == extra),
            "{extra} cases never ran"
        );
    }
}
