//! From tokens to our AST: the attribute into [`Attribute`] (the `attribute` module, its
//! `batch(..)` setting in the `batch` module), the function into [`Handler`] (the `function`
//! module).
//!
//! Each problem is pushed to [`Errors`] on the token that causes it and parsing goes on, so one
//! compile shows every mistake; only tokens that cannot be read at all stop the attribute early.

mod attribute;
mod batch;
mod function;

use proc_macro2::Span;
use quote::ToTokens;
use syn::{Expr, Lit};

pub(crate) use attribute::{attribute, Attribute};
pub(crate) use batch::WindowValue;
pub(crate) use function::{handler, Handler, Kind};

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
        (". ", "."),
    ] {
        shown = shown.replace(spaced, tight);
    }
    shown
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

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::*;

    #[test]
    fn types_and_expressions_are_shown_as_people_write_them() {
        let ty: syn::Type = syn::parse_quote!(&mut rust_stream::Context<'_>);
        assert_eq!(show(&ty), "&mut rust_stream::Context<'_>");
        let expr: Expr = syn::parse_quote!(SqsQueue::new("orders.fifo").wait(d));
        assert_eq!(show(&expr), "SqsQueue::new(\"orders.fifo\").wait(d)");
    }

    #[test]
    fn the_first_item_is_the_source_and_every_bad_setting_is_reported() {
        let mut errors = Errors::default();
        let parsed = attribute(
            quote!(
                orders_queue(),
                concurrency = 8,
                retries = 3,
                concurrency = 9,
                dlq = 1
            ),
            &mut errors,
        );
        assert!(parsed.source.is_some());
        assert!(parsed.concurrency.is_some());
        let error = errors.finish().expect_err("three bad settings");
        let messages: Vec<String> = error.into_iter().map(|e| e.to_string()).collect();
        assert_eq!(messages.len(), 3, "{messages:#?}");
        assert!(messages[0].starts_with("unknown setting `retries`"));
        assert!(messages[1].contains("set twice"));
        assert!(messages[2].contains("`dlq` is called `dead_letter`"));
    }

    #[test]
    fn the_inbox_is_set_as_idempotent_and_its_other_names_and_forms_point_there() {
        let messages = |args: proc_macro2::TokenStream| {
            let mut errors = Errors::default();
            let parsed = attribute(args, &mut errors);
            let messages: Vec<String> = errors
                .finish()
                .err()
                .into_iter()
                .flatten()
                .map(|e| e.to_string())
                .collect();
            (parsed.idempotent.is_some(), messages)
        };
        assert_eq!(
            messages(quote!("payments", idempotent = payments_inbox())),
            (true, vec![])
        );
        for name in [
            "inbox",
            "idempotency",
            "dedup",
            "deduplicate",
            "exactly_once",
        ] {
            let key = syn::Ident::new(name, proc_macro2::Span::call_site());
            let (set, messages) = messages(quote!("payments", #key = payments_inbox()));
            assert!(!set);
            assert_eq!(
                messages,
                [format!(
                    "`{name}` is called `idempotent` here: write `idempotent = payments_inbox()`"
                )]
            );
        }
        // A flag is no inbox: the example, not `idempotent = true`.
        assert_eq!(
            messages(quote!("payments", dedup = true)).1,
            ["`dedup` is called `idempotent` here: write `idempotent = payments_inbox()`"]
        );
        assert_eq!(
            messages(quote!("payments", idempotent(Inbox::new(store)))).1,
            ["write the setting `idempotent` as `idempotent = Inbox::new(store)`"]
        );
        assert!(messages(quote!("payments", idempotent = a, idempotent = b))
            .1
            .iter()
            .any(|message| message == "`idempotent` is set twice; keep one of them"));
    }

    #[test]
    fn a_batch_window_is_read_by_its_unit_or_kept_as_an_expression() {
        let nanos = |window: proc_macro2::TokenStream| {
            let mut errors = Errors::default();
            let parsed = attribute(
                quote!("postings", batch(max = 10, window = #window)),
                &mut errors,
            );
            assert!(errors.finish().is_ok());
            match parsed.batch.and_then(|batch| batch.window) {
                Some(WindowValue::Literal { nanos, .. }) => Some(nanos),
                Some(WindowValue::Expr(_)) => None,
                None => panic!("no window"),
            }
        };
        assert_eq!(nanos(quote!(100ms)), Some(100_000_000));
        assert_eq!(nanos(quote!(2s)), Some(2_000_000_000));
        assert_eq!(nanos(quote!(0.25s)), Some(250_000_000));
        assert_eq!(nanos(quote!(5m)), Some(300_000_000_000));
        assert_eq!(nanos(quote!(0ms)), Some(0));
        assert_eq!(nanos(quote!(Duration::from_millis(250))), None);
    }

    #[test]
    fn literals_are_read_through_groups() {
        let expr: Expr = syn::parse_quote!("orders");
        assert_eq!(string_literal(&expr).as_deref(), Some("orders"));
        let expr: Expr = syn::parse_quote!(10);
        assert_eq!(int_literal(&expr), Some(10));
        let expr: Expr = syn::parse_quote!(n);
        assert_eq!(int_literal(&expr), None);
    }
}
