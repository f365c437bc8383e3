//! stride-check: the op registry, the layout generator and the conformance runner behind
//! `stride check`.
//!
//! stride promises the same answer on every device, dtype and memory layout, and a loud
//! failure instead of a silent one. This crate is how that promise is checked: every op is
//! declared once in the [`registry`] (operands, claimed dtypes, result-dtype rule, sample
//! generator, an f64 reference written with plain loops, tolerances, and how to call each
//! form), and the [`runner`] runs each one over every [`layouts::LayoutKind`] (outputs of
//! in-place and `_out` forms included — poisoned before the call, guarded around), every
//! size of the [`sizes`] sweep and every dtype, producing a [`Report`].
//! Each entry also says whether the op is differentiable ([`Grad`]); [`grad`] gradchecks
//! every differentiable entry over its samples and the same layouts.
//!
//! ```no_run
//! let report = stride_check::run(&stride_check::Config::default());
//! print!("{}", report.table());
//! assert!(report.ok());
//! ```
//!
//! See `README.md` in this crate for how to add an op.

pub mod bounds;
pub mod grad;
pub mod host;
pub mod layouts;
pub mod promote;
pub mod reference;
pub mod registry;
pub mod report;
pub mod rng;
pub mod runner;
pub mod sizes;
pub mod tol;

pub use layouts::{LayoutKind, LayoutSpec};
pub use registry::{
    Arg, ArgSpec, DTypeRule, Domain, Family, Form, Grad, OpInfo, Params, Sample, SampleArg,
    SampleCtx,
};
pub use report::{Failure, Key, Reason, Report};
pub use runner::{
    device_available, run, run_case, run_case_outcome, run_ops, Assignment, Config, LayoutChoice,
    Outcome,
};
pub use tol::Tol;
