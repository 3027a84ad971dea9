-- Payments (src/payments): payment intents, the payments (charges) their confirmations create and
-- the refunds of those payments, projected from the payment-intent streams of the event store (every
-- table here can be rebuilt). Card numbers are never stored: a payment method is a token with its
-- brand, last four digits and expiry.
CREATE SCHEMA IF NOT EXISTS payments;

CREATE TABLE payments.payment_intents (
  payment_intent_id   text        PRIMARY KEY,
  amount              integer     NOT NULL,
  currency            text        NOT NULL,
  status              text        NOT NULL,
  capture_method      text        NOT NULL,
  customer_id         text,
  description         text,
  payment_method      jsonb,
  last_payment_error  jsonb,
  next_action         jsonb,
  cancellation_reason text,
  latest_payment_id   text,
  amount_capturable   integer     NOT NULL DEFAULT 0,
  amount_received     integer     NOT NULL DEFAULT 0,
  metadata            jsonb       NOT NULL DEFAULT '{}',
  processor           text        NOT NULL,
  canceled_at         timestamptz,
  created_at          timestamptz NOT NULL,
  updated_at          timestamptz NOT NULL,
  version             integer     NOT NULL
);

CREATE TABLE payments.payments (
  payment_id          text        PRIMARY KEY,
  payment_intent_id   text        NOT NULL,
  customer_id         text,
  amount              integer     NOT NULL,
  currency            text        NOT NULL,
  status              text        NOT NULL,
  capture_method      text        NOT NULL,
  amount_captured     integer     NOT NULL DEFAULT 0,
  amount_refunded     integer     NOT NULL DEFAULT 0,
  payment_method      jsonb       NOT NULL,
  failure_code        text,
  decline_code        text,
  failure_message     text,
  processor           text        NOT NULL,
  processor_reference text,
  description         text,
  metadata            jsonb       NOT NULL DEFAULT '{}',
  authorized_at       timestamptz,
  captured_at         timestamptz,
  canceled_at         timestamptz,
  created_at          timestamptz NOT NULL,
  updated_at          timestamptz NOT NULL
);
-- `GET /v1/payments`, newest first, whole or by one of its filters.
CREATE INDEX payments_created_idx ON payments.payments (created_at, payment_id);
CREATE INDEX payments_customer_idx ON payments.payments (customer_id, created_at, payment_id);
CREATE INDEX payments_intent_idx ON payments.payments (payment_intent_id, created_at, payment_id);

CREATE TABLE payments.refunds (
  refund_id           text        PRIMARY KEY,
  payment_id          text        NOT NULL,
  payment_intent_id   text        NOT NULL,
  amount              integer     NOT NULL,
  currency            text        NOT NULL,
  status              text        NOT NULL,
  reason              text,
  failure_reason      text,
  processor_reference text,
  created_at          timestamptz NOT NULL,
  updated_at          timestamptz NOT NULL
);
CREATE INDEX refunds_payment_idx ON payments.refunds (payment_id, created_at);
