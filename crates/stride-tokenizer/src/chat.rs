//! Chat templates: a renderer for the small Jinja subset that ChatML-style templates use
//! (SmolLM2's among them), and a clear refusal of anything else. Not a Jinja engine.
//!
//! Understood: literal text; `{{ a + b + … }}` over string literals, `message['role']` and
//! `message['content']`; `{% for message in messages %}…{% endfor %}`; `{% if C %}…{% endif %}`
//! (and `{% else %}`) where C is `A and B and …` over `loop.first`, `loop.last`,
//! `add_generation_prompt`, `not add_generation_prompt`, and `messages[0]['role']` or
//! `message['role']` `==`/`!=` a string literal; `{# comments #}`.

use crate::{Result, TokenizerError};

/// One chat message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    /// `"system"`, `"user"`, `"assistant"`, …
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Term {
    Lit(String),
    Role,
    Content,
}

#[derive(Clone, Debug, PartialEq)]
enum Atom {
    LoopFirst,
    LoopLast,
    AddGen(bool),
    FirstRole { eq: bool, lit: String },
    Role { eq: bool, lit: String },
}

#[derive(Clone, Debug, PartialEq)]
enum Node {
    Text(String),
    Expr(Vec<Term>),
    For(Vec<Node>),
    If {
        cond: Vec<Atom>,
        then: Vec<Node>,
        otherwise: Vec<Node>,
    },
}

/// A recognised chat template, ready to render.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatTemplate {
    nodes: Vec<Node>,
}

fn unsupported(what: impl std::fmt::Display) -> TokenizerError {
    TokenizerError::UnsupportedChatTemplate(format!(
        "{what}; only ChatML-style templates (for message in messages, if, string concatenation) are rendered"
    ))
}

enum Seg {
    Text(String),
    Expr(String),
    Stmt(String),
}

fn lex(src: &str) -> Result<Vec<Seg>> {
    let mut out = Vec::new();
    let mut rest = src;
    while !rest.is_empty() {
        let next = ["{{", "{%", "{#"]
            .iter()
            .filter_map(|m| rest.find(m).map(|p| (p, *m)))
            .min();
        let Some((p, open)) = next else {
            out.push(Seg::Text(rest.to_string()));
            break;
        };
        if p > 0 {
            out.push(Seg::Text(rest[..p].to_string()));
        }
        let close = match open {
            "{{" => "}}",
            "{%" => "%}",
            _ => "#}",
        };
        let body_start = p + 2;
        let end = find_close(&rest[body_start..], close)
            .ok_or_else(|| unsupported(format!("unclosed {open:?}")))?;
        let body = &rest[body_start..body_start + end];
        if body.starts_with('-') || body.ends_with('-') {
            return Err(unsupported(format!(
                "whitespace control in {open}{body}{close}"
            )));
        }
        match open {
            "{{" => out.push(Seg::Expr(body.trim().to_string())),
            "{%" => out.push(Seg::Stmt(body.trim().to_string())),
            _ => {}
        }
        rest = &rest[body_start + end + 2..];
    }
    Ok(out)
}

/// Byte positions of `s` that lie outside string literals (`'…'` or `"…"`, with `\`
/// escapes), in order.
fn outside_quotes(s: &str) -> impl Iterator<Item = usize> + '_ {
    let mut quote: Option<char> = None;
    let mut escaped = false;
    s.char_indices().filter_map(move |(i, c)| {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            return None;
        }
        if c == '\'' || c == '"' {
            quote = Some(c);
            return None;
        }
        Some(i)
    })
}

/// Position of `close` in `s`, outside string literals.
fn find_close(s: &str, close: &str) -> Option<usize> {
    outside_quotes(s).find(|&i| s[i..].starts_with(close))
}

