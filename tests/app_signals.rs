//! `App::run` stops gracefully on SIGTERM and SIGINT. Each test signals its own process, so this
//! file holds only these tests and runs them one at a time.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rust_stream::prelude::*;
use tokio::sync::Mutex;

#[derive(serde::Deserialize)]
struct Ping;

struct Count(Arc<AtomicU32>);

impl Handle<Ping> for Count {
    async fn handle(
        &self,
        _ping: &Ping,
        _outs: &(),
        _ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Signals go to the whole process: one test at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

async fn run_until_signal(signal: &str) {
    let _turn = ONE_AT_A_TIME.lock().await;
    let broker = SqsBroker::in_process();
    let pings = broker.publisher(SqsQueue::new("pings").create_if_missing());
    let handled = Arc::new(AtomicU32::new(0));
    let app = RustStream::new(AppInfo::new("signals", "0.0.0")).with_broker(broker, |b| {
        b.include(subscriber("pings", Count(handled.clone())).build());
    });
    let running = tokio::spawn(app.run());
    pings.raw("null").send().await.unwrap();
    for _ in 0..500 {
        if handled.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(handled.load(Ordering::SeqCst), 1, "the service runs");
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &std::process::id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
    let stopped = tokio::time::timeout(Duration::from_secs(10), running).await;
    let result = stopped
        .expect("run returns after the signal")
        .expect("the app task");
    assert!(result.is_ok(), "{result:?}");
}

#[tokio::test]
async fn sigterm_stops_the_service_gracefully() {
    run_until_signal("TERM").await;
}

#[tokio::test]
async fn sigint_stops_the_service_gracefully() {
    run_until_signal("INT").await;
}
