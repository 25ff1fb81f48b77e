//! `#[subscriber(SOURCE, key = value, key(..), ..)]`: the source first, then settings, each
//! known by name; names from SQS's API or other frameworks are pointed to ours.

use proc_macro2::{Span, TokenStream};
use syn::parse::{ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{token, Expr, Ident, Token};

use super::batch::{Batch, BATCH_FORM};
use super::{int_literal, show, Errors};

/// The settings written as `key = value`, with what each takes.
const ASSIGNED: &[(&str, &str)] = &[
    ("concurrency", "concurrency = 8"),
    ("batch_size", "batch_size = 10"),
    ("wait", "wait = Duration::from_secs(5)"),
    (
        "visibility_timeout",
        "visibility_timeout = Duration::from_secs(60)",
    ),
    ("pollers", "pollers = 2"),
    (
        "retry",
        "retry = RetryPolicy::exponential(Duration::from_secs(1), Duration::from_secs(300))",
    ),
    ("timeout", "timeout = Duration::from_secs(30)"),
    ("codec", "codec = MyCodec"),
    ("filter", "filter = from_the_ledger"),
    ("idempotent", "idempotent = payments_inbox()"),
];

/// The settings written as `key(..)`.
const CALLED: &[(&str, &str)] = &[
    ("dead_letter", "dead_letter(\"orders-dlq\", 5)"),
    ("outputs", "outputs(receipts = \"receipts\")"),
    ("batch", "batch(max = 10, window = 100ms)"),
    ("layers", "layers(from_fn(audit))"),
];

/// Names people reach for, from SQS's API or other frameworks, and the setting that means it.
const RENAMED: &[(&str, &str)] = &[
    ("wait_time_seconds", "wait"),
    ("wait_time", "wait"),
    ("wait_seconds", "wait"),
    ("long_poll", "wait"),
    ("max_messages", "batch_size"),
    ("max_number_of_messages", "batch_size"),
    ("batch_window", "batch"),
    ("batching_window", "batch"),
    ("max_batching_window", "batch"),
    ("prefetch", "batch_size"),
    ("visibility", "visibility_timeout"),
    ("visibility_timeout_seconds", "visibility_timeout"),
    ("max_concurrency", "concurrency"),
    ("workers", "concurrency"),
    ("parallelism", "concurrency"),
    ("dlq", "dead_letter"),
    ("dead_letter_queue", "dead_letter"),
    ("redrive", "dead_letter"),
    ("max_receive_count", "dead_letter"),
    ("retry_policy", "retry"),
    ("backoff", "retry"),
    ("handler_timeout", "timeout"),
    ("output", "outputs"),
    ("layer", "layers"),
    ("middleware", "layers"),
    ("publish", "outputs"),
    ("publishes", "outputs"),
    ("predicate", "filter"),
    ("condition", "filter"),
    ("when", "filter"),
    ("inbox", "idempotent"),
    ("idempotency", "idempotent"),
    ("dedup", "idempotent"),
    ("deduplicate", "idempotent"),
    ("exactly_once", "idempotent"),
];

/// The example for a setting, by name.
fn example(key: &str) -> Option<&'static str> {
    ASSIGNED
        .iter()
        .chain(CALLED)
        .find(|(name, _)| *name == key)
        .map(|(_, example)| *example)
}

/// The setting `key` as the user should write it, keeping their value where it fits.
fn suggest(key: &str, value: Option<&Expr>) -> String {
    let assigned = ASSIGNED.iter().any(|(known, _)| *known == key);
    match value {
        // `dedup = true`: the inbox is a value, not a flag to switch on.
        Some(Expr::Lit(_)) if key == "idempotent" => example(key).unwrap_or_default().to_owned(),
        Some(value) if assigned => match int_literal(value) {
            Some(seconds) if matches!(key, "wait" | "visibility_timeout" | "timeout") => {
                format!("{key} = Duration::from_secs({seconds})")
            }
            _ => format!("{key} = {}", show(value)),
        },
        _ => example(key).unwrap_or_default().to_owned(),
    }
}

fn valid_keys() -> String {
    let names: Vec<String> = ASSIGNED
        .iter()
        .chain(CALLED)
        .map(|(_, example)| format!("`{example}`"))
        .collect();
    names.join(", ")
}

/// A `key = value` setting.
pub(crate) struct Setting {
    pub(crate) key: Ident,
    pub(crate) value: Expr,
}

