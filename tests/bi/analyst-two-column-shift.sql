-- tool: analyst SQL (psql), a day shifted by another column of the row
-- source: issue 33 ("over ts + days * INTERVAL '1 day'"): its keys would depend on two
--   columns; refused until a bucket of two columns has a public key set
-- identifiers: the demo's visits.visited_at and visits.days
-- expect: refused 0A000
SELECT date_trunc('month', visited_at + days * INTERVAL '1 day') AS discharged, COUNT(*) FROM visits GROUP BY 1
