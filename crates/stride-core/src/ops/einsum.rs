//! `einsum`: any valid equation, reduced to views (`diagonal`, `permute`, `expand`),
//! `reshape`, `sum_dims` and `matmul` — never to a broadcast product of all operands.
//!
//! 1. Parse: one term per operand (letters `a-zA-Z`, at most one `...`), an optional
//!    `->` output. Without `->` the output is the ellipsis dims, then the letters that appear
//!    exactly once, in alphabetical order (uppercase first), as in PyTorch/NumPy.
//! 2. Per operand: a letter repeated within it becomes its diagonal (a view); ellipsis dims
//!    are right-aligned across operands and broadcast; a label that appears in no other
//!    operand and not in the output is summed out right away.
//! 3. Operands are contracted left to right: for the pair (A, B), labels in both that are
//!    still needed (by the output or a later operand) are batch dims, labels in both that
//!    are not are contracted (the `K` of a batched matmul), the others stay. A broadcast
//!    (size-1) contracted label is summed out of the other side instead.
//! 4. What remains is summed over the labels not in the output and permuted to its order.
//!
//! Like PyTorch, the result may be a view of an operand when no arithmetic is needed
//! (`ij->ji`, `ii->i`).

use crate::autocast::autocast_inputs;
use crate::shape::checked_numel;
use crate::{DType, Error, Result, Tensor};

const OP: &str = "einsum";

/// A dim's label: a letter, or the `i`-th of the (right-aligned) ellipsis dims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Label {
    Ell(usize),
    Letter(u8),
}

/// One term of the equation: letters, with the position of `...` if any.
#[derive(Debug, Clone, PartialEq)]
struct Term {
    letters: Vec<u8>,
    ellipsis: Option<usize>,
}

fn parse_term(s: &str, what: &str) -> Result<Term> {
    let b = s.as_bytes();
    let (mut letters, mut ellipsis, mut i) = (vec![], None, 0);
    while i < b.len() {
        match b[i] {
            c if c.is_ascii_alphabetic() => {
                letters.push(c);
                i += 1;
            }
            b'.' => {
                if b.len() < i + 3 || &b[i..i + 3] != b"..." {
                    return Err(Error::invalid(
                        OP,
                        format!("{what} {s:?} has a '.' that is not part of an ellipsis '...'"),
                    ));
                }
                if ellipsis.is_some() {
                    return Err(Error::invalid(
                        OP,
                        format!("{what} {s:?} has more than one ellipsis '...'"),
                    ));
                }
                ellipsis = Some(letters.len());
                i += 3;
            }
            c => {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "{what} {s:?} has the invalid character {:?}; subscripts are letters a-z, A-Z and '...'",
                        c as char
                    ),
                ))
            }
        }
    }
    Ok(Term { letters, ellipsis })
}

/// The parsed equation: input terms and the output term (explicit or implicit).
fn parse(equation: &str, n_operands: usize) -> Result<(Vec<Term>, Option<Term>)> {
    let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    if rhs.is_some_and(|r| r.contains("->")) {
        return Err(Error::invalid(
            OP,
            format!("the equation {equation:?} has more than one '->'"),
        ));
    }
    let terms: Vec<Term> = lhs
        .split(',')
        .enumerate()
        .map(|(i, t)| parse_term(t, &format!("operand {i}'s subscripts")))
        .collect::<Result<_>>()?;
    if terms.len() != n_operands {
        return Err(Error::invalid(
            OP,
            format!(
                "the equation {equation:?} has subscripts for {} operands but {n_operands} tensors were given",
                terms.len()
            ),
        ));
    }
    let out = rhs.map(|r| parse_term(r, "the output")).transpose()?;
    Ok((terms, out))
}

/// An operand being contracted: a tensor and one distinct label per dim.
struct Operand {
    t: Tensor,
    labels: Vec<Label>,
}

impl Operand {
    fn size(&self, l: Label) -> Option<usize> {
        self.labels
            .iter()
            .position(|&m| m == l)
            .map(|i| self.t.shape()[i])
    }
    /// Sums out `labels` (those present).
    fn sum_out(self, labels: &[Label]) -> Result<Operand> {
        let dims: Vec<usize> = (0..self.labels.len())
            .filter(|&i| labels.contains(&self.labels[i]))
            .collect();
        if dims.is_empty() {
            return Ok(self);
        }
        let t = sum_over(&self.t, &dims)?;
        let labels = (0..self.labels.len())
            .filter(|i| !dims.contains(i))
            .map(|i| self.labels[i])
            .collect();
        Ok(Operand { t, labels })
    }
    /// Permutes to the label order `order` (a permutation of the labels).
    fn permute_to(&self, order: &[Label]) -> Result<Tensor> {
        let perm: Vec<i64> = order
            .iter()
            .map(|l| self.labels.iter().position(|m| m == l).unwrap() as i64)
            .collect();
        self.t.permute(&perm)
    }
}

