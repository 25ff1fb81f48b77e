//! Routing: several message types on one queue, each to a handler of its own.
//!
//! An app that includes several subscribers of one queue, each taking another message type, has
//! them routed: one consumer reads the queue and hands each message to the subscriber of the type
//! its type header names ([`TYPE_HEADER`](crate::TYPE_HEADER), `rust_stream.type` unless the broker names it
//! otherwise with [`SqsBroker::type_header`](crate::SqsBroker::type_header)). Publishers set the
//! header by themselves: a typed message ([`Publisher::message`](crate::Publisher::message), a
//! handler's [`Output`](crate::Output)) to a queue an app on the same broker routes carries the
//! short name of its Rust type, and [`Publisher::with_type_header`](crate::Publisher::with_type_header)
//! makes any publisher send it (for a queue routed by a service elsewhere).
//!
//! ```
//! use rust_stream::prelude::*;
//! # #[derive(serde::Serialize, serde::Deserialize)] struct PaymentPosted { id: u64 }
//! # #[derive(serde::Serialize, serde::Deserialize)] struct PaymentReversed { id: u64 }
//!
//! #[subscriber(SqsQueue::new("payments").create_if_missing())]
//! async fn posted(_payment: &PaymentPosted) {}
//!
//! #[subscriber(SqsQueue::new("payments").create_if_missing())]
//! async fn reversed(_payment: &PaymentReversed) {}
//!
//! let app = RustStream::new(AppInfo::new("ledger", "1.0.0")).with_broker(SqsBroker::in_process(), |b| {
//!     b.include(posted);   // messages whose `rust_stream.type` is `PaymentPosted`
//!     b.include(reversed); // and `PaymentReversed`, from one consumer of `payments`
//! });
//! # let _ = app;
//! ```
//!
//! A message is routed, in this order:
//!
//! 1. to the subscriber whose message type's short name its type header names;
//! 2. else to the first subscriber, in the order included, whose
//!    [`filter`](crate::SubscriberBuilder::filter) accepts it (a subscriber with a filter is
//!    chosen by its filter only; `|_| true` takes whatever nothing else claims);
//! 3. else it is dead-lettered (never deleted), with a reason in
//!    [`DEAD_LETTER_REASON_HEADER`](crate::DEAD_LETTER_REASON_HEADER) that names the type it
//!    carried, or says it carried none, and the types the queue routes. Without a dead-letter
//!    queue it is retried, as any dead-lettered message is.
//!
//! What the app refuses at start, before any call: subscribers of one queue that take the same
//! type without a filter ([`ConfigError::DuplicateSubscription`]); routed subscribers whose queue
//! settings differ ([`ConfigError::RouteSettings`], naming both handlers: one consumer reads the
//! queue for all of them); and a handler output that sends a type to a routed queue of the app
//! that no route takes and no filter may ([`ConfigError::UnroutedOutput`]): a typo in a type
//! would otherwise be a dead letter per message. Routes are Rust types, so the types themselves
//! are checked by the compiler.
//!
//! Inside: `check` finds those problems among an app's subscribers when it starts, `merge` makes
//! each routed queue's subscribers one subscriber whose handler is a `Router`, and the engine runs
//! it as any other: a `Router` only chooses the route and calls its handler, whose decoding,
//! outcome and outputs the engine settles as it settles any handler's. See also
//! `docs/routing.md`.

use std::collections::HashMap;
use std::sync::Arc;

use crate::describe::short_name;
use crate::handler::context::{Context, Message};
use crate::handler::middleware::Layers;
use crate::handler::{ErasedHandler, Handled, Handler};
use crate::model::ConfigError;
use crate::outcome::HandlerOutcome;
use crate::state::States;
use crate::subscriber::{Filter, Subscriber};
use crate::task::BoxFuture;

/// The subscribers of an app grouped by queue name, in the order their queues were first
/// included; each group in the order its subscribers were.
fn by_queue<T>(subscribers: impl IntoIterator<Item = (String, T)>) -> Vec<(String, Vec<T>)> {
    let mut groups: Vec<(String, Vec<T>)> = Vec::new();
    for (queue, subscriber) in subscribers {
        match groups.iter_mut().find(|(name, _)| *name == queue) {
            Some((_, group)) => group.push(subscriber),
            None => groups.push((queue, vec![subscriber])),
        }
    }
    groups
}

/// The queues of `subscribers` that are routed: read by more than one of them.
pub(crate) fn routed_queues(subscribers: &[Subscriber]) -> Vec<String> {
    by_queue(
        subscribers
            .iter()
            .map(|subscriber| (subscriber.queue.name.clone(), ())),
    )
    .into_iter()
    .filter(|(_, group)| group.len() > 1)
    .map(|(queue, _)| queue)
    .collect()
}

/// The short name of a subscriber's message type: what a type header names it by.
fn route_name(subscriber: &Subscriber) -> String {
    short_name(subscriber.message_type)
}

/// The short name of a subscriber's handler, as errors and spans name it.
fn handler_name(subscriber: &Subscriber) -> String {
    short_name(subscriber.handler_type)
}

