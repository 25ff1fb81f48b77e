#!/bin/sh
# A relay round's queries on PostgreSQL with N scheduled rows (due in 1 to 30 days) and 100 due:
# the lease of today (the whole table, ordered by id, with the window counts) and the new indexed one.
N=$1
URL=${RUST_STREAM_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}
S=sched_round_$N
psql -q "$URL" <<SQL
DROP SCHEMA IF EXISTS $S CASCADE; CREATE SCHEMA $S; SET search_path = $S;
CREATE TABLE rust_stream_outbox (
    id bigserial PRIMARY KEY, destination text NOT NULL, group_id text, message text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(), due_at timestamptz NOT NULL DEFAULT now(),
    ready_at timestamptz NOT NULL DEFAULT now(), scheduled boolean NOT NULL DEFAULT false,
    schedule_key text);
CREATE INDEX rust_stream_outbox_ready ON rust_stream_outbox (ready_at, due_at, id);
CREATE UNIQUE INDEX rust_stream_outbox_key ON rust_stream_outbox (destination, schedule_key)
    WHERE schedule_key IS NOT NULL;
INSERT INTO rust_stream_outbox (destination, group_id, message, due_at, ready_at, scheduled, schedule_key)
SELECT 'dunning.fifo', 'g-' || (i % 1000), repeat('x', 300),
       CASE WHEN i <= 100 THEN now() - interval '1 minute' ELSE now() + interval '1 day' + i * interval '1 second' END,
       CASE WHEN i <= 100 THEN now() - interval '1 minute' ELSE now() + interval '1 day' + i * interval '1 second' END,
       true, 'k-' || i FROM generate_series(1, $N + 100) i;
VACUUM ANALYZE rust_stream_outbox;
\timing on
\echo the lease of today (ORDER BY id, count(*) OVER ())
SELECT count(*), max(backlog), max(oldest_ms) FROM (SELECT id, destination, group_id, message, count(*) OVER () AS backlog,
       (extract(epoch FROM now() - min(created_at) OVER ()) * 1000)::float8 AS oldest_ms
       FROM rust_stream_outbox ORDER BY id LIMIT 500) r;
SELECT count(*), max(backlog), max(oldest_ms) FROM (SELECT id, destination, group_id, message, count(*) OVER () AS backlog,
       (extract(epoch FROM now() - min(created_at) OVER ()) * 1000)::float8 AS oldest_ms
       FROM rust_stream_outbox ORDER BY id LIMIT 500) r;
SELECT count(*), max(backlog), max(oldest_ms) FROM (SELECT id, destination, group_id, message, count(*) OVER () AS backlog,
       (extract(epoch FROM now() - min(created_at) OVER ()) * 1000)::float8 AS oldest_ms
       FROM rust_stream_outbox ORDER BY id LIMIT 500) r;
\echo the indexed lease (ready_at <= now, ORDER BY due, id)
SELECT count(*), max(due_ms) FROM (SELECT id, due_ms FROM (
    SELECT id, destination, group_id, message, scheduled, schedule_key,
           (extract(epoch FROM due_at) * 1000)::bigint AS due_ms,
           CASE WHEN scheduled THEN due_at
                ELSE max(due_at) FILTER (WHERE NOT scheduled)
                     OVER (PARTITION BY destination, group_id ORDER BY id) END AS after
    FROM rust_stream_outbox WHERE ready_at <= now()) ready ORDER BY after, id LIMIT 500) r;
SELECT count(*), max(due_ms) FROM (SELECT id, due_ms FROM (
    SELECT id, destination, group_id, message, scheduled, schedule_key,
           (extract(epoch FROM due_at) * 1000)::bigint AS due_ms,
           CASE WHEN scheduled THEN due_at
                ELSE max(due_at) FILTER (WHERE NOT scheduled)
                     OVER (PARTITION BY destination, group_id ORDER BY id) END AS after
    FROM rust_stream_outbox WHERE ready_at <= now()) ready ORDER BY after, id LIMIT 500) r;
SELECT count(*), max(due_ms) FROM (SELECT id, due_ms FROM (
    SELECT id, destination, group_id, message, scheduled, schedule_key,
           (extract(epoch FROM due_at) * 1000)::bigint AS due_ms,
           CASE WHEN scheduled THEN due_at
                ELSE max(due_at) FILTER (WHERE NOT scheduled)
                     OVER (PARTITION BY destination, group_id ORDER BY id) END AS after
    FROM rust_stream_outbox WHERE ready_at <= now()) ready ORDER BY after, id LIMIT 500) r;
\echo the backlog: ready, oldest, next
SELECT (SELECT count(*) FROM rust_stream_outbox WHERE ready_at <= now()),
       (SELECT min(ready_at) FROM rust_stream_outbox),
       (SELECT min(ready_at) FROM rust_stream_outbox WHERE ready_at > now());
\echo the count of rows waiting for later
SELECT count(*) FROM rust_stream_outbox WHERE ready_at > now();
\timing off
DROP SCHEMA $S CASCADE;
SQL
