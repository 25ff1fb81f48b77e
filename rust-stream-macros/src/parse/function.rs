//! The function: an `async fn` whose first parameter is the message (`&T`), or the messages of a
//! batch (`&[T]`), then contexts, states and outputs, each recognised by its type's last path
//! segment (`Context` or `BatchContext`, `State`, `Output`).

use quote::ToTokens;
use syn::{FnArg, Ident, ItemFn, Pat, ReturnType, Type};

use super::{show, Errors};

/// What a parameter after the message is.
pub(crate) enum Kind {
    /// `&mut Context<'_>` (`mutable`) or `&Context<'_>`; in a batch handler `BatchContext`.
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

/// The message parameter: `pat: &T`, or `pat: &[T]` in a batch handler.
pub(crate) struct Message {
    /// `T`.
    pub(crate) ty: Type,
}

/// The function under `#[subscriber]`.
pub(crate) struct Handler {
    pub(crate) item: ItemFn,
    /// Whether it handles batches: the attribute says `batch(..)`, or the first parameter is a
    /// slice (then without `batch(..)`, which is an error). The other parameters are read as a
    /// batch handler's, so one mistake gives one error.
    pub(crate) batched: bool,
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
    BatchContext,
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
        "BatchContext" => Named::BatchContext,
        "State" => Named::State(argument),
        "Output" => Named::Output(argument),
        _ => Named::Other,
    }
}

/// What a subscriber may take, for errors about parameters.
fn takes(batched: bool) -> &'static str {
    if batched {
        "a batch subscriber takes the messages `&[T]` first, then any of \
         `&mut BatchContext<'_>` (or `&BatchContext<'_>`), `State<S>` for shared state, and \
         `name: &Output<U>` for an output declared in `outputs(name = ..)`"
    } else {
        "a subscriber takes the message `&T` first, then any of `&mut Context<'_>` (or \
         `&Context<'_>`), `State<S>` for shared state, and `name: &Output<U>` for an output \
         declared in `outputs(name = ..)`"
    }
}

/// `&[T]`, `&mut [T]` or `[T]`: the element type.
fn slice_of(ty: &Type) -> Option<&Type> {
    match strip(referent(ty)) {
        Type::Slice(slice) => Some(&slice.elem),
        _ => None,
    }
}

/// `Vec<T>`: `T`, for the slice a `&Vec<T>` should be.
fn vec_of(ty: &Type) -> Option<&Type> {
    let Type::Path(path) = strip(ty) else {
        return None;
    };
    let last = path.path.segments.last()?;
    if last.ident != "Vec" {
        return None;
    }
    match &last.arguments {
        syn::PathArguments::AngleBracketed(args) if args.args.len() == 1 => {
            match args.args.first() {
                Some(syn::GenericArgument::Type(ty)) => Some(ty),
                _ => None,
            }
        }
        _ => None,
    }
}

fn contains_impl_trait(ty: &Type) -> bool {
    ty.to_token_stream()
        .into_iter()
        .any(|token| matches!(&token, proc_macro2::TokenTree::Ident(ident) if ident == "impl"))
}