/// The first setting of a queue on which two routed subscribers disagree, if any.
fn differing_setting(first: &Subscriber, second: &Subscriber) -> Option<&'static str> {
    let (a, b) = (&first.queue, &second.queue);
    if a == b {
        return None;
    }
    let (x, y) = (&a.consumer, &b.consumer);
    Some(if x.concurrency != y.concurrency {
        "concurrency"
    } else if x.batch_size != y.batch_size {
        "batch size"
    } else if x.wait != y.wait {
        "wait"
    } else if x.visibility_timeout != y.visibility_timeout {
        "visibility timeout"
    } else if x.pollers != y.pollers {
        "pollers"
    } else if x.retry != y.retry {
        "retry policy"
    } else if x.handler_timeout != y.handler_timeout {
        "handler timeout"
    } else if x.delete_run != y.delete_run {
        "delete run"
    } else if x.flow.rate_limit != y.flow.rate_limit {
        "rate limit"
    } else if x.flow.backpressure != y.flow.backpressure {
        "backpressure"
    } else if x.flow.per_key != y.flow.per_key {
        "in-flight limit per key"
    } else if a.dead_letter != b.dead_letter {
        "dead-letter queue"
    } else if a.subscriptions != b.subscriptions {
        "topic subscriptions"
    } else if a.create_if_missing != b.create_if_missing {
        "create-if-missing"
    } else if a.content_based_dedup != b.content_based_dedup {
        "content-based deduplication"
    } else if a.high_throughput != b.high_throughput {
        "high throughput"
    } else {
        "settings"
    })
}

