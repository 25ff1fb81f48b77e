//! `Publisher::send_batch`: many messages in as few `SendMessageBatch` calls as SQS allows, each
//! FIFO group in the order given, and one answer per message in input order, where a message
//! that breaks a rule, or is for another queue, fails alone while the rest are sent; on a FIFO
//! queue, a message refused or failed for good holds its group's later messages of the batch,
//! which fail unsent (issue 34).

mod common;

use std::time::Duration;

use common::fifo_sends::{stored, SendFaults};
use common::{delete_all, fifo_queue, receive};
use rust_stream::account::Account;
use rust_stream::model::rules::ErrorKind;
use rust_stream::prelude::*;
use rust_stream::transport::layer::Hooked;
use rust_stream::transport::{ReceivedMessage, SentMessage, TransportError};
use rust_stream::{Outgoing, PublishError, Publisher};
use serde::{Deserialize, Serialize};

const GROUPS: u32 = 5;

#[derive(Debug, Serialize, Deserialize)]
struct Payment {
    account: u32,
    n: u32,
}

/// Payment `n` of a hundred, in the group of its account.
fn payment(payments: &Publisher, n: u32) -> Outgoing {
    let account = n % GROUPS;
    payments
        .message(&Payment { account, n })
        .group_id(format!("account-{account}"))
}

/// Receives and deletes until the queue has nothing visible, in the order received.
async fn drain(account: &Account, url: &str) -> Vec<ReceivedMessage> {
    let mut all = Vec::new();
    loop {
        let got = receive(account, url, 10).await;
        if got.is_empty() {
            return all;
        }
        delete_all(account, url, &got).await;
        all.extend(got);
    }
}

/// The payment numbers of each account, in the order received.
fn by_account(received: &[ReceivedMessage]) -> Vec<Vec<u32>> {
    let mut by_account = vec![Vec::new(); GROUPS as usize];
    for message in received {
        let payment: Payment = serde_json::from_str(&message.body).unwrap();
        assert_eq!(
            message.group_id(),
            Some(format!("account-{}", payment.account).as_str())
        );
        by_account[payment.account as usize].push(payment.n);
    }
    by_account
}