/// `dead_letter("queue", max_receive_count)`.
pub(crate) struct DeadLetter {
    pub(crate) key: Ident,
    pub(crate) queue: Expr,
    pub(crate) max_receive_count: Expr,
}

/// One `name = SOURCE` entry of `outputs(..)`.
pub(crate) struct OutputEntry {
    pub(crate) name: Ident,
    pub(crate) source: Expr,
}

/// `#[subscriber(SOURCE, settings..)]`.
#[derive(Default)]
pub(crate) struct Attribute {
    pub(crate) source: Option<Expr>,
    pub(crate) concurrency: Option<Setting>,
    pub(crate) batch_size: Option<Setting>,
    pub(crate) wait: Option<Setting>,
    pub(crate) visibility_timeout: Option<Setting>,
    pub(crate) pollers: Option<Setting>,
    pub(crate) retry: Option<Setting>,
    pub(crate) timeout: Option<Setting>,
    pub(crate) codec: Option<Setting>,
    pub(crate) filter: Option<Setting>,
    /// `idempotent = ..`: the subscription's inbox, an expression of an `Inbox<S>` value.
    pub(crate) idempotent: Option<Setting>,
    pub(crate) dead_letter: Option<DeadLetter>,
    /// The `outputs` key, to say "set twice".
    pub(crate) outputs_key: Option<Ident>,
    pub(crate) outputs: Vec<OutputEntry>,
    /// `batch(..)`: the handler takes `&[T]`.
    pub(crate) batch: Option<Batch>,
    /// The `layers` key, to say "set twice".
    pub(crate) layers_key: Option<Ident>,
    /// The subscription's middleware, in order: each an expression of a `Middleware` value.
    pub(crate) layers: Vec<Expr>,
}

/// One comma-separated item of the attribute, before it is understood.
enum Item {
    /// `key = value`.
    Assign { key: Ident, value: Expr },
    /// `key(..)`.
    Call {
        key: Ident,
        paren: token::Paren,
        args: TokenStream,
    },
    /// `key: value`, a common slip for `key = value`.
    Colon { key: Ident, value: Expr },
    /// Anything else: a source.
    Expr(Expr),
}

/// Names people give the source, as if it were a setting.
fn is_source_key(name: &str) -> bool {
    matches!(name, "queue" | "source" | "name")
}

fn is_key(name: &str) -> bool {
    example(name).is_some()
}

fn parse_item(input: ParseStream<'_>, first: bool) -> syn::Result<Item> {
    if input.peek(Ident) && input.peek2(Token![=]) && !input.peek2(Token![==]) {
        let key: Ident = input.parse()?;
        input.parse::<Token![=]>()?;
        return Ok(Item::Assign {
            key,
            value: input.parse()?,
        });
    }
    if input.peek(Ident) && input.peek2(Token![:]) && !input.peek2(Token![::]) {
        let key: Ident = input.parse()?;
        input.parse::<Token![:]>()?;
        return Ok(Item::Colon {
            key,
            value: input.parse()?,
        });
    }
    if input.peek(Ident) && input.peek2(token::Paren) {
        // `key(..)` is a setting, except that in first place a call of a function of the user's
        // (`orders_queue()`) is the source.
        let fork = input.fork();
        let key: Ident = fork.parse()?;
        let ends_item = {
            let content;
            let _ = syn::parenthesized!(content in fork);
            let _: TokenStream = content.parse()?;
            fork.is_empty() || fork.peek(Token![,])
        };
        if ends_item && (!first || is_key(&key.to_string())) {
            let key: Ident = input.parse()?;
            let content;
            let paren = syn::parenthesized!(content in input);
            return Ok(Item::Call {
                key,
                paren,
                args: content.parse()?,
            });
        }
    }
    Ok(Item::Expr(input.parse()?))
}

