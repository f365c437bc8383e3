//! WGSL text: the op tables' C expressions translated, and the load, store and conversion of
//! each dtype in the packed words of a binding.
//!
//! The op tables (`backend/op_table.rs`) give each op once, as a C-like expression over `x`,
//! `y`, `z` and the op's scalar `v`; [`translate`] turns one into WGSL for a compute type:
//! calls get the type's suffix (`m_exp(x)` → `m_exp_f32(x)`, the prelude has no
//! overloading), `(C)1` becomes `f32(1)`, `c ? a : b` becomes `select(b, a, c)`, bool
//! comparisons become logic, and every operation is parenthesised (WGSL refuses mixed
//! operators without parentheses). So a new op in the table needs no WGSL written by hand.

use crate::DType;

/// The WGSL type a dtype computes in: f32 for every float, i32 for the signed integers,
/// u32 for the unsigned ones, bool.
pub(crate) fn ctype(d: DType) -> &'static str {
    match d {
        DType::F32 | DType::F16 | DType::BF16 | DType::F64 => "f32",
        DType::I32 | DType::I8 | DType::I64 => "i32",
        DType::U32 | DType::U8 => "u32",
        DType::Bool => "bool",
    }
}

/// The prelude every shader starts with: conversions and the tables' functions.
pub(crate) const PRELUDE: &str = include_str!("prelude.wgsl");

// ---------------------------------------------------------------------------------------------
// loads and stores

/// `fn ld{k}(e: u32) -> ctype`: element `e` of binding `b{slot}` as `dtype` computes.
pub(crate) fn load_fn(k: usize, slot: usize, atomic: bool, dtype: DType) -> String {
    let w = |i: &str| {
        if atomic {
            format!("atomicLoad(&b{slot}[{i}])")
        } else {
            format!("b{slot}[{i}]")
        }
    };
    let half = format!("(({} >> ((e & 1u) * 16u)) & 0xffffu)", w("e >> 1u"));
    let byte = format!("(({} >> ((e & 3u) * 8u)) & 0xffu)", w("e >> 2u"));
    let body = match dtype {
        DType::F32 => format!("bitcast<f32>({})", w("e")),
        DType::F16 => format!("f16_to_f32({half})"),
        DType::BF16 => format!("bf16_to_f32({half})"),
        DType::I32 => format!("bitcast<i32>({})", w("e")),
        DType::U32 => w("e"),
        DType::I8 => format!("(bitcast<i32>({byte} << 24u) >> 24u)"),
        DType::U8 => byte,
        DType::Bool => format!("({byte} != 0u)"),
        DType::I64 | DType::F64 => unreachable!("no WGSL loads for {dtype:?}"),
    };
    format!(
        "fn ld{k}(e: u32) -> {} {{ return {body}; }}\n",
        ctype(dtype)
    )
}

/// `fn raw{k}(e: u32) -> u32`: the raw bits of element `e` (for same-dtype copies).
pub(crate) fn raw_load_fn(k: usize, slot: usize, atomic: bool, dtype: DType) -> String {
    let w = |i: &str| {
        if atomic {
            format!("atomicLoad(&b{slot}[{i}])")
        } else {
            format!("b{slot}[{i}]")
        }
    };
    let body = match dtype.size_in_bytes() {
        4 => w("e"),
        2 => format!("(({} >> ((e & 1u) * 16u)) & 0xffffu)", w("e >> 1u")),
        1 => format!("(({} >> ((e & 3u) * 8u)) & 0xffu)", w("e >> 2u")),
        _ => unreachable!(),
    };
    format!("fn raw{k}(e: u32) -> u32 {{ return {body}; }}\n")
}

/// `fn st{k}(e: u32, r: u32)`: stores the raw bits `r` as element `e` of binding `b{slot}`
/// (sub-word elements through atomics: see `launch.rs`).
pub(crate) fn store_fn(k: usize, slot: usize, dtype: DType) -> String {
    let body = match dtype.size_in_bytes() {
        4 => format!("b{slot}[e] = r;"),
        2 => format!(
            "let s = (e & 1u) * 16u; atomicAnd(&b{slot}[e >> 1u], ~(0xffffu << s)); \
             atomicOr(&b{slot}[e >> 1u], (r & 0xffffu) << s);"
        ),
        1 => format!(
            "let s = (e & 3u) * 8u; atomicAnd(&b{slot}[e >> 2u], ~(0xffu << s)); \
             atomicOr(&b{slot}[e >> 2u], (r & 0xffu) << s);"
        ),
        _ => unreachable!(),
    };
    format!("fn st{k}(e: u32, r: u32) {{ {body} }}\n")
}

