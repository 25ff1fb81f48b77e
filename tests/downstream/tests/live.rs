use payments::{service, Entry, Payment, Queues};
use rust_stream::prelude::*;
use rust_stream::testing::{
    eventually, live_broker, live_endpoint, on_each_backend, QueueNames, TestApp,
};

/// In process on a paused clock, then on LocalStack in real time.
#[test]
fn a_payment_is_booked_on_each_backend() {
    on_each_backend(async |backend| {
        // Names of this run's own: tests running at once on one LocalStack do not meet.
        let queues = Queues {
            payments: backend.queue_name("payments"),
            ledger: backend.queue_name("ledger"),
        };
        let broker = backend.broker().clone();
        let recorder = broker.recorder();
        let running = TestApp::spawn(service(broker.clone(), &queues))
            .await
            .expect("the service starts");

        let paid = Payment { id: 1, account: "ada".into(), cents: 1250 };
        let nothing = Payment { id: 2, account: "ada".into(), cents: 0 };
        let payments = broker.publisher(SqsQueue::new(&queues.payments));
        payments.message(&paid).send().await.unwrap();
        payments.message(&nothing).send().await.unwrap();

        eventually("one entry in the ledger", async || {
            recorder.published(&queues.ledger).len() == 1
        })
        .await;
        running.drain().await;
        running.stop().await.unwrap();

        let entries: Vec<Entry> = recorder.published_as(&queues.ledger);
        assert_eq!(entries, [Entry { payment: 1, account: "ada".into(), cents: 1250 }]);
        assert_eq!(recorder.dead_lettered(&queues.payments).len(), 1);
    });
}

/// LocalStack alone, for a test that needs no in-process leg: the server RUST_STREAM_LIVE_ENDPOINT
/// names, or one the kit starts for this test binary.
#[tokio::test]
async fn the_service_creates_its_queues_on_localstack() {
    let Some(endpoint) = live_endpoint("the queues on LocalStack") else {
        return; // Skipped, and said so on standard error (never under CI).
    };
    // Region us-east-1, test credentials, long polls of at most 1 s: a stop takes no 20 s.
    let broker = live_broker(&endpoint).await;
    let names = QueueNames::new();
    let queues = Queues {
        payments: names.queue_name("payments"),
        ledger: names.queue_name("ledger"),
    };
    let running = TestApp::spawn(service(broker, &queues))
        .await
        .expect("the service starts");
    let loads = running.queues().await;
    assert!(loads.iter().any(|load| load.queue == queues.ledger), "{loads:?}");
    running.stop().await.unwrap();
}
