-- A usage record's row is found by (meter, identifier), its dedup key, and never by its id: the key
-- becomes the primary key and the id's own index goes. One index entry fewer per record written —
-- with random ids, a random descent of an index as large as the table (bench:billing, batches of
-- 1,000 records). The key's index is built once more here, under this migration's lock.
ALTER TABLE billing.usage_records
  DROP CONSTRAINT usage_records_pkey,
  DROP CONSTRAINT usage_records_identifier_uq,
  ADD CONSTRAINT usage_records_pkey PRIMARY KEY (meter, identifier);
