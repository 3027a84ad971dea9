-- Catalog (src/catalog): products with their embedded price and inventory, and the open stock holds
-- by owner (checkout or order), projected from the product streams (both tables can be rebuilt).
CREATE SCHEMA IF NOT EXISTS catalog;

CREATE TABLE catalog.products (
  product_id          text        PRIMARY KEY,
  name                text        NOT NULL,
  description         text,
  -- Unique per store: a concurrent second create of a SKU fails on this index inside its own
  -- transaction (409), whatever the pre-check saw.
  sku                 text        UNIQUE,
  status              text        NOT NULL,
  price               jsonb       NOT NULL,
  price_type          text        NOT NULL,
  price_version       integer     NOT NULL,
  images              jsonb       NOT NULL DEFAULT '[]',
  metadata            jsonb       NOT NULL DEFAULT '{}',
  tracked             boolean     NOT NULL,
  stocked_quantity    bigint      NOT NULL CHECK (stocked_quantity >= 0),
  reserved_quantity   bigint      NOT NULL CHECK (reserved_quantity >= 0),
  low_stock_threshold bigint      NOT NULL,
  allow_backorder     boolean     NOT NULL,
  deleted_at          timestamptz,
  created_at          timestamptz NOT NULL,
  updated_at          timestamptz NOT NULL,
  version             bigint      NOT NULL,
  search_text         text        GENERATED ALWAYS AS (lower(name || ' ' || coalesce(sku, ''))) STORED
);
-- GET /v1/products pages newest first by (created_at, product_id): the whole catalogue (admin with
-- includeArchived), one status (shoppers: active; the default list: not archived, two statuses).
CREATE INDEX products_created_idx ON catalog.products (created_at, product_id);
CREATE INDEX products_status_created_idx ON catalog.products (status, created_at, product_id);
-- `q`: case-insensitive substring of the name or SKU (as customers' search, 0006/0013).
CREATE INDEX products_search_idx ON catalog.products USING gin (search_text gin_trgm_ops)
  WITH (fastupdate = on, gin_pending_list_limit = 256);

CREATE TABLE catalog.reservations (
  owner_id   text        NOT NULL,
  product_id text        NOT NULL,
  quantity   bigint      NOT NULL CHECK (quantity > 0),
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  PRIMARY KEY (owner_id, product_id)
);
CREATE INDEX reservations_product_idx ON catalog.reservations (product_id);
