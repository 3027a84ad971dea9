-- Usage metering (src/billing/usage): the raw usage records and the rollups summaries read, all
-- projected from the `usage.recorded` events (one stream per (meter, identifier)) in the write's
-- transaction, and rebuildable from the log.
CREATE SCHEMA IF NOT EXISTS billing;

-- The subscription read model usage reads (src/billing/contract.ts). Owned and written by the
-- subscriptions part (migration 0021); created here only when that migration is not present, with
-- exactly the contract's columns, so usage can be built and tested on its own.
CREATE TABLE IF NOT EXISTS billing.subscriptions (
  id                   text        PRIMARY KEY,
  customer_id          text        NOT NULL,
  product_id           text        NOT NULL,
  status               text        NOT NULL,
  currency             text        NOT NULL,
  current_period_start timestamptz NOT NULL,
  current_period_end   timestamptz NOT NULL,
  usage                jsonb       NULL,
  usage_closed_before  timestamptz NULL,
  test_clock_id        text        NULL
);

-- One row per usage record. `identifier` is unique per meter (the dedup key); values are exact
-- decimals (up to 6 places). `unique_value` is properties[uniqueKey] as text, when the price counts
-- distinct values.
CREATE TABLE billing.usage_records (
  id              text        PRIMARY KEY,
  subscription_id text        NOT NULL,
  customer_id     text        NOT NULL,
  meter           text        COLLATE "C" NOT NULL,
  identifier      text        COLLATE "C" NOT NULL,
  value           numeric     NOT NULL,
  occurred_at     timestamptz NOT NULL,
  properties      jsonb       NOT NULL,
  unique_value    text        COLLATE "C" NULL,
  period_start    timestamptz NOT NULL,
  period_end      timestamptz NULL,
  created_at      timestamptz NOT NULL,
  CONSTRAINT usage_records_identifier_uq UNIQUE (meter, identifier)
);
-- Edge hours of a summary range, and the reference scans of tests.
CREATE INDEX usage_records_subscription_idx ON billing.usage_records (subscription_id, meter, occurred_at);

-- The hourly rollup: per (subscription, meter, hour) the count, sum, max, and the last value (latest
-- by timestamp, ties broken by the larger identifier, byte order).
CREATE TABLE billing.usage_hourly (
  subscription_id text        NOT NULL,
  meter           text        COLLATE "C" NOT NULL,
  hour            timestamptz NOT NULL,
  event_count     bigint      NOT NULL,
  sum_value       numeric     NOT NULL,
  max_value       numeric     NOT NULL,
  last_value      numeric     NOT NULL,
  last_at         timestamptz NOT NULL,
  last_identifier text        COLLATE "C" NOT NULL,
  PRIMARY KEY (subscription_id, meter, hour)
);

-- The distinct values unique_count counts, per hour.
CREATE TABLE billing.usage_distinct (
  subscription_id text        NOT NULL,
  meter           text        COLLATE "C" NOT NULL,
  hour            timestamptz NOT NULL,
  value           text        COLLATE "C" NOT NULL,
  PRIMARY KEY (subscription_id, meter, hour, value)
);