/// Splits `s` at `sep` outside string literals.
fn split_outside_quotes<'s>(s: &'s str, sep: &str) -> Vec<&'s str> {
    let mut parts = Vec::new();
    let mut start = 0;
    for i in outside_quotes(s) {
        if i >= start && s[i..].starts_with(sep) {
            parts.push(&s[start..i]);
            start = i + sep.len();
        }
    }
    parts.push(&s[start..]);
    parts
}

fn string_literal(s: &str) -> Option<String> {
    let s = s.trim();
    let q = s.chars().next()?;
    if (q != '\'' && q != '"') || s.len() < 2 || !s.ends_with(q) {
        return None;
    }
    let inner = &s[1..s.len() - 1];
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == q {
            return None; // a quote inside: not one literal
        }
        if c == '\\' {
            match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                '\\' => out.push('\\'),
                '\'' => out.push('\''),
                '"' => out.push('"'),
                _ => return None,
            }
        } else {
            out.push(c);
        }
    }
    Some(out)
}

/// `message['role']`, `message["role"]`, `message.role` → "message.role".
fn normalize_access(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .replace("[\"", ".")
        .replace("['", ".")
        .replace("\"]", "")
        .replace("']", "")
}

fn parse_expr(e: &str) -> Result<Vec<Term>> {
    split_outside_quotes(e, "+")
        .into_iter()
        .map(|t| {
            if let Some(l) = string_literal(t) {
                return Ok(Term::Lit(l));
            }
            match normalize_access(t).as_str() {
                "message.role" => Ok(Term::Role),
                "message.content" => Ok(Term::Content),
                _ => Err(unsupported(format!(
                    "expression {:?} in {{{{ {e} }}}}",
                    t.trim()
                ))),
            }
        })
        .collect()
}

fn parse_cond(c: &str) -> Result<Vec<Atom>> {
    split_outside_quotes(c, " and ")
        .into_iter()
        .map(|a| {
            let a = a.trim();
            match a {
                "loop.first" => return Ok(Atom::LoopFirst),
                "loop.last" => return Ok(Atom::LoopLast),
                "add_generation_prompt" => return Ok(Atom::AddGen(true)),
                "not add_generation_prompt" => return Ok(Atom::AddGen(false)),
                _ => {}
            }
            for (op, eq) in [("!=", false), ("==", true)] {
                let parts = split_outside_quotes(a, op);
                if parts.len() == 2 {
                    let lit = string_literal(parts[1])
                        .ok_or_else(|| unsupported(format!("condition {a:?}")))?;
                    return match normalize_access(parts[0]).as_str() {
                        "messages[0].role" => Ok(Atom::FirstRole { eq, lit }),
                        "message.role" => Ok(Atom::Role { eq, lit }),
                        _ => Err(unsupported(format!("condition {a:?}"))),
                    };
                }
            }
            Err(unsupported(format!("condition {a:?}")))
        })
        .collect()
}

/// Parses nodes until one of `ends` (returned) or the end of input.
fn parse_nodes(
    segs: &mut std::iter::Peekable<std::vec::IntoIter<Seg>>,
    ends: &[&str],
) -> Result<(Vec<Node>, Option<String>)> {
    let mut nodes = Vec::new();
    while let Some(seg) = segs.next() {
        match seg {
            Seg::Text(t) => nodes.push(Node::Text(t)),
            Seg::Expr(e) => nodes.push(Node::Expr(parse_expr(&e)?)),
            Seg::Stmt(s) => {
                let words: Vec<&str> = s.split_whitespace().collect();
                if ends.contains(&s.as_str()) {
                    return Ok((nodes, Some(s)));
                }
                match words.first().copied() {
                    Some("for") => {
                        if words != ["for", "message", "in", "messages"] {
                            return Err(unsupported(format!("loop {{% {s} %}}")));
                        }
                        let (body, end) = parse_nodes(segs, &["endfor"])?;
                        if end.is_none() {
                            return Err(unsupported("a for loop without endfor"));
                        }
                        nodes.push(Node::For(body));
                    }
                    Some("if") => {
                        let cond = parse_cond(s["if".len()..].trim())?;
                        let (then, end) = parse_nodes(segs, &["endif", "else"])?;
                        let otherwise = match end.as_deref() {
                            Some("endif") => Vec::new(),
                            Some("else") => {
                                let (o, end) = parse_nodes(segs, &["endif"])?;
                                if end.is_none() {
                                    return Err(unsupported("an if without endif"));
                                }
                                o
                            }
                            _ => return Err(unsupported("an if without endif")),
                        };
                        nodes.push(Node::If {
                            cond,
                            then,
                            otherwise,
                        });
                    }
                    _ => return Err(unsupported(format!("statement {{% {s} %}}"))),
                }
            }
        }
    }
    Ok((nodes, None))
}