/// `fn ld{k}(e: u32) -> vec2<u32>`: the (low, high) words of i64 element `e` of `b{slot}`
/// (i64 arithmetic in WGSL runs on word pairs).
pub(crate) fn load64_fn(k: usize, slot: usize, atomic: bool) -> String {
    let w = |i: &str| {
        if atomic {
            format!("atomicLoad(&b{slot}[{i}])")
        } else {
            format!("b{slot}[{i}]")
        }
    };
    format!(
        "fn ld{k}(e: u32) -> vec2<u32> {{ return vec2<u32>({}, {}); }}\n",
        w("2u * e"),
        w("2u * e + 1u")
    )
}

/// `fn st{k}(e: u32, r: vec2<u32>)`: stores the (low, high) words of i64 element `e`.
pub(crate) fn store64_fn(k: usize, slot: usize) -> String {
    format!(
        "fn st{k}(e: u32, r: vec2<u32>) {{ b{slot}[2u * e] = r.x; b{slot}[2u * e + 1u] = r.y; }}\n"
    )
}

/// The raw bits of `dtype` for a value `v` of its compute type.
pub(crate) fn to_raw(dtype: DType, v: &str) -> String {
    match dtype {
        DType::F32 | DType::I32 => format!("bitcast<u32>({v})"),
        DType::F16 => format!("f32_to_f16({v})"),
        DType::BF16 => format!("f32_to_bf16({v})"),
        DType::U32 => v.to_string(),
        DType::I8 => format!("(bitcast<u32>({v}) & 0xffu)"),
        DType::U8 => format!("({v} & 0xffu)"),
        DType::Bool => format!("select(0u, 1u, {v})"),
        DType::I64 | DType::F64 => unreachable!("no WGSL stores for {dtype:?}"),
    }
}

/// The raw bits of `to` for a value `v` computed as `from` computes: the CPU's casts
/// (floats to integers saturate with NaN to 0, integers wrap, integers round once to a
/// float, anything non-zero is true — NaN included).
pub(crate) fn cast_raw(from: DType, to: DType, v: &str) -> String {
    use DType::*;
    let float_from = matches!(from, F32 | F16 | BF16);
    match (from, to) {
        (_, Bool) if float_from => {
            format!("select(0u, 1u, (bitcast<u32>({v}) & 0x7fffffffu) != 0u)")
        }
        (_, Bool) if from == Bool => format!("select(0u, 1u, {v})"),
        (_, Bool) => format!("select(0u, 1u, {v} != {}(0))", ctype(from)),
        (Bool, F32) => format!("select(0u, 0x3f800000u, {v})"),
        (Bool, F16) => format!("select(0u, 0x3c00u, {v})"),
        (Bool, BF16) => format!("select(0u, 0x3f80u, {v})"),
        (Bool, _) => format!("select(0u, 1u, {v})"),
        (_, F32 | F16 | BF16) if float_from => to_raw(to, v),
        (_, I32) if float_from => format!("bitcast<u32>(sat_i32({v}))"),
        (_, U32) if float_from => format!("sat_u32({v})"),
        (_, I8) if float_from => format!("(bitcast<u32>(sat_i8({v})) & 0xffu)"),
        (_, U8) if float_from => format!("sat_u8({v})"),
        // integers: i32 (signed) or u32 (unsigned) values
        (_, F32) => format!("bitcast<u32>({}_to_f32({v}))", ctype(from)),
        (_, F16) => format!("{}_to_f16({v})", ctype(from)),
        (_, BF16) => format!("{}_to_bf16({v})", ctype(from)),
        _ => {
            let bits = if ctype(from) == "i32" {
                format!("bitcast<u32>({v})")
            } else {
                v.to_string()
            };
            match to.size_in_bytes() {
                1 => format!("({bits} & 0xffu)"),
                _ => bits,
            }
        }
    }
}

/// `fn at(k: u32, i: u32) -> u32`: operand `k`'s element offset of logical position `i`
/// over the merged geometry in `geo` (`[n, rank, shape…, then per operand offset,
/// strides…]`), outermost dim first, as `Plan` gives it.
pub(crate) const AT_FN: &str = "
fn at(k: u32, i: u32) -> u32 {
    let r = geo[1];
    let base = 2u + r + k * (1u + r);
    var o = geo[base];
    var rem = i;
    for (var d = r; d > 1u; d = d - 1u) {
        let n = geo[1u + d];
        let q = rem / n;
        o = o + (rem - q * n) * geo[base + d];
        rem = q;
    }
    if (r > 0u) { o = o + rem * geo[base + 1u]; }
    return o;
}
";