/// Reads `#[subscriber(..)]`; what cannot be read at all leaves the attribute empty.
pub(crate) fn attribute(args: TokenStream, errors: &mut Errors) -> Attribute {
    let items = (|input: ParseStream<'_>| {
        let mut items = Vec::new();
        while !input.is_empty() {
            items.push(parse_item(input, items.is_empty())?);
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        Ok(items)
    })
    .parse2(args);
    let mut attribute = Attribute::default();
    let items = match items {
        Ok(items) => items,
        Err(error) => {
            errors.push(error);
            return attribute;
        }
    };
    let mut items: Vec<Item> = items;
    match items.first() {
        Some(Item::Expr(_)) => {
            if let Item::Expr(source) = items.remove(0) {
                attribute.source = Some(source);
            }
        }
        Some(_) => match items.iter().position(|item| matches!(item, Item::Expr(_))) {
            Some(position) => {
                if let Item::Expr(source) = items.remove(position) {
                    errors.spanned(
                        &source,
                        format!(
                            "the source comes first, before the settings: \
                             `#[subscriber({}, ..)]`",
                            show(&source)
                        ),
                    );
                    attribute.source = Some(source);
                }
            }
            None => {
                // `queue = ".."` is answered by the setting's own error, which says where the
                // queue goes.
                if let Some(
                    Item::Assign { key, .. } | Item::Call { key, .. } | Item::Colon { key, .. },
                ) = items.first()
                {
                    if !is_source_key(&key.to_string()) {
                        errors.spanned(
                            key,
                            "missing source: a subscriber's first argument is the queue it reads, \
                         before any setting: `#[subscriber(\"orders\", ..)]` or \
                             `#[subscriber(SqsQueue::new(\"orders.fifo\"), ..)]`",
                        );
                    }
                }
            }
        },
        None => errors.at(
            Span::call_site(),
            "missing source: name the queue this subscriber reads: `#[subscriber(\"orders\")]` \
             or `#[subscriber(SqsQueue::new(\"orders.fifo\"))]`",
        ),
    }
    for item in items {
        attribute.item(item, errors);
    }
    attribute
}

impl Attribute {
    fn item(&mut self, item: Item, errors: &mut Errors) {
        match item {
            Item::Expr(second) => errors.spanned(
                &second,
                format!(
                    "a subscriber reads one source, and `{}` would be a second; remove one of \
                     them (to read two queues, write two subscribers). Settings are \
                     `key = value`: {}",
                    show(&second),
                    valid_keys()
                ),
            ),
            Item::Colon { key, value } => {
                let name = key.to_string();
                if is_key(&name) {
                    if name == "batch" && self.batch.is_none() {
                        // Meant as a batch handler: its `&[T]` is not reported again.
                        self.batch = Some(Batch {
                            key: key.clone(),
                            max: None,
                            window: None,
                        });
                    }
                    let fix = suggest(&name, Some(&value));
                    errors.spanned(&key, format!("write the setting `{name}` as `{fix}`"));
                } else {
                    Self::unknown(&key, Some(&value), errors);
                }
            }
            Item::Assign { key, value } => {
                let name = key.to_string();
                let slot = match name.as_str() {
                    "concurrency" => &mut self.concurrency,
                    "batch_size" => &mut self.batch_size,
                    "wait" => &mut self.wait,
                    "visibility_timeout" => &mut self.visibility_timeout,
                    "pollers" => &mut self.pollers,
                    "retry" => &mut self.retry,
                    "timeout" => &mut self.timeout,
                    "codec" => &mut self.codec,
                    "filter" => &mut self.filter,
                    "idempotent" => &mut self.idempotent,
                    "dead_letter" | "outputs" | "layers" => {
                        let example = example(&name).unwrap_or_default();
                        errors.spanned(
                            &key,
                            format!("`{name}` is written like a call: `{example}`"),
                        );
                        return;
                    }
                    "batch" => {
                        // Meant as a batch handler: its `&[T]` is not reported again.
                        self.batch.get_or_insert(Batch {
                            key: key.clone(),
                            max: None,
                            window: None,
                        });
                        errors.spanned(
                            &key,
                            format!(
                                "`batch` is written like a call: {BATCH_FORM}; for the messages \
                                 one receive asks SQS for, write `batch_size = {}`",
                                show(&value)
                            ),
                        );
                        return;
                    }
                    _ => return Self::unknown(&key, Some(&value), errors),
                };
                if slot.is_some() {
                    twice(&key, errors);
                } else {
                    *slot = Some(Setting { key, value });
                }
            }
            Item::Call { key, paren, args } => {
                let name = key.to_string();
                match name.as_str() {
                    "dead_letter" => self.dead_letter(key, paren, args, errors),
                    "outputs" => self.outputs(key, args, errors),
                    "batch" => self.batch(key, args, errors),
                    "layers" => self.layers(key, paren, args, errors),
                    _ if ASSIGNED.iter().any(|(known, _)| *known == name) => {
                        let value = syn::parse2::<Expr>(args).ok();
                        let fix = suggest(&name, value.as_ref());
                        errors.spanned(&key, format!("write the setting `{name}` as `{fix}`"));
                    }
                    _ => Self::unknown(&key, syn::parse2::<Expr>(args).ok().as_ref(), errors),
                }
            }
        }
    }

