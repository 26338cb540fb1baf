-- tool: analyst SQL (psql), a day shifted by another column of the row
-- source: issue 33 ("over ts + days * INTERVAL '1 day'"): the month of discharge; its
--   keys are the months from the domain's first moment to its last plus 60 days
-- identifiers: the demo's visits.visited_at and visits.days
-- expect: answered
SELECT date_trunc('month', visited_at + days * INTERVAL '1 day') AS discharged, COUNT(*) FROM visits GROUP BY 1
