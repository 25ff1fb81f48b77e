//! The PostgreSQL the stores' live tests run on (issue 23): `scripts/test.sh` starts one with
//! `scripts/postgres.sh` and names it in `RUST_STREAM_POSTGRES_URL`. This checks that it is there
//! and does what the inbox and outbox rely on: tables in a schema of the test's own, a write seen
//! inside its transaction and by nobody else before the commit, by everyone after it, and a
//! rolled-back write gone. Without the variable the test says SKIPPED; under CI it fails.

mod common;

use rust_stream::testing::QueueNames;
use sqlx::{AssertSqlSafe, PgExecutor, PgPool};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_write_is_kept_and_a_rolled_back_one_is_gone() {
    let Some(url) = common::postgres_url("postgres_live (transactions on the test PostgreSQL)")
    else {
        return;
    };
    let pool = PgPool::connect(&url)
        .await
        .unwrap_or_else(|error| panic!("cannot connect to {url}: {error}"));
    // Tests and runs at once share the server: this run's tables are in a schema of its own,
    // named with the kit's per-run id (hex digits, so safe to put in SQL as it is).
    let schema = format!("postgres_live_{}", QueueNames::new().run());
    execute(&pool, &format!("CREATE SCHEMA {schema}")).await;
    execute(
        &pool,
        &format!("CREATE TABLE {schema}.ledger (id bigint PRIMARY KEY, note text NOT NULL)"),
    )
    .await;
    let insert = format!("INSERT INTO {schema}.ledger (id, note) VALUES ($1, $2)");

    let mut kept = pool.begin().await.unwrap();
    sqlx::query(AssertSqlSafe(insert.as_str()))
        .bind(1_i64)
        .bind("kept")
        .execute(&mut *kept)
        .await
        .unwrap();
    assert_eq!(
        note(&mut *kept, &schema, 1).await.as_deref(),
        Some("kept"),
        "a transaction reads its own write"
    );
    assert_eq!(
        note(&pool, &schema, 1).await,
        None,
        "another connection sees nothing before the commit"
    );
    kept.commit().await.unwrap();
    assert_eq!(note(&pool, &schema, 1).await.as_deref(), Some("kept"));

    let mut undone = pool.begin().await.unwrap();
    sqlx::query(AssertSqlSafe(insert.as_str()))
        .bind(2_i64)
        .bind("rolled back")
        .execute(&mut *undone)
        .await
        .unwrap();
    assert_eq!(
        note(&mut *undone, &schema, 2).await.as_deref(),
        Some("rolled back")
    );
    undone.rollback().await.unwrap();
    assert_eq!(
        note(&pool, &schema, 2).await,
        None,
        "a rolled-back write is gone"
    );

    execute(&pool, &format!("DROP SCHEMA {schema} CASCADE")).await;
    pool.close().await;
}

/// Runs one statement that returns nothing.
async fn execute(pool: &PgPool, statement: &str) {
    sqlx::query(AssertSqlSafe(statement))
        .execute(pool)
        .await
        .unwrap_or_else(|error| panic!("{statement}: {error}"));
}

/// The note of ledger row `id`, as `executor` (a transaction, or the pool) sees it.
async fn note<'e>(executor: impl PgExecutor<'e>, schema: &str, id: i64) -> Option<String> {
    sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT note FROM {schema}.ledger WHERE id = $1"
    )))
    .bind(id)
    .fetch_optional(executor)
    .await
    .unwrap()
}