    fn unknown(key: &Ident, value: Option<&Expr>, errors: &mut Errors) {
        let name = key.to_string();
        if is_source_key(&name) {
            let source = value.map_or_else(|| "\"orders\"".to_owned(), show);
            errors.spanned(
                key,
                format!(
                    "`{name}` is not a setting: the queue is the first argument, unnamed: \
                     `#[subscriber({source}, ..)]`"
                ),
            );
        } else if let Some((_, new)) = RENAMED.iter().find(|(old, _)| *old == name) {
            let fix = suggest(new, value);
            errors.spanned(
                key,
                format!("`{name}` is called `{new}` here: write `{fix}`"),
            );
        } else {
            errors.spanned(
                key,
                format!(
                    "unknown setting `{name}`; the settings are {}",
                    valid_keys()
                ),
            );
        }
    }

    fn dead_letter(
        &mut self,
        key: Ident,
        paren: token::Paren,
        args: TokenStream,
        errors: &mut Errors,
    ) {
        let form = "write `dead_letter(\"queue\", max_receive_count)`, e.g. \
                    `dead_letter(\"orders-dlq\", 5)`";
        let parsed = Punctuated::<Expr, Token![,]>::parse_terminated.parse2(args);
        let (queue, max_receive_count) = match parsed {
            Ok(list) if list.len() == 2 => {
                let mut list = list.into_iter();
                match (list.next(), list.next()) {
                    (Some(queue), Some(max)) => (queue, max),
                    _ => return,
                }
            }
            Ok(list) if list.is_empty() => {
                errors.at(
                    paren.span.join(),
                    format!("`dead_letter` names a queue: {form}"),
                );
                return;
            }
            Ok(list) => {
                errors.spanned(
                    &list,
                    format!(
                        "`dead_letter` takes a queue and a max receive count, here {} \
                         argument(s); {form}",
                        list.len()
                    ),
                );
                return;
            }
            Err(error) => {
                errors.push(error);
                return;
            }
        };
        if self.dead_letter.is_some() {
            return twice(&key, errors);
        }
        self.dead_letter = Some(DeadLetter {
            key,
            queue,
            max_receive_count,
        });
    }

    fn outputs(&mut self, key: Ident, args: TokenStream, errors: &mut Errors) {
        if self.outputs_key.is_some() {
            return twice(&key, errors);
        }
        self.outputs_key = Some(key);
        let entry = |input: ParseStream<'_>| -> syn::Result<OutputEntry> {
            let name: Ident = input.parse().map_err(|error| {
                syn::Error::new(
                    error.span(),
                    "an output is `name = SOURCE`, named like its `&Output<U>` parameter: \
                     `outputs(receipts = \"receipts\")`",
                )
            })?;
            input.parse::<Token![=]>().map_err(|error| {
                syn::Error::new(
                    error.span(),
                    format!("give the output `{name}` its queue: `{name} = \"queue\"`"),
                )
            })?;
            Ok(OutputEntry {
                name,
                source: input.parse()?,
            })
        };
        let entries = (|input: ParseStream<'_>| {
            Punctuated::<OutputEntry, Token![,]>::parse_terminated_with(input, entry)
        })
        .parse2(args);
        match entries {
            Ok(entries) => {
                for entry in entries {
                    if self.outputs.iter().any(|known| known.name == entry.name) {
                        twice(&entry.name, errors);
                    } else {
                        self.outputs.push(entry);
                    }
                }
            }
            Err(error) => errors.push(error),
        }
    }
}

impl Attribute {
    /// `layers(a, b)`: the subscription's middleware, outermost first.
    fn layers(&mut self, key: Ident, paren: token::Paren, args: TokenStream, errors: &mut Errors) {
        if self.layers_key.is_some() {
            return twice(&key, errors);
        }
        match Punctuated::<Expr, Token![,]>::parse_terminated.parse2(args) {
            Ok(list) if list.is_empty() => errors.at(
                paren.span.join(),
                "`layers` names the subscription's middleware, outermost first: \
                 `layers(from_fn(audit))`",
            ),
            Ok(list) => {
                self.layers_key = Some(key);
                self.layers = list.into_iter().collect();
            }
            Err(error) => errors.push(error),
        }
    }
}

/// The error goes on the second one: the first reads as intended until the second appears.
pub(super) fn twice(again: &Ident, errors: &mut Errors) {
    errors.spanned(again, format!("`{again}` is set twice; keep one of them"));
}
