-- Billing subscriptions and invoices (src/billing): read models projected from the subscription
-- streams (rebuildable). `billing.subscriptions` carries the columns the usage part reads and locks
-- (src/billing/contract.ts): a usage write locks its row FOR KEY SHARE, a renewal FOR UPDATE.
CREATE SCHEMA IF NOT EXISTS billing;

CREATE TABLE billing.subscriptions (
  id                   text        PRIMARY KEY,
  customer_id          text        NOT NULL,
  product_id           text        NOT NULL,
  status               text        NOT NULL,
  currency             text        NOT NULL,
  current_period_start timestamptz NOT NULL,
  current_period_end   timestamptz NOT NULL,
  -- The price's metered part (contract UsagePrice), null when licensed only.
  usage                jsonb,
  -- Usage timestamped before this is invoiced (`period_closed`).
  usage_closed_before  timestamptz,
  test_clock_id        text,
  state                jsonb       NOT NULL,
  created_at           timestamptz NOT NULL,
  updated_at           timestamptz NOT NULL,
  version              bigint      NOT NULL
);
-- GET /v1/subscriptions pages newest first by (created_at, id), whole or by one filter.
CREATE INDEX subscriptions_created_idx ON billing.subscriptions (created_at, id);
CREATE INDEX subscriptions_customer_created_idx ON billing.subscriptions (customer_id, created_at, id);
CREATE INDEX subscriptions_status_created_idx ON billing.subscriptions (status, created_at, id);
CREATE INDEX subscriptions_product_created_idx ON billing.subscriptions (product_id, created_at, id);

CREATE TABLE billing.invoices (
  id              text        PRIMARY KEY,
  subscription_id text        NOT NULL,
  customer_id     text        NOT NULL,
  -- The licensed period it bills in advance (for a final invoice: the instant it was issued).
  period_start    timestamptz NOT NULL,
  period_end      timestamptz NOT NULL,
  status          text        NOT NULL,
  total           bigint      NOT NULL,
  state           jsonb       NOT NULL,
  created_at      timestamptz NOT NULL,
  updated_at      timestamptz NOT NULL,
  version         bigint      NOT NULL,
  -- One invoice per subscription and period, however often a renewal runs (research §6 row 5).
  UNIQUE (subscription_id, period_start)
);
CREATE INDEX invoices_subscription_created_idx ON billing.invoices (subscription_id, created_at, id);
CREATE INDEX invoices_customer_created_idx ON billing.invoices (customer_id, created_at, id);
CREATE INDEX invoices_created_idx ON billing.invoices (created_at, id);