/// `fn line(k: u32, i: u32) -> u32`: operand `k`'s offset of the first element of line `i`
/// (lines: every position of the dims a scan or sort does not walk), from `geo` laid out as
/// `[…, kept rank at geo[rank_at], kept shape…, (offset, strides…) per operand]`.
pub(crate) fn line_fn(rank_at: usize) -> String {
    format!(
        "
fn line(k: u32, i: u32) -> u32 {{
    let kr = geo[{rank_at}];
    let base = {rank_at}u + 1u + kr + k * (1u + kr);
    var o = geo[base];
    var rem = i;
    for (var d = kr; d > 0u; d = d - 1u) {{
        let n = geo[{rank_at}u + d];
        let q = rem / n;
        o = o + (rem - q * n) * geo[base + d];
        rem = q;
    }}
    return o;
}}
"
    )
}

/// The grid-stride loop's head: `i` walks `0..geo[0]`.
pub(crate) const LOOP_HEAD: &str = "
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let n = geo[0];
    let step = nwg.x * 256u;
    for (var i = gid.x; i < n; i = i + step) {
";

// ---------------------------------------------------------------------------------------------
// the op tables' expressions

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Num(String),
    Op(&'static str),
}

fn lex(s: &str) -> Vec<Tok> {
    const OPS: [&str; 22] = [
        "==", "!=", "<=", ">=", "&&", "||", "!", "&", "|", "^", "<", ">", "+", "-", "*", "/", "?",
        ":", "(", ")", ",", "%",
    ];
    let b = s.as_bytes();
    let mut out = vec![];
    let mut i = 0;
    while i < b.len() {
        let c = b[i] as char;
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' {
            let st = i;
            while i < b.len() && ((b[i] as char).is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Ident(s[st..i].to_string()));
        } else if c.is_ascii_digit() || c == '.' {
            let st = i;
            while i < b.len() && ((b[i] as char).is_ascii_alphanumeric() || b[i] == b'.') {
                i += 1;
            }
            out.push(Tok::Num(s[st..i].to_string()));
        } else {
            let op = OPS
                .iter()
                .find(|o| s[i..].starts_with(**o))
                .unwrap_or_else(|| panic!("op table: unexpected {c:?} in {s:?}"));
            out.push(Tok::Op(op));
            i += op.len();
        }
    }
    out
}

/// A recursive-descent parser with C's precedence, printing WGSL as it goes.
struct Parser<'a> {
    toks: Vec<Tok>,
    pos: usize,
    /// The compute type (`f32`, `i32`, `u32`, `bool`) of the operands.
    ty: &'a str,
}

const LEVELS: [&[&str]; 9] = [
    &["||"],
    &["&&"],
    &["|"],
    &["^"],
    &["&"],
    &["==", "!="],
    &["<", "<=", ">", ">="],
    &["+", "-"],
    &["*", "/", "%"],
];

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }
    fn eat(&mut self, op: &str) -> bool {
        if self.peek() == Some(&Tok::Op(leak(op))) {
            self.pos += 1;
            true
        } else {
            false
        }
    }
    fn expect(&mut self, op: &str) {
        assert!(self.eat(op), "op table: expected {op:?}");
    }
    fn ternary(&mut self) -> String {
        let c = self.binary(0);
        if self.eat("?") {
            let a = self.ternary();
            self.expect(":");
            let b = self.ternary();
            format!("select({b}, {a}, {c})")
        } else {
            c
        }
    }
    fn binary(&mut self, level: usize) -> String {
        if level == LEVELS.len() {
            return self.unary();
        }
        let mut l = self.binary(level + 1);
        loop {
            let Some(Tok::Op(op)) = self.peek().cloned() else {
                return l;
            };
            if !LEVELS[level].contains(&op) {
                return l;
            }
            self.pos += 1;
            let r = self.binary(level + 1);
            l = if self.ty == "f32" && op == "!=" && !mutant("ordered_ne") {
                // naga compiles a float `!=` as an ordered comparison (false for NaN); C's
                // is unordered
                format!("(!({l} == {r}))")
            } else if self.ty == "bool" {
                match op {
                    "^" => format!("({l} != {r})"),
                    "<" => format!("(!({l}) & ({r}))"),
                    ">" => format!("(({l}) & !({r}))"),
                    "<=" => format!("(!({l}) | ({r}))"),
                    ">=" => format!("(({l}) | !({r}))"),
                    _ => format!("({l} {op} {r})"),
                }
            } else {
                format!("({l} {op} {r})")
            };
        }
    }
    fn unary(&mut self) -> String {
        if self.eat("!") {
            return format!("(!{})", self.unary());
        }
        if self.eat("-") {
            return format!("(-{})", self.unary());
        }
        // a cast: `(C)` or `(T)`, both the compute type
        if let (Some(Tok::Op("(")), Some(Tok::Ident(t)), Some(Tok::Op(")"))) = (
            self.toks.get(self.pos),
            self.toks.get(self.pos + 1),
            self.toks.get(self.pos + 2),
        ) {
            if t == "C" || t == "T" {
                self.pos += 3;
                // a cast of a literal is the literal typed (numbers print typed already)
                if let Some(Tok::Num(_)) = self.peek() {
                    return self.primary();
                }
                let ty = self.ty;
                return format!("{ty}({})", self.unary());
            }
        }
        self.primary()
    }
    fn primary(&mut self) -> String {
        match self.peek().cloned() {
            Some(Tok::Op("(")) => {
                self.pos += 1;
                let e = self.ternary();
                self.expect(")");
                format!("({e})")
            }
            Some(Tok::Num(n)) => {
                self.pos += 1;
                format!("{}({n})", self.ty)
            }
            Some(Tok::Ident(id)) => {
                self.pos += 1;
                if self.eat("(") {
                    let mut args = vec![];
                    if !self.eat(")") {
                        loop {
                            args.push(self.ternary());
                            if self.eat(")") {
                                break;
                            }
                            self.expect(",");
                        }
                    }
                    format!("{id}_{}({})", self.ty, args.join(", "))
                } else {
                    id
                }
            }
            t => panic!("op table: unexpected {t:?}"),
        }
    }
}