struct Ctx<'m> {
    messages: &'m [ChatMessage],
    add_generation_prompt: bool,
    /// (index, message) inside the loop
    current: Option<(usize, &'m ChatMessage)>,
}

impl ChatTemplate {
    /// Recognises a template, or says which construct is not understood.
    pub fn parse(src: &str) -> Result<ChatTemplate> {
        let segs = lex(src)?;
        let mut it = segs.into_iter().peekable();
        let (nodes, end) = parse_nodes(&mut it, &[])?;
        debug_assert!(end.is_none());
        if !uses_messages(&nodes) {
            return Err(unsupported("the template never loops over the messages"));
        }
        Ok(ChatTemplate { nodes })
    }

    /// The common ChatML template: `<|im_start|>{role}\n{content}<|im_end|>\n` per message,
    /// `<|im_start|>assistant\n` as the generation prompt.
    pub fn chatml() -> ChatTemplate {
        ChatTemplate::parse(
            "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
        )
        .expect("the built-in ChatML template parses")
    }

    /// The prompt text for `messages`.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> String {
        let mut out = String::new();
        let mut ctx = Ctx {
            messages,
            add_generation_prompt,
            current: None,
        };
        render_nodes(&self.nodes, &mut ctx, &mut out);
        out
    }
}

fn uses_messages(nodes: &[Node]) -> bool {
    nodes.iter().any(|n| match n {
        Node::For(_) => true,
        Node::If {
            then, otherwise, ..
        } => uses_messages(then) || uses_messages(otherwise),
        _ => false,
    })
}

fn holds(a: &Atom, ctx: &Ctx) -> bool {
    let n = ctx.messages.len();
    match a {
        Atom::LoopFirst => ctx.current.is_some_and(|(i, _)| i == 0),
        Atom::LoopLast => ctx.current.is_some_and(|(i, _)| i + 1 == n),
        Atom::AddGen(v) => ctx.add_generation_prompt == *v,
        Atom::FirstRole { eq, lit } => ctx.messages.first().is_some_and(|m| m.role == *lit) == *eq,
        Atom::Role { eq, lit } => ctx.current.is_some_and(|(_, m)| m.role == *lit) == *eq,
    }
}

fn render_nodes<'m>(nodes: &[Node], ctx: &mut Ctx<'m>, out: &mut String) {
    for n in nodes {
        match n {
            Node::Text(t) => out.push_str(t),
            Node::Expr(terms) => {
                for t in terms {
                    match t {
                        Term::Lit(s) => out.push_str(s),
                        Term::Role => out.push_str(ctx.current.map_or("", |(_, m)| &m.role)),
                        Term::Content => out.push_str(ctx.current.map_or("", |(_, m)| &m.content)),
                    }
                }
            }
            Node::For(body) => {
                let saved = ctx.current;
                for (i, m) in ctx.messages.iter().enumerate() {
                    ctx.current = Some((i, m));
                    render_nodes(body, ctx, out);
                }
                ctx.current = saved;
            }
            Node::If {
                cond,
                then,
                otherwise,
            } => {
                if cond.iter().all(|a| holds(a, ctx)) {
                    render_nodes(then, ctx, out);
                } else {
                    render_nodes(otherwise, ctx, out);
                }
            }
        }
    }
}
