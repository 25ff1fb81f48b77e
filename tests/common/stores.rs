//! The databases the store tests run on (`inbox_store.rs`, `history_store.rs`, `history.rs`,
//! `fault_kills_in_process.rs`): a SQLite file of a case's own, removed when the case ends, and a
//! PostgreSQL schema of a case's own (at `RUST_STREAM_POSTGRES_URL`), dropped once the case passed.

use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

/// A database file, with SQLite's `-wal` and `-shm` beside it, removed when dropped.
pub struct TempFile(pub std::path::PathBuf);

impl TempFile {
    /// A new file name under the temporary directory for `case` of the test binary `what`.
    pub fn new(what: &str, case: &str) -> Self {
        Self(std::env::temp_dir().join(format!(
            "rust-stream-{what}-{case}-{}-{}.db",
            std::process::id(),
            fastrand::u64(..)
        )))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut path = self.0.clone().into_os_string();
            path.push(suffix);
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A schema of a case's own, and a connection to drop it with once the case passed (one that
/// failed leaves it, to look at).
#[derive(Clone)]
pub struct Schema {
    pub admin: PgPool,
    pub name: String,
}

impl Schema {
    pub async fn drop_it(&self) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA {} CASCADE",
            self.name
        )))
        .execute(&self.admin)
        .await
        .unwrap();
    }
}

/// A new schema named after `prefix` and `case`, and connection options whose connections find
/// their tables there (`search_path`); `None` (with the kit's loud note, or a failure under CI)
/// when no PostgreSQL was started.
pub async fn postgres_schema(prefix: &str, case: &str) -> Option<(PgConnectOptions, Schema)> {
    let url = rust_stream::testing::live_postgres_url(&format!("a {prefix} test on PostgreSQL"))?;
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    // PostgreSQL cuts names at 63 bytes: the random part must survive.
    let name = format!("{prefix}_{:.40}_{:08x}", case, fastrand::u32(..));
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {name}")))
        .execute(&admin)
        .await
        .unwrap();
    let options = PgConnectOptions::from_str(&url)
        .unwrap()
        .options([("search_path", name.as_str())]);
    Some((options, Schema { admin, name }))
}

/// A pool of 10 on `options`, as `PostgresStore::connect` makes one (no test before acquire).
pub async fn postgres_pool(options: &PgConnectOptions) -> PgPool {
    PgPoolOptions::new()
        .max_connections(10)
        .test_before_acquire(false)
        .connect_with(options.clone())
        .await
        .unwrap()
}
