//! Rules that span the attribute and the function, or that a literal breaks before run time.
//!
//! What only a value known at run time can break (a queue name built at run time, a `Duration`
//! made by a function) is left to `RustStream::run`, which reports every setting problem at once;
//! what is written as a literal is checked here, so the mistake shows in the editor.

use crate::parse::{int_literal, show, string_literal, Attribute, Errors, Handler, Kind};

/// The most outputs a subscriber has: `Outputs` is implemented for tuples up to six.
const MAX_OUTPUTS: usize = 6;

pub(crate) fn check(attribute: &Attribute, handler: &Handler, errors: &mut Errors) {
    outputs(attribute, handler, errors);
    contexts(handler, errors);
    literals(attribute, errors);
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
    for again in contexts {
        errors.spanned(
            &again.tokens,
            "the context is taken twice; keep one `&mut Context<'_>` parameter",
        );
    }
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
