-- Customers read model (src/customers/projection.ts). Personal columns hold clear text: erasing a
-- customer deletes the row (the event log keeps only ciphertext under the shredded key).
CREATE SCHEMA IF NOT EXISTS customers;

CREATE TABLE customers.customers (
  customer_id      text        PRIMARY KEY,
  user_id          text,
  email            text        NOT NULL,
  email_normalized text        NOT NULL UNIQUE,
  first_name       text        NOT NULL,
  last_name        text        NOT NULL,
  phone            text,
  tags             text[]      NOT NULL DEFAULT '{}',
  metadata         jsonb       NOT NULL DEFAULT '{}',
  active           boolean     NOT NULL DEFAULT true,
  order_count      integer     NOT NULL DEFAULT 0,
  total_spent      bigint      NOT NULL DEFAULT 0,
  created_at       timestamptz NOT NULL,
  updated_at       timestamptz NOT NULL,
  version          bigint      NOT NULL
);
CREATE INDEX customers_user_idx ON customers.customers (user_id) WHERE user_id IS NOT NULL;
CREATE INDEX customers_created_idx ON customers.customers (created_at, customer_id);
