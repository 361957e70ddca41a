//! `ssl.principal.mapping.rules`, as Kafka's SslPrincipalMapper: a comma-separated list of
//! `RULE:pattern/replacement/[LU]` and `DEFAULT`; the first rule whose pattern matches the whole
//! distinguished name gives the principal (the name with every match of the pattern replaced, Java's
//! `String.replaceAll`, then lower- or upper-cased); no match is an error.
//!
//! The splitting and parsing use Kafka's own expressions (leftmost-first regular expressions give
//! the same matches as Java's backtracking for them); Java's `.` and `\s` are spelled out so that
//! they mean what they mean in Java. A rule's pattern is compiled by the `regex` crate: Java's
//! syntax minus back-references and look-around, which are refused when the rules are parsed.

use regex::{Captures, Regex};
use std::fmt;
use std::sync::OnceLock;

/// Kafka's default for `ssl.principal.mapping.rules`.
pub const DEFAULT_RULES: &str = "DEFAULT";

const DOT: &str = r"[^\n\r\x{85}\x{2028}\x{2029}]";
const SPACE: &str = r"[ \t\n\x0B\x0C\r]";

fn rule_pattern() -> String {
    // Kafka: (DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)
    format!(r"(DEFAULT)|RULE:((\\{DOT}|[^\\/])*)/((\\{DOT}|[^\\/])*)/([LU]?){DOT}*?|({DOT}*?)")
}

fn splitter() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| {
        Regex::new(&format!(r"{SPACE}*({}){SPACE}*(,{SPACE}*|$)", rule_pattern()))
            .expect("Kafka's rule splitter")
    })
}

fn parser() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| Regex::new(&format!("^(?:{})", rule_pattern())).expect("Kafka's rule parser"))
}

/// A rule list that does not parse (Kafka: IllegalArgumentException at start-up).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidRule(pub String);

impl fmt::Display for InvalidRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidRule {}

/// No rule matched the name, or a rule's replacement names a group that does not exist
/// (Kafka: NoMatchingRule / IndexOutOfBoundsException when the client connects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoMatchingRule(pub String);

impl fmt::Display for NoMatchingRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NoMatchingRule {}

#[derive(Debug, Clone)]
enum Case {
    Keep,
    Lower,
    Upper,
}

#[derive(Debug, Clone)]
enum Rule {
    Default,
    Replace {
        source: String,
        whole: Regex,
        anywhere: Regex,
        /// As configured (printed); `replacement` is after escape_literal_back_references.
        shown: String,
        replacement: String,
        case: Case,
    },
}

/// Kafka's SslPrincipalMapper: built once from the configured rules, then asked per client.
#[derive(Debug, Clone)]
pub struct SslPrincipalMapper {
    rules: Vec<Rule>,
}

impl SslPrincipalMapper {
    /// Parses `ssl.principal.mapping.rules` (None: Kafka's default, `DEFAULT`).
    pub fn from_rules(rules: Option<&str>) -> Result<Self, InvalidRule> {
        let text = rules.unwrap_or(DEFAULT_RULES);
        // Java's String.trim: every char <= ' '.
        let text = text.trim_matches(|c: char| c <= ' ');
        let mut parsed = Vec::new();
        for found in splitter().captures_iter(text) {
            let rule = found.get(1).map_or("", |m| m.as_str());
            if let Some(rule) = parse_rule(rule)? {
                parsed.push(rule);
            }
        }
        Ok(SslPrincipalMapper { rules: parsed })
    }

    /// The principal name for a distinguished name (RFC 2253 form): the first matching rule's.
    pub fn name(&self, distinguished_name: &str) -> Result<String, NoMatchingRule> {
        for rule in &self.rules {
            if let Some(name) = rule.apply(distinguished_name)? {
                return Ok(name);
            }
        }
        Err(NoMatchingRule(format!(
            "No rules apply to {distinguished_name}, rules {}",
            self.list()
        )))
    }

    fn list(&self) -> String {
        let shown: Vec<String> = self.rules.iter().map(ToString::to_string).collect();
        format!("[{}]", shown.join(", "))
    }
}

