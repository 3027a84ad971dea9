-- Webhooks (src/webhooks): endpoints, deliveries and their attempts, projected from the event store
-- (every table here can be rebuilt). Signing secrets are not here: they rest encrypted in the events.
CREATE SCHEMA IF NOT EXISTS webhooks;

CREATE TABLE webhooks.endpoints (
  webhook_id                 text        PRIMARY KEY,
  url                        text        NOT NULL,
  events                     text[]      NOT NULL,
  metadata                   jsonb       NOT NULL DEFAULT '{}',
  status                     text        NOT NULL,
  failing_since              timestamptz,
  disabled_reason            text,
  disabled_at                timestamptz,
  previous_secret_expires_at timestamptz,
  created_by_type            text        NOT NULL,
  created_by_id              text        NOT NULL,
  created_at                 timestamptz NOT NULL,
  updated_at                 timestamptz NOT NULL,
  version                    integer     NOT NULL
);
CREATE INDEX endpoints_created_idx ON webhooks.endpoints (created_at, webhook_id);

CREATE TABLE webhooks.deliveries (
  delivery_id      text        PRIMARY KEY,
  webhook_id       text        NOT NULL,
  event_id         text        NOT NULL,
  event_type       text        NOT NULL,
  status           text        NOT NULL,
  attempts         integer     NOT NULL DEFAULT 0,
  last_status_code integer,
  last_error       text,
  next_attempt_at  timestamptz,
  succeeded_at     timestamptz,
  created_at       timestamptz NOT NULL,
  updated_at       timestamptz NOT NULL,
  version          integer     NOT NULL
);
-- The delivery log of one endpoint, newest first; recovery scans its failed ones by time.
CREATE INDEX deliveries_webhook_idx ON webhooks.deliveries (webhook_id, created_at, delivery_id);

CREATE TABLE webhooks.attempts (
  delivery_id      text        NOT NULL,
  attempt          integer     NOT NULL,
  webhook_id       text        NOT NULL,
  trigger          text        NOT NULL,
  attempted_at     timestamptz NOT NULL,
  succeeded        boolean     NOT NULL,
  status_code      integer,
  duration_ms      integer     NOT NULL,
  error_class      text,
  error            text,
  response_excerpt text,
  next_attempt_at  timestamptz,
  PRIMARY KEY (delivery_id, attempt)
);
CREATE INDEX attempts_webhook_idx ON webhooks.attempts (webhook_id);

-- Due work grouped by a key (the endpoint of a webhook attempt), so a worker can cap how many of one
-- group run at once: a hung endpoint holds its own slots, never everyone's.
ALTER TABLE processors.due_work ADD COLUMN group_key text;
