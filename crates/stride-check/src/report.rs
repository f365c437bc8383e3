//! The conformance report: pass/fail counts per (op, form, layout, dtype), the first
//! failure of each with everything needed to reproduce it, a readable table and JSON.

use crate::host::short;
use crate::registry::Form;
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use stride_core::{DType, Device};

/// One row of the report.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub op: String,
    pub form: Form,
    /// A layout kind's name, or `mixed` (mixed-dtype cases) or `rejects` (unclaimed dtypes).
    pub layout: String,
    /// A dtype (`f32`), a pair (`f32,i64`), a cast (`f32->i64`), …
    pub dtype: String,
}

/// An operand of a failing case.
#[derive(Debug, Clone, PartialEq)]
pub struct OperandDesc {
    /// `self`, `other`, `out`, `result`, …
    pub role: String,
    pub dtype: Option<DType>,
    pub layout: String,
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
    pub offset: usize,
    pub storage_len: usize,
    /// For a scalar operand, its value.
    pub scalar: Option<String>,
}

impl OperandDesc {
    pub fn scalar(role: &str, value: String) -> OperandDesc {
        OperandDesc {
            role: role.into(),
            dtype: None,
            layout: "scalar".into(),
            shape: vec![],
            strides: vec![],
            offset: 0,
            storage_len: 0,
            scalar: Some(value),
        }
    }
}

impl fmt::Display for OperandDesc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.scalar {
            Some(v) => write!(f, "{}: scalar {v}", self.role),
            None => write!(
                f,
                "{}: {} {} shape {:?} strides {:?} offset {} (storage {})",
                self.role,
                self.dtype.map_or("?", short),
                self.layout,
                self.shape,
                self.strides,
                self.offset,
                self.storage_len
            ),
        }
    }
}

/// Why a case failed.
#[derive(Debug, Clone, PartialEq)]
pub enum Reason {
    /// The op panicked (it must return an error instead).
    Panicked { message: String },
    /// The op returned an error where it must succeed.
    UnexpectedError { error: String },
    /// The op succeeded where it must fail.
    MissingError { expected: String },
    /// The result's dtype is not what the dtype rule says (dtypes never change silently).
    WrongDType { expected: DType, got: DType },
    WrongShape {
        expected: Vec<usize>,
        got: Vec<usize>,
    },
    /// An in-place or `_out` call returned something other than its destination.
    NotDestination,
    /// A view that copied, or a copy that aliases an input.
    Aliasing { expected_shared: bool },
    WrongStrides {
        expected: Vec<usize>,
        got: Vec<usize>,
    },
    /// A new (non-view) result whose elements overlap or leave gaps in its storage.
    NotDense {
        shape: Vec<usize>,
        strides: Vec<usize>,
        storage_len: usize,
    },
    /// Values outside the tolerance.
    WrongValues {
        mismatches: usize,
        total: usize,
        /// The worst element's index.
        index: Vec<usize>,
        got: f64,
        want: f64,
        max_abs_err: f64,
        max_rel_err: f64,
        atol: f64,
        rtol: f64,
    },
    /// Output elements the op never wrote: still poisoned (`_out`) or still holding their
    /// old value (in place) — the dropped-write bug.
    Unwritten {
        index: Vec<usize>,
        value: f64,
        want: f64,
        count: usize,
        total: usize,
        poisoned: bool,
    },
    /// Storage around the destination view changed: a stray write.
    GuardClobbered {
        operand: String,
        storage_index: usize,
        was: f64,
        now: f64,
        count: usize,
    },
    /// An input's storage changed (or any operand's, after a refused call).
    InputModified {
        operand: String,
        storage_index: usize,
        was: f64,
        now: f64,
        count: usize,
    },
    /// The harness itself could not run the case.
    Harness { message: String },
}

