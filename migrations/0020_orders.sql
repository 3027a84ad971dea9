-- Orders (src/orders): one row per order, projected from the order streams (rebuildable): the
-- aggregate's state whole (`state`, what reads decode) and the columns lists filter on.
CREATE SCHEMA IF NOT EXISTS orders;

CREATE TABLE orders.orders (
  order_id           text        PRIMARY KEY,
  display_id         text        NOT NULL UNIQUE,
  -- One order per checkout, whatever path completes it (research §6 row 3).
  checkout_id        text        UNIQUE,
  customer_id        text,
  -- Lower-cased; null once the customer was erased.
  email              text,
  status             text        NOT NULL,
  payment_status     text        NOT NULL,
  fulfillment_status text        NOT NULL,
  currency           text        NOT NULL,
  total              bigint      NOT NULL,
  amount_paid        bigint      NOT NULL,
  amount_refunded    bigint      NOT NULL,
  state              jsonb       NOT NULL,
  created_at         timestamptz NOT NULL,
  updated_at         timestamptz NOT NULL,
  version            bigint      NOT NULL
);
-- GET /v1/orders pages newest first by (created_at, order_id), whole or by one filter.
CREATE INDEX orders_created_idx ON orders.orders (created_at, order_id);
CREATE INDEX orders_customer_created_idx ON orders.orders (customer_id, created_at, order_id);
CREATE INDEX orders_status_created_idx ON orders.orders (status, created_at, order_id);
CREATE INDEX orders_email_created_idx ON orders.orders (email, created_at, order_id);

-- The display-id allocator: one row updated in the placing transaction (its row lock queues
-- concurrent placements; a rolled-back placement gives its number back), so numbers have no gaps.
-- Not a read model: never rebuilt (the numbers live in the order.placed events).
CREATE TABLE orders.counters (
  name  text   PRIMARY KEY,
  value bigint NOT NULL
);
INSERT INTO orders.counters (name, value) VALUES ('display_id', 1000);