/// `x` summed over `dims` (no keepdim).
fn sum_over(x: &Tensor, dims: &[usize]) -> Result<Tensor> {
    let dims: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
    x.sum_dims(&dims, false)
}

/// Contracts `a` and `b`; `keep` holds the labels still needed afterwards.
fn contract(a: Operand, b: Operand, keep: &[Label]) -> Result<Operand> {
    // a contracted label that is broadcast (size 1) on one side: summing a size-1 dim is the
    // element itself, so summing it out of both sides first is exact
    let bcast: Vec<Label> = a
        .labels
        .iter()
        .copied()
        .filter(|&l| !keep.contains(&l) && b.size(l).is_some_and(|nb| Some(nb) != a.size(l)))
        .collect();
    let (a, b) = (a.sum_out(&bcast)?, b.sum_out(&bcast)?);
    let in_b = |l: &Label| b.labels.contains(l);
    let batch: Vec<Label> = a
        .labels
        .iter()
        .copied()
        .filter(|l| in_b(l) && keep.contains(l))
        .collect();
    let contr: Vec<Label> = a
        .labels
        .iter()
        .copied()
        .filter(|l| in_b(l) && !keep.contains(l))
        .collect();
    let a_only: Vec<Label> = a.labels.iter().copied().filter(|l| !in_b(l)).collect();
    let b_only: Vec<Label> = b
        .labels
        .iter()
        .copied()
        .filter(|l| !a.labels.contains(l))
        .collect();
    let size = |o: &Operand, ls: &[Label]| -> Vec<usize> {
        ls.iter().map(|&l| o.size(l).unwrap()).collect()
    };
    let batch_sizes: Vec<usize> = batch
        .iter()
        .map(|&l| a.size(l).unwrap().max(b.size(l).unwrap()))
        .collect();
    let (m_sizes, k_sizes, n_sizes) = (size(&a, &a_only), size(&a, &contr), size(&b, &b_only));
    let (m, k, n): (usize, usize, usize) = (
        m_sizes.iter().product(),
        k_sizes.iter().product(),
        n_sizes.iter().product(),
    );
    let to_i64 = |v: &[usize]| v.iter().map(|&x| x as i64).collect::<Vec<i64>>();
    // A as [batch..., M, K] and B as [batch..., K, N]; reshape before broadcasting the batch
    // dims, so a copy (if the reshape needs one) never materialises a broadcast
    let mut a_shape = to_i64(&size(&a, &batch));
    a_shape.extend([m as i64, k as i64]);
    let at = a
        .permute_to(&[batch.clone(), a_only.clone(), contr.clone()].concat())?
        .reshape(&a_shape)?;
    let mut b_shape = to_i64(&size(&b, &batch));
    b_shape.extend([k as i64, n as i64]);
    let bt = b
        .permute_to(&[batch.clone(), contr, b_only.clone()].concat())?
        .reshape(&b_shape)?;
    let mut full = to_i64(&batch_sizes);
    full.extend([m as i64, k as i64]);
    let at = at.expand(&full)?;
    let nb = full.len();
    full[nb - 2] = k as i64;
    full[nb - 1] = n as i64;
    let bt = bt.expand(&full)?;
    let c = at.matmul(&bt)?;
    let mut out_shape = to_i64(&batch_sizes);
    out_shape.extend(to_i64(&m_sizes));
    out_shape.extend(to_i64(&n_sizes));
    let t = c.reshape(&out_shape)?;
    Ok(Operand {
        t,
        labels: [batch, a_only, b_only].concat(),
    })
}