impl Reason {
    /// A short machine-readable name.
    pub fn kind(&self) -> &'static str {
        match self {
            Reason::Panicked { .. } => "panicked",
            Reason::UnexpectedError { .. } => "unexpected_error",
            Reason::MissingError { .. } => "missing_error",
            Reason::WrongDType { .. } => "wrong_dtype",
            Reason::WrongShape { .. } => "wrong_shape",
            Reason::NotDestination => "not_destination",
            Reason::Aliasing { .. } => "aliasing",
            Reason::WrongStrides { .. } => "wrong_strides",
            Reason::NotDense { .. } => "not_dense",
            Reason::WrongValues { .. } => "wrong_values",
            Reason::Unwritten { .. } => "unwritten",
            Reason::GuardClobbered { .. } => "guard_clobbered",
            Reason::InputModified { .. } => "input_modified",
            Reason::Harness { .. } => "harness",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Panicked { message } => write!(f, "panicked: {message}"),
            Reason::UnexpectedError { error } => write!(f, "returned an error where it must succeed: {error}"),
            Reason::MissingError { expected } => write!(f, "succeeded where it must fail: {expected}"),
            Reason::WrongDType { expected, got } => write!(f, "returned dtype {got}, the dtype rule says {expected}"),
            Reason::WrongShape { expected, got } => write!(f, "returned shape {got:?}, expected {expected:?}"),
            Reason::NotDestination => write!(f, "did not return its destination (self / out) view"),
            Reason::Aliasing { expected_shared: true } => write!(f, "expected a view sharing the input's storage, got a copy"),
            Reason::Aliasing { expected_shared: false } => write!(f, "expected a new tensor, got one sharing an input's storage"),
            Reason::WrongStrides { expected, got } => write!(f, "returned strides {got:?}, expected {expected:?}"),
            Reason::NotDense { shape, strides, storage_len } => write!(
                f,
                "returned a new tensor (shape {shape:?}, strides {strides:?}, storage {storage_len}) that is not dense and non-overlapping"
            ),
            Reason::WrongValues { mismatches, total, index, got, want, max_abs_err, max_rel_err, atol, rtol } => write!(
                f,
                "{mismatches}/{total} values out of tolerance (atol {atol:e}, rtol {rtol:e}); worst at {index:?}: got {got}, want {want}; max abs err {max_abs_err:e}, max rel err {max_rel_err:e}"
            ),
            Reason::Unwritten { index, value, want, count, total, poisoned } => write!(
                f,
                "{count}/{total} output elements never written (first at {index:?}: {} {value}, want {want})",
                if *poisoned { "still poisoned:" } else { "kept its old value" }
            ),
            Reason::GuardClobbered { operand, storage_index, was, now, count } => write!(
                f,
                "stray write: {count} storage element(s) outside the {operand} view changed (first at storage index {storage_index}: guard {was} became {now})"
            ),
            Reason::InputModified { operand, storage_index, was, now, count } => write!(
                f,
                "operand {operand} was modified: {count} storage element(s) changed (first at storage index {storage_index}: {was} became {now})"
            ),
            Reason::Harness { message } => write!(f, "harness error: {message}"),
        }
    }
}

/// The first failure of a row: enough to reproduce it.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub op: String,
    pub form: Form,
    pub dtype: String,
    pub operands: Vec<OperandDesc>,
    pub params: String,
    pub reason: Reason,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} ({}) dtype {}{}",
            self.op,
            self.form,
            self.dtype,
            if self.params.is_empty() {
                String::new()
            } else {
                format!(" args {}", self.params)
            }
        )?;
        for o in &self.operands {
            writeln!(f, "    {o}")?;
        }
        write!(f, "    => {}", self.reason)
    }
}

/// Counts of one row.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    /// Passes: cases whose result was checked, plus cases refused as they had to be.
    pub passed: u64,
    pub failed: u64,
    pub first_failure: Option<Failure>,
    /// Of `passed`, the cases that passed by failing as required (no value was checked).
    pub refused: u64,
    /// Cases the device has no kernel for (`Error::NotImplemented`): not run, not passed.
    pub not_implemented: u64,
    /// Cases that need a dtype the device cannot hold (f64 on wgpu): not run, not passed,
    /// not failed.
    pub device_lacks: u64,
}

impl Row {
    /// Cases whose result was computed and checked (passes that were not refusals).
    pub fn checked(&self) -> u64 {
        self.passed - self.refused
    }
}

/// Collects outcomes.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    pub rows: BTreeMap<Key, Row>,
}

