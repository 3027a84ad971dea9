-- Checkouts (src/checkout): one row per checkout, projected from the checkout streams of the event
-- store (rebuildable). The intent's id is unique: a payment intent belongs to one checkout at most,
-- which is how the completion flow finds the checkout of a payment.
CREATE SCHEMA IF NOT EXISTS checkout;

CREATE TABLE checkout.checkouts (
  checkout_id       text        PRIMARY KEY,
  status            text        NOT NULL,
  payment_status    text        NOT NULL,
  customer_id       text,
  email             text,
  shipping_address  jsonb,
  currency          text        NOT NULL,
  line_items        jsonb       NOT NULL,
  subtotal          bigint      NOT NULL,
  total             bigint      NOT NULL,
  capture_method    text        NOT NULL,
  payment_intent_id text        UNIQUE,
  order_id          text        UNIQUE,
  expires_at        timestamptz NOT NULL,
  metadata          jsonb       NOT NULL DEFAULT '{}',
  created_at        timestamptz NOT NULL,
  updated_at        timestamptz NOT NULL,
  completed_at      timestamptz,
  expired_at        timestamptz,
  version           integer     NOT NULL
);
CREATE INDEX checkouts_customer_idx ON checkout.checkouts (customer_id, created_at, checkout_id);
