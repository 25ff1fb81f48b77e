//! Work an app runs beside its subscribers, from the moment they consume to shutdown: the
//! [`Worker`] trait, and the [`WorkerContext`] a worker is given. The outbox's
//! [relay](crate::outbox::Relay) is one: it sends the messages committed transactions left in
//! the outbox.
//!
//! An app mounts workers with its subscribers (`b.worker(..)` in
//! [`RustStream::with_broker`](crate::RustStream::with_broker)). Each runs in a task of its own,
//! started once every subscription consumes (an app that fails to start runs none); it watches
//! [`WorkerContext::shutdown`] and returns when asked, and the app waits for it as it stops.
//! What it reports through [`WorkerContext::probe`] is part of the app's
//! [health](crate::health::Health): an app is ready only while every worker says it keeps up.

use std::future::Future;
use std::sync::Arc;

use crate::health::WorkerProbe;
use crate::task::{BoxFuture, Shutdown};

/// Background work of an app: see the [module docs](self).
pub trait Worker: Send + 'static {
    /// The worker's name, as the app's health report shows it.
    fn name(&self) -> String;

    /// Runs until `context.shutdown()` is requested, then returns once what it was doing is in
    /// a safe state.
    fn run(self, context: WorkerContext) -> impl Future<Output = ()> + Send;
}

/// What a running worker is given: when to stop, and where to say how it does.
#[derive(Debug, Clone)]
pub struct WorkerContext {
    shutdown: Shutdown,
    probe: Arc<WorkerProbe>,
}

impl WorkerContext {
    pub(crate) fn new(shutdown: Shutdown, probe: Arc<WorkerProbe>) -> Self {
        Self { shutdown, probe }
    }

    /// When to stop, and how long stopping may take.
    pub fn shutdown(&self) -> &Shutdown {
        &self.shutdown
    }

    /// Where the worker reports whether it keeps up.
    pub fn probe(&self) -> &WorkerProbe {
        &self.probe
    }
}

/// A worker of any type, as an app holds it until it runs.
pub(crate) struct ErasedWorker {
    pub(crate) name: String,
    pub(crate) start: Box<dyn FnOnce(WorkerContext) -> BoxFuture<'static, ()> + Send>,
}

impl ErasedWorker {
    pub(crate) fn new(worker: impl Worker) -> Self {
        Self {
            name: worker.name(),
            start: Box::new(move |context| Box::pin(worker.run(context))),
        }
    }
}

impl std::fmt::Debug for ErasedWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker").field("name", &self.name).finish()
    }
}
