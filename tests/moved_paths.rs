//! The public paths that moved when the crate was layered still name the same items (marked
//! deprecated where the old module is gone), so code written against them keeps compiling.

#![allow(deprecated)]

use std::any::TypeId;

#[test]
fn the_old_paths_name_the_items_at_their_new_places() {
    fn same<A: 'static, B: 'static>() -> bool {
        TypeId::of::<A>() == TypeId::of::<B>()
    }
    assert!(same::<
        rust_stream::engine::transport::ReceiveMessage,
        rust_stream::transport::ReceiveMessage,
    >());
    assert!(same::<
        rust_stream::engine::transport::TransportError,
        rust_stream::model::TransportError,
    >());
    assert!(same::<
        rust_stream::engine::meter::ApiCalls,
        rust_stream::ApiCalls,
    >());
    assert!(same::<
        rust_stream::engine::record::Settled,
        rust_stream::record::Settled,
    >());
    assert!(same::<
        rust_stream::sqs::rules::ErrorKind,
        rust_stream::model::ErrorKind,
    >());
    assert_eq!(
        rust_stream::sqs::rules::MAX_BATCH_ENTRIES,
        rust_stream::model::rules::MAX_BATCH_ENTRIES
    );
    assert!(same::<
        rust_stream::sqs::aws::AwsTransport,
        rust_stream::aws::AwsTransport,
    >());
    assert!(same::<rust_stream::sqs::SqsQueue, rust_stream::SqsQueue>());
    assert!(same::<
        rust_stream::app::AppContext,
        rust_stream::broker::AppContext,
    >());
    assert!(same::<
        rust_stream::app::QueueLoad,
        rust_stream::health::QueueLoad,
    >());
    assert!(same::<
        rust_stream::asyncapi::Payload,
        rust_stream::describe::Payload,
    >());
    assert_eq!(
        rust_stream::asyncapi::ASYNCAPI_VERSION,
        rust_stream::broker::ASYNCAPI_VERSION
    );
}

/// A transport written against the old path still implements the trait at the new one.
#[test]
fn a_transport_named_by_the_old_path_is_the_same_trait() {
    fn takes<T: rust_stream::transport::Transport>(_: &T) {}
    fn takes_old<T: rust_stream::engine::transport::Transport>(transport: &T) {
        takes(transport);
    }
    takes_old(&rust_stream::account::Account::new());
}
