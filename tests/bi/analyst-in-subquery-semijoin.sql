-- tool: analyst SQL (psql), a semi-join written as IN over the people of the same unit
-- source: the BI probe of 2026-11-28 (IN as EXISTS)
-- identifiers: the demo's visits and people.age
-- expect: answered
SELECT COUNT(*) AS n, AVG(cost) AS avg_cost FROM visits WHERE person_id IN (SELECT person_id FROM people WHERE age >= 65)
