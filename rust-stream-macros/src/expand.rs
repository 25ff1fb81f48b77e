//! Writes the code a person would write by hand for a subscriber: a unit struct named like the
//! function, its associated `call` (the function as written, for tests), its `Handle<T, O>` impl
//! calling `call` (`HandleBatch<T, O>` for a batch handler, over `&[T]`), its `on(queue)` building
//! the subscriber with the attribute's settings on any queue, and `From<name> for Subscriber`,
//! which is `on` with the attribute's own queue.
//!
//! Paths are absolute (`::rust_stream::..`, `::core::..`) so the user's imports do not matter;
//! helpers live in `rust_stream::__private`. Bounds only the compiler can check (`T: Deserialize`,
//! `U: Serialize`, what a handler returns) are spanned on the user's tokens, so the error points
//! there and not at the attribute.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::{FnArg, Ident, ItemFn, Pat, ReturnType};

use crate::check;
use crate::parse::{self, Attribute, Errors, Handler, Kind, WindowValue};

pub(crate) fn subscriber(args: TokenStream, item: TokenStream) -> TokenStream {
    let item: ItemFn = match syn::parse2(item.clone()) {
        Ok(item) => item,
        Err(_) => {
            let error = syn::Error::new_spanned(
                &item,
                "`#[subscriber]` goes on an `async fn` that handles one message: \
                 `async fn name(msg: &T) -> HandlerOutcome`",
            );
            let error = error.to_compile_error();
            return quote!(#error #item);
        }
    };
    let mut errors = Errors::default();
    let attribute = parse::attribute(args, &mut errors);
    let handler = parse::handler(item, attribute.batch.is_some(), &mut errors);
    check::check(&attribute, &handler, &mut errors);
    match errors.finish() {
        Ok(()) => expand(&attribute, &handler),
        Err(error) => with_error(&handler, &error),
    }
}

/// The errors, and enough code that the user sees only them: a stub where the struct would be,
/// so `b.include(name)` resolves, and the function itself as its `call` (its body is still
/// checked), so `name::call(..)` in a test resolves.
fn with_error(handler: &Handler, error: &syn::Error) -> TokenStream {
    let error = error.to_compile_error();
    let item = &handler.item;
    if handler.is_method {
        // Inside an impl block nothing but the method may stand.
        return quote!(#error #item);
    }
    let name = &item.sig.ident;
    let vis = &item.vis;
    let (docs, cfgs, _) = split_attributes(item);
    // The function itself becomes `call`: written once, so each mistake in it is reported once.
    let mut call = item.clone();
    call.sig.ident = Ident::new("call", item.sig.ident.span());
    quote! {
        #error
        #(#docs)*
        #(#cfgs)*
        #[allow(non_camel_case_types, dead_code)]
        #[derive(Debug, Clone, Copy)]
        #vis struct #name;

        #(#cfgs)*
        #[allow(dead_code, unused, clippy::all)]
        impl #name {
            #call
        }

        #(#cfgs)*
        #[allow(dead_code)]
        impl #name {
            #vis fn on(
                self,
                _queue: impl ::core::convert::Into<::rust_stream::SqsQueue>,
            ) -> ::rust_stream::Subscriber {
                ::core::unreachable!("`#[subscriber]` reported an error")
            }
        }

        #(#cfgs)*
        impl ::core::convert::From<#name> for ::rust_stream::Subscriber {
            fn from(_: #name) -> Self {
                ::core::unreachable!("`#[subscriber]` reported an error")
            }
        }
    }
}

/// The spans of the first and last tokens, so generated tokens can cover all of them.
fn ends(tokens: &impl ToTokens) -> (Span, Span) {
    let mut all = tokens.to_token_stream().into_iter();
    let first = all
        .next()
        .map_or_else(Span::call_site, |token| token.span());
    let last = all.last().map_or(first, |token| token.span());
    (first, last)
}