/// An operand with its term's letters resolved to labels and repeated letters turned into
/// diagonals. `ell` is the number of ellipsis dims of the whole equation.
fn label_operand(i: usize, t: &Tensor, term: &Term, ell: usize) -> Result<Operand> {
    let n_ell = t.dim().checked_sub(term.letters.len());
    let n_ell = match (n_ell, term.ellipsis) {
        (Some(e), Some(_)) => e,
        (Some(0), None) => 0,
        _ => {
            return Err(Error::invalid(
                OP,
                format!(
                    "operand {i} has shape {:?} ({} dims) but its subscripts {:?}{} name {}",
                    t.shape(),
                    t.dim(),
                    String::from_utf8_lossy(&term.letters),
                    if term.ellipsis.is_some() {
                        " (with '...')"
                    } else {
                        ""
                    },
                    term.letters.len()
                ),
            ))
        }
    };
    let mut labels: Vec<Label> = term.letters.iter().map(|&c| Label::Letter(c)).collect();
    if let Some(p) = term.ellipsis {
        let ells = (ell - n_ell..ell).map(Label::Ell);
        labels.splice(p..p, ells);
    }
    let mut t = t.clone();
    // repeated letters: take the diagonal (it becomes the last dim)
    loop {
        let rep = (0..labels.len()).find_map(|p| {
            (p + 1..labels.len())
                .find(|&q| labels[q] == labels[p])
                .map(|q| (p, q))
        });
        let Some((p, q)) = rep else { break };
        let (np, nq) = (t.shape()[p], t.shape()[q]);
        if np != nq {
            return Err(Error::invalid(
                OP,
                format!(
                    "operand {i} (shape {:?}) repeats subscript {:?} over dims {p} and {q} of different sizes {np} and {nq}",
                    t.shape(),
                    label_char(labels[p])
                ),
            ));
        }
        t = t.diagonal(0, p as i64, q as i64)?;
        let l = labels[p];
        labels.remove(q);
        labels.remove(p);
        labels.push(l);
    }
    Ok(Operand { t, labels })
}

fn label_char(l: Label) -> String {
    match l {
        Label::Letter(c) => (c as char).to_string(),
        Label::Ell(i) => format!("...[{i}]"),
    }
}

