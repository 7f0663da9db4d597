//! Shell-style globs over function names: `*` (any run of characters), `?` (one character),
//! `[abc]`, `[a-z]`, `[!a-z]` or `[^a-z]` (one character in, or not in, the set), and `\x` for
//! a literal `x`. A glob matches the whole name. Written here rather than taken from a crate
//! because function names need none of a path glob's rules (no `/` or leading-dot specials).

use thiserror::Error;

/// Why a glob could not be compiled.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum GlobError {
    #[error("`[` without a closing `]`")]
    UnclosedClass,
    #[error("`\\` at the end (escape what?)")]
    TrailingEscape,
    #[error("empty pattern")]
    Empty,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Literal(char),
    AnyOne,
    AnyRun,
    Class {
        negated: bool,
        /// Inclusive ranges; a single character is a range of one.
        ranges: Vec<(char, char)>,
    },
}

impl Token {
    fn matches(&self, c: char) -> bool {
        match self {
            Token::Literal(l) => *l == c,
            Token::AnyOne => true,
            Token::AnyRun => unreachable!("`*` is matched by backtracking"),
            Token::Class { negated, ranges } => {
                ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated
            }
        }
    }
}

/// A compiled glob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Glob {
    text: String,
    tokens: Vec<Token>,
}

impl Glob {
    pub fn new(text: &str) -> Result<Glob, GlobError> {
        if text.is_empty() {
            return Err(GlobError::Empty);
        }
        let mut tokens = Vec::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            let token = match c {
                '*' => {
                    // `**` means the same as `*`; one token keeps matching linear.
                    if tokens.last() == Some(&Token::AnyRun) {
                        continue;
                    }
                    Token::AnyRun
                }
                '?' => Token::AnyOne,
                '\\' => Token::Literal(chars.next().ok_or(GlobError::TrailingEscape)?),
                '[' => {
                    let negated = matches!(chars.peek(), Some('!' | '^'));
                    if negated {
                        chars.next();
                    }
                    let mut ranges = Vec::new();
                    let mut first = true;
                    loop {
                        let c = chars.next().ok_or(GlobError::UnclosedClass)?;
                        // A `]` right after `[` or `[!` is a member, as in the shell.
                        if c == ']' && !first {
                            break;
                        }
                        first = false;
                        let lo = if c == '\\' {
                            chars.next().ok_or(GlobError::UnclosedClass)?
                        } else {
                            c
                        };
                        let mut hi = lo;
                        if chars.peek() == Some(&'-') {
                            let mut ahead = chars.clone();
                            ahead.next();
                            if let Some(&end) = ahead.peek() {
                                if end != ']' {
                                    chars.next();
                                    hi = chars.next().ok_or(GlobError::UnclosedClass)?;
                                }
                            }
                        }
                        ranges.push((lo, hi));
                    }
                    Token::Class { negated, ranges }
                }
                c => Token::Literal(c),
            };
            tokens.push(token);
        }
        Ok(Glob {
            text: text.to_owned(),
            tokens,
        })
    }

    /// The pattern as given.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether it names one name exactly (no wildcard, no class).
    pub fn is_literal(&self) -> bool {
        self.tokens
            .iter()
            .all(|token| matches!(token, Token::Literal(_)))
    }

    /// Whether the whole of `name` matches.
    pub fn matches(&self, name: &str) -> bool {
        // The classic greedy matcher: on a mismatch, go back to the last `*` and let it take
        // one more character. Each `*` only ever moves forward, so this is O(pattern × name).
        let name: Vec<char> = name.chars().collect();
        let (mut t, mut n) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while n < name.len() {
            match self.tokens.get(t) {
                Some(Token::AnyRun) => {
                    star = Some((t, n));
                    t += 1;
                }
                Some(token) if token.matches(name[n]) => {
                    t += 1;
                    n += 1;
                }
                _ => match star {
                    Some((star_t, star_n)) => {
                        t = star_t + 1;
                        n = star_n + 1;
                        star = Some((star_t, star_n + 1));
                    }
                    None => return false,
                },
            }
        }
        self.tokens[t..].iter().all(|token| *token == Token::AnyRun)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(glob: &str, name: &str) -> bool {
        Glob::new(glob).unwrap().matches(name)
    }

    #[test]
    fn glob_literals_and_wildcards() {
        assert!(matches("fib", "fib"));
        assert!(!matches("fib", "fibo"));
        assert!(!matches("fib", "fi"));
        assert!(matches("fib*", "fib"));
        assert!(matches("fib*", "fibonacci"));
        assert!(!matches("fib*", "xfib"));
        assert!(matches("*@plt", "qsort@plt"));
        assert!(matches("*", ""));
        assert!(matches("a*b*c", "aXXbYYc"));
        assert!(matches("a*b*c", "abbbc"));
        assert!(!matches("a*b*c", "abcb"));
        assert!(matches("a**c", "abc"));
        assert!(matches("is_?dd", "is_odd"));
        assert!(!matches("is_?dd", "is_dd"));
        assert!(matches(
            "geometry::*::area() const",
            "geometry::Circle::area() const"
        ));
        assert!(matches("ünï*", "ünïcode"));
    }

    #[test]
    fn glob_classes() {
        assert!(matches("op_[as]*", "op_add"));
        assert!(matches("op_[as]*", "op_sub"));
        assert!(!matches("op_[as]*", "op_mul"));
        assert!(matches("op_[!as]*", "op_mul"));
        assert!(matches("op_[^as]*", "op_mul"));
        assert!(matches("f[0-9]", "f7"));
        assert!(!matches("f[0-9]", "fx"));
        assert!(matches("f[]]", "f]"));
        assert!(matches("f[a-]", "f-"));
        assert!(matches("f\\*", "f*"));
        assert!(!matches("f\\*", "fx"));
    }

    #[test]
    fn glob_errors() {
        assert_eq!(Glob::new("fib[").unwrap_err(), GlobError::UnclosedClass);
        assert_eq!(Glob::new("[a-").unwrap_err(), GlobError::UnclosedClass);
        assert_eq!(Glob::new("fib\\").unwrap_err(), GlobError::TrailingEscape);
        assert_eq!(Glob::new("").unwrap_err(), GlobError::Empty);
    }
}
