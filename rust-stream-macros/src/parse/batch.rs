//! `batch(max = .., window = ..)`: the setting that makes a handler take a batch of messages a
//! call, read into [`Batch`]. `window` takes a number with a unit (`100ms`), which Rust would not
//! read as an expression, or any `Duration` expression; names from Lambda's event source mappings
//! and elsewhere are pointed to ours, as the attribute's own keys are.

use proc_macro2::TokenStream;
use syn::parse::{ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{Expr, Ident, Token};

use super::attribute::{twice, Attribute, Setting};
use super::{show, Errors};

/// `batch(max = .., window = ..)`: the handler takes a batch of messages a call.
pub(crate) struct Batch {
    /// The `batch` key, where an error about the whole setting goes.
    pub(crate) key: Ident,
    /// `max = ..`: the most messages a call, a `usize` expression; `None` after its error.
    pub(crate) max: Option<Setting>,
    /// `window = ..`: how long a batch is gathered from its first message; `None` after its error.
    pub(crate) window: Option<WindowValue>,
}

/// What `window` is set to.
pub(crate) enum WindowValue {
    /// A number with a unit, `100ms`, which Rust would not take as an expression: its length.
    Literal { written: syn::Lit, nanos: u128 },
    /// Any `Duration` expression, as written.
    Expr(Expr),
}

/// The units a `window` literal may have, with their length in nanoseconds.
pub(crate) const WINDOW_UNITS: &[(&str, u128)] = &[
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
];

/// The keys of `batch(..)`, as `batch` takes them.
pub(super) const BATCH_FORM: &str =
    "`batch(max = 10, window = 100ms)`, with `max` messages a call (1–1000), gathered for at \
     most `window` from the first (`100ms`, `2s` or a `Duration`, at most 5 minutes)";

/// Names people give the keys of `batch(..)`, from Lambda's event source mappings and elsewhere.
const BATCH_RENAMED: &[(&str, &str)] = &[
    ("size", "max"),
    ("max_size", "max"),
    ("batch_size", "max"),
    ("max_messages", "max"),
    ("messages", "max"),
    ("count", "max"),
    ("wait", "window"),
    ("linger", "window"),
    ("timeout", "window"),
    ("max_wait", "window"),
    ("batching_window", "window"),
    ("maximum_batching_window", "window"),
];

impl Attribute {
    pub(super) fn batch(&mut self, key: Ident, args: TokenStream, errors: &mut Errors) {
        if self.batch.is_some() {
            return twice(&key, errors);
        }
        let entry = |input: ParseStream<'_>| -> syn::Result<(Ident, Expr)> {
            let name: Ident = input.parse().map_err(|error| {
                syn::Error::new(
                    error.span(),
                    format!("`batch` takes its values by name: {BATCH_FORM}"),
                )
            })?;
            if input.peek(Token![:]) {
                let value = &name;
                return Err(syn::Error::new_spanned(
                    &name,
                    format!("write `{value} = ..`, with `=`: {BATCH_FORM}"),
                ));
            }
            input.parse::<Token![=]>().map_err(|error| {
                syn::Error::new(
                    error.span(),
                    format!("give `{name}` its value: {BATCH_FORM}"),
                )
            })?;
            Ok((name, input.parse()?))
        };
        let entries = (|input: ParseStream<'_>| {
            Punctuated::<(Ident, Expr), Token![,]>::parse_terminated_with(input, entry)
        })
        .parse2(args);
        let mut batch = Batch {
            key,
            max: None,
            window: None,
        };
        // A key that was set, even to a value with an error, is not reported missing.
        let (mut max_seen, mut window_seen) = (false, false);
        match entries {
            Ok(entries) => {
                for (name, value) in entries {
                    match name.to_string().as_str() {
                        "max" if max_seen => twice(&name, errors),
                        "max" => {
                            max_seen = true;
                            batch.max = Some(Setting { key: name, value });
                        }
                        "window" if window_seen => twice(&name, errors),
                        "window" => {
                            window_seen = true;
                            batch.window = window(value, errors);
                        }
                        other => {
                            let renamed = BATCH_RENAMED.iter().find(|(old, _)| *old == other);
                            let message = match renamed {
                                Some((_, new)) => format!(
                                    "`{other}` is called `{new}` in `batch(..)`: write \
                                     `{new} = {}`",
                                    show(&value)
                                ),
                                None => format!(
                                    "unknown key `{other}` in `batch(..)`; it takes {BATCH_FORM}"
                                ),
                            };
                            errors.spanned(&name, message);
                        }
                    }
                }
            }
            Err(error) => {
                errors.push(error);
                // The values could not be read: one error is enough.
                (max_seen, window_seen) = (true, true);
            }
        }
        let missing: Vec<&str> = [("max", max_seen), ("window", window_seen)]
            .into_iter()
            .filter(|(_, seen)| !seen)
            .map(|(name, _)| name)
            .collect();
        if !missing.is_empty() {
            errors.spanned(
                &batch.key,
                format!(
                    "`batch(..)` needs `{}`: {BATCH_FORM}",
                    missing.join("` and `")
                ),
            );
        }
        self.batch = Some(batch);
    }
}

/// Reads `window = value`: a number with a unit or a `Duration` expression.
fn window(value: Expr, errors: &mut Errors) -> Option<WindowValue> {
    let lit = match &value {
        Expr::Lit(lit) => Some(lit.lit.clone()),
        Expr::Group(group) => match &*group.expr {
            Expr::Lit(lit) => Some(lit.lit.clone()),
            _ => None,
        },
        _ => None,
    };
    let Some(lit) = lit else {
        return Some(WindowValue::Expr(value));
    };
    let (digits, suffix) = match &lit {
        syn::Lit::Int(int) => (int.base10_digits().to_owned(), int.suffix().to_owned()),
        syn::Lit::Float(float) => (float.base10_digits().to_owned(), float.suffix().to_owned()),
        _ => {
            errors.spanned(
                &value,
                format!("`window` is a length of time: {BATCH_FORM}"),
            );
            return None;
        }
    };
    let units: Vec<String> = WINDOW_UNITS
        .iter()
        .map(|(unit, _)| format!("`{digits}{unit}`"))
        .collect();
    let Some((_, unit)) = WINDOW_UNITS.iter().find(|(unit, _)| *unit == suffix) else {
        let what = if suffix.is_empty() {
            "`window` needs a unit".to_owned()
        } else {
            format!("`window` takes the units `ms`, `s` and `m`, not `{suffix}`")
        };
        errors.spanned(
            &value,
            format!(
                "{what}: write {} (milliseconds, seconds, minutes), or a `Duration`",
                match units.split_last() {
                    Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
                    None => String::new(),
                }
            ),
        );
        return None;
    };
    let nanos = match &lit {
        syn::Lit::Int(_) => digits.parse::<u128>().ok().map(|n| n.saturating_mul(*unit)),
        // An f64 holds every window up to 5 minutes to the nanosecond.
        _ => digits
            .parse::<f64>()
            .ok()
            .map(|n| (n * *unit as f64).round() as u128),
    };
    match nanos {
        Some(nanos) => Some(WindowValue::Literal {
            written: lit,
            nanos,
        }),
        None => {
            errors.spanned(&value, "this window is too long: at most 5 minutes (`5m`)");
            None
        }
    }
}
