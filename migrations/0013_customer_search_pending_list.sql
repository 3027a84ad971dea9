-- The trigram index behind `GET /user?q=` took each customer row in directly (fastupdate off, 0006):
-- ~45 trigrams per row, each a descent of the GIN tree, which was most of what a customer write
-- cost PostgreSQL (measured on PostgreSQL 15: 150–430 µs of a ~750 µs POST /user, growing with the
-- index; issue #17). Rows now go to a small pending list (256 kB, a few thousand rows) that the
-- inserting backend merges into the tree in one sorted pass once it is full (or VACUUM does):
-- 35–60 µs per row. A search reads that list whole besides the tree, which at 256 kB costs well
-- under a millisecond and, unlike the 4 MB default that 0006 avoided, is too small to turn the
-- planner to a sequential scan. Embedded PGlite (no autovacuum) merges it the same way, when full.
ALTER INDEX customers.customers_search_idx SET (fastupdate = on, gin_pending_list_limit = 256);
