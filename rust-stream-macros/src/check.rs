//! Rules that span the attribute and the function, or that a literal breaks before run time.
//!
//! What only a value known at run time can break (a queue name built at run time, a `Duration`
//! made by a function) is left to `RustStream::run`, which reports every setting problem at once;
//! what is written as a literal is checked here, so the mistake shows in the editor.

use quote::ToTokens;

use crate::parse::{
    int_literal, show, string_literal, Attribute, Errors, Handler, Kind, WindowValue,
};

/// The most messages a batch handler call takes: `rust_stream::handler::batch::MAX_BATCH_MESSAGES`.
const MAX_BATCH_MESSAGES: u128 = 1_000;
/// The longest batch window, in nanoseconds: `rust_stream::handler::batch::MAX_BATCH_WINDOW`, 5 minutes.
const MAX_BATCH_WINDOW_NANOS: u128 = 300 * 1_000_000_000;

/// The most outputs a subscriber has: `Outputs` is implemented for tuples up to six.
const MAX_OUTPUTS: usize = 6;

pub(crate) fn check(attribute: &Attribute, handler: &Handler, errors: &mut Errors) {
    outputs(attribute, handler, errors);
    contexts(handler, errors);
    literals(attribute, errors);
    inbox(attribute, errors);
}

/// Each `&Output<U>` parameter has its `outputs(..)` entry and each entry its parameter.
fn outputs(attribute: &Attribute, handler: &Handler, errors: &mut Errors) {
    let mut taken = Vec::new();
    for param in &handler.params {
        let Kind::Output { name, .. } = &param.kind else {
            continue;
        };
        if taken.contains(&name) {
            errors.spanned(
                name,
                format!("the output `{name}` is taken twice; remove one of the parameters"),
            );
            continue;
        }
        taken.push(name);
        if !attribute.outputs.iter().any(|entry| entry.name == *name) {
            let declared: Vec<String> = attribute
                .outputs
                .iter()
                .map(|entry| format!("`{}`", entry.name))
                .collect();
            let declared = if declared.is_empty() {
                String::new()
            } else {
                format!(" (it declares {})", declared.join(", "))
            };
            errors.spanned(
                name,
                format!(
                    "the output `{name}` has no queue: `outputs(..)` declares no `{name}`{declared}; \
                     add `outputs({name} = \"queue\")` to `#[subscriber(..)]`"
                ),
            );
        }
    }
    for entry in &attribute.outputs {
        if !taken.contains(&&entry.name) && !handler.rejected_outputs.contains(&entry.name) {
            let name = &entry.name;
            errors.spanned(
                name,
                format!(
                    "the output `{name}` is declared but no parameter takes it; add a parameter \
                     `{name}: &Output<U>`, or remove the entry"
                ),
            );
        }
    }
    if taken.len() > MAX_OUTPUTS {
        if let Some(key) = &attribute.outputs_key {
            errors.spanned(
                key,
                format!(
                    "a subscriber has at most {MAX_OUTPUTS} outputs, here {}; split the work \
                     between subscribers",
                    taken.len()
                ),
            );
        }
    }
}

/// The context is lent once.
fn contexts(handler: &Handler, errors: &mut Errors) {
    let mut contexts = handler
        .params
        .iter()
        .filter(|param| matches!(param.kind, Kind::Context { .. }));
    let _first = contexts.next();
    let context = if handler.batched {
        "BatchContext"
    } else {
        "Context"
    };
    for again in contexts {
        errors.spanned(
            &again.tokens,
            format!("the context is taken twice; keep one `&mut {context}<'_>` parameter"),
        );
    }
}

/// An inbox goes on a handler of one message a call: the app refuses it on a batch handler at
/// start (`ConfigError::IdempotentBatch`), and the attribute shows both, so it says so here.
///
/// Only `batch(..)` makes the handler a batch handler here: a slice without it already has its
/// error, which says to add `batch(..)` or take one message.
fn inbox(attribute: &Attribute, errors: &mut Errors) {
    let (Some(inbox), Some(_)) = (&attribute.idempotent, &attribute.batch) else {
        return;
    };
    errors.spanned(
        &inbox.key,
        "a batch handler takes no inbox: the inbox claims one message's key a call, in a \
         transaction of its own, so `idempotent` goes on a handler of one message a call; \
         remove `batch(..)` and take `&T`, or remove `idempotent`",
    );
}

