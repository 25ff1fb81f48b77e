//! The function: an `async fn` whose first parameter is the message, then contexts, states and
//! outputs, each recognised by its type's last path segment (`Context`, `State`, `Output`).

use quote::ToTokens;
use syn::{FnArg, Ident, ItemFn, Pat, ReturnType, Type};

use super::{show, Errors};

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