/// `#[doc]` attributes (for the struct), `#[cfg]`s (for every item), the rest (for the body).
fn split_attributes(
    item: &ItemFn,
) -> (
    Vec<&syn::Attribute>,
    Vec<&syn::Attribute>,
    Vec<&syn::Attribute>,
) {
    let mut docs = Vec::new();
    let mut cfgs = Vec::new();
    let mut rest = Vec::new();
    for attribute in &item.attrs {
        let path = attribute.path();
        if path.is_ident("doc") {
            docs.push(attribute);
        } else if path.is_ident("cfg") || path.is_ident("cfg_attr") {
            cfgs.push(attribute);
        } else {
            rest.push(attribute);
        }
    }
    (docs, cfgs, rest)
}

/// The AsyncAPI payload of `ty`: its JSON Schema when it has one (and rust-stream has its
/// `schemars` feature), else its name; chosen by method resolution on the concrete type.
fn describe(ty: &syn::Type) -> TokenStream {
    quote! {{
        #[allow(unused_imports)]
        use ::rust_stream::__private::{ByName as _, WithSchema as _};
        ::rust_stream::__private::describe::<#ty>().payload()
    }}
}

/// The doc comment as one text: each line without the space after `///`.
fn description(docs: &[&syn::Attribute]) -> Option<String> {
    let lines: Vec<String> = docs
        .iter()
        .filter_map(|attribute| match &attribute.meta {
            syn::Meta::NameValue(doc) => match &doc.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(text),
                    ..
                }) => Some(text.value()),
                _ => None,
            },
            _ => None,
        })
        .map(|line| {
            line.strip_prefix(' ')
                .unwrap_or(&line)
                .trim_end()
                .to_owned()
        })
        .collect();
    let text = lines.join("\n").trim().to_owned();
    (!text.is_empty()).then_some(text)
}

/// The names of `call`'s parameters, which it hands on to the function as written: the user's
/// own where a parameter is a plain name (`order`, `mut ctx`, `State(ledger)`), else one for its
/// kind. None is the function's name, which a parameter of that name would shadow in `call`'s
/// body, and none is taken twice.
///
/// Only a function without errors is expanded, so its inputs are the message, then `params` in
/// order.
fn argument_names(handler: &Handler) -> Vec<Ident> {
    let function = &handler.item.sig.ident;
    let inputs: Vec<&syn::PatType> = handler
        .item
        .sig
        .inputs
        .iter()
        .filter_map(|input| match input {
            FnArg::Typed(typed) => Some(typed),
            FnArg::Receiver(_) => None,
        })
        .collect();
    let written: Vec<Ident> = inputs
        .iter()
        .filter_map(|typed| plain_name(&typed.pat))
        .collect();
    let kinds = std::iter::once(None).chain(handler.params.iter().map(|param| Some(&param.kind)));
    let mut taken: Vec<Ident> = Vec::new();
    for (position, (typed, kind)) in inputs.iter().zip(kinds).enumerate() {
        let fallback = match kind {
            None if handler.batched => "messages",
            None => "message",
            Some(Kind::Context { .. }) => "ctx",
            Some(Kind::State { .. }) => "state",
            Some(Kind::Output { .. }) => "output",
        };
        let own = plain_name(&typed.pat).or_else(|| match (kind, &*typed.pat) {
            (Some(Kind::State { .. }), Pat::TupleStruct(state)) if state.elems.len() == 1 => {
                state.elems.first().and_then(plain_name)
            }
            _ => None,
        });
        let clashes = |candidate: &Ident| {
            candidate == function
                || taken.contains(candidate)
                || (own.as_ref() != Some(candidate) && written.contains(candidate))
        };
        let mut name = own
            .clone()
            .unwrap_or_else(|| Ident::new(fallback, Span::call_site()));
        if clashes(&name) {
            name = format_ident!("{}_{}", fallback, position);
        }
        while clashes(&name) {
            name = format_ident!("{}_", name);
        }
        taken.push(name);
    }
    taken
}