/// Reads the function, a batch handler's when the attribute has `batch(..)` (`batch_declared`);
/// every problem of its signature goes to `errors`.
pub(crate) fn handler(item: ItemFn, batch_declared: bool, errors: &mut Errors) -> Handler {
    let sig = &item.sig;
    let name = &sig.ident;
    let first_is_slice = sig.inputs.iter().find_map(|input| match input {
        FnArg::Typed(typed) => Some(slice_of(&typed.ty).is_some()),
        FnArg::Receiver(_) => None,
    }) == Some(true);
    let batched = batch_declared || first_is_slice;
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
            message = self::message(typed, name, batch_declared, batched, errors);
            message_expected = message.is_none() && is_misplaced(typed);
        } else if message_expected && looks_like_message(typed) {
            message_expected = false;
        } else if let Some(param) = param(typed, batched, &mut rejected_outputs, errors) {
            params.push(param);
        }
    }
    if sig.inputs.is_empty() {
        let message = if batched {
            format!(
                "a batch subscriber takes the messages it handles: add them as the first \
                 parameter, a slice: `async fn {name}(msgs: &[T])`"
            )
        } else {
            format!(
                "a subscriber takes the message it handles: add it as the first parameter, \
                 borrowed: `async fn {name}(msg: &T)`"
            )
        };
        errors.at(sig.paren_token.span.join(), message);
    }
    if let ReturnType::Type(_, ty) = &sig.output {
        if contains_impl_trait(ty) {
            let named = if batched {
                "`BatchOutcome`, `()`, `Result<(), E: Display>` or \
                 `Result<BatchOutcome, E: Display>`"
            } else {
                "`HandlerOutcome`, `()`, `Result<(), E: Display>` or `Result<(), HandlerOutcome>`"
            };
            errors.spanned(ty, format!("name the return type: {named}"));
        }
    }
    Handler {
        item,
        batched,
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

fn message(
    typed: &syn::PatType,
    name: &Ident,
    batch_declared: bool,
    batched: bool,
    errors: &mut Errors,
) -> Option<Message> {
    if batched {
        return messages(typed, name, batch_declared, errors);
    }
    let (reference, referent) = match strip(&typed.ty) {
        Type::Reference(reference) => (Some(reference), &*reference.elem),
        ty => (None, ty),
    };
    let misplaced = match named(referent) {
        Named::Context | Named::BatchContext => Some("the context"),
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

/// The first parameter of a batch handler: `pat: &[T]`. Without `batch(..)` (`batch_declared`),
/// a slice there is the one error: the attribute lacks `batch(..)`.
fn messages(
    typed: &syn::PatType,
    name: &Ident,
    batch_declared: bool,
    errors: &mut Errors,
) -> Option<Message> {
    let pat = show(&typed.pat);
    let (reference, referent) = match strip(&typed.ty) {
        Type::Reference(reference) => (Some(reference), &*reference.elem),
        ty => (None, ty),
    };
    let misplaced = match named(referent) {
        Named::Context | Named::BatchContext => Some("the context"),
        Named::State(_) => Some("state"),
        Named::Output(_) => Some("an output"),
        Named::Other => None,
    };
    if let Some(what) = misplaced {
        let ty = show(&typed.ty);
        errors.spanned(
            typed,
            format!(
                "the first parameter of a batch subscriber is its messages; {what} comes after \
                 them: `async fn {name}(msgs: &[T], {pat}: {ty})`"
            ),
        );
        return None;
    }
    let Some(element) = slice_of(&typed.ty) else {
        // `batch(..)` with one message, `&T`, or a `Vec`.
        let element = vec_of(referent).unwrap_or(referent);
        let element = show(element);
        errors.spanned(
            &typed.ty,
            format!(
                "`batch(..)` hands the subscriber a batch of messages, as a slice: take \
                 `{pat}: &[{element}]` (or remove `batch(..)` to handle one message at a time)"
            ),
        );
        return None;
    };
    if !batch_declared {
        errors.spanned(
            &typed.ty,
            format!(
                "`{pat}: {}` takes messages in batches: add `batch(max = .., window = ..)` to \
                 `#[subscriber(..)]`, e.g. `batch(max = 10, window = 100ms)`, or take one \
                 message: `{pat}: &{}`",
                show(&typed.ty),
                show(element)
            ),
        );
        return None;
    }
    if contains_impl_trait(element) {
        errors.spanned(
            element,
            "a subscriber cannot be generic: name the messages' type, e.g. `msgs: &[Order]`",
        );
        return None;
    }
    let Some(reference) = reference else {
        errors.spanned(
            &typed.ty,
            format!(
                "the messages are borrowed, not owned: take `{pat}: &[{}]` (clone what you keep)",
                show(element)
            ),
        );
        return None;
    };
    if let Some(mutability) = &reference.mutability {
        let and = reference.and_token;
        errors.spanned(
            quote::quote!(#and #mutability),
            format!(
                "the messages are shared, not yours to change: take `{pat}: &[{}]` (clone them \
                 to change a copy)",
                show(element)
            ),
        );
        return None;
    }
    Some(Message {
        ty: element.clone(),
    })
}

fn param(
    typed: &syn::PatType,
    batched: bool,
    rejected_outputs: &mut Vec<Ident>,
    errors: &mut Errors,
) -> Option<Param> {
    let pat = show(&typed.pat);
    let (reference, referent) = match strip(&typed.ty) {
        Type::Reference(reference) => (Some(reference), &*reference.elem),
        ty => (None, ty),
    };
    let kind = match (named(referent), reference) {
        (Named::Context, Some(_)) if batched => {
            let and = if reference.is_some_and(|r| r.mutability.is_some()) {
                "&mut "
            } else {
                "&"
            };
            errors.spanned(
                &typed.ty,
                format!(
                    "a batch subscriber's context is `{and}BatchContext<'_>` (from \
                     `rust_stream::handler::batch`), with a `Context` per message, `{pat}[i]`: take \
                     `{pat}: {and}BatchContext<'_>`"
                ),
            );
            return None;
        }
        (Named::BatchContext, Some(_)) if !batched => {
            errors.spanned(
                &typed.ty,
                format!(
                    "`BatchContext` is the context of a batch subscriber, and this one handles \
                     one message at a time: take `{pat}: &mut Context<'_>` (or add \
                     `batch(max = .., window = ..)` and take the messages as `&[T]`)"
                ),
            );
            return None;
        }
        (Named::Context | Named::BatchContext, Some(reference)) => Kind::Context {
            mutable: reference.mutability.is_some(),
        },
        (Named::Context | Named::BatchContext, None) => {
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
                format!(
                    "name the type it carries: `State<S>` or `&Output<U>`; {}",
                    takes(batched)
                ),
            );
            return None;
        }
        (Named::Other, reference) => {
            let more = match (reference.is_some(), batched) {
                (true, false) => " (a subscriber handles one message, its first parameter)",
                (true, true) => " (a batch subscriber's messages are its first parameter)",
                (false, _) => "",
            };
            errors.spanned(
                &typed.ty,
                format!(
                    "a subscriber cannot be given `{}`{more}; {}",
                    show(&typed.ty),
                    takes(batched)
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