#[tokio::test(start_paused = true)]
async fn a_hundred_payments_over_five_groups_go_out_in_ten_calls_and_keep_each_groups_order() {
    let account = Account::new();
    let url = fifo_queue(&account, "payments.fifo", &[]).await;
    let broker = SqsBroker::with_account(&account);
    let payments = broker.publisher("payments.fifo");

    let results = payments
        .send_batch((0..100).map(|n| payment(&payments, n)))
        .await;

    assert_eq!(results.len(), 100);
    let sent: Vec<_> = results
        .into_iter()
        .map(|result| result.expect("every payment is sent"))
        .collect();
    assert_eq!(broker.api_calls().send_message_batch, 10);
    // Groups go out side by side, so only each group's own sends are stored in the order given.
    for group in 0..GROUPS {
        let sequence_numbers: Vec<u128> = sent
            .iter()
            .skip(group as usize)
            .step_by(GROUPS as usize)
            .map(|sent| sent.sequence_number.as_deref().unwrap().parse().unwrap())
            .collect();
        assert!(
            sequence_numbers.windows(2).all(|pair| pair[0] < pair[1]),
            "account-{group} stored in the order given: {sequence_numbers:?}"
        );
    }
    let received = drain(&account, &url).await;
    assert_eq!(received.len(), 100);
    for (group, numbers) in by_account(&received).into_iter().enumerate() {
        let expected: Vec<u32> = (0..100).filter(|n| n % GROUPS == group as u32).collect();
        assert_eq!(numbers, expected, "the order of account-{group}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_message_that_breaks_a_rule_gets_its_own_error_and_holds_its_groups_later_ones() {
    let account = Account::new();
    let url = fifo_queue(&account, "payments.fifo", &[]).await;
    let broker = SqsBroker::with_account(&account);
    let payments = broker.publisher("payments.fifo");
    let batch = (0..100).map(|n| match n {
        50 => payments.raw("").group_id("account-0"),
        n => payment(&payments, n),
    });

    let results = payments.send_batch(batch).await;

    assert_eq!(results.len(), 100);
    for (index, result) in results.iter().enumerate() {
        match (index, result) {
            (50, Err(error @ PublishError::Rejected { queue, .. })) => {
                assert_eq!(queue, "payments.fifo");
                assert_eq!(error.kind(), Some(ErrorKind::MissingParameter), "{error}");
            }
            (50, Ok(sent)) => panic!("the empty body was sent as {}", sent.message_id),
            // account-0's later payments would be stored ahead of payment 50.
            (
                index,
                Err(PublishError::Rejected {
                    error: TransportError::HeldBehind { message },
                    ..
                }),
            ) if index > 50 && index % 5 == 0 => {
                assert!(message.contains("MissingParameter"), "{message}");
            }
            (_, result) => assert!(result.is_ok(), "message {index}: {result:?}"),
        }
    }
    assert_eq!(
        broker.api_calls().send_message_batch,
        9,
        "90 messages need 9 calls"
    );
    let received = drain(&account, &url).await;
    assert_eq!(received.len(), 90);
    for (group, numbers) in by_account(&received).into_iter().enumerate() {
        let expected: Vec<u32> = (0..100)
            .filter(|n| n % GROUPS == group as u32 && (group != 0 || *n < 50))
            .collect();
        assert_eq!(numbers, expected, "the order of account-{group}");
    }
}

/// Fifteen payments of one account in one batch (two calls on one in-order shard) through an
/// outage of `seconds` from the first call: the payments stored, and each one's answer.
async fn fifteen_of_a_group_through_an_outage(
    seconds: u64,
) -> (Vec<u32>, Vec<Result<SentMessage, PublishError>>) {
    let account = Account::new();
    fifo_queue(&account, "payments.fifo", &[]).await;
    let faults = SendFaults::of("payments.fifo");
    let broker = SqsBroker::with_transport(Hooked::new(account.clone(), faults.clone()));
    let payments = broker.publisher("payments.fifo");
    faults.outage_from_next_call(Duration::from_secs(seconds));
    let results = payments
        .send_batch((1..=15).map(|n| {
            payments
                .message(&Payment { account: 7, n })
                .group_id("account-7")
        }))
        .await;
    let stored = stored(&account, "payments.fifo")
        .await
        .iter()
        .map(|body| serde_json::from_str::<Payment>(body).unwrap().n)
        .collect();
    (stored, results)
}

#[tokio::test(start_paused = true)]
async fn a_batch_of_more_than_ten_of_a_group_never_stores_a_later_message_ahead_of_an_earlier_one()
{
    for seconds in [5, 15, 19, 22, 25, 30, 38, 45, 60, 90] {
        let (stored, results) = fifteen_of_a_group_through_an_outage(seconds).await;
        // What is stored is the batch's first payments, in order; the first that failed holds
        // every later one, which fails without being sent.
        let first_failed = results.iter().position(Result::is_err).unwrap_or(15);
        assert_eq!(
            stored,
            (1..=first_failed as u32).collect::<Vec<_>>(),
            "outage of {seconds} s: stored {stored:?}"
        );
        for (index, result) in results.iter().enumerate().skip(first_failed + 1) {
            assert!(
                matches!(
                    result,
                    Err(PublishError::Rejected {
                        error: TransportError::HeldBehind { .. },
                        ..
                    })
                ) || index < 10,
                "outage of {seconds} s: payment {} after a failed one: {result:?}",
                index + 1
            );
            assert!(
                result.is_err(),
                "outage of {seconds} s: payment {}",
                index + 1
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_message_sqs_refuses_holds_its_groups_messages_in_the_batchs_later_calls() {
    let account = Account::new();
    fifo_queue(&account, "payments.fifo", &[]).await;
    let faults = SendFaults::of("payments.fifo");
    let broker = SqsBroker::with_transport(Hooked::new(account.clone(), faults.clone()));
    let payments = broker.publisher("payments.fifo");
    let refused = serde_json::to_string(&Payment { account: 7, n: 3 }).unwrap();
    faults.refused.lock().unwrap().insert(refused);

    let results = payments
        .send_batch((1..=15).map(|n| {
            payments
                .message(&Payment { account: 7, n })
                .group_id("account-7")
        }))
        .await;

    // Payments 4-10 went in payment 3's call, before SQS refused it: SQS stored them, as it
    // stores a call's other entries. Payments 11-15 were not sent.
    let ok: Vec<bool> = results.iter().map(Result::is_ok).collect();
    let expected: Vec<bool> = (1..=15).map(|n| n != 3 && n <= 10).collect();
    assert_eq!(ok, expected, "{results:?}");
    for result in &results[10..] {
        assert!(
            matches!(
                result,
                Err(PublishError::Rejected { error: TransportError::HeldBehind { message }, .. })
                    if message.contains("refused by the test")
            ),
            "{result:?}"
        );
    }
    let stored: Vec<u32> = stored(&account, "payments.fifo")
        .await
        .iter()
        .map(|body| serde_json::from_str::<Payment>(body).unwrap().n)
        .collect();
    assert_eq!(stored, [1, 2, 4, 5, 6, 7, 8, 9, 10]);
    assert_eq!(faults.calls().len(), 1, "no call carried payments 11-15");
}

#[tokio::test(start_paused = true)]
async fn a_message_for_another_queue_is_refused_and_the_rest_are_sent() {
    let account = Account::new();
    let url = fifo_queue(&account, "payments.fifo", &[]).await;
    let refunds = fifo_queue(&account, "refunds.fifo", &[]).await;
    let broker = SqsBroker::with_account(&account);
    let payments = broker.publisher("payments.fifo");
    let batch = vec![
        payment(&payments, 0),
        broker
            .publisher("refunds.fifo")
            .raw("{}")
            .group_id("account-0"),
        // A publisher made elsewhere for the same queue makes messages of the same queue.
        payment(&Publisher::new("payments.fifo"), 1),
    ];

    let results = payments.send_batch(batch).await;

    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    let error = results[1].as_ref().unwrap_err();
    let PublishError::OtherQueue {
        queue,
        message_queue,
    } = error
    else {
        panic!("expected the message to be refused, got {error}")
    };
    assert_eq!(
        (queue.as_str(), message_queue.as_str()),
        ("payments.fifo", "refunds.fifo")
    );
    assert!(error.to_string().contains("refunds.fifo"), "{error}");
    assert_eq!(drain(&account, &url).await.len(), 2);
    assert!(receive(&account, &refunds, 10).await.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_batch_with_nothing_valid_to_send_makes_no_call() {
    let broker = SqsBroker::in_process();
    let payments = broker.publisher("payments.fifo");

    assert!(payments.send_batch(Vec::new()).await.is_empty());
    let results = payments
        .send_batch([
            payments.raw(""),
            payments.raw("{}").header_number("amount", "12abc"),
        ])
        .await;

    assert_eq!(results.len(), 2);
    assert!(results.iter().all(Result::is_err), "{results:?}");
    assert_eq!(broker.api_calls(), Default::default());
}