/// The name a pattern binds when it is just a name: `order`, `mut ctx`; not `ref order`, `_`.
fn plain_name(pat: &Pat) -> Option<Ident> {
    match pat {
        Pat::Ident(ident) if ident.by_ref.is_none() && ident.subpat.is_none() => {
            let mut name = ident.ident.clone();
            // `call`'s own tokens, so lints on the user's parameter are not repeated on it.
            name.set_span(Span::call_site());
            Some(name)
        }
        _ => None,
    }
}

fn expand(attribute: &Attribute, handler: &Handler) -> TokenStream {
    let item = &handler.item;
    let name = &item.sig.ident;
    let vis = &item.vis;
    let (docs, cfgs, rest) = split_attributes(item);
    let Some(message) = &handler.message else {
        // parse reported the missing message; nothing reaches here without one.
        return TokenStream::new();
    };
    let Some(source) = &attribute.source else {
        return TokenStream::new();
    };
    let msg_ty = &message.ty;

    // Outputs, in parameter order, with the `outputs(..)` entry of the same name.
    let outputs: Vec<_> = handler
        .params
        .iter()
        .filter_map(|param| match &param.kind {
            Kind::Output {
                name,
                output,
                value,
            } => {
                let entry = attribute.outputs.iter().find(|entry| entry.name == *name)?;
                Some((output, value, &entry.source))
            }
            _ => None,
        })
        .collect();
    let output_types = outputs.iter().map(|(output, _, _)| output);
    let output_values = outputs.iter().map(|(output, value, source)| {
        let payload = describe(value);
        quote!(<#output>::new(#source).payload(#payload))
    });
    let output_bindings: Vec<_> = (0..outputs.len())
        .map(|index| format_ident!("__rust_stream_output_{}", index))
        .collect();
    let (outs_ty, outs_value, outs_pattern) = match outputs.len() {
        0 => (quote!(()), None, quote!(_)),
        1 => {
            let ty = output_types.clone().next();
            let value = output_values.clone().next();
            let binding = &output_bindings[0];
            (quote!(#ty), Some(quote!(#value)), quote!(#binding))
        }
        _ => (
            quote!((#(#output_types),*)),
            Some(quote!((#(#output_values),*))),
            quote!((#(#output_bindings),*)),
        ),
    };

    // The arguments of the inner function, in its order; states read before it runs.
    let mut arguments = vec![quote!(__rust_stream_msg)];
    let mut read_states = Vec::new();
    let mut state_types = Vec::new();
    let mut output_index = 0;
    for (index, param) in handler.params.iter().enumerate() {
        match &param.kind {
            Kind::Context { mutable: true } => arguments.push(quote!(__rust_stream_ctx)),
            Kind::Context { mutable: false } => arguments.push(quote!(&*__rust_stream_ctx)),
            Kind::State { inner } => {
                let binding = format_ident!("__rust_stream_state_{}", index);
                // A missing state settles the call: every message of a batch.
                let (read, missing) = if handler.batched {
                    (
                        quote!(::rust_stream::__private::batch_state::<#inner>),
                        quote!(outcome),
                    )
                } else {
                    (
                        quote!(::rust_stream::__private::state::<#inner>),
                        quote!(::core::result::Result::Err(outcome)),
                    )
                };
                read_states.push(quote! {
                    let #binding = match #read(__rust_stream_ctx) {
                        ::core::result::Result::Ok(state) => state,
                        ::core::result::Result::Err(outcome) => {
                            return #missing;
                        }
                    };
                });
                arguments.push(quote!(#binding));
                state_types.push(inner);
            }
            Kind::Output { .. } => {
                let binding = &output_bindings[output_index];
                output_index += 1;
                arguments.push(quote!(#binding));
            }
        }
    }

    // What the function returns settles the message (each message of the batch); a type that
    // cannot is reported on it.
    let settler = if handler.batched {
        format_ident!("settle_batch")
    } else {
        format_ident!("settle")
    };
    let settle = match &item.sig.output {
        ReturnType::Default => quote! {
            ::rust_stream::__private::#settler(__rust_stream_returned)
        },
        ReturnType::Type(_, ty) => {
            let (first, last) = ends(ty);
            let open = quote_spanned!(first=> ::rust_stream::__private::#settler::<);
            let close = quote_spanned!(last=> >(__rust_stream_returned));
            quote!(#open #ty #close)
        }
    };

    // `call` takes the parameters as written and runs the body as written, in an inner function
    // of the same name: `?`, `return` and borrows of the parameters behave as in any `async fn`,
    // and `#[tracing::instrument]` still names its span after the function, not after `call`.
    let call = {
        let sig = &item.sig;
        let block = &item.block;
        let output = &sig.output;
        let names = argument_names(handler);
        let types = sig.inputs.iter().filter_map(|input| match input {
            FnArg::Typed(typed) => Some(&typed.ty),
            FnArg::Receiver(_) => None,
        });
        let doc = if handler.batched {
            format!(
                "Runs `{name}` as written, with its parameters and return type: the body its \
                 `HandleBatch` impl runs. A unit test calls it with a batch context from \
                 `rust_stream::testing::TestBatch` (feature `testing`) and asserts what it \
                 returns and publishes for each message."
            )
        } else {
            format!(
                "Runs `{name}` as written, with its parameters and return type: the body its \
                 `Handle` impl runs. A unit test calls it with a context from \
                 `rust_stream::testing::TestContext` (feature `testing`) and asserts what it \
                 returns and publishes."
            )
        };
        quote! {
            #(#cfgs)*
            impl #name {
                #[doc = #doc]
                #vis async fn call(#(#names: #types),*) #output {
                    #(#rest)*
                    // `async` is the macro's requirement, not a choice a body without `.await`
                    // could drop.
                    #[allow(clippy::unused_async)]
                    #sig #block
                    #name(#(#names),*).await
                }
            }
        }
    };

    // Bounds the macro cannot see, on the tokens of the parameter they are about: from its first
    // token to its last, so the whole type is underlined.
    //
    // The message needs `for<'de> T: Deserialize<'de>`. A bound without generics is checked where
    // it is written, so `T: Deserialize<'static>` on a function of its own fails there, on the
    // message's type, with serde's "add `#[derive(serde::Deserialize)]`". The impl carries the
    // higher-ranked bound, which is not checked where it is written but lets `build` assume it,
    // so the impl adds no second error.
    let message_check = {
        let (_, last) = ends(msg_ty);
        let bound = quote_spanned!(last=> : ::rust_stream::__private::Deserialize<'static>);
        quote! {
            #(#cfgs)*
            const _: () = {
                #[allow(dead_code)]
                fn message_is_deserialize() where #msg_ty #bound {}
            };
        }
    };
    let message_bound = quote! {
        for<'__de> #msg_ty: ::rust_stream::__private::Deserialize<'__de>
    };
    let value_bounds: Vec<_> = outputs
        .iter()
        .map(|(_, value, _)| {
            let (_, last) = ends(value);
            let bound = quote_spanned!(last=> : ::rust_stream::__private::Serialize);
            quote!(#value #bound)
        })
        .collect();
    // On the `Handle` impl, `on` and the `From` impl: the same error from each is shown once.
    let state_bounds: Vec<_> = state_types
        .iter()
        .map(|inner| {
            let (_, last) = ends(inner);
            let bound = quote_spanned! {last=>
                : ::core::clone::Clone + ::core::marker::Send + ::core::marker::Sync + 'static
            };
            quote!(#inner #bound)
        })
        .collect();

    let settings = [
        &attribute.concurrency,
        &attribute.batch_size,
        &attribute.wait,
        &attribute.visibility_timeout,
        &attribute.pollers,
        &attribute.retry,
        &attribute.timeout,
        &attribute.filter,
    ]
    .into_iter()
    .flatten()
    .map(|setting| {
        let key = &setting.key;
        let value = &setting.value;
        quote!(.#key(#value))
    });
    let dead_letter = attribute.dead_letter.as_ref().map(|dead_letter| {
        let key = &dead_letter.key;
        let queue = &dead_letter.queue;
        let max = &dead_letter.max_receive_count;
        quote!(.#key(#queue, #max))
    });
    let codec = attribute.codec.as_ref().map(|setting| {
        let key = &setting.key;
        let value = &setting.value;
        quote!(.#key(#value))
    });
    let batch_call = attribute.batch.as_ref().and_then(|batch| {
        let max = &batch.max.as_ref()?.value;
        let window = match batch.window.as_ref()? {
            WindowValue::Literal { written, nanos } => {
                let nanos = u64::try_from(*nanos).ok()?;
                quote_spanned!(written.span()=> ::core::time::Duration::from_nanos(#nanos))
            }
            WindowValue::Expr(expr) => quote!(#expr),
        };
        Some(quote!(.batch(#max, #window)))
    });
    // Each layer's call on its expression's tokens, so a value that is no middleware is
    // reported there.
    let layers = attribute.layers.iter().map(|layer| {
        let (first, _) = ends(layer);
        quote_spanned!(first=> .layer(#layer))
    });
    // The same for the inbox: a value that is no `Inbox<S>` is reported on its expression.
    let idempotent = attribute.idempotent.as_ref().map(|setting| {
        let value = &setting.value;
        let (first, _) = ends(value);
        quote_spanned!(first=> .idempotent(#value))
    });
    let description = description(&docs).map(|text| quote!(.description(#text)));
    let outputs_call = outs_value.map(|value| quote!(.outputs(#value)));
    let message_payload = describe(msg_ty);
    let on_doc = format!(
        "Mounts `{name}` on the queue given instead of the attribute's first argument, with \
         every other setting of the attribute kept: `b.include({name}.on(SqsQueue::new(name)))` for a \
         queue named at run time (from configuration, or unique to a test).\n\n\
         That queue replaces the first argument whole: its name and what is set on the queue \
         itself, there or here (`.create_if_missing()`, `.content_based_dedup()`, and any \
         setting written on the `SqsQueue`, such as `.visibility_timeout(..)`). The settings \
         after it in the attribute (`concurrency`, `batch_size`, `wait`, `visibility_timeout`, \
         `pollers`, `retry`, `timeout`, `filter`, `dead_letter`, `codec`, `outputs`, `layers`, \
         `idempotent`, `batch`), the states it reads \
         and its description are applied on top, as `{name}` itself applies them: where both \
         set one, the attribute's wins. The broker's queue-name prefix \
         (`SqsBroker::queue_name_prefix`) applies to it too."
    );
    // A body whose future is not `Send` is reported on the function's name.
    let handle_impl = if handler.batched {
        let returns = quote_spanned! {item.sig.ident.span()=>
            -> ::rust_stream::handler::batch::BatchOutcome
        };
        quote! {
            #(#cfgs)*
            impl ::rust_stream::handler::batch::HandleBatch<#msg_ty, #outs_ty> for #name
            where
                #(#state_bounds,)*
            {
                async fn handle(
                    &self,
                    __rust_stream_msg: &[#msg_ty],
                    __rust_stream_outs: &#outs_ty,
                    __rust_stream_ctx: &mut ::rust_stream::handler::batch::BatchContext<'_>,
                ) #returns {
                    let #outs_pattern = __rust_stream_outs;
                    #(#read_states)*
                    let __rust_stream_returned = #name::call(#(#arguments),*).await;
                    #settle
                }
            }
        }
    } else {
        let returns = quote_spanned! {item.sig.ident.span()=>
            -> ::core::result::Result<(), ::rust_stream::HandlerOutcome>
        };
        quote! {
            #(#cfgs)*
            impl ::rust_stream::Handle<#msg_ty, #outs_ty> for #name
            where
                #(#state_bounds,)*
            {
                async fn handle(
                    &self,
                    __rust_stream_msg: &#msg_ty,
                    __rust_stream_outs: &#outs_ty,
                    __rust_stream_ctx: &mut ::rust_stream::Context<'_>,
                ) #returns {
                    let #outs_pattern = __rust_stream_outs;
                    #(#read_states)*
                    let __rust_stream_returned = #name::call(#(#arguments),*).await;
                    #settle
                }
            }
        }
    };

    quote! {
        #(#docs)*
        #(#cfgs)*
        #[allow(non_camel_case_types)]
        #[derive(Debug, Clone, Copy)]
        #vis struct #name;

        #handle_impl

        #call

        #(#cfgs)*
        impl #name {
            #[doc = #on_doc]
            // The parameter's name is the macro's own: the settings' expressions, written in
            // the user's scope, may name a `queue` of theirs.
            #vis fn on(
                self,
                __rust_stream_queue: impl ::core::convert::Into<::rust_stream::SqsQueue>,
            ) -> ::rust_stream::Subscriber
            where
                #message_bound,
                #(#value_bounds,)*
                #(#state_bounds,)*
            {
                ::rust_stream::subscriber(__rust_stream_queue, self)
                    #batch_call
                    #(#settings)*
                    #dead_letter
                    #codec
                    #(#layers)*
                    #idempotent
                    #(.requires_state::<#state_types>())*
                    #description
                    .payload(#message_payload)
                    #outputs_call
                    .build::<#msg_ty>()
            }
        }

        #(#cfgs)*
        impl ::core::convert::From<#name> for ::rust_stream::Subscriber
        where
            #message_bound,
            #(#value_bounds,)*
            #(#state_bounds,)*
        {
            fn from(handler: #name) -> Self {
                handler.on(#source)
            }
        }

        #message_check
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names_of_call(item: ItemFn) -> Vec<String> {
        let mut errors = Errors::default();
        let handler = parse::handler(item, false, &mut errors);
        assert!(errors.finish().is_ok());
        argument_names(&handler)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn call_keeps_plain_parameter_names_and_names_patterns_by_their_kind() {
        let item: ItemFn = syn::parse_quote! {
            async fn bill(
                Order { id }: &Order,
                State(ledger): State<Ledger>,
                State(Limit(limit)): State<Limit>,
                mut ctx: &mut Context<'_>,
                receipts: &Output<Receipt>,
            ) {}
        };
        assert_eq!(
            names_of_call(item),
            ["message", "ledger", "state", "ctx", "receipts"]
        );
    }

    #[test]
    fn no_name_of_call_shadows_the_function_or_another_parameter() {
        let item: ItemFn = syn::parse_quote! {
            async fn order(order: &Order, _: &Context<'_>, ctx: State<Ledger>, _: State<Limit>, state: State<Calls>) {}
        };
        assert_eq!(
            names_of_call(item),
            ["message_0", "ctx_1", "ctx", "state_3", "state"]
        );
    }

    #[test]
    fn the_description_is_the_doc_comment_without_the_space_after_the_slashes() {
        let item: ItemFn = syn::parse_quote! {
            /// Reads `orders`.
            ///
            ///   Indented stays indented.
            #[inline]
            async fn f(order: &Order) {}
        };
        let (docs, _, rest) = split_attributes(&item);
        assert_eq!(rest.len(), 1);
        assert_eq!(
            description(&docs).as_deref(),
            Some("Reads `orders`.\n\n  Indented stays indented.")
        );
        let bare: ItemFn = syn::parse_quote!(
            async fn f(order: &Order) {}
        );
        assert_eq!(description(&split_attributes(&bare).0), None);
    }
}
