-- Idempotency keys (design/API.md "Idempotency"): one row per (requester, key), kept 24 h. A request
-- claims its key with one INSERT … ON CONFLICT; while it runs the row is `in_flight` under a lease
-- (renewed by the running request, so a crashed process's claim lapses); its final response is
-- stored when it completes, or the row is deleted when nothing must be kept (4xx rejections, 5xx).
-- Every timestamp comes from the application's clock, never now().
CREATE SCHEMA IF NOT EXISTS http;

CREATE TABLE http.idempotency_keys (
  -- SHA-256 of the requester (the Authorization header, or the client address without one).
  scope_hash   text        NOT NULL,
  key          text        NOT NULL,
  -- SHA-256 of method, path and canonical body: the same key with another request is refused.
  fingerprint  text        NOT NULL,
  method       text        NOT NULL,
  path         text        NOT NULL,
  state        text        NOT NULL CHECK (state IN ('in_flight', 'completed')),
  claim_token  text        NOT NULL,
  lease_until  timestamptz,
  status       integer,
  content_type text,
  headers      jsonb,
  body         bytea,
  created_at   timestamptz NOT NULL,
  completed_at timestamptz,
  expires_at   timestamptz NOT NULL,
  PRIMARY KEY (scope_hash, key),
  CONSTRAINT idempotency_keys_completed_ck CHECK (state <> 'completed' OR status IS NOT NULL)
);
-- The purge scan.
CREATE INDEX idempotency_keys_expires_idx ON http.idempotency_keys (expires_at);