impl Recorder {
    /// Records a case by how it ended (a refusal and a missing kernel counted apart).
    pub fn record_outcome(&mut self, key: Key, outcome: crate::runner::Outcome) {
        use crate::runner::Outcome;
        match outcome {
            Outcome::Checked => self.record(key, Ok(())),
            Outcome::Refused => {
                self.rows.entry(key.clone()).or_default().refused += 1;
                self.record(key, Ok(()));
            }
            Outcome::NotImplemented => self.rows.entry(key).or_default().not_implemented += 1,
            Outcome::DeviceLacksDType => self.rows.entry(key).or_default().device_lacks += 1,
            Outcome::Failed(f) => self.record(key, Err(f)),
        }
    }
    pub fn record(&mut self, key: Key, outcome: Result<(), Failure>) {
        let row = self.rows.entry(key).or_default();
        match outcome {
            Ok(()) => row.passed += 1,
            Err(f) => {
                row.failed += 1;
                row.first_failure.get_or_insert(f);
            }
        }
    }
    /// (passed, failed)
    pub fn totals(&self) -> (u64, u64) {
        self.rows
            .values()
            .fold((0, 0), |(p, f), r| (p + r.passed, f + r.failed))
    }
}

/// The result of a run.
#[derive(Debug, Clone)]
pub struct Report {
    pub device: Device,
    pub full: bool,
    pub rows: BTreeMap<Key, Row>,
    pub elapsed_s: f64,
    /// Set when the device cannot run ops in this build (nothing was run).
    pub device_error: Option<String>,
    /// Cases not run because the op has no kernel on this device yet, by op.
    pub not_implemented: BTreeMap<String, u64>,
}

const LAYOUT_COLUMNS: [&str; 10] = [
    "contiguous",
    "transposed",
    "permuted",
    "stepped",
    "offset",
    "expanded",
    "unit-strides",
    "aliased",
    "mixed",
    "rejects",
];
const LAYOUT_HEADS: [&str; 10] = [
    "contig", "transp", "permut", "stepped", "offset", "expand", "unit", "aliased", "mixed",
    "rejects",
];

/// The dtype a row's label starts with (`f32,i64` → f32; `u8->f16` → u8).
fn label_dtype(label: &str) -> Option<DType> {
    let head: String = label
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    DType::parse(&head)
}

impl Report {
    pub fn new(device: Device, full: bool) -> Report {
        Report {
            device,
            full,
            rows: BTreeMap::new(),
            elapsed_s: 0.0,
            device_error: None,
            not_implemented: BTreeMap::new(),
        }
    }
    pub fn merge(&mut self, r: Recorder) {
        for (k, v) in r.rows {
            let row = self.rows.entry(k).or_default();
            row.passed += v.passed;
            row.failed += v.failed;
            row.refused += v.refused;
            row.not_implemented += v.not_implemented;
            row.device_lacks += v.device_lacks;
            if row.first_failure.is_none() {
                row.first_failure = v.first_failure;
            }
        }
    }
    pub fn passed(&self) -> u64 {
        self.rows.values().map(|r| r.passed).sum()
    }
    pub fn failed(&self) -> u64 {
        self.rows.values().map(|r| r.failed).sum()
    }
    /// Cases not run because they need a dtype the device cannot hold.
    pub fn device_lacks_total(&self) -> u64 {
        self.rows.values().map(|r| r.device_lacks).sum()
    }
    /// Cases not run because the device has no kernel for them.
    pub fn not_implemented_total(&self) -> u64 {
        self.rows.values().map(|r| r.not_implemented).sum()
    }
    /// Whether everything ran and passed: no failure, and no case left unrun for want of a
    /// kernel (see [`Report::ok_allowing_unimplemented`]).
    pub fn ok(&self) -> bool {
        self.ok_allowing_unimplemented() && self.not_implemented_total() == 0
    }
    /// Whether everything that ran passed; cases without a kernel on the device are allowed
    /// (`stride check --allow-unimplemented`). They are still counted and listed.
    pub fn ok_allowing_unimplemented(&self) -> bool {
        self.device_error.is_none() && self.failed() == 0
    }
    /// The exit status of `stride check`: `Err` (in words) when a check failed or the
    /// device can't run, and when any case did not run for want of a kernel unless
    /// `allow_unimplemented`.
    pub fn verdict(&self, allow_unimplemented: bool) -> Result<(), String> {
        let device = self.device;
        if let Some(e) = &self.device_error {
            return Err(format!("device {device} can't run: {e}"));
        }
        if self.failed() > 0 {
            return Err(format!(
                "{} of {} checks failed on {device}",
                self.failed(),
                self.passed() + self.failed()
            ));
        }
        let ni = self.not_implemented_total();
        if ni > 0 && !allow_unimplemented {
            let ops: Vec<&str> = self.not_implemented.keys().map(|k| k.as_str()).collect();
            return Err(format!(
                "{ni} cases did not run on {device}: no kernel for {} (pass \
                 --allow-unimplemented to accept that)",
                ops.join(", ")
            ));
        }
        Ok(())
    }
    /// Whether `op` in `form` ran at least one case whose *result* was checked — a row of
    /// refusals (rejected dtypes, invalid arguments) or of missing kernels does not count.
    pub fn ran(&self, op: &str, form: Form) -> bool {
        self.rows
            .iter()
            .any(|(k, r)| k.op == op && k.form == form && r.checked() > 0)
    }
    /// The rows with failures.
    pub fn failures(&self) -> Vec<(&Key, &Failure)> {
        self.rows
            .iter()
            .filter_map(|(k, r)| r.first_failure.as_ref().map(|f| (k, f)))
            .collect()
    }
    /// Distinct ops, (op, form) pairs, layout columns and dtype labels covered — by rows
    /// with at least one checked result (refusals and missing kernels cover nothing).
    pub fn coverage(&self) -> (usize, usize, usize, usize) {
        use std::collections::BTreeSet;
        let keys = || {
            self.rows
                .iter()
                .filter(|(_, r)| r.checked() > 0)
                .map(|(k, _)| k)
        };
        let ops: BTreeSet<&str> = keys().map(|k| k.op.as_str()).collect();
        let forms: BTreeSet<(&str, Form)> = keys().map(|k| (k.op.as_str(), k.form)).collect();
        let layouts: BTreeSet<&str> = keys().map(|k| k.layout.as_str()).collect();
        let dtypes: BTreeSet<&str> = keys().map(|k| k.dtype.as_str()).collect();
        (ops.len(), forms.len(), layouts.len(), dtypes.len())
    }

