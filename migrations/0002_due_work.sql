-- Durable timed work: retries, schedules, expiries. Claimed with FOR UPDATE SKIP LOCKED and a
-- lease; the I/O happens outside any transaction; the outcome is recorded with a fenced update.
CREATE SCHEMA IF NOT EXISTS processors;

CREATE TABLE processors.due_work (
  id           text        PRIMARY KEY,
  kind         text        NOT NULL,
  key          text        NOT NULL,
  payload      jsonb       NOT NULL DEFAULT '{}',
  due_at       timestamptz NOT NULL,
  status       text        NOT NULL DEFAULT 'pending'
                 CHECK (status IN ('pending', 'claimed', 'done', 'failed', 'cancelled')),
  attempts     integer     NOT NULL DEFAULT 0,
  claimed_by   text,
  claim_token  bigint      NOT NULL DEFAULT 0,
  lease_until  timestamptz,
  last_error   text,
  created_at   timestamptz NOT NULL,
  updated_at   timestamptz NOT NULL,
  completed_at timestamptz,
  CONSTRAINT due_work_kind_key_uq UNIQUE (kind, key)
);
-- Claim scan: pending items by due time, and claimed items whose lease ran out.
CREATE INDEX due_work_pending_idx ON processors.due_work (due_at) WHERE status = 'pending';
CREATE INDEX due_work_claimed_idx ON processors.due_work (lease_until) WHERE status = 'claimed';
-- Backlog statistics (/metrics, ops status) scan only live rows, never the done/cancelled history.
CREATE INDEX due_work_live_idx ON processors.due_work (kind) WHERE status IN ('pending', 'claimed', 'failed');