impl fmt::Display for SslPrincipalMapper {
    /// As Kafka's toString: `SslPrincipalMapper(rules = [RULE:pattern/replacement/L, DEFAULT])`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SslPrincipalMapper(rules = {})", self.list())
    }
}

fn parse_rule(rule: &str) -> Result<Option<Rule>, InvalidRule> {
    let Some(m) = parser().captures(rule) else {
        return Err(InvalidRule(format!("Invalid rule: {rule}")));
    };
    let end = m.get(0).map_or(0, |g| g.end());
    if end != rule.len() {
        return Err(InvalidRule(format!(
            "Invalid rule: `{rule}`, unmatched substring: `{}`",
            &rule[end..]
        )));
    }
    if m.get(1).is_some() {
        return Ok(Some(Rule::Default));
    }
    let Some(pattern) = m.get(2) else {
        return Ok(None); // an empty rule, ignored as Kafka does
    };
    let source = pattern.as_str().to_string();
    let compile = |text: &str| {
        Regex::new(text).map_err(|e| {
            InvalidRule(format!(
                "Invalid rule: `{rule}`: pattern `{source}`: {}",
                one_line(&e)
            ))
        })
    };
    let whole = compile(&format!("^(?:{source})$"))?;
    let anywhere = compile(&source)?;
    let replacement = m.get(4).map_or("", |g| g.as_str()).to_string();
    let case = match m.get(6).map(|g| g.as_str()) {
        Some("L") => Case::Lower,
        Some("U") => Case::Upper,
        _ => Case::Keep,
    };
    // Java checks the replacement's syntax when it is applied; checking it here finds the
    // mistake at start-up instead of at the first client.
    let groups = anywhere.captures_len() - 1;
    let escaped = escape_literal_back_references(&replacement, groups);
    check_replacement(&escaped, &anywhere).map_err(|why| {
        InvalidRule(format!(
            "Invalid rule: `{rule}`: replacement `{replacement}`: {why}"
        ))
    })?;
    Ok(Some(Rule::Replace {
        source,
        whole,
        anywhere,
        shown: replacement,
        replacement: escaped,
        case,
    }))
}

fn one_line(e: &regex::Error) -> String {
    e.to_string().split_whitespace().collect::<Vec<_>>().join(" ")
}

impl Rule {
    fn apply(&self, name: &str) -> Result<Option<String>, NoMatchingRule> {
        let Rule::Replace {
            whole,
            anywhere,
            replacement,
            case,
            ..
        } = self
        else {
            return Ok(Some(name.to_string()));
        };
        if !whole.is_match(name) {
            return Ok(None);
        }
        let replaced = replace_all(anywhere, name, replacement).map_err(NoMatchingRule)?;
        Ok(Some(match case {
            Case::Keep => replaced,
            Case::Lower => replaced.to_lowercase(),
            Case::Upper => replaced.to_uppercase(),
        }))
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Default => f.write_str("DEFAULT"),
            Rule::Replace {
                source, shown, case, ..
            } => {
                write!(f, "RULE:{source}/{shown}")?;
                match case {
                    Case::Lower => f.write_str("/L"),
                    Case::Upper => f.write_str("/U"),
                    Case::Keep => Ok(()),
                }
            }
        }
    }
}

/// Kafka's escapeLiteralBackReferences: a `$N` naming a group the pattern lacks (after dropping
/// trailing digits while N >= 10) becomes a literal `$N`. Kafka walks the original string's
/// matches but edits a copy at the original offsets; so does this.
fn escape_literal_back_references(unescaped: &str, groups: usize) -> String {
    if groups == 0 {
        return unescaped.to_string();
    }
    static BACK_REF: OnceLock<Regex> = OnceLock::new();
    let back_ref = BACK_REF.get_or_init(|| Regex::new(r"\$([0-9]+)").expect("back reference"));
    let mut value = unescaped.to_string();
    for m in back_ref.captures_iter(unescaped) {
        let digits = &m[1];
        if digits.starts_with('0') {
            continue;
        }
        let mut index: u128 = digits.parse().unwrap_or(u128::MAX);
        while index > groups as u128 && index >= 10 {
            index /= 10;
        }
        if index > groups as u128 {
            let start = m.get(1).map_or(0, |g| g.start());
            if start - 1 <= value.len() && value.is_char_boundary(start - 1) {
                value = format!("{}\\{}", &value[..start - 1], &value[start - 1..]);
            }
        }
    }
    value
}

