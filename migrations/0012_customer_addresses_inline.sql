-- A customer's addresses as JSON on the customer row (issue #17): `GET /user/:id` read them with a
-- json_agg subquery over customers.addresses, which cost as much PostgreSQL time again as the row
-- itself. The projection keeps this copy in step with customers.addresses (which stays the table
-- address changes are made in), in the same transaction; readers take the column as it is.
-- `json`, not `jsonb`: stored and sent as built, keys in API order, nothing parsed on the way out.
ALTER TABLE customers.customers ADD COLUMN addresses json NOT NULL DEFAULT '[]';

UPDATE customers.customers c
   SET addresses = a.addresses
  FROM (SELECT customer_id,
               json_agg(json_build_object('id', address_id, 'label', label, 'line1', line1, 'city', city,
                 'state', state, 'postalCode', postal_code, 'country', country, 'isDefault', is_default)
                 ORDER BY created_at, address_id) AS addresses
          FROM customers.addresses GROUP BY customer_id) a
 WHERE a.customer_id = c.customer_id;
