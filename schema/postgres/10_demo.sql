-- 10_demo.sql: the demo SaaS schema that every shard holds, and that
-- Tributary replicates (documents, invoices) into ClickHouse.
--
-- Applied by deploy/local/stack.sh to each shard after 01_snowflake.sql, in
-- database `app`, schema public. Idempotent: safe to apply again on every
-- stack start (CREATE ... IF NOT EXISTS only; nothing is dropped or altered
-- destructively). Ids come from tributary.next_id(), so an id tells which
-- shard created the row, even after the row moved to another shard.
--
-- Replica identity stays the default (the primary key): updates that keep the
-- key send no old row, deletes send the key only. Tributary copes with that;
-- do not switch to FULL just for it.

CREATE TABLE IF NOT EXISTS documents (
    id           bigint      PRIMARY KEY DEFAULT tributary.next_id(),
    workspace_id bigint      NOT NULL,
    title        text        NOT NULL,
    -- Large (kilobytes to megabytes): stored out of line in TOAST, so an
    -- UPDATE that leaves it alone replicates it as "unchanged TOAST".
    body         text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- EXTERNAL: out of line but uncompressed. With the default (EXTENDED) a
-- compressible body can shrink below the TOAST threshold and stay inline,
-- which makes whether an update carries the body depend on its content.
-- EXTERNAL moves every body over ~2 kB out of line, so the behaviour the
-- reader must handle is predictable in tests and in the demo.
ALTER TABLE documents ALTER COLUMN body SET STORAGE EXTERNAL;

-- A workspace's documents, newest first (the demo app's list view).
CREATE INDEX IF NOT EXISTS documents_workspace_updated_idx
    ON documents (workspace_id, updated_at DESC);

CREATE TABLE IF NOT EXISTS invoices (
    id           bigint        PRIMARY KEY DEFAULT tributary.next_id(),
    workspace_id bigint        NOT NULL,
    amount       numeric(12,2) NOT NULL,
    -- ISO 4217 code, upper case.
    currency     text          NOT NULL CONSTRAINT invoices_currency_iso CHECK (currency ~ '^[A-Z]{3}$'),
    status       text          NOT NULL CONSTRAINT invoices_status_known
                               CHECK (status IN ('issued', 'paid', 'refunded', 'void')),
    issued_at    timestamptz   NOT NULL,
    paid_at      timestamptz
);

-- A workspace's invoices by period (billing pages; per-shard revenue sums
-- that the tests compare with ClickHouse).
CREATE INDEX IF NOT EXISTS invoices_workspace_issued_idx
    ON invoices (workspace_id, issued_at);
-- Revenue by period and status across workspaces on one shard.
CREATE INDEX IF NOT EXISTS invoices_issued_status_idx
    ON invoices (issued_at, status);

-- The move saga's log (docs/design/moves.md; internal/loadgen/saga.go):
-- moving a document to another workspace that lives on another shard
-- records the move here on the source shard (started), copies the row to
-- the target shard if absent (copied), then deletes it at the source and
-- marks the move done in one transaction (done). Each step is recorded so
-- that a crashed move can be resumed (loadgen --resume yes), and so that
-- the id being live on two shards for a while can be told apart from a
-- real collision. Replicated (deploy/local/tables.json, `moves` section):
-- the API shows a document under a move once and reports moves stuck past
-- the grace period and documents on neither shard (GET /v1/anomalies/moves).
CREATE TABLE IF NOT EXISTS document_moves (
    move_id        uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    document_id    bigint      NOT NULL,
    from_workspace bigint      NOT NULL,
    to_workspace   bigint      NOT NULL,
    from_shard     int         NOT NULL,
    to_shard       int         NOT NULL,
    -- started: nothing copied yet; copied: the target shard has the row;
    -- done: the source row is gone; failed: given up, source row kept.
    state          text        NOT NULL DEFAULT 'started'
                               CONSTRAINT document_moves_state_known
                               CHECK (state IN ('started', 'copied', 'done', 'failed')),
    started_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz
);

-- The moves of one document, e.g. to decide whether a duplicate id is a
-- move in progress.
CREATE INDEX IF NOT EXISTS document_moves_document_idx
    ON document_moves (document_id, started_at);
-- Unfinished moves, for the saga's recovery on restart.
CREATE INDEX IF NOT EXISTS document_moves_unfinished_idx
    ON document_moves (started_at)
    WHERE state IN ('started', 'copied');

-- A legacy table with per-shard serial ids (colliding across shards): every
-- shard counts 1, 2, 3... on its own, so the same id names different rows
-- on different shards. Replicated with id_layout "serial": identity is
-- (shard, id), and ids used on several shards are reported as
-- serial_collision anomalies, never merged. Written by loadgen
-- --legacy-percent.
CREATE TABLE IF NOT EXISTS legacy_notes (
    id           bigserial   PRIMARY KEY,
    workspace_id bigint      NOT NULL,
    note         text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