/// One piece of a Java replacement string.
enum Piece<'a> {
    Text(&'a str),
    Group(usize),
    Named(&'a str),
}

/// Java's Matcher.appendReplacement syntax: `\x` is x, `$N` a group (digits taken while the
/// number stays a group), `${name}` a named group.
fn pieces<'a>(replacement: &'a str, groups: usize) -> Result<Vec<Piece<'a>>, String> {
    let bytes = replacement.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => {
                let c = replacement[i + 1..]
                    .chars()
                    .next()
                    .ok_or_else(|| "character to be escaped is missing".to_string())?;
                out.push(Piece::Text(&replacement[i + 1..i + 1 + c.len_utf8()]));
                i += 1 + c.len_utf8();
            }
            b'$' => {
                i += 1;
                if bytes.get(i) == Some(&b'{') {
                    let close = replacement[i..]
                        .find('}')
                        .ok_or_else(|| "named capturing group is missing trailing '}'".to_string())?;
                    out.push(Piece::Named(&replacement[i + 1..i + close]));
                    i += close + 1;
                    continue;
                }
                let Some(d) = bytes.get(i).filter(|b| b.is_ascii_digit()) else {
                    return Err("Illegal group reference".to_string());
                };
                let mut number = usize::from(d - b'0');
                if number > groups {
                    return Err(format!("No group {number}"));
                }
                i += 1;
                while let Some(d) = bytes.get(i).filter(|b| b.is_ascii_digit()) {
                    let next = number * 10 + usize::from(d - b'0');
                    if next > groups {
                        break;
                    }
                    number = next;
                    i += 1;
                }
                out.push(Piece::Group(number));
            }
            _ => {
                let end = replacement[i..].find(['\\', '$']).map_or(bytes.len(), |e| i + e);
                out.push(Piece::Text(&replacement[i..end]));
                i = end;
            }
        }
    }
    Ok(out)
}

fn check_replacement(replacement: &str, pattern: &Regex) -> Result<(), String> {
    for piece in pieces(replacement, pattern.captures_len() - 1)? {
        if let Piece::Named(name) = piece {
            if !pattern.capture_names().any(|n| n == Some(name)) {
                return Err(format!("No group with name {{{name}}}"));
            }
        }
    }
    Ok(())
}

/// Java's String.replaceAll: after an empty match the next search starts one character later;
/// after a non-empty one, where it ended.
fn replace_all(pattern: &Regex, text: &str, replacement: &str) -> Result<String, String> {
    let pieces = pieces(replacement, pattern.captures_len() - 1)?;
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut at = 0;
    while at <= text.len() {
        let Some(caps) = pattern.captures_at(text, at) else {
            break;
        };
        let m = caps.get(0).expect("group 0");
        out.push_str(&text[copied..m.start()]);
        append(&mut out, &caps, &pieces);
        copied = m.end();
        at = if m.start() == m.end() {
            match text[m.end()..].chars().next() {
                Some(c) => m.end() + c.len_utf8(),
                None => break,
            }
        } else {
            m.end()
        };
    }
    out.push_str(&text[copied..]);
    Ok(out)
}

fn append(out: &mut String, caps: &Captures<'_>, pieces: &[Piece<'_>]) {
    for piece in pieces {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Group(n) => out.push_str(caps.get(*n).map_or("", |g| g.as_str())),
            Piece::Named(n) => out.push_str(caps.name(n).map_or("", |g| g.as_str())),
        }
    }
}

#[cfg(test)]
#[path = "mapper_tests.rs"]
mod tests;
