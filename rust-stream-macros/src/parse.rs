//! From tokens to our AST: the attribute into [`Attribute`], the function into [`Handler`].
//!
//! Each problem is pushed to [`Errors`] on the token that causes it and parsing goes on, so one
//! compile shows every mistake; only tokens that cannot be read at all stop the attribute early.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::parse::{ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{token, Expr, FnArg, Ident, ItemFn, Lit, Pat, ReturnType, Token, Type};

/// Every problem found so far, reported together.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    pub(crate) fn spanned(&mut self, tokens: impl ToTokens, message: impl std::fmt::Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    pub(crate) fn at(&mut self, span: Span, message: impl std::fmt::Display) {
        self.push(syn::Error::new(span, message));
    }

    pub(crate) fn finish(self) -> Result<(), syn::Error> {
        self.0.map_or(Ok(()), Err)
    }
}

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
    ("codec", "codec = MyCodec"),
];

/// The settings written as `key(..)`.
const CALLED: &[(&str, &str)] = &[
    ("dead_letter", "dead_letter(\"orders-dlq\", 5)"),
    ("outputs", "outputs(receipts = \"receipts\")"),
];

/// Names people reach for, from SQS's API or other frameworks, and the setting that means it.
const RENAMED: &[(&str, &str)] = &[
    ("wait_time_seconds", "wait"),
    ("wait_time", "wait"),
    ("wait_seconds", "wait"),
    ("long_poll", "wait"),
    ("max_messages", "batch_size"),
    ("max_number_of_messages", "batch_size"),
    ("batch", "batch_size"),
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
    ("output", "outputs"),
    ("publish", "outputs"),
    ("publishes", "outputs"),
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
        Some(value) if assigned => match int_literal(value) {
            Some(seconds) if matches!(key, "wait" | "visibility_timeout") => {
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
    pub(crate) codec: Option<Setting>,
    pub(crate) dead_letter: Option<DeadLetter>,
    /// The `outputs` key, to say "set twice".
    pub(crate) outputs_key: Option<Ident>,
    pub(crate) outputs: Vec<OutputEntry>,
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

/// Reads `#[subscriber(..)]`; `None` only when its tokens cannot be read at all.
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
                    "codec" => &mut self.codec,
                    "dead_letter" | "outputs" => {
                        let example = example(&name).unwrap_or_default();
                        errors.spanned(
                            &key,
                            format!("`{name}` is written like a call: `{example}`"),
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

/// The error goes on the second one: the first reads as intended until the second appears.
fn twice(again: &Ident, errors: &mut Errors) {
    errors.spanned(again, format!("`{again}` is set twice; keep one of them"));
}

/// A type or expression as a person writes it, for error messages.
pub(crate) fn show(tokens: &impl ToTokens) -> String {
    let mut shown = tokens.to_token_stream().to_string();
    for (spaced, tight) in [
        (" :: ", "::"),
        (":: ", "::"),
        (" < ", "<"),
        ("< ", "<"),
        (" <", "<"),
        (" >", ">"),
        (" ,", ","),
        ("& ", "&"),
        ("' ", "'"),
        (" (", "("),
        ("( ", "("),
        (" )", ")"),
        (" .", "."),
    ] {
        shown = shown.replace(spaced, tight);
    }
    shown
}

/// What a parameter after the message is.
pub(crate) enum Kind {
    /// `&mut Context<'_>` (`mutable`) or `&Context<'_>`.
    Context { mutable: bool },
    /// `State<S>`: `inner` is `S`.
    State { inner: Box<Type> },
    /// `name: &Output<U>`: `output` is `Output<U>`, `value` is `U`.
    Output {
        name: Ident,
        output: Box<Type>,
        value: Box<Type>,
    },
}

/// A parameter after the message.
pub(crate) struct Param {
    pub(crate) kind: Kind,
    /// The whole `pat: Type`, for errors.
    pub(crate) tokens: syn::PatType,
}

/// The message parameter: `pat: &T`.
pub(crate) struct Message {
    /// `T`.
    pub(crate) ty: Type,
}

/// The function under `#[subscriber]`.
pub(crate) struct Handler {
    pub(crate) item: ItemFn,
    pub(crate) message: Option<Message>,
    pub(crate) params: Vec<Param>,
    /// Whether it takes `self`: then it sits in an impl block, where no struct can be emitted.
    pub(crate) is_method: bool,
    /// Names of output parameters already reported (taken by value, ...), so their
    /// `outputs(..)` entries are not reported again as unused.
    pub(crate) rejected_outputs: Vec<Ident>,
}

/// What a type names, when it is one of the parameter kinds.
enum Named<'a> {
    Context,
    State(Option<&'a Type>),
    Output(Option<&'a Type>),
    Other,
}

fn strip(ty: &Type) -> &Type {
    match ty {
        Type::Paren(inner) => strip(&inner.elem),
        Type::Group(inner) => strip(&inner.elem),
        ty => ty,
    }
}

fn named(ty: &Type) -> Named<'_> {
    let Type::Path(path) = strip(ty) else {
        return Named::Other;
    };
    if path.qself.is_some() {
        return Named::Other;
    }
    let Some(last) = path.path.segments.last() else {
        return Named::Other;
    };
    let argument = match &last.arguments {
        syn::PathArguments::AngleBracketed(args) if args.args.len() == 1 => {
            match args.args.first() {
                Some(syn::GenericArgument::Type(ty)) => Some(ty),
                _ => None,
            }
        }
        _ => None,
    };
    match last.ident.to_string().as_str() {
        "Context" => Named::Context,
        "State" => Named::State(argument),
        "Output" => Named::Output(argument),
        _ => Named::Other,
    }
}

/// What a subscriber may take, for errors about parameters.
const TAKES: &str = "a subscriber takes the message `&T` first, then any of `&mut Context<'_>` \
                     (or `&Context<'_>`), `State<S>` for shared state, and `name: &Output<U>` \
                     for an output declared in `outputs(name = ..)`";

fn contains_impl_trait(ty: &Type) -> bool {
    ty.to_token_stream()
        .into_iter()
        .any(|token| matches!(&token, proc_macro2::TokenTree::Ident(ident) if ident == "impl"))
}

/// Reads the function; every problem of its signature goes to `errors`.
pub(crate) fn handler(item: ItemFn, errors: &mut Errors) -> Handler {
    let sig = &item.sig;
    let name = &sig.ident;
    if let Some(constness) = &sig.constness {
        errors.spanned(
            constness,
            "a subscriber cannot be a `const fn`; remove `const`",
        );
    }
    if let Some(unsafety) = &sig.unsafety {
        errors.spanned(
            unsafety,
            "a subscriber cannot be an `unsafe fn`: nothing could uphold its contract when the \
             broker calls it; remove `unsafe` and keep the `unsafe` block inside",
        );
    }
    if let Some(abi) = &sig.abi {
        errors.spanned(abi, "a subscriber cannot have an ABI; remove the `extern`");
    }
    if sig.asyncness.is_none() {
        errors.spanned(
            sig.fn_token,
            format!("a subscriber is an `async fn`; write `async fn {name}(..)`"),
        );
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        let generics = if sig.generics.params.is_empty() {
            sig.generics.where_clause.to_token_stream()
        } else {
            sig.generics.to_token_stream()
        };
        errors.spanned(
            generics,
            "a subscriber cannot be generic: its message type must be known to decode the \
             message; name concrete types, or implement `Handle<T>` by hand for a generic handler",
        );
    }
    if let Some(variadic) = &sig.variadic {
        errors.spanned(
            variadic,
            "a subscriber cannot be variadic; remove the `...`",
        );
    }

    let mut is_method = false;
    let mut message = None;
    let mut params = Vec::new();
    let mut rejected_outputs = Vec::new();
    // When the context (or another parameter) came first, the message is usually right behind
    // it: one error for the swap, not a second for the message.
    let mut message_expected = false;
    for (position, input) in sig.inputs.iter().enumerate() {
        let typed = match input {
            FnArg::Receiver(receiver) => {
                is_method = true;
                errors.spanned(
                    receiver,
                    "a subscriber is a free function, not a method: move it out of the `impl` \
                     block and remove `self`; for a handler that keeps fields, implement \
                     `Handle<T>` for your type by hand",
                );
                continue;
            }
            FnArg::Typed(typed) => typed,
        };
        if position == 0 || (position == 1 && is_method && message.is_none()) {
            message = self::message(typed, name, errors);
            message_expected = message.is_none() && is_misplaced(typed);
        } else if message_expected && looks_like_message(typed) {
            message_expected = false;
        } else if let Some(param) = param(typed, &mut rejected_outputs, errors) {
            params.push(param);
        }
    }
    if sig.inputs.is_empty() {
        errors.at(
            sig.paren_token.span.join(),
            format!(
                "a subscriber takes the message it handles: add it as the first parameter, \
                 borrowed: `async fn {name}(msg: &T)`"
            ),
        );
    }
    if let ReturnType::Type(_, ty) = &sig.output {
        if contains_impl_trait(ty) {
            errors.spanned(
                ty,
                "name the return type: `HandlerOutcome`, `()`, `Result<(), E: Display>` or \
                 `Result<(), HandlerOutcome>`",
            );
        }
    }
    Handler {
        item,
        message,
        params,
        is_method,
        rejected_outputs,
    }
}

fn referent(ty: &Type) -> &Type {
    match strip(ty) {
        Type::Reference(reference) => &reference.elem,
        ty => ty,
    }
}

/// A context, state or output in first place.
fn is_misplaced(typed: &syn::PatType) -> bool {
    !matches!(named(referent(&typed.ty)), Named::Other)
}

/// `&T` of no parameter kind: what a message looks like.
fn looks_like_message(typed: &syn::PatType) -> bool {
    matches!(strip(&typed.ty), Type::Reference(_))
        && matches!(named(referent(&typed.ty)), Named::Other)
}

fn message(typed: &syn::PatType, name: &Ident, errors: &mut Errors) -> Option<Message> {
    let (reference, referent) = match strip(&typed.ty) {
        Type::Reference(reference) => (Some(reference), &*reference.elem),
        ty => (None, ty),
    };
    let misplaced = match named(referent) {
        Named::Context => Some("the context"),
        Named::State(_) => Some("state"),
        Named::Output(_) => Some("an output"),
        Named::Other => None,
    };
    if let Some(what) = misplaced {
        let pat = show(&typed.pat);
        let ty = show(&typed.ty);
        errors.spanned(
            typed,
            format!(
                "the first parameter of a subscriber is the message; {what} comes after it: \
                 `async fn {name}(msg: &T, {pat}: {ty})`"
            ),
        );
        return None;
    }
    if contains_impl_trait(referent) {
        errors.spanned(
            referent,
            "a subscriber cannot be generic: name the message's type, e.g. `msg: &Order`",
        );
        return None;
    }
    let Some(reference) = reference else {
        errors.spanned(
            &typed.ty,
            format!(
                "the message is borrowed, not owned: take `{}: &{}` (clone what you keep)",
                show(&typed.pat),
                show(&typed.ty)
            ),
        );
        return None;
    };
    if let Some(mutability) = &reference.mutability {
        let and = reference.and_token;
        errors.spanned(
            quote::quote!(#and #mutability),
            format!(
                "the message is shared, not yours to change: take `{}: &{}` (clone it to \
                 change a copy)",
                show(&typed.pat),
                show(&*reference.elem)
            ),
        );
        return None;
    }
    Some(Message {
        ty: referent.clone(),
    })
}

fn param(
    typed: &syn::PatType,
    rejected_outputs: &mut Vec<Ident>,
    errors: &mut Errors,
) -> Option<Param> {
    let pat = show(&typed.pat);
    let (reference, referent) = match strip(&typed.ty) {
        Type::Reference(reference) => (Some(reference), &*reference.elem),
        ty => (None, ty),
    };
    let kind = match (named(referent), reference) {
        (Named::Context, Some(reference)) => Kind::Context {
            mutable: reference.mutability.is_some(),
        },
        (Named::Context, None) => {
            errors.spanned(
                &typed.ty,
                format!(
                    "the context is lent to the handler, not given: take `{pat}: &mut {}` (or \
                     `&{}` to only read it)",
                    show(referent),
                    show(referent)
                ),
            );
            return None;
        }
        (Named::State(Some(inner)), None) => Kind::State {
            inner: Box::new(inner.clone()),
        },
        (Named::State(_), Some(_)) => {
            errors.spanned(
                &typed.ty,
                format!(
                    "state is handed over as an owned clone: take `{pat}: {}`, or \
                     `State({pat}): {}`",
                    show(referent),
                    show(referent)
                ),
            );
            return None;
        }
        (Named::Output(Some(value)), Some(reference)) => {
            if reference.mutability.is_some() {
                rejected_outputs.extend(ident_of(&typed.pat));
                errors.spanned(
                    &typed.ty,
                    format!("an output is shared: take `{pat}: &{}`", show(referent)),
                );
                return None;
            }
            let Some(name) = ident_of(&typed.pat) else {
                errors.spanned(
                    &typed.pat,
                    format!(
                        "an output parameter is a plain name, the name of its \
                         `outputs(name = ..)` entry: `receipts: &{}`",
                        show(referent)
                    ),
                );
                return None;
            };
            Kind::Output {
                name,
                output: Box::new(referent.clone()),
                value: Box::new(value.clone()),
            }
        }
        (Named::Output(Some(_)), None) => {
            rejected_outputs.extend(ident_of(&typed.pat));
            errors.spanned(
                &typed.ty,
                format!(
                    "an output is lent to the handler: take `{pat}: &{}`",
                    show(referent)
                ),
            );
            return None;
        }
        (Named::State(None) | Named::Output(None), _) => {
            errors.spanned(
                &typed.ty,
                format!("name the type it carries: `State<S>` or `&Output<U>`; {TAKES}"),
            );
            return None;
        }
        (Named::Other, reference) => {
            let more = if reference.is_some() {
                " (a subscriber handles one message, its first parameter)"
            } else {
                ""
            };
            errors.spanned(
                &typed.ty,
                format!(
                    "a subscriber cannot be given `{}`{more}; {TAKES}",
                    show(&typed.ty)
                ),
            );
            return None;
        }
    };
    Some(Param {
        kind,
        tokens: typed.clone(),
    })
}

fn ident_of(pat: &Pat) -> Option<Ident> {
    match pat {
        Pat::Ident(ident) if ident.subpat.is_none() && ident.by_ref.is_none() => {
            Some(ident.ident.clone())
        }
        _ => None,
    }
}

/// The literal string of an expression, when it is one.
pub(crate) fn string_literal(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Lit(lit) => match &lit.lit {
            Lit::Str(value) => Some(value.value()),
            _ => None,
        },
        Expr::Group(group) => string_literal(&group.expr),
        _ => None,
    }
}

/// The literal integer of an expression, when it is one.
pub(crate) fn int_literal(expr: &Expr) -> Option<u128> {
    match expr {
        Expr::Lit(lit) => match &lit.lit {
            Lit::Int(value) => value.base10_parse().ok(),
            _ => None,
        },
        Expr::Group(group) => int_literal(&group.expr),
        _ => None,
    }
}