/// Literal settings within SQS's limits.
fn literals(attribute: &Attribute, errors: &mut Errors) {
    if let Some(setting) = &attribute.batch_size {
        if let Some(got) = int_literal(&setting.value) {
            if !(1..=10).contains(&got) {
                errors.spanned(
                    &setting.value,
                    format!(
                        "batch size {got} is outside 1..=10: SQS returns at most 10 messages a \
                         receive; set `batch_size` between 1 and 10"
                    ),
                );
            }
        }
    }
    for setting in [&attribute.concurrency, &attribute.pollers]
        .into_iter()
        .flatten()
    {
        if int_literal(&setting.value) == Some(0) {
            let key = &setting.key;
            errors.spanned(
                &setting.value,
                format!("`{key} = 0` would never handle a message; set it to 1 or more"),
            );
        }
    }
    for setting in [
        &attribute.wait,
        &attribute.visibility_timeout,
        &attribute.timeout,
    ]
    .into_iter()
    .flatten()
    {
        if let Some(got) = int_literal(&setting.value) {
            let key = &setting.key;
            errors.spanned(
                &setting.value,
                format!(
                    "`{key}` is a `Duration`, not a number of seconds: write \
                     `{key} = Duration::from_secs({got})`"
                ),
            );
        }
    }
    if let Some(setting) = &attribute.filter {
        if let syn::Expr::Lit(literal) = &setting.value {
            let routes_by_type = if matches!(literal.lit, syn::Lit::Str(_)) {
                " (a queue's subscribers are routed by their message type already: no filter \
                 names a type)"
            } else {
                ""
            };
            errors.spanned(
                &setting.value,
                format!(
                    "`filter` takes a function of the message's context, \
                     `fn(&Context<'_>) -> bool`, not a literal{routes_by_type}: write \
                     `filter = from_the_ledger` with \
                     `fn from_the_ledger(ctx: &Context<'_>) -> bool {{ .. }}`"
                ),
            );
        }
    }
    batch(attribute, errors);
    if let Some(dead_letter) = &attribute.dead_letter {
        if let Some(got) = int_literal(&dead_letter.max_receive_count) {
            if !(1..=1000).contains(&got) {
                errors.spanned(
                    &dead_letter.max_receive_count,
                    format!(
                        "max receive count {got} is outside SQS's 1..=1000; a message goes to \
                         the dead-letter queue after this many receives"
                    ),
                );
            }
        }
        let source = attribute.source.as_ref().and_then(source_name);
        if let (Some(source), Some(queue)) = (source, string_literal(&dead_letter.queue)) {
            let fifo = |name: &str| name.ends_with(".fifo");
            if queue == source {
                errors.spanned(
                    &dead_letter.queue,
                    format!("`{queue}` cannot be its own dead-letter queue; name another queue"),
                );
            } else if fifo(&queue) != fifo(&source) {
                let (want, fix) = if fifo(&source) {
                    (
                        "a FIFO queue needs a FIFO dead-letter queue",
                        format!("`{queue}.fifo`"),
                    )
                } else {
                    (
                        "a standard queue needs a standard dead-letter queue",
                        format!("`{}`", queue.trim_end_matches(".fifo")),
                    )
                };
                errors.spanned(
                    &dead_letter.queue,
                    format!(
                        "{want} (SQS refuses the redrive policy otherwise); name one like {fix}"
                    ),
                );
            }
        }
    }
}

/// `batch(max = .., window = ..)` within the limits the app checks at start.
fn batch(attribute: &Attribute, errors: &mut Errors) {
    let Some(batch) = &attribute.batch else {
        return;
    };
    if let Some(max) = &batch.max {
        if let Some(suffix) = int_suffix(&max.value).filter(|suffix| !suffix.is_empty()) {
            if suffix != "usize" {
                errors.spanned(
                    &max.value,
                    format!(
                        "`max` is a number of messages, a `usize`, not `{}`: write `max = {}`",
                        suffix,
                        int_literal(&max.value).unwrap_or(10)
                    ),
                );
            }
        } else if let Some(got) = int_literal(&max.value) {
            if !(1..=MAX_BATCH_MESSAGES).contains(&got) {
                errors.spanned(
                    &max.value,
                    format!(
                        "batch max {got} is outside 1..={MAX_BATCH_MESSAGES}: a batch handler \
                         call takes at most {MAX_BATCH_MESSAGES} messages; set `max` between 1 \
                         and {MAX_BATCH_MESSAGES}"
                    ),
                );
            }
        }
    }
    if let Some(window) = &batch.window {
        let (nanos, written) = match window {
            WindowValue::Literal { written, nanos } => (Some(*nanos), written.to_token_stream()),
            WindowValue::Expr(expr) => (duration_call(expr), expr.to_token_stream()),
        };
        if nanos.is_some_and(|nanos| nanos > MAX_BATCH_WINDOW_NANOS) {
            errors.spanned(
                &written,
                format!(
                    "a batch window of `{}` is longer than 5 minutes, the longest a batch's \
                     first message may wait for the rest (as Lambda's batching window); set \
                     `window` to at most `5m` (`300s`)",
                    show(&written)
                ),
            );
        }
    }
}

/// The suffix of an integer literal (`""` for none), when the expression is one.
fn int_suffix(expr: &syn::Expr) -> Option<String> {
    match expr {
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Int(int),
            ..
        }) => Some(int.suffix().to_owned()),
        syn::Expr::Group(group) => int_suffix(&group.expr),
        _ => None,
    }
}

/// The length of `Duration::from_secs(N)` (or `from_millis`, `from_micros`, `from_nanos`) with
/// a literal `N`, in nanoseconds.
fn duration_call(expr: &syn::Expr) -> Option<u128> {
    match expr {
        syn::Expr::Call(call) if call.args.len() == 1 => {
            let function = show(&call.func);
            let unit: u128 = [
                ("from_secs", 1_000_000_000),
                ("from_millis", 1_000_000),
                ("from_micros", 1_000),
                ("from_nanos", 1),
            ]
            .into_iter()
            .find(|(name, _)| function.ends_with(&format!("Duration::{name}")))?
            .1;
            call.args
                .first()
                .and_then(int_literal)
                .map(|n| n.saturating_mul(unit))
        }
        syn::Expr::Group(group) => duration_call(&group.expr),
        syn::Expr::Paren(paren) => duration_call(&paren.expr),
        _ => None,
    }
}

/// The queue name of a source written as `"name"` or `SqsQueue::new("name")...`.
fn source_name(source: &syn::Expr) -> Option<String> {
    match source {
        syn::Expr::Lit(_) => string_literal(source),
        syn::Expr::MethodCall(call) => source_name(&call.receiver),
        syn::Expr::Call(call) if show(&call.func).ends_with("SqsQueue::new") => {
            call.args.first().and_then(string_literal)
        }
        syn::Expr::Group(group) => source_name(&group.expr),
        syn::Expr::Paren(paren) => source_name(&paren.expr),
        _ => None,
    }
}