/// Finds what keeps an app's routed queues from working: two subscribers of one queue for one
/// type without a filter, routed subscribers whose queue settings differ, and a handler output
/// that sends a type to a routed queue of the app that no route takes.
pub(crate) fn check(subscribers: &[Subscriber], problems: &mut Vec<ConfigError>) {
    let groups = by_queue(
        subscribers
            .iter()
            .map(|subscriber| (subscriber.queue.name.clone(), subscriber)),
    );
    // The route names of each routed queue, and whether a filter there may take anything.
    let mut routed: HashMap<&str, (Vec<String>, bool)> = HashMap::new();
    for (queue, group) in &groups {
        if group.len() < 2 {
            continue;
        }
        let by_type: Vec<&&Subscriber> = group.iter().filter(|s| s.filter.is_none()).collect();
        let duplicate = by_type.iter().enumerate().any(|(at, subscriber)| {
            by_type[..at]
                .iter()
                .any(|earlier| route_name(earlier) == route_name(subscriber))
        });
        if duplicate {
            problems.push(ConfigError::DuplicateSubscription {
                queue: queue.clone(),
            });
            continue;
        }
        if let Some(batch) = group
            .iter()
            .find(|subscriber| subscriber.handler.batch_limits().is_some())
        {
            problems.push(ConfigError::RoutedBatchHandler {
                queue: queue.clone(),
                handler: handler_name(batch),
            });
            continue;
        }
        let first = group[0];
        if let Some((second, setting)) = group[1..]
            .iter()
            .find_map(|second| Some((second, differing_setting(first, second)?)))
        {
            problems.push(ConfigError::RouteSettings {
                queue: queue.clone(),
                setting,
                first: handler_name(first),
                second: handler_name(second),
            });
        }
        let filtered = by_type.len() < group.len();
        let names = by_type
            .iter()
            .map(|subscriber| route_name(subscriber))
            .collect();
        routed.insert(queue.as_str(), (names, filtered));
    }
    for subscriber in subscribers {
        let payloads = &subscriber.output_payloads;
        if payloads.len() != subscriber.outputs.len() {
            // An `Outputs` of one's own that does not say its payloads: nothing to check.
            continue;
        }
        for (output, payload) in subscriber.outputs.iter().zip(payloads) {
            let Some(queue) = output.destination().queue() else {
                continue;
            };
            let Some((names, filtered)) = routed.get(queue.name.as_str()) else {
                continue;
            };
            let type_name = short_name(payload.type_name());
            if *filtered || names.contains(&type_name) {
                continue;
            }
            problems.push(ConfigError::UnroutedOutput {
                handler: handler_name(subscriber),
                queue: queue.name.clone(),
                type_name,
                routes: names
                    .iter()
                    .map(|name| format!("`{name}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
    }
}

/// Makes the subscribers of each routed queue one subscriber, whose handler routes each message
/// by the type header `header` (see the module docs); the others stay as they are. Runs on
/// subscribers [`check`] found nothing wrong with.
pub(crate) fn merge(subscribers: Vec<Subscriber>, header: Arc<str>) -> Vec<Subscriber> {
    by_queue(
        subscribers
            .into_iter()
            .map(|subscriber| (subscriber.queue.name.clone(), subscriber)),
    )
    .into_iter()
    .map(|(queue, group)| {
        if group.len() == 1 {
            group.into_iter().next().expect("one subscriber")
        } else {
            routed(queue, group, header.clone())
        }
    })
    .collect()
}

/// The one subscriber of a routed queue: the first subscriber's queue, every subscriber's
/// outputs, and a [`Router`] over their handlers.
fn routed(queue: String, group: Vec<Subscriber>, header: Arc<str>) -> Subscriber {
    let handler_names: Vec<String> = group.iter().map(handler_name).collect();
    let mut routes = Vec::with_capacity(group.len());
    let mut outputs = Vec::new();
    let mut output_payloads = Vec::new();
    let mut requirements = Vec::new();
    let mut first = None;
    for mut subscriber in group {
        routes.push(Route {
            type_name: route_name(&subscriber),
            handler_name: Arc::from(handler_name(&subscriber)),
            filter: subscriber.filter.take(),
            handler: match &subscriber.handler {
                Handler::One(handler) => handler.clone(),
                Handler::Batch(..) => {
                    unreachable!("`check` refuses batch handlers on routed queues")
                }
            },
        });
        outputs.append(&mut subscriber.outputs);
        output_payloads.append(&mut subscriber.output_payloads);
        requirements.append(&mut subscriber.requirements);
        first.get_or_insert(subscriber);
    }
    let first = first.expect("a routed queue has subscribers");
    let by_type = routes
        .iter()
        .enumerate()
        .filter(|(_, route)| route.filter.is_none())
        .map(|(at, route)| (route.type_name.clone(), at))
        .collect();
    Subscriber {
        output_payloads,
        outputs,
        requirements,
        filter: None,
        handler_name: Some(handler_names.join("|")),
        handler: Handler::One(Arc::new(Router {
            queue,
            header,
            by_type,
            routes,
        })),
        ..first
    }
}

/// One subscriber of a routed queue.
struct Route {
    /// The short name of its message type, as a type header names it.
    type_name: String,
    handler_name: Arc<str>,
    /// Chooses it instead of its type, when it has one.
    filter: Option<Filter>,
    handler: Arc<dyn ErasedHandler>,
}

/// The handler of a routed queue: chooses each message's route, and runs that route's handler,
/// or dead-letters the message when no route takes it.
struct Router {
    queue: String,
    /// The name of the type header.
    header: Arc<str>,
    /// The routes chosen by type (those without a filter), by type name.
    by_type: HashMap<String, usize>,
    /// Every route, in the order its subscriber was included.
    routes: Vec<Route>,
}

impl Router {
    /// The route that takes the message `ctx` is over, or why none does.
    fn choose(&self, ctx: &Context<'_>) -> Result<&Route, String> {
        let named = ctx.header(&self.header);
        if let Some(&at) = named.and_then(|name| self.by_type.get(name)) {
            return Ok(&self.routes[at]);
        }
        if let Some(route) = self
            .routes
            .iter()
            .find(|route| route.filter.as_ref().is_some_and(|filter| (filter.0)(ctx)))
        {
            return Ok(route);
        }
        let mut types: Vec<&str> = self.by_type.keys().map(String::as_str).collect();
        types.sort_unstable();
        let types = types
            .iter()
            .map(|name| format!("`{name}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let found = match named {
            Some(name) => format!("type `{name}` (its `{}` header)", self.header),
            None => format!("no `{}` header", self.header),
        };
        Err(format!(
            "no handler of queue `{}` takes this message: it carries {found}, the queue routes \
             {types}, and no subscriber's filter took it",
            self.queue
        ))
    }
}

impl ErasedHandler for Router {
    fn call(
        self: Arc<Self>,
        message: Message,
        states: Arc<States>,
        stopping: tokio_util::sync::CancellationToken,
    ) -> BoxFuture<'static, Handled> {
        // Chosen when the engine first polls the attempt, in its `process` span and behind its
        // panic catch: a filter that panics is a handler that panics, and its message is retried.
        Box::pin(async move {
            let chosen = {
                let ctx = Context::new(&message, &states, stopping.clone());
                self.choose(&ctx)
                    .map(|route| (route.handler.clone(), route.handler_name.clone()))
            };
            match chosen {
                Ok((handler, name)) => {
                    tracing::debug!(rust_stream.route = %name, "routed");
                    handler.call(message, states, stopping).await
                }
                Err(reason) => Handled::Done {
                    outcome: HandlerOutcome::dead_letter(reason),
                    staged: Vec::new(),
                },
            }
        })
    }

    /// Each route inside `outer`: the layers run once the route is chosen, as they do around a
    /// subscriber's handler on a queue of its own.
    fn layered(self: Arc<Self>, outer: &Layers) -> Arc<dyn ErasedHandler> {
        Arc::new(Router {
            queue: self.queue.clone(),
            header: self.header.clone(),
            by_type: self.by_type.clone(),
            routes: self
                .routes
                .iter()
                .map(|route| Route {
                    type_name: route.type_name.clone(),
                    handler_name: route.handler_name.clone(),
                    filter: route.filter.clone(),
                    handler: route.handler.clone().layered(outer),
                })
                .collect(),
        })
    }
}
