#!/bin/sh
# A relay round's queries on SQLite with N scheduled rows (due in 1 to 30 days) and 100 due:
# the lease of today (the whole table, ordered by id, with the window counts) and the new indexed one.
N=$1
DB=${TMPDIR:-/tmp}/rust-stream-schedule-rounds-$N.db
rm -f $DB
sqlite3 $DB <<SQL
PRAGMA journal_mode = WAL;
CREATE TABLE rust_stream_outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT, destination TEXT NOT NULL, group_id TEXT,
    message TEXT NOT NULL, created_at INTEGER NOT NULL, due_at INTEGER NOT NULL DEFAULT 0,
    ready_at INTEGER NOT NULL DEFAULT 0, scheduled INTEGER NOT NULL DEFAULT 0,
    schedule_key TEXT, relaying INTEGER NOT NULL DEFAULT 0) STRICT;
CREATE INDEX rust_stream_outbox_ready ON rust_stream_outbox (ready_at, due_at, id);
CREATE UNIQUE INDEX rust_stream_outbox_key ON rust_stream_outbox (destination, schedule_key)
    WHERE schedule_key IS NOT NULL;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $N + 100)
INSERT INTO rust_stream_outbox (destination, group_id, message, created_at, due_at, ready_at, scheduled, schedule_key)
SELECT 'dunning.fifo', 'g-' || (i % 1000), printf('%.300c', 'x'), 1000,
       CASE WHEN i <= 100 THEN 1000 ELSE 2000000 + i * 1000 END,
       CASE WHEN i <= 100 THEN 1000 ELSE 2000000 + i * 1000 END, 1, 'k-' || i FROM n;
ANALYZE;
SQL
sqlite3 $DB <<SQL
.timer on
.print the lease of today (ORDER BY id, count(*) OVER ())
SELECT count(*), max(backlog), max(oldest_ms) FROM (SELECT id, destination, group_id, message, count(*) OVER () AS backlog,
    CAST(CAST(unixepoch('subsec') * 1000 AS INTEGER) - min(created_at) OVER () AS REAL) AS oldest_ms
    FROM rust_stream_outbox ORDER BY id LIMIT 500);
SELECT count(*), max(backlog), max(oldest_ms) FROM (SELECT id, destination, group_id, message, count(*) OVER () AS backlog,
    CAST(CAST(unixepoch('subsec') * 1000 AS INTEGER) - min(created_at) OVER () AS REAL) AS oldest_ms
    FROM rust_stream_outbox ORDER BY id LIMIT 500);
.print the indexed lease (ready_at <= now, ORDER BY due, id)
SELECT count(*), max(due_at) FROM (SELECT id, destination, group_id, message, due_at, scheduled, schedule_key FROM (
        SELECT id, destination, group_id, message, due_at, scheduled, schedule_key,
               CASE WHEN scheduled THEN due_at
                    ELSE max(CASE WHEN scheduled THEN NULL ELSE due_at END)
                         OVER (PARTITION BY destination, group_id ORDER BY id) END AS after
        FROM rust_stream_outbox WHERE ready_at <= 1500000)
    ORDER BY after, id LIMIT 500);
SELECT count(*), max(due_at) FROM (SELECT id, destination, group_id, message, due_at, scheduled, schedule_key FROM (
        SELECT id, destination, group_id, message, due_at, scheduled, schedule_key,
               CASE WHEN scheduled THEN due_at
                    ELSE max(CASE WHEN scheduled THEN NULL ELSE due_at END)
                         OVER (PARTITION BY destination, group_id ORDER BY id) END AS after
        FROM rust_stream_outbox WHERE ready_at <= 1500000)
    ORDER BY after, id LIMIT 500);
.print the backlog: ready, oldest, next
SELECT (SELECT count(*) FROM rust_stream_outbox WHERE ready_at <= 1500000),
       (SELECT min(ready_at) FROM rust_stream_outbox),
       (SELECT min(ready_at) FROM rust_stream_outbox WHERE ready_at > 1500000);
.print the count of rows waiting for later
SELECT count(*) FROM rust_stream_outbox WHERE ready_at > 1500000;
SQL
rm -f $DB $DB-wal $DB-shm