impl Tensor {
    /// Einstein summation (PyTorch's `torch.einsum`), e.g. `"btd,bsd->bts"` for attention
    /// scores, `"ii->"` for a trace, `"...ij,...jk->...ik"` for a broadcast batched matmul.
    ///
    /// Operands must share one dtype and device. A label's sizes must agree across operands,
    /// or be 1 (broadcast). Bad equations are errors naming the problem.
    pub fn einsum(equation: &str, operands: &[&Tensor]) -> Result<Tensor> {
        if let Some(c) = autocast_inputs("einsum", operands)? {
            let cast: Vec<&Tensor> = c.tensors.iter().collect();
            return Tensor::einsum(equation, &cast);
        }
        if operands.is_empty() {
            return Err(Error::invalid(OP, "expects at least one operand"));
        }
        let (terms, out) = parse(equation, operands.len())?;
        for (i, t) in operands.iter().enumerate().skip(1) {
            if t.device() != operands[0].device() {
                return Err(Error::DeviceMismatch {
                    op: OP,
                    a: operands[0].device(),
                    b: t.device(),
                });
            }
            if t.dtype() != operands[0].dtype() {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "operands must share one dtype, got {} (operand 0) and {} (operand {i}); convert with to_dtype",
                        operands[0].dtype(),
                        t.dtype()
                    ),
                ));
            }
        }
        // half inputs with more than one operand: every step in f32, one rounding at the end
        // (one operand is a view or a single reduction, which already rounds once)
        if operands.len() > 1 && matches!(operands[0].dtype(), DType::F16 | DType::BF16) {
            return crate::in_compute_dtype(operands, |up| {
                let refs: Vec<&Tensor> = up.iter().collect();
                Tensor::einsum(equation, &refs)
            });
        }
        // the number of ellipsis dims: the most any operand covers
        let mut ell = 0;
        for (t, term) in operands.iter().zip(&terms) {
            if term.ellipsis.is_some() {
                ell = ell.max(t.dim().saturating_sub(term.letters.len()));
            }
        }
        let ops: Vec<Operand> = operands
            .iter()
            .zip(&terms)
            .enumerate()
            .map(|(i, (t, term))| label_operand(i, t, term, ell))
            .collect::<Result<_>>()?;
        // sizes agree (or broadcast) per label
        let mut sizes: std::collections::BTreeMap<Label, (usize, usize)> = Default::default();
        for (i, o) in ops.iter().enumerate() {
            for (d, &l) in o.labels.iter().enumerate() {
                let n = o.t.shape()[d];
                match sizes.get(&l) {
                    Some(&(m, j)) if m != n && m != 1 && n != 1 => {
                        return Err(Error::invalid(
                            OP,
                            format!(
                                "subscript {:?} has size {m} in operand {j} (shape {:?}) but {n} in operand {i} (shape {:?}); sizes must match or be 1",
                                label_char(l),
                                operands[j].shape(),
                                operands[i].shape()
                            ),
                        ))
                    }
                    Some(&(m, _)) if m >= n => {}
                    _ => {
                        sizes.insert(l, (n, i));
                    }
                }
            }
        }
        // the output labels
        let out_labels: Vec<Label> = match &out {
            Some(term) => {
                let mut ls: Vec<Label> = term.letters.iter().map(|&c| Label::Letter(c)).collect();
                if let Some(p) = term.ellipsis {
                    ls.splice(p..p, (0..ell).map(Label::Ell));
                }
                for (k, l) in ls.iter().enumerate() {
                    if ls[..k].contains(l) {
                        return Err(Error::invalid(
                            OP,
                            format!(
                                "the output subscript {:?} appears more than once",
                                label_char(*l)
                            ),
                        ));
                    }
                    if !sizes.contains_key(l) {
                        return Err(Error::invalid(
                            OP,
                            format!(
                                "the output subscript {:?} does not appear in any operand's subscripts",
                                label_char(*l)
                            ),
                        ));
                    }
                }
                ls
            }
            None => {
                let mut count: std::collections::BTreeMap<u8, usize> = Default::default();
                for term in &terms {
                    for &c in &term.letters {
                        *count.entry(c).or_default() += 1;
                    }
                }
                (0..ell)
                    .map(Label::Ell)
                    .chain(
                        count
                            .into_iter()
                            .filter(|&(_, n)| n == 1)
                            .map(|(c, _)| Label::Letter(c)),
                    )
                    .collect()
            }
        };
        let out_shape: Vec<usize> = out_labels.iter().map(|l| sizes[l].0).collect();
        checked_numel(OP, &out_shape)?;
        // sum out labels used by one operand only and not in the output
        let lonely: Vec<Vec<Label>> = (0..ops.len())
            .map(|i| {
                ops[i]
                    .labels
                    .iter()
                    .copied()
                    .filter(|l| {
                        !out_labels.contains(l)
                            && !ops
                                .iter()
                                .enumerate()
                                .any(|(j, o)| j != i && o.labels.contains(l))
                    })
                    .collect()
            })
            .collect();
        let ops: Vec<Operand> = ops
            .into_iter()
            .zip(&lonely)
            .map(|(o, l)| o.sum_out(l))
            .collect::<Result<_>>()?;
        // contract left to right, keeping the labels the output or a later operand needs
        let later: Vec<Vec<Label>> = (0..ops.len())
            .map(|k| ops[k + 1..].iter().flat_map(|o| o.labels.clone()).collect())
            .collect();
        let mut ops = ops.into_iter().enumerate();
        let (_, mut acc) = ops.next().expect("at least one operand");
        for (k, b) in ops {
            let mut keep = out_labels.clone();
            keep.extend(&later[k]);
            acc = contract(acc, b, &keep)?;
        }
        // sum what the output drops, broadcast what a single operand left at size 1, permute
        let drop: Vec<Label> = acc
            .labels
            .iter()
            .copied()
            .filter(|l| !out_labels.contains(l))
            .collect();
        let acc = acc.sum_out(&drop)?;
        let t = acc.permute_to(&out_labels)?;
        if t.shape() != out_shape.as_slice() {
            let s: Vec<i64> = out_shape.iter().map(|&n| n as i64).collect();
            return t.expand(&s);
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn parses_terms() {
        let (t, o) = parse("ab, b...c -> ...ac", 2).unwrap();
        assert_eq!(
            t[0],
            Term {
                letters: b"ab".to_vec(),
                ellipsis: None
            }
        );
        assert_eq!(
            t[1],
            Term {
                letters: b"bc".to_vec(),
                ellipsis: Some(1)
            }
        );
        assert_eq!(
            o.unwrap(),
            Term {
                letters: b"ac".to_vec(),
                ellipsis: Some(0)
            }
        );
        assert!(parse("ab", 2).is_err());
        assert!(parse("a1", 1).is_err());
        assert!(parse("a..b", 1).is_err());
        assert!(parse("......", 1).is_err());
        assert!(parse("a->a->a", 1).is_err());
    }
}