    /// The readable report: a summary, an (op, form) × layout table, an op × dtype table,
    /// then every failing row with its first failure.
    pub fn table(&self) -> String {
        let mut s = String::new();
        if let Some(e) = &self.device_error {
            let _ = writeln!(s, "stride check: device {} can't run: {e}", self.device);
            return s;
        }
        let (ops, forms, _, labels) = self.coverage();
        let _ = writeln!(
            s,
            "stride check on {} — {} sweep — {} ops, {} op forms, {} dtype cases: {} checks, {} failed ({:.1} s)\n",
            self.device,
            if self.full { "full" } else { "sampled (--full for every size)" },
            ops,
            forms,
            labels,
            self.passed() + self.failed(),
            self.failed(),
            self.elapsed_s
        );
        if !self.not_implemented.is_empty() {
            let n: u64 = self.not_implemented.values().sum();
            let names: Vec<String> = self
                .not_implemented
                .iter()
                .map(|(k, v)| format!("{k} ({v})"))
                .collect();
            let _ = writeln!(
                s,
                "NOT RUN: {n} cases of {} ops have no kernel on {} (cells marked NI; a failure \
                 unless --allow-unimplemented): {}\n",
                names.len(),
                self.device,
                names.join(", ")
            );
        }
        let lacks = self.device_lacks_total();
        if lacks > 0 {
            let _ = writeln!(
                s,
                "NOT RUN: {lacks} cases need a dtype {} cannot hold (f64 on wgpu: WGSL has no \
                 portable 64-bit float); a documented limit of the device, not a failure\n",
                self.device
            );
        }
        // (op, form) × layout
        let mut by_form: BTreeMap<(String, Form), [(u64, u64, u64); 10]> = BTreeMap::new();
        let mut by_dtype: BTreeMap<String, [(u64, u64, u64); 11]> = BTreeMap::new();
        for (k, r) in &self.rows {
            let e = by_form
                .entry((k.op.clone(), k.form))
                .or_insert([(0, 0, 0); 10]);
            if let Some(i) = LAYOUT_COLUMNS.iter().position(|c| *c == k.layout) {
                e[i].0 += r.passed;
                e[i].1 += r.failed;
                e[i].2 += r.not_implemented;
            }
            let d = by_dtype.entry(k.op.clone()).or_insert([(0, 0, 0); 11]);
            let i = label_dtype(&k.dtype)
                .and_then(|d| DType::ALL.iter().position(|x| *x == d))
                .unwrap_or(10);
            d[i].0 += r.passed;
            d[i].1 += r.failed;
            d[i].2 += r.not_implemented;
        }
        let cell = |(p, f, ni): (u64, u64, u64)| {
            if f > 0 {
                format!("FAIL{f}")
            } else if ni > 0 {
                format!("NI{ni}")
            } else if p == 0 {
                "-".to_string()
            } else {
                p.to_string()
            }
        };
        let _ = write!(s, "{:<28} {:<8}", "op", "form");
        for h in LAYOUT_HEADS {
            let _ = write!(s, "{h:>9}");
        }
        s.push('\n');
        for ((op, form), cols) in &by_form {
            let _ = write!(s, "{op:<28} {:<8}", form.name());
            for c in cols {
                let _ = write!(s, "{:>9}", cell(*c));
            }
            s.push('\n');
        }
        s.push('\n');
        let _ = write!(s, "{:<28}", "op (all forms)");
        for d in DType::ALL {
            let _ = write!(s, "{:>8}", short(d));
        }
        s.push('\n');
        for (op, cols) in &by_dtype {
            let _ = write!(s, "{op:<28}");
            for c in &cols[..10] {
                let _ = write!(s, "{:>8}", cell(*c));
            }
            s.push('\n');
        }
        let fails = self.failures();
        if fails.is_empty() && self.not_implemented_total() > 0 {
            let _ = writeln!(
                s,
                "\nthe {} checks that ran passed; {} cases did not run (no kernel)",
                self.passed(),
                self.not_implemented_total()
            );
        } else if fails.is_empty() {
            let _ = writeln!(s, "\nall {} checks passed", self.passed());
        } else {
            let _ = writeln!(s, "\n{} failing rows (first failure of each):", fails.len());
            for (k, f) in fails {
                let r = &self.rows[k];
                let _ = writeln!(
                    s,
                    "\n[{} {} {} {}] {} of {} failed",
                    k.op,
                    k.form,
                    k.layout,
                    k.dtype,
                    r.failed,
                    r.failed + r.passed
                );
                let _ = writeln!(s, "  {f}");
            }
        }
        s
    }

