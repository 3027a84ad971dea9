-- The /user surface (src/customers): search and sort indexes, addresses, and account deactivation.
-- pg_trgm is a trusted extension (PostgreSQL ≥ 13): any role that may create objects in the
-- database can enable it; embedded PGlite loads it at start.
CREATE EXTENSION IF NOT EXISTS pg_trgm;

-- `q` is a case-insensitive substring of first name, last name or email; one trigram index over the
-- three (space-separated, so "ada lovelace" finds Ada Lovelace) answers it without a scan.
ALTER TABLE customers.customers
  ADD COLUMN search_text text GENERATED ALWAYS AS (lower(first_name || ' ' || last_name || ' ' || email)) STORED;

-- Both GIN indexes take each row in directly (fastupdate off), not through a pending list merged only
-- by VACUUM or when it outgrows 4 MB: every search reads that unsorted list whole, and the planner,
-- costing it, turns to a sequential scan instead. Embedded PGlite never autovacuums, so there the list
-- would only ever be merged at 4 MB. Direct insertion costs ~0.1 ms more per row written.
CREATE INDEX customers_search_idx ON customers.customers USING gin (search_text gin_trgm_ops)
  WITH (fastupdate = off);
CREATE INDEX customers_tags_idx ON customers.customers USING gin (tags) WITH (fastupdate = off);

-- One index per sort field of GET /user (the id breaks ties, so pages never overlap). `createdAt`
-- has customers_created_idx (0005); `email` sorts by email_normalized alone, which is unique (no
-- ties), so its UNIQUE index (0005) serves it.
CREATE INDEX customers_total_spent_idx ON customers.customers (total_spent, customer_id);
CREATE INDEX customers_order_count_idx ON customers.customers (order_count, customer_id);
CREATE INDEX customers_last_name_idx ON customers.customers (lower(last_name), customer_id);

-- A customer's addresses, in the order they were added; exactly one is the default while any exist.
CREATE TABLE customers.addresses (
  address_id  text        PRIMARY KEY,
  customer_id text        NOT NULL,
  label       text,
  line1       text        NOT NULL,
  city        text        NOT NULL,
  state       text,
  postal_code text,
  country     text        NOT NULL,
  is_default  boolean     NOT NULL DEFAULT false,
  created_at  timestamptz NOT NULL
);
CREATE INDEX addresses_customer_idx ON customers.addresses (customer_id, created_at, address_id);

-- A deactivated shopper cannot log in or refresh (src/identity); set and cleared with the customer's
-- `active` flag.
ALTER TABLE identity.users ADD COLUMN deactivated_at timestamptz;
