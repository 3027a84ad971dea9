-- `GET /v1/invoices?status=` (paid | open | void): newest first within a status, as the other
-- filters of the list.
CREATE INDEX invoices_status_created_idx ON billing.invoices (status, created_at, id);