fn leak(op: &str) -> &'static str {
    // the lexer's operators are all static; find the same one
    [
        "==", "!=", "<=", ">=", "&&", "||", "!", "&", "|", "^", "<", ">", "+", "-", "*", "/", "?",
        ":", "(", ")", ",", "%",
    ]
    .into_iter()
    .find(|o| *o == op)
    .expect("a known operator")
}

/// Whether `STRIDE_WGPU_MUTANT` names this deliberately wrong variant (the checks of the
/// generated shaders are shown to fail on it): `ordered_ne` keeps WGSL's `!=` for floats,
/// which is false for NaN where C's is true; `matmul_short_k` leaves the last k out of
/// every product's sum; `reduce_long_loops` lets one invocation fold any length (past
/// llvmpipe's loop budget); `reduce_f32_acc` sums floats in plain f32; `arg_any_tie` lets an
/// arg reduction's tie go to whichever candidate its merge sees second; `scan_out_step`
/// writes a scan through its input's step; `index_narrow` reads i64 indices as their low
/// word; `gate_ignored` lets a gather or scatter write after its index check failed;
/// `scatter_reverse` walks a scatter's axis backwards; `scatter_long_walk` lets one
/// invocation walk any scatter axis; `sort_ties_unstable` sorts on keys alone.
pub(crate) fn mutant(name: &str) -> bool {
    static M: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    M.get_or_init(|| std::env::var("STRIDE_WGPU_MUTANT").unwrap_or_default()) == name
}

/// The WGSL of an op table's C expression for operands of compute type `ty`.
pub(crate) fn translate(c: &str, ty: &str) -> String {
    let mut p = Parser {
        toks: lex(c),
        pos: 0,
        ty,
    };
    let e = p.ternary();
    assert!(p.pos == p.toks.len(), "op table: trailing tokens in {c:?}");
    e
}

#[cfg(test)]
mod tests {
    use super::translate;

    #[test]
    fn expressions_translate() {
        assert_eq!(translate("m_exp(x)", "f32"), "m_exp_f32(x)");
        assert_eq!(
            translate("(C)1 / m_sqrt(x)", "f32"),
            "(f32(1) / m_sqrt_f32(x))"
        );
        assert_eq!(
            translate("is_neg(x) ? (T)0 : x", "i32"),
            "select(x, i32(0), is_neg_i32(x))"
        );
        assert_eq!(translate("x ^ y", "bool"), "(x != y)");
        assert_eq!(translate("x != (C)0", "f32"), "(!(x == f32(0)))");
        assert_eq!(translate("x <= y", "bool"), "(!(x) | (y))");
        assert_eq!(translate("!x & y", "bool"), "((!x) & y)");
        assert_eq!(
            translate("!m_isnan(x) && !m_isinf(x)", "f32"),
            "((!m_isnan_f32(x)) && (!m_isinf_f32(x)))"
        );
        assert_eq!(
            translate("(x >= y ? x : y) <= z ? (x >= y ? x : y) : z", "u32"),
            "select(z, (select(y, x, (x >= y))), ((select(y, x, (x >= y))) <= z))"
        );
        assert_eq!(translate("x + v * (y / z)", "f32"), "(x + (v * ((y / z))))");
    }
}