    /// The whole report as JSON.
    pub fn json(&self) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            "{{\"device\":{},\"full\":{},\"elapsed_s\":{:.3},\"checks\":{},\"failed\":{},\"device_error\":{},\"device_lacks_dtype\":{},\"not_implemented\":{{{}}},\"rows\":[",
            js(&self.device.to_string()),
            self.full,
            self.elapsed_s,
            self.passed() + self.failed(),
            self.failed(),
            self.device_error.as_deref().map_or("null".to_string(), js),
            self.device_lacks_total(),
            self.not_implemented
                .iter()
                .map(|(k, v)| format!("{}:{v}", js(k)))
                .collect::<Vec<_>>()
                .join(",")
        );
        for (i, (k, r)) in self.rows.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let _ = write!(
                s,
                "{{\"op\":{},\"form\":{},\"layout\":{},\"dtype\":{},\"passed\":{},\"failed\":{},\"refused\":{},\"not_implemented\":{},\"first_failure\":",
                js(&k.op),
                js(k.form.name()),
                js(&k.layout),
                js(&k.dtype),
                r.passed,
                r.failed,
                r.refused,
                r.not_implemented
            );
            match &r.first_failure {
                None => s.push_str("null"),
                Some(f) => {
                    let _ = write!(
                        s,
                        "{{\"params\":{},\"reason\":{},\"message\":{},\"operands\":[",
                        js(&f.params),
                        js(f.reason.kind()),
                        js(&f.reason.to_string())
                    );
                    for (j, o) in f.operands.iter().enumerate() {
                        if j > 0 {
                            s.push(',');
                        }
                        let _ = write!(
                            s,
                            "{{\"role\":{},\"dtype\":{},\"layout\":{},\"shape\":{:?},\"strides\":{:?},\"offset\":{},\"storage_len\":{},\"scalar\":{}}}",
                            js(&o.role),
                            o.dtype.map_or("null".to_string(), |d| js(short(d))),
                            js(&o.layout),
                            o.shape,
                            o.strides,
                            o.offset,
                            o.storage_len,
                            o.scalar.as_deref().map_or("null".to_string(), js)
                        );
                    }
                    s.push_str("]}");
                }
            }
            s.push('}');
        }
        s.push_str("]}");
        s
    }
}

/// A JSON string literal.
fn js(v: &str) -> String {
    let mut o = String::with_capacity(v.len() + 2);
    o.push('"');
    for c in v.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}
