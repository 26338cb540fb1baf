-- tool: analyst SQL (psql), people whose visits of a day or more cost over 1,000 in all,
--   and their average total
-- source: issue 33 (per-person sums, an aggregate over a subquery grouped by the unit)
-- identifiers: the demo's visits.person_id, cost, days
-- expect: answered
SELECT COUNT(*) AS people, AVG(spend) AS avg_spend FROM (SELECT person_id, SUM(cost) AS spend FROM visits WHERE days >= 1 GROUP BY person_id) t WHERE spend > 1000
