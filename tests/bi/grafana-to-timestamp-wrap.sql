-- tool: Grafana, a user query wrapping the epoch bin in to_timestamp(), grouped by position
-- source: the BI probe of 2026-11-28 (a one-to-one function of a key)
-- identifiers: the demo's visits.visited_at
-- expect: answered
SELECT
  to_timestamp(floor(extract(epoch from visited_at)/3600)*3600) AS "time",
  count(*) AS visits
FROM visits
WHERE visited_at BETWEEN '2024-06-03T00:00:00Z' AND '2024-06-04T00:00:00Z'
GROUP BY 1
ORDER BY 1
